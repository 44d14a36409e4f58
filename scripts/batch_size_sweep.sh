#!/usr/bin/env bash
# batch_size_sweep.sh: train the same model at several total batch sizes, one output dir per run,
# then plot steps and tokens to reach a target loss and fit the critical batch size B_crit
# (scripts/plot_sweep.py; McCandlish et al. 2018, "An Empirical Model of Large-Batch Training").
#
#   scripts/batch_size_sweep.sh --batch-sizes "4096 8192 16384" --tokens 4194304 --depth d2 \
#       --lr-rule sqrt --base-lr 6e-4 --base-batch 4096 --out sweeps/d2
#
# Every run gets the same token budget (steps = budget / batch tokens), so small batches take
# many steps and large ones few; the plots show which batch reaches a loss in the fewest steps
# for a given token cost. Each run's learning rate follows --lr-rule from --base-lr at
# --base-batch: constant (same lr), linear (lr * B/base, Goyal et al. 2017), sqrt
# (lr * sqrt(B/base), the Adam-style rule, e.g. Malladi et al. 2022). Val loss is measured every
# --val-every-tokens tokens (the same token interval for every run, so the curves line up).
# A finished run leaves <run dir>/.done and is skipped when the sweep is run again (--force reruns).
set -uo pipefail

die() { echo "error: $1" >&2; exit 1; }
script_dir="$(cd "$(dirname "$0")" && pwd)"

usage() {
    cat <<'EOF'
usage: scripts/batch_size_sweep.sh [flags]
  --batch-sizes "A B .."  total batch sizes in tokens (the trainer's -d)      default "4096 8192 16384"
  --micro-batch B         sequences per rank per micro-step (-b)                default 4
  --seq-len T             sequence length (-t)                                  default 64
  --lr-rule R             constant | linear | sqrt scaling of --base-lr         default constant
  --base-lr LR            learning rate at --base-batch                         default 3e-4
  --base-batch N          batch tokens where --base-lr applies                  default: smallest batch size
  --tokens N              token budget per run; steps = N / batch tokens        default 2097152
  --val-every-tokens N    val loss every N tokens, rounded to whole steps per run (0: none; the
                          plots then use smoothed train loss)                   default tokens/32
  --val-steps M           val batches per evaluation (-m)                       default 10
  --ranks N               ranks; N > 1 runs under mpirun -np N --oversubscribe  default 1
  --depth dN              model descriptor (-e): d1..d4, d6, d12, ...           default d2
  --train PATTERN         train shards (-i)         default data/tinyshakespeare/tiny_shakespeare_train.bin
  --val PATTERN           val shards (-j)           default data/tinyshakespeare/tiny_shakespeare_val.bin
  --out DIR               sweep dir: one subdir per run, plots in DIR/plots    default sweeps/batch_size
  --binary PATH           trainer executable                                    default ./train_gpt2
  --extra "FLAGS"         passed to every run after the sweep's own flags (later flags win);
                          split on spaces, no quoting: e.g. --extra "-k cosine -q 0.1 -u 20"
  --target-loss X         passed to plot_sweep.py (default: a loss every run reaches)
  --force                 rerun runs that already finished
  --dry-run               validate and print the commands, run nothing
  -h, --help              this help
EOF
}

batch_sizes="4096 8192 16384"; micro_batch=4; seq_len=64; lr_rule=constant; base_lr=3e-4; base_batch=""
tokens=2097152; val_every_tokens=""; val_steps=10; ranks=1; depth=d2
train="data/tinyshakespeare/tiny_shakespeare_train.bin"; val="data/tinyshakespeare/tiny_shakespeare_val.bin"
out="sweeps/batch_size"; binary="./train_gpt2"; extra=""; target_loss=""; force=0; dry_run=0

while [ $# -gt 0 ]; do
    flag=$1
    case "$flag" in
        -h|--help) usage; exit 0 ;;
        --force) force=1; shift; continue ;;
        --dry-run) dry_run=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || die "$flag: missing value; expected a value after the flag (see --help)"
    value=$2; shift 2
    case "$flag" in
        --batch-sizes) batch_sizes=$value ;;
        --micro-batch) micro_batch=$value ;;
        --seq-len) seq_len=$value ;;
        --lr-rule) lr_rule=$value ;;
        --base-lr) base_lr=$value ;;
        --base-batch) base_batch=$value ;;
        --tokens) tokens=$value ;;
        --val-every-tokens) val_every_tokens=$value ;;
        --val-steps) val_steps=$value ;;
        --ranks) ranks=$value ;;
        --depth) depth=$value ;;
        --train) train=$value ;;
        --val) val=$value ;;
        --out) out=$value ;;
        --binary) binary=$value ;;
        --extra) extra=$value ;;
        --target-loss) target_loss=$value ;;
        *) die "$flag: unknown flag; expected one of the flags listed by --help" ;;
    esac
done

# ---- validation: everything is checked before the first run starts ------------------------------
is_positive_int() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$((10#$1))" -gt 0 ]; }
is_positive_number() { [[ "$1" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && awk -v x="$1" 'BEGIN { exit !(x > 0) }'; }

is_positive_int "$micro_batch" || die "--micro-batch $micro_batch: not a positive integer; expected sequences per rank, e.g. 4"
is_positive_int "$seq_len" || die "--seq-len $seq_len: not a positive integer; expected a sequence length, e.g. 64"
is_positive_int "$ranks" || die "--ranks $ranks: not a positive integer; expected the number of ranks, e.g. 1"
is_positive_int "$tokens" || die "--tokens $tokens: not a positive integer; expected a token budget per run"
is_positive_int "$val_steps" || die "--val-steps $val_steps: not a positive integer; expected val batches per evaluation"
is_positive_number "$base_lr" || die "--base-lr $base_lr: not a positive number; expected a learning rate, e.g. 6e-4"
case "$lr_rule" in constant|linear|sqrt) ;; *) die "--lr-rule $lr_rule: unknown rule; expected constant, linear or sqrt" ;; esac
[[ "$depth" =~ ^d[0-9]+$ ]] || [ -f "$depth" ] || die "--depth $depth: not a descriptor or a file; expected dN (d1..d4, d6, d12, d24, d36, d48) or an llm.c model file"
[ -n "$target_loss" ] && { [[ "$target_loss" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || die "--target-loss $target_loss: not a number; expected a loss value, e.g. 4.5"; }

tokens_per_micro_step=$((micro_batch * seq_len * ranks))
read -r -a batches <<< "$batch_sizes"
[ ${#batches[@]} -gt 0 ] || die "--batch-sizes: empty; expected total batch sizes in tokens, e.g. \"4096 8192 16384\""
declare -A seen=()
for batch in "${batches[@]}"; do
    is_positive_int "$batch" || die "--batch-sizes: '$batch' is not a positive integer; expected total batch sizes in tokens"
    [ -z "${seen[$batch]:-}" ] || die "--batch-sizes: $batch given twice; expected distinct batch sizes"
    seen[$batch]=1
    [ $((batch % tokens_per_micro_step)) -eq 0 ] ||
        die "--batch-sizes: $batch is not a multiple of micro-batch x seq-len x ranks = $micro_batch x $seq_len x $ranks = $tokens_per_micro_step; expected multiples of $tokens_per_micro_step"
    [ "$batch" -le "$tokens" ] || die "--tokens $tokens: smaller than batch size $batch; expected a budget of at least one step of the largest batch"
done
if [ -z "$base_batch" ]; then
    base_batch=$(printf '%s\n' "${batches[@]}" | sort -n | head -1)
fi
is_positive_int "$base_batch" || die "--base-batch $base_batch: not a positive integer; expected batch tokens where --base-lr applies"
[ -n "$val_every_tokens" ] || val_every_tokens=$((tokens / 32))
[[ "$val_every_tokens" =~ ^[0-9]+$ ]] || die "--val-every-tokens $val_every_tokens: not an integer; expected tokens between val evaluations (0: none)"

if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then
    die "--binary $binary: not an executable file; expected the trainer (make train_gpt2)"
fi
compgen -G "$train" >/dev/null || die "--train $train: no file matches; expected a train shard pattern (see data/)"
if [ "$val_every_tokens" -gt 0 ]; then
    compgen -G "$val" >/dev/null || die "--val $val: no file matches; expected a val shard pattern, or --val-every-tokens 0"
fi
launcher=()
if [ "$ranks" -gt 1 ]; then
    command -v mpirun >/dev/null || die "--ranks $ranks: mpirun not found; expected Open MPI installed (scripts/setup.sh) or --ranks 1"
    launcher=(mpirun -np "$ranks" --oversubscribe)
    [ "$(id -u)" -eq 0 ] && launcher+=(--allow-run-as-root)
fi
read -r -a extra_words <<< "$extra"

# ---- the runs ----------------------------------------------------------------------------------
# lr for batch size $1 under the rule (awk: bash has no floating point).
run_lr() {
    awk -v rule="$lr_rule" -v base="$base_lr" -v b="$1" -v b0="$base_batch" 'BEGIN {
        r = b / b0; lr = (rule == "linear") ? base * r : (rule == "sqrt") ? base * sqrt(r) : base;
        printf "%.6g", lr }'
}

[ "$dry_run" -eq 1 ] || mkdir -p "$out" || die "--out $out: cannot create; expected a writable directory"
total=${#batches[@]}; index=0
for batch in $(printf '%s\n' "${batches[@]}" | sort -n); do
    index=$((index + 1))
    steps=$((tokens / batch))
    lr=$(run_lr "$batch")
    val_every=0
    [ "$val_every_tokens" -gt 0 ] && val_every=$(( (val_every_tokens + batch / 2) / batch )) && [ "$val_every" -lt 1 ] && val_every=1
    dir="$out/$(printf 'bs_%08d' "$batch")"
    cmd=("${launcher[@]}" "$binary" -i "$train" -o "$dir" -e "$depth" -b "$micro_batch" -t "$seq_len"
         -d "$batch" -l "$lr" -x "$steps" -v "$val_every" -s 0 -n 0)
    [ "$val_every" -gt 0 ] && cmd+=(-j "$val" -m "$val_steps")
    cmd+=("${extra_words[@]}")
    echo "sweep: [$index/$total] batch $batch tokens, $steps steps, lr $lr -> $dir"
    if [ "$dry_run" -eq 1 ]; then
        echo "  ${cmd[*]}"
        continue
    fi
    if [ -f "$dir/.done" ] && [ "$force" -eq 0 ]; then
        echo "  already done (remove $dir/.done or pass --force to rerun)"
        continue
    fi
    mkdir -p "$dir" || die "--out $out: cannot create $dir; expected a writable directory"
    rm -f "$dir/.done" "$dir/log.jsonl"
    printf '%q ' "${cmd[@]}" > "$dir/command.sh"; echo >> "$dir/command.sh"
    start=$SECONDS
    "${cmd[@]}" > "$dir/train.out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || die "run at batch $batch failed (exit $rc); see $dir/train.out and $dir/command.sh"
    touch "$dir/.done"
    echo "  done in $((SECONDS - start)) s"
done
[ "$dry_run" -eq 1 ] && exit 0

plot_args=("$out" -o "$out/plots")
[ -n "$target_loss" ] && plot_args+=(--target-loss "$target_loss")
python3 "$script_dir/plot_sweep.py" "${plot_args[@]}"
