#!/usr/bin/env bash
# What the timeline trace (-tr, zero/trace/trace.h) costs the CPU build (not a test): three builds of
# one stage, interleaved round by round on the same 2-rank run, mean step over steps 2..X:
#   compiled out   -DZERO_TRACE=0: every hook is an empty function (the compiler drops the calls)
#   off            the default build without -tr: each hook tests one flag
#   on             -tr with every step traced (-ts 1-X)
# Prints each round and the median per variant, with the machine's load (shared cores: compare
# within a round). Usage: dev/bench/trace_overhead.sh [stage (3)] [rounds (3)] [steps (8)]
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=${1:-3}; rounds=${2:-3}; steps=${3:-8}
export OMP_NUM_THREADS=1
make -s build/train_gpt2_z"$stage"
W=$(mktemp -d /tmp/trace_overhead.XXXXXX)
trap 'rm -rf "$W"' EXIT
# The same Makefile rule, its compiler given -DZERO_TRACE=0, into a build dir of its own.
make -s BUILD="$W/b" MPICC="mpicc -DZERO_TRACE=0" "$W/b/train_gpt2_z$stage"
cp "$W/b/train_gpt2_z$stage" "$W/compiled_out"
python3 tests/markov_shards.py "$W" 3000 200000 8000 1234
run() { # VARIANT ROUND -> mean step ms over steps 2..
    local bin=build/train_gpt2_z$stage extra=()
    [ "$1" = compiled_out ] && bin=$W/compiled_out
    [ "$1" = on ] && extra=(-tr "$W/t$2.json" -ts 1-"$steps")
    timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" -e d2 -t 64 -b 4 -x "$steps" -v 0 -n 0 -s 0 \
        -i "$W/train.bin" -o "$W/$1_$2" "${extra[@]}" >"$W/$1_$2.out" 2>&1
    python3 -c "import json,sys; t=[r['ms'] for r in map(json.loads, open(sys.argv[1])) if r['kind']=='train' and r['step']>=2]; print(f'{sum(t)/len(t):.1f}')" "$W/$1_$2/log.jsonl"
}
declare -A all
for r in $(seq 1 "$rounds"); do
    line="round $r:"
    for v in compiled_out off on; do ms=$(run $v "$r"); all[$v]="${all[$v]:-} $ms"; line="$line $v $ms ms"; done
    echo "$line | load $(cut -d' ' -f1-3 /proc/loadavg)"
done
for v in compiled_out off on; do
    echo "$v: median $(tr ' ' '\n' <<<"${all[$v]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') ms per step (d2, T 64, B 4, 2 ranks, stage $stage)"
done
echo "trace events per step on rank 0: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d['traceEvents']) // $steps)" "$W/t1.rank0.json")"
