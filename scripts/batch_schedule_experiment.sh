#!/usr/bin/env bash
# batch_schedule_experiment.sh: -d auto against a sweep of fixed batch sizes (docs/results/batch_schedule/).
#
#   bash scripts/batch_schedule_experiment.sh SETUP OUT_DIR
#
# SETUP (docs/results/batch_schedule/README.md); every setup: B 2 x T 64 (128-token micro-batches), fixed
# batch sizes 256 .. 4096 tokens with the sqrt lr rule, constant lr, no warmup, val loss on 8
# batches; -d auto runs from -d0 up to 4096 tokens (-dm) with -dl sqrt from the sweep's lr at -d0,
# so at every batch the auto run uses the lr the sweep used there.
#   shakespeare_d2  d2 (GPT-2 vocab) on data/tinyshakespeare (data/tinyshakespeare.py), the setup
#                   of docs/results/sweep/: lr 1e-3 at 512 tokens, fixed runs val every 3072 tokens
#   docs_d2         the same on data/doc_corpus (data/doc_corpus.py: 20 M tokens of Debian's
#                   documentation, GPT-2 tokens)
#     Both stop each run early, at its first val loss <= STOP_LOSS (default 6.9 and 7.8: at or
#     below the setup's lower target; docs_d2's 7.85 is about the lowest loss the fixed 1024-token
#     run reaches in its budget, 7.81 after 24 steps) or at its token budget: a fixed run after max(24576
#     tokens, 16 steps) (-x), an auto run once its log counts 32768 tokens. With a constant lr a stop changes nothing before it.
#   shakespeare     the PyTorch reference model (dev/reference: V 1000, C 64, 2 layers; about
#                   1 MFLOP per token, d2's LM head alone costs 40) on the GPT-2 shards mapped to its
#                   1000 ids (data/shrink_vocab.py: the 999 most frequent tokens, the rest one id):
#                   data/ts_v1000, lr 2e-3 at 512 tokens, 131072 tokens per fixed run, val every 2048
#   docs            the same on data/docs_v1000
#     These two run the fixed sweep through scripts/batch_size_sweep.sh and stop an auto run
#     once it has trained on 49152 tokens (past both targets in every run there).
# One -d auto run per entry FACTOR:WINDOW:START of AUTO (-df, -dw, -d0; default for the d2 setups
# "0.0625:3:256 0.125:3:256", for the others "0.0625:3:256 0.0625:3:512 0.125:3:256 0.25:10:256"),
# val every 3 steps. Then scripts/plot_schedule.py at TARGETS (default: the setup's two target
# losses). BATCHES (default "4096 2048 1024 512 256") are the fixed runs' batch sizes, run in that
# order. Runs go JOBS at a time (default all; fixed runs largest batch first), one thread each
# (the machine's cores are shared: 1-thread ranks lose the least to contention); finished runs
# (.done) are kept and skipped when the script runs again. BINARY (default build/train_gpt2_z2:
# one rank measures B_simple on every micro-batch) from the environment.
set -uo pipefail
die() { echo "error: $1" >&2; exit 1; }
[ $# -eq 2 ] || die "expected 2 arguments, SETUP (shakespeare_d2, docs_d2, shakespeare or docs) and OUT_DIR; got $#"
setup=$1; out=$2
binary=${BINARY:-build/train_gpt2_z2}
export OMP_NUM_THREADS=1
[ -x "$binary" ] || die "BINARY=$binary: not an executable; expected the trainer (make zero_binaries)"
autos_default="0.0625:3:256 0.0625:3:512 0.125:3:256 0.25:10:256"; stop=""
case "$setup" in
    shakespeare_d2) train=data/tinyshakespeare/tiny_shakespeare_train.bin; val=data/tinyshakespeare/tiny_shakespeare_val.bin
                    model=d2; base_lr=1e-3; targets=${TARGETS:-7.5,7.0}; stop=${STOP_LOSS:-6.9} ;;
    docs_d2) train='data/doc_corpus/docs_train_*.bin'; val='data/doc_corpus/docs_val_*.bin'
             model=d2; base_lr=1e-3; targets=${TARGETS:-8.4,7.85}; stop=${STOP_LOSS:-7.8} ;;
    shakespeare) train=data/ts_v1000/tiny_shakespeare_train.bin; val=data/ts_v1000/tiny_shakespeare_val.bin
                 model=dev/reference/gpt2_ref_model.bin; base_lr=2e-3; targets=${TARGETS:-5.0,4.6} ;;
    docs) train='data/docs_v1000/docs_train_*.bin'; val='data/docs_v1000/docs_val_*.bin'
          model=dev/reference/gpt2_ref_model.bin; base_lr=2e-3; targets=${TARGETS:-5.0,4.6} ;;
    *) die "SETUP $setup: unknown; expected shakespeare_d2, docs_d2, shakespeare or docs" ;;
esac
case "$setup" in
    *_d2) autos_default="0.0625:3:256 0.125:3:256"; auto_budget=32768; val_tokens=3072 ;;
    *) auto_budget=49152; val_tokens=2048 ;;
esac
[[ "$stop" =~ ^([0-9]+\.?[0-9]*)?$ ]] || die "STOP_LOSS=$stop: not a number; expected a val loss, e.g. 7.0"
compgen -G "$train" >/dev/null || die "$train: no shards; expected them prepared (data/tinyshakespeare.py or data/doc_corpus.py; for the V 1000 setups then data/shrink_vocab.py)"
batches=${BATCHES:-"4096 2048 1024 512 256"}; autos=${AUTO:-$autos_default}; jobs=${JOBS:-99}
mkdir -p "$out" || die "$out: cannot create; expected a writable directory"
echo "experiment $setup: $(date -u +%H:%M:%S) | $(uptime)"

wait_for_slot() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 5; done; }
lr_at() { awk -v b="$1" -v lr="$base_lr" 'BEGIN { printf "%.6g", lr * sqrt(b / 512) }'; }

# watched_run DIR BUDGET -- CMD...: run CMD (the trainer, writing DIR/log.jsonl), checked every 5 s;
# stopped once a val loss is <= $stop (if set) or the log counts BUDGET tokens (0: no budget).
# DIR/.done gets the reason (stop_loss, budget or finished), the wall time and the load.
watched_run() {
    local dir=$1 budget=$2; shift 3
    [ -f "$dir/.done" ] && { echo "$dir: already done"; return 0; }
    rm -rf "$dir"; mkdir -p "$dir"
    printf '%q ' "$@" > "$dir/command.sh"; echo >> "$dir/command.sh"
    local start=$SECONDS reason=""
    "$@" > "$dir/train.out" 2>&1 &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do
        sleep 5
        reason=$(awk -v stop="$stop" -v budget="$budget" '
            /"kind":"val"/ && stop != "" && match($0, /"loss":[-+0-9.eE]+/) {
                if (substr($0, RSTART + 7, RLENGTH - 7) + 0 <= stop + 0) { print "stop_loss"; exit } }
            budget > 0 && match($0, /"tokens":[0-9]+/) {
                if (substr($0, RSTART + 9, RLENGTH - 9) + 0 >= budget + 0) { print "budget"; exit } }' "$dir/log.jsonl" 2>/dev/null)
        if [ -n "$reason" ]; then kill $pid; wait $pid 2>/dev/null; break; fi
    done
    if [ -z "$reason" ]; then
        wait $pid || { echo "error: $dir: the trainer failed; see $dir/train.out and $dir/command.sh" >&2; return 1; }
        reason=finished
    fi
    echo "$reason after $((SECONDS - start)) s | $(uptime)" | tee "$dir/.done"
}

for b in $batches; do
    wait_for_slot
    if [[ "$setup" == *_d2 ]]; then  # the d2 setups: the sweep's command (scripts/batch_size_sweep.sh), run watched
        steps=$((24576 / b)); [ $steps -lt 16 ] && steps=16
        v=$(( (val_tokens + b / 2) / b )); [ $v -lt 1 ] && v=1
        watched_run "$out/$(printf 'bs_%08d' $b)" 0 -- "$binary" -i "$train" -o "$out/$(printf 'bs_%08d' $b)" -e $model \
            -b 2 -t 64 -d $b -l "$(lr_at $b)" -x $steps -v $v -s 0 -n 0 -j "$val" -m 8 > "$out/sweep_$b.log" 2>&1 &
    else
        bash scripts/batch_size_sweep.sh --binary "$binary" --depth $model --micro-batch 2 --seq-len 64 --batch-sizes "$b" \
            --tokens 131072 --val-every-tokens $val_tokens --val-steps 8 --lr-rule sqrt --base-lr $base_lr --base-batch 512 \
            --train "$train" --val "$val" --out "$out" > "$out/sweep_$b.log" 2>&1 &
    fi
done
for a in $autos; do
    wait_for_slot
    IFS=: read -r f w d0 <<< "$a"
    dir="$out/auto_f${f}_w${w}_s${d0}"
    watched_run "$dir" $auto_budget -- "$binary" -i "$train" -j "$val" -o "$dir" -e $model -b 2 -t 64 -d auto -d0 $d0 -dm 4096 \
        -df "$f" -dw $w -dl sqrt -l "$(lr_at $d0)" -x $((auto_budget / 128)) -v 3 -m 8 -s 0 -n 0 > "$out/auto_${a//:/_}.log" 2>&1 &
done
wait
echo "experiment $setup: runs done $(date -u +%H:%M:%S) | $(uptime)"
python3 scripts/plot_schedule.py "$out" --targets "$targets" -o "$out/plots"
