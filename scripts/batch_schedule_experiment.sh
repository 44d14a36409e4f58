#!/usr/bin/env bash
# batch_schedule_experiment.sh: -d auto against a sweep of fixed batch sizes (docs/batch_schedule/).
#
#   bash scripts/batch_schedule_experiment.sh SETUP OUT_DIR
#
# SETUP (docs/batch_schedule/README.md): the PyTorch reference model (dev/reference: V 1000, C 64,
# 2 layers, context 64; about 1 MFLOP per token, d2's LM head alone costs 40), B 2 x T 64
# (128-token micro-batches), batch sizes 256 .. 4096 tokens, val loss on 8 batches, on the GPT-2
# shards mapped to its 1000 ids (data/shrink_vocab.py: the 999 most frequent tokens, the rest one id):
#   shakespeare  data/ts_v1000 (tinyshakespeare), 131072 tokens per run, val every 2048 tokens
#   docs         data/docs_v1000 (data/doc_corpus.py: 20 M tokens of Debian's documentation),
#                131072 tokens per run, val every 2048 tokens
# It runs the fixed sweep (scripts/batch_size_sweep.sh: sqrt lr rule, 2e-3 at 512 tokens,
# constant lr, no warmup) and one -d auto run per entry FACTOR:WINDOW:START of AUTO (default
# "0.0625:3:256 0.0625:3:512 0.125:3:256 0.25:10:256": -df, -dw, -d0) up to 4096 tokens (-dm),
# with the same lr rule, so at every batch the auto run uses the lr the sweep used there. An auto
# run is stopped once it has trained on 49152 tokens (its log's "tokens"; the trainer counts
# steps, and how many steps a budget takes depends on the batches the schedule picks), past both
# targets in every run here. Then
# scripts/plot_schedule.py at TARGETS (default: the setup's two target losses).
# All runs start at once (JOBS at a time, default all), one thread each (the machine's cores are
# shared: 1-thread ranks lose the least to contention); finished runs are kept and skipped when
# the script runs again. BINARY (default build/train_gpt2_z2: one rank measures B_simple on every
# micro-batch) from the environment.
set -uo pipefail
die() { echo "error: $1" >&2; exit 1; }
[ $# -eq 2 ] || die "expected 2 arguments, SETUP (shakespeare or docs) and OUT_DIR; got $#"
setup=$1; out=$2
binary=${BINARY:-build/train_gpt2_z2}
export OMP_NUM_THREADS=1
[ -x "$binary" ] || die "BINARY=$binary: not an executable; expected the trainer (make zero_binaries)"
case "$setup" in
    shakespeare) train=data/ts_v1000/tiny_shakespeare_train.bin; val=data/ts_v1000/tiny_shakespeare_val.bin
                 tokens=131072; val_tokens=2048; targets=${TARGETS:-5.0,4.6} ;;
    docs) train='data/docs_v1000/docs_train_*.bin'; val='data/docs_v1000/docs_val_*.bin'
          tokens=131072; val_tokens=2048; targets=${TARGETS:-5.0,4.6} ;;
    *) die "SETUP $setup: unknown; expected shakespeare or docs" ;;
esac
compgen -G "$train" >/dev/null || die "$train: no shards; expected them prepared (data/tinyshakespeare.py or data/doc_corpus.py, then data/shrink_vocab.py)"
batches="256 512 1024 2048 4096"; autos=${AUTO:-"0.0625:3:256 0.0625:3:512 0.125:3:256 0.25:10:256"}; jobs=${JOBS:-99}
model=dev/reference/gpt2_ref_model.bin
mkdir -p "$out" || die "$out: cannot create; expected a writable directory"

wait_for_slot() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 5; done; }
for b in $batches; do
    wait_for_slot
    bash scripts/batch_size_sweep.sh --binary "$binary" --depth $model --micro-batch 2 --seq-len 64 --batch-sizes "$b" \
        --tokens $tokens --val-every-tokens $val_tokens --val-steps 8 --lr-rule sqrt --base-lr 2e-3 --base-batch 512 \
        --train "$train" --val "$val" --out "$out" > "$out/sweep_$b.log" 2>&1 &
done

# An auto run, stopped once its log counts the token budget (checked every 5 s; the last val
# record before the stop is what plot_schedule.py reads).
auto_run() {
    local f=$1 w=$2 d0=$3 dir="$out/auto_f$1_w$2_s$3" budget=49152
    [ -f "$dir/.done" ] && { echo "auto $dir: already done"; return 0; }
    rm -rf "$dir"
    local lr
    lr=$(awk -v b=$d0 'BEGIN { printf "%.6g", 2e-3 * sqrt(b / 512) }')
    "$binary" -i "$train" -j "$val" -o "$dir" -e $model -b 2 -t 64 -d auto -d0 $d0 -dm 4096 -df "$f" -dw $w -dl sqrt \
        -l "$lr" -x $((tokens / 256)) -v 3 -m 8 -s 0 -n 0 > "$dir.out" 2>&1 &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do
        sleep 5
        local seen
        seen=$(tail -n 5 "$dir/log.jsonl" 2>/dev/null | python3 -c 'import json,sys
t=[json.loads(l).get("tokens",0) for l in sys.stdin if l.strip().endswith("}")]
print(max(t) if t else 0)')
        if [ "${seen:-0}" -ge $budget ]; then kill $pid; wait $pid 2>/dev/null; echo "budget" > "$dir/.done"; return 0; fi
    done
    wait $pid && touch "$dir/.done"
}
for a in $autos; do
    wait_for_slot
    auto_run ${a//:/ } > "$out/auto_${a//:/_}.log" 2>&1 &
done
wait
python3 scripts/plot_schedule.py "$out" --targets "$targets" -o "$out/plots"
