#!/usr/bin/env bash
# gpt2_124M.sh: pretrain GPT-2 124M (d12) on FineWeb 10B tokens on one GPU box, llm.c's
# recipe (docs/gpt2_124M.md): 524288 tokens a step (-d, 2^19, GPT-3 paper's 0.5M for 125M),
# T 1024, lr 6e-4 peak, 700 warmup steps, cosine to 0, AdamW weight decay 0.1, grad clip 1.0,
# 18865 steps (= 9.9e9 tokens: one pass over sample-10BT's train shards), val loss (20
# batches) and HellaSwag every 250 steps, a checkpoint every 1000 (resumable: rerun the same
# command, -y 1 picks up the latest one in --out).
# The ZeRO stage and micro-batch come from the planner (--plan h100, plan/plan.h): the largest
# -b of 64, 32, 16, 8 at which a stage fits in device memory, and among the stages that fit
# the fastest predicted step (ties: the lower stage, less communication); gradient
# accumulation keeps -d. --stage S / --batch B override.
#
# usage: scripts/gpt2_124M.sh [--gpus N] [--launcher mpirun|srun] [--data DIR] [--out DIR]
#                             [--hellaswag FILE] [--machine h100|h200] [--stage S] [--batch B]
#                             [--dry-run] [--smoke]
#   --dry-run  print the planner's choice and the command, run nothing (builds nothing)
#   --smoke    the same recipe shrunk for a CPU (tests/t_72_pretrain.sh): the CPU trainer
#              (build/train_gpt2_zS), d2, B 4 x T 64, 6 steps, warmup 2, val/HellaSwag (first
#              8 examples) and checkpoints every 3, planned with --plan cpu; --data must hold
#              shards made by data/fineweb.py (the test makes them from a local parquet)
# Data: data/fineweb.py --out-dir DIR writes DIR/fineweb_{val,train}_*.bin; data/hellaswag.py
# writes data/hellaswag/hellaswag_val.bin. Exit status: the trainer's; 1 on a bad flag.
set -euo pipefail
cd "$(dirname "$0")/.."

gpus=8 launcher=mpirun data=data/fineweb10B out=log_gpt2_124M hellaswag=data/hellaswag/hellaswag_val.bin
machine=h100 stage=auto batch=auto dry_run=0 smoke=0
die() { echo "error: $1; expected $2" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
        --gpus|--launcher|--data|--out|--hellaswag|--machine|--stage|--batch)
            [ $# -ge 2 ] || die "$1: no value" "$1 VALUE"
            declare "${1#--}=$2"; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --smoke) smoke=1; shift ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "$1: unknown flag" "flags as listed by --help" ;;
    esac
done
[[ $gpus =~ ^[1-9][0-9]*$ ]] || die "--gpus $gpus: not a positive count" "the number of GPUs (ranks) on this box"
[[ $launcher =~ ^(mpirun|srun)$ ]] || die "--launcher $launcher: unknown" "mpirun or srun"
[[ $stage =~ ^(auto|[0-3])$ ]] || die "--stage $stage: unknown" "auto or 0-3"
[[ $batch =~ ^(auto|[1-9][0-9]*)$ ]] || die "--batch $batch: not a micro-batch" "auto or a positive count"
[ "$dry_run" = 1 ] || ls "$data"/fineweb_train_*.bin >/dev/null 2>&1 ||
    die "--data $data: no fineweb_train_*.bin shards" "the output dir of data/fineweb.py"

if [ "$smoke" = 1 ]; then
    depth=d2 T=64 total=$((4 * 64 * gpus)) batches="4" steps=6 warmup=2 lr=1e-3 every=3 ckpt=3 val_batches=2
    plan_machine="cpu,peak_tflops=0.1,mem_gbs=10,mem_gib=16" # given rates: the plan is instant
    trainer() { echo "build/train_gpt2_z$1"; }
    build() { [ "$dry_run" = 1 ] || nice -n 10 make -s "build/train_gpt2_z$1" >&2; }
    extra=(-hm 8 -s 0)
else
    depth=d12 T=1024 total=524288 batches="64 32 16 8" steps=18865 warmup=700 lr=6e-4 every=250 ckpt=1000 val_batches=20
    plan_machine=$machine
    trainer() { echo "./train_gpt2cu"; }
    build() { [ "$dry_run" = 1 ] || make -s train_gpt2cu ZERO_STAGE="$1" >&2; }
    extra=(-s 5000 -g 64)
fi

# The planner: for each candidate -b, the plan_json rows of stages 0-3; choose as said above.
choose() {
    local planner=./plan_gpt2 b rows pick # the planner's own binary plans either build's layout
    if [ ! -x "$planner" ]; then make -s plan_gpt2 >&2 || { echo "none"; return; }; fi
    for b in $batches; do
        [ "$batch" = auto ] || [ "$batch" = "$b" ] || continue
        rows=$("$planner" --plan "$plan_machine" -np "$gpus" -e "$depth" -b "$b" -t "$T" -d "$total" -pj - 2>/dev/null | grep '^plan_json ' || true)
        pick=$(python3 -c '
import json, sys
want = sys.argv[1]
rows = [json.loads(line.split(" ", 1)[1]) for line in sys.stdin if line.strip()]
fit = [r for r in rows if r["fits"] and (want == "auto" or r["stage"] == int(want))]
if fit:
    best = min(fit, key=lambda r: (round(r["step_ms"], 1), r["stage"]))
    print(best["stage"], best["step_ms"], best["mfu"], best["bytes_total"] / 2**30, best["grad_accum_steps"])
' "$stage" <<<"$rows")
        if [ -n "$pick" ]; then echo "$b $pick"; return; fi
    done
    echo "nofit"
}
choice=$(choose)
if [ "$choice" = nofit ]; then
    die "the planner (--plan $plan_machine, $gpus ranks): no stage fits at -b ${batch/auto/$batches}" "more GPUs or a smaller --batch"
elif [ "$choice" = none ]; then
    b=${batch/auto/${batches%% *}} s=${stage/auto/1}
    echo "plan: ./plan_gpt2 could not be built, the planner did not run: -b $b, stage $s (build it and rerun --dry-run for the planner's choice)"
else
    read -r b s step_ms mfu gib accum <<<"$choice"
    [ "$stage" = auto ] || s=$stage
    printf 'plan: %s ranks (--plan %s): -b %s, ZeRO stage %s, %s micro-steps, %.1f GiB per rank, predicted step %.1f ms, MFU %.1f%%, %.2f h for %d steps\n' \
        "$gpus" "$plan_machine" "$b" "$s" "$accum" "$gib" "$step_ms" "$(python3 -c "print(100 * $mfu)")" \
        "$(python3 -c "print($step_ms * $steps / 3.6e6)")" "$steps"
fi

args=(-i "$data/fineweb_train_*.bin" -j "$data/fineweb_val_*.bin" -o "$out" -e "$depth"
      -b "$b" -t "$T" -d "$total" -l "$lr" -u "$warmup" -q 0.0 -k cosine -c 0.1 -gc 1.0 -x "$steps"
      -v "$every" -m "$val_batches" -hs "$every" -hf "$hellaswag" -n "$ckpt" -y 1 "${extra[@]}")
cmd=("$(trainer "$s")" "${args[@]}")
if [ "$gpus" -gt 1 ] || [ "$smoke" = 0 ]; then
    if [ "$launcher" = srun ]; then cmd=(srun --ntasks="$gpus" --ntasks-per-node="$gpus" --gpus-per-task=1 "${cmd[@]}")
    else cmd=(mpirun -np "$gpus" --bind-to none "${cmd[@]}"); fi
fi
[ "$smoke" = 1 ] && [ "$gpus" -gt 1 ] && [ "$launcher" = mpirun ] && cmd=("${cmd[0]}" --allow-run-as-root --oversubscribe "${cmd[@]:1}")
echo "command: $(printf "%q " "${cmd[@]}")" # quoted: the shard globs stay globs when pasted
[ "$dry_run" = 1 ] && exit 0
build "$s"
exec "${cmd[@]}"
