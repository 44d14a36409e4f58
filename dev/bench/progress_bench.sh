#!/usr/bin/env bash
# What the CPU build's MPI progress thread (zero/progress_cpu.h) hides (not a test): the simulated
# cluster (tests/cluster.sh, 2 hosts x 2 ranks, TCP over veth and a bridge, each host's eth0
# limited to RATE by tc tbf), MODEL on the ZeRO tests' synthetic shards, S steps, for each stage:
# the trainer as built (progress thread on) and build/noprogress/ (ZERO_PROGRESS_THREAD=0: the
# rings move only when the model calls into the engine), interleaved, ROUNDS rounds. Per run:
# rank 0's mean step time and exposed communication (the log's ms and comm_wait_ms) over steps 2..S.
# Usage (root): [ROUNDS=2] [RPN=2 ranks per host] dev/bench/progress_bench.sh [MODEL (d4)] [RATE (1gbit)] [STAGES (0 1 2 3)] [S (5)]
set -uo pipefail
cd "$(dirname "$0")/../.."
model=${1:-d4}; rate=${2:-1gbit}; stages=${3:-0 1 2 3}; steps=${4:-5}; rounds=${ROUNDS:-2}; rpn=${RPN:-2}
source tests/cluster.sh
if ! why=$(cluster_can_run); then echo "progress_bench: $why"; exit 1; fi
bins=(); for s in $stages; do bins+=(build/train_gpt2_z$s build/noprogress/train_gpt2_z$s); done
make -s "${bins[@]}" >/dev/null || exit 1
cluster_up 2 || exit 1
data="$CL_DIR/data"
mkdir -p "$data"
python3 tests/markov_shards.py "$data" 3000 200000 8000 1234
export OMP_NUM_THREADS=1
cluster_rate_limit node0 "$rate"
cluster_rate_limit node1 "$rate"
echo "progress_bench: $model, 2 hosts x $rpn ranks (B 2, T 64 per rank, 1 thread), eth0 at $rate, steps 2-$steps, $rounds rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$CL_DIR/results"
for r in $(seq "$rounds"); do for stage in $stages; do for variant in on off; do
    bin=$PWD/build/train_gpt2_z$stage; [ $variant = off ] && bin=$PWD/build/noprogress/train_gpt2_z$stage
    run="$CL_DIR/z${stage}_${variant}_$r"
    if ! cluster_exec node0 timeout 900 "${CL_MPIRUN[@]}" -x OMP_NUM_THREADS -H node0:$rpn,node1:$rpn -np $((2 * rpn)) "$bin" \
            -e "$model" -b 2 -t 64 -x "$steps" -v 0 -s 0 -n 0 -l 1e-4 -wt 600 -i "$data/train.bin" -o "$run" >"$run.out" 2>&1; then
        echo "run failed: stage $stage, progress $variant: $(tail -2 "$run.out" | tr '\n' ' ')"; continue
    fi
    echo "$stage $variant $run" >>"$CL_DIR/results"
done; done; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$CL_DIR/results" <<'PY'
import json, statistics, sys
runs = {}
for stage, variant, run in (l.split() for l in open(sys.argv[1])):
    train = [x for x in map(json.loads, open(run + "/log.jsonl")) if x["kind"] == "train" and x["step"] >= 2]
    runs.setdefault((stage, variant), []).append((sum(x["ms"] for x in train) / len(train), sum(x["comm_wait_ms"] for x in train) / len(train)))
print("| stage | step ms, thread on | step ms, off | exposed comm ms, on | exposed, off | exposed on / off | rounds (on: step, exposed) |")
print("|---|---|---|---|---|---|---|")
for stage in sorted({k[0] for k in runs}):
    on, off = runs.get((stage, "on"), []), runs.get((stage, "off"), [])
    if not on or not off: continue
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"| {stage} | {med(on, 0):.0f} | {med(off, 0):.0f} | {med(on, 1):.0f} | {med(off, 1):.0f} | {med(on, 1) / max(med(off, 1), 1e-9):.2f} | "
          + ", ".join(f"{a:.0f}/{b:.0f}" for a, b in on) + " |")
PY
