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
  Integers are plain decimal (no leading zeros), below 2^31 where the trainer reads them.
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
  --depth dN              model (-e): d1..d4, d6, d12, d24, d36, d48 or an llm.c model file
                                                                                default d2
  --train PATTERN         train shards (-i)         default data/tinyshakespeare/tiny_shakespeare_train.bin
  --val PATTERN           val shards (-j)           default data/tinyshakespeare/tiny_shakespeare_val.bin
  --out DIR               sweep dir: one subdir per run, plots in DIR/plots    default sweeps/batch_size
  --binary PATH           trainer executable                                    default ./train_gpt2
  --extra "FLAGS"         passed to every run after the sweep's own flags (later flags win);
                          split on spaces, no quoting: e.g. --extra "-k cosine -q 0.1 -u 20";
                          not checked here: the trainer rejects a bad one in the first run
  --target-loss X         passed to plot_sweep.py (default: a loss every run reaches)
  --force                 rerun runs that already finished
  --dry-run               validate and print the commands, run nothing
  -h, --help              this help
  Before the first run it prints the expected run time (6N FLOPs per token over every run's
  tokens, at SWEEP_FLOPS FLOP/s, default 5e10: about what 2 CPU cores sustain on d2-d4) and warns
  when that is over 30 minutes. The defaults (d2, 3 runs x 2097152 tokens) take hours on a CPU.
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
    case "$flag" in  # the flags that take a value; anything else is unknown, with or without a value after it
        --batch-sizes|--micro-batch|--seq-len|--lr-rule|--base-lr|--base-batch|--tokens|--val-every-tokens|\
        --val-steps|--ranks|--depth|--train|--val|--out|--binary|--extra|--target-loss) ;;
        *) die "$flag: unknown flag; expected one of the flags listed by --help" ;;
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
    esac
done

# ---- validation: everything is checked before the first run starts ------------------------------
# Integers are plain decimal digits without leading zeros (bash would read 08 as bad octal and
# 0400 as 256), at most 18 digits (bash arithmetic is 64-bit), within bounds: what the trainer
# reads as an int must stay below 2^31. int_problem VALUE MIN MAX prints what is wrong, or nothing.
INT_MAX=2147483647
int_problem() {
    local v=$1 min=$2 max=$3 noun="positive integer"
    [ "$min" -eq 0 ] && noun="non-negative integer"
    if [[ "$v" =~ ^0[0-9]+$ ]]; then echo "not a $noun (leading zero)"
    elif ! [[ "$v" =~ ^[0-9]+$ ]]; then echo "not a $noun"
    elif [ ${#v} -gt 18 ] || [ "$v" -gt "$max" ]; then echo "too large (at most $max)"
    elif [ "$v" -lt "$min" ]; then echo "not a $noun"
    fi
}
# check_int FLAG VALUE MIN MAX EXPECTED: die unless VALUE is an integer in [MIN, MAX].
check_int() {
    local problem
    problem=$(int_problem "$2" "$3" "$4")
    [ -z "$problem" ] || die "$1 $2: $problem; expected $5"
}
# is_finite_in X LO HI: X (a number awk reads) is finite and LO < X <= HI.
is_finite_in() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x > lo && x <= hi) }'; }
is_positive_number() { [[ "$1" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && is_finite_in "$1" 0 1.7e308; }

check_int --micro-batch "$micro_batch" 1 $INT_MAX "sequences per rank, e.g. 4"
check_int --seq-len "$seq_len" 1 $INT_MAX "a sequence length, e.g. 64"
[ $((micro_batch * seq_len)) -le $INT_MAX ] ||
    die "--micro-batch $micro_batch: micro-batch x seq-len = $((micro_batch * seq_len)) tokens; expected at most $INT_MAX"
check_int --ranks "$ranks" 1 65536 "the number of ranks, e.g. 1"
check_int --tokens "$tokens" 1 999999999999999999 "a token budget per run"
check_int --val-steps "$val_steps" 1 $INT_MAX "val batches per evaluation"
is_positive_number "$base_lr" || die "--base-lr $base_lr: not a finite positive number; expected a learning rate > 0, e.g. 6e-4"
case "$lr_rule" in constant|linear|sqrt) ;; *) die "--lr-rule $lr_rule: unknown rule; expected constant, linear or sqrt" ;; esac
case "$depth" in
    d1|d2|d3|d4|d6|d12|d24|d36|d48) ;;
    *) [ -f "$depth" ] || die "--depth $depth: not a descriptor or a file; expected d1..d4, d6, d12, d24, d36, d48 or an llm.c model file" ;;
esac
if [ -n "$target_loss" ]; then
    [[ "$target_loss" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] && is_finite_in "$target_loss" -1 1.7e308 ||
        die "--target-loss $target_loss: not a finite number; expected a loss value, e.g. 4.5"
fi
[ -n "$out" ] || die "--out: empty; expected a sweep directory"
# The nearest existing ancestor of --out (itself, if it exists) must be a directory.
out_probe=$out
while [ ! -e "$out_probe" ] && [ ! -L "$out_probe" ]; do out_probe=$(dirname "$out_probe"); done
if [ "$out_probe" = "$out" ]; then
    [ -d "$out" ] || die "--out $out: exists and is not a directory; expected a sweep directory (created if missing)"
else
    [ -d "$out_probe" ] || die "--out $out: $out_probe is not a directory; expected a path whose existing part is a directory"
fi

tokens_per_micro_step=$((micro_batch * seq_len * ranks))
read -r -a batches <<< "$batch_sizes"
[ ${#batches[@]} -gt 0 ] || die "--batch-sizes: empty; expected total batch sizes in tokens, e.g. \"4096 8192 16384\""
[ -z "$base_batch" ] || check_int --base-batch "$base_batch" 1 $INT_MAX "batch tokens where --base-lr applies"
[ -n "$val_every_tokens" ] || val_every_tokens=$((tokens / 32))
check_int --val-every-tokens "$val_every_tokens" 0 999999999999999999 "tokens between val evaluations (0: none)"
declare -A seen=()
for batch in "${batches[@]}"; do
    problem=$(int_problem "$batch" 1 $INT_MAX)
    [ -z "$problem" ] || die "--batch-sizes: '$batch' is $problem; expected total batch sizes in tokens"
    [ -z "${seen[$batch]:-}" ] || die "--batch-sizes: $batch given twice; expected distinct batch sizes"
    seen[$batch]=1
    [ $((batch % tokens_per_micro_step)) -eq 0 ] ||
        die "--batch-sizes: $batch is not a multiple of micro-batch x seq-len x ranks = $micro_batch x $seq_len x $ranks = $tokens_per_micro_step; expected multiples of $tokens_per_micro_step"
    [ "$batch" -le "$tokens" ] || die "--tokens $tokens: smaller than batch size $batch; expected a budget of at least one step of the largest batch"
    [ $((tokens / batch)) -le $INT_MAX ] ||
        die "--tokens $tokens: $((tokens / batch)) steps at batch size $batch; expected at most $INT_MAX steps per run"
    [ $(( (val_every_tokens + batch / 2) / batch )) -le $INT_MAX ] ||
        die "--val-every-tokens $val_every_tokens: more than $INT_MAX steps at batch size $batch; expected at most $INT_MAX steps between evaluations"
done

# The default base batch: the smallest batch size (checked above).
[ -n "$base_batch" ] || base_batch=$(printf '%s\n' "${batches[@]}" | sort -n | head -1)
# lr for batch size $1 under the rule (awk: bash has no floating point).
run_lr() {
    awk -v rule="$lr_rule" -v base="$base_lr" -v b="$1" -v b0="$base_batch" 'BEGIN {
        r = b / b0; lr = (rule == "linear") ? base * r : (rule == "sqrt") ? base * sqrt(r) : base;
        printf "%.6g", lr }'
}

for batch in "${batches[@]}"; do  # a huge --base-lr times a large ratio could overflow, a tiny one underflow
    lr=$(run_lr "$batch")
    is_finite_in "$lr" 0 1.7e308 ||
        die "--base-lr $base_lr: gives lr $lr at batch size $batch under the $lr_rule rule; expected a finite lr > 0 for every run"
done
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

# ---- the expected run time, before anything runs --------------------------------------------------
# 6N FLOPs per token (forward + backward, Kaplan et al. 2020) with N = 12LC^2 + 50304C, over every
# run's tokens; the rate SWEEP_FLOPS (FLOP/s) is a rough CPU figure, not a measurement of this host.
case "$depth" in
    d1) lc="1 64" ;; d2) lc="2 128" ;; d3) lc="3 192" ;; d4) lc="4 256" ;; d6) lc="6 384" ;;
    d12) lc="12 768" ;; d24) lc="24 1024" ;; d36) lc="36 1280" ;; d48) lc="48 1600" ;; *) lc="" ;;
esac
if [ -n "$lc" ]; then
    read -r layers channels <<<"$lc"
    awk -v L="$layers" -v C="$channels" -v runs="${#batches[@]}" -v tok="$tokens" -v rate="${SWEEP_FLOPS:-5e10}" 'BEGIN {
        n = 12 * L * C * C + 50304 * C; s = 6 * n * runs * tok / rate;
        printf "sweep: %d runs x %d tokens, %.1fM parameters: about %.0f minutes at %.3g FLOP/s (SWEEP_FLOPS)\n", runs, tok, n / 1e6, s / 60, rate
        if (s > 1800) printf "sweep: warning: this sweep runs for about %.1f hours; smaller --tokens or fewer --batch-sizes shorten it, --dry-run shows the commands\n", s / 3600 }'
fi

# ---- the runs ----------------------------------------------------------------------------------
[ "$dry_run" -eq 1 ] || mkdir -p "$out" 2>/dev/null || die "--out $out: cannot create; expected a writable directory"
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
    mkdir -p "$dir" 2>/dev/null || die "--out $out: cannot create $dir; expected a writable directory"
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
