#!/usr/bin/env bash
# ZeRO++ convergence (not a test): d2 on tinyshakespeare, S steps (default 300), stage 3 on 4
# ranks of this machine, plain and with qwZ (-qw 1), hpZ (-hp 2), qgZ (-qg 1: one level, the
# 4 ranks of this host) and all three (-hp 2: qgZ in two levels of 2 ranks); the final val
# loss of each and its gap to plain stage 3 (the issue's target: within 1%).
# Prints `uptime` beside: the ranks share the machine's cores.
# Usage: dev/bench/zeropp_convergence.sh [STEPS (300)] [MODEL (d2)]
set -uo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-300}
model=${2:-d2}
source tests/lib.sh
ensure_tinyshakespeare || { echo "zeropp_convergence: no tinyshakespeare shards"; exit 1; }
make -s build/train_gpt2_z3 >/dev/null || exit 1
out=$(mktemp -d /tmp/zeropp_conv.XXXXXX)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1
echo "load before: $(uptime)"
run() {
    local name=$1; shift
    local t0=$(date +%s)
    timeout 3600 mpirun --allow-run-as-root --oversubscribe -np 4 build/train_gpt2_z3 -e "$model" -b 4 -t 64 -x "$steps" \
        -l 1e-3 -u 20 -v 50 -m 8 -s 0 -o "$out/$name" "$@" >"$out/$name.out" 2>&1 || { echo "$name failed: $(tail -2 "$out/$name.out")"; return 1; }
    echo "$name: $(grep -m1 '^done' "$out/$name.out") ($(( $(date +%s) - t0 )) s wall)"
}
run plain
for spec in "qw -qw 1" "hp -hp 2" "qg -qg 1" "all -qw 1 -hp 2 -qg 1"; do
    set -- $spec; name=$1; shift
    run "$name" "$@" && echo "  $name vs plain: $(python3 tests/zeropp_logcheck.py gap "$out/plain" "$out/$name" 0.01)"
done
echo "load after: $(uptime)"
