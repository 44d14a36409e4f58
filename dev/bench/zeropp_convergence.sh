#!/usr/bin/env bash
# ZeRO++ convergence (not a test): d2 on tinyshakespeare, S steps (default 300), stage 3 on 4
# ranks of this machine, plain; all three off given as flags (-qw 0 -hp 1 -qg 0: its losses must
# equal plain's, every digit); and with qwZ (-qw 1), hpZ (-hp 2), qgZ (-qg 1: one level, the
# 4 ranks of this host) and all three (-hp 2: qgZ in two levels of 2 ranks), at the default
# blocks (-qb, -qbg). Prints the final val loss of each and its gap to plain stage 3 (the
# issue's target: within 1%), the wall time and `uptime`'s load at its start and end (the ranks
# share the machine's cores), and plots val loss vs step (dev/bench/zeropp_convergence_plot.py).
# Every log stays in OUT (default: a new /tmp/zeropp_conv.XXXXXX): OUT/NAME/log.jsonl, OUT/NAME.out.
# OFF_STEPS (default STEPS) shortens the all-off run: its train losses are then compared with
# plain's first OFF_STEPS (within warmup, -u 20, the learning rate does not depend on -x).
# Usage: [OUT=dir] [PARALLEL=k (1): configs at a time] [CONFIGS="plain off qw hp qg all"]
#        [OFF_STEPS=n] [PLOT=file.png] dev/bench/zeropp_convergence.sh [STEPS (300)] [MODEL (d2)]
set -uo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-300}
model=${2:-d2}
parallel=${PARALLEL:-1}
configs=${CONFIGS:-plain off qw hp qg all}
off_steps=${OFF_STEPS:-$steps}
source tests/lib.sh
why=$(ensure_tinyshakespeare) || { echo "zeropp_convergence: no tinyshakespeare shards: $why"; exit 1; }
make -s build/train_gpt2_z3 >/dev/null || exit 1
out=${OUT:-$(mktemp -d /tmp/zeropp_conv.XXXXXX)}
mkdir -p "$out"
echo "logs in $out"
export OMP_NUM_THREADS=1
flags() {
    case $1 in
        plain) ;; off) echo "-qw 0 -hp 1 -qg 0" ;; qw) echo "-qw 1" ;; hp) echo "-hp 2" ;; qg) echo "-qg 1" ;;
        all) echo "-qw 1 -hp 2 -qg 1" ;; *) echo "zeropp_convergence: unknown config $1" >&2; return 1 ;;
    esac
}
run() {
    local name=$1 t0 n=$steps; t0=$(date +%s)
    [ "$name" = off ] && n=$off_steps
    local load0; load0=$(uptime | sed 's/.*load average: //')
    # shellcheck disable=SC2046 # the flags are words
    if timeout 7200 mpirun --allow-run-as-root --oversubscribe -np 4 build/train_gpt2_z3 -e "$model" -b 4 -t 64 -x "$n" \
        -l 1e-3 -u 20 -v 50 -m 8 -s 0 -o "$out/$name" $(flags "$name") >"$out/$name.out" 2>&1; then
        echo "$(( $(date +%s) - t0 )) s wall, load ${load0} -> $(uptime | sed 's/.*load average: //')" >"$out/$name.wall"
        echo "$name: $(grep -m1 '^done' "$out/$name.out") ($(cat "$out/$name.wall"))"
    else
        echo "failed after $(( $(date +%s) - t0 )) s: $(tail -1 "$out/$name.out")" >"$out/$name.wall"
        echo "$name failed: $(tail -2 "$out/$name.out")"
    fi
}
echo "load before: $(uptime)"
for name in $configs; do
    flags "$name" >/dev/null || exit 1
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
    run "$name" &
done
wait
echo "load after: $(uptime)"
for name in $configs; do
    [ "$name" = plain ] && continue
    [ -f "$out/$name/log.jsonl" ] && [ -f "$out/plain/log.jsonl" ] || continue
    if [ "$name" = off ]; then
        if [ "$off_steps" = "$steps" ]; then
            echo "  off vs plain, every train and val loss: $(python3 tests/zero_logcheck.py same "$out/plain" "$out/off" --kinds train,val)"
        else # off's steps are a prefix of plain's: its train records against plain's at the same steps
            echo "  off vs plain, train losses of steps 1-$off_steps: $(python3 tests/zero_logcheck.py same "$out/off" "$out/plain" --kinds train)"
        fi
    else
        echo "  $name vs plain: $(python3 tests/zeropp_logcheck.py gap "$out/plain" "$out/$name" 0.01)"
    fi
done
python3 dev/bench/zeropp_convergence_plot.py "$out" -o "${PLOT:-$out/zeropp_convergence.png}" $configs
