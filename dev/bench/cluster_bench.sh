#!/usr/bin/env bash
# Bytes on the wire and exposed communication across hosts, the engine's rings against MPI's own
# collectives (build/mpicoll/, ZERO_RING=0), in the simulated cluster (tests/cluster.sh: 2 hosts
# x 2 ranks, TCP over veth and a bridge). For each ZeRO stage and build:
#   - each host's eth0 tx bytes per step (interface counter; a (2+S)-step run minus a 2-step
#     run, so start-up and teardown cancel), against the printed per-rank formula x 4 bytes x
#     the ring edges leaving the host (1 here)
#   - with both hosts' eth0 limited to RATE (tc tbf), the mean step time and exposed (waited)
#     communication per step over the steps after the first (the log's comm_wait_ms; rank 0)
# Usage (root): dev/bench/cluster_bench.sh [MODEL (d2)] [RATE (100mbit)] [S steps (4)]
# Prints `uptime` beside the table: ranks share the machine's cores, so times are noisy when it
# is busy; bytes are not.
set -uo pipefail
cd "$(dirname "$0")/../.."
model=${1:-d2}
rate=${2:-100mbit}
steps=${3:-4}
source tests/cluster.sh
if ! why=$(cluster_can_run); then echo "cluster_bench: $why"; exit 1; fi
make -s zero_binaries build/mpicoll/train_gpt2_z0 build/mpicoll/train_gpt2_z1 build/mpicoll/train_gpt2_z2 \
    build/mpicoll/train_gpt2_z3 >/dev/null || exit 1
cluster_up 2 || exit 1
data="$CL_DIR/data"
mkdir -p "$data"
python3 tests/markov_shards.py "$data" 3000 200000 8000 1234
export OMP_NUM_THREADS=1
# run OUT BINARY STEPS: 2 hosts x 2 ranks, B 2 x T 64 per rank, no val, no checkpoints.
run() {
    cluster_exec node0 timeout 900 "${CL_MPIRUN[@]}" -x OMP_NUM_THREADS -H node0:2,node1:2 -np 4 "$PWD/$2" \
        -e "$model" -b 2 -t 64 -x "$3" -v 0 -s 0 -l 1e-4 -wt 600 -i "$data/train.bin" -o "$1" >"$1.out" 2>&1 ||
        { echo "run failed: $2 ($1.out):"; tail -3 "$1.out"; exit 1; }
}
tx() { echo "$(cluster_tx_bytes node0) $(cluster_tx_bytes node1)"; }
results="$CL_DIR/results"
: >"$results"
for stage in 0 1 2 3; do
    for build in ring mpicoll; do
        bin=build/train_gpt2_z$stage
        [ "$build" = mpicoll ] && bin=build/mpicoll/train_gpt2_z$stage
        a=($(tx)); run "$CL_DIR/long_${build}_$stage" "$bin" $((2 + steps)); b=($(tx))
        run "$CL_DIR/short_${build}_$stage" "$bin" 2; c=($(tx))
        echo "bytes $stage $build $(( (b[0] - a[0] - c[0] + b[0]) / steps )) $(( (b[1] - a[1] - c[1] + b[1]) / steps ))" >>"$results"
    done
done
cluster_rate_limit node0 "$rate"
cluster_rate_limit node1 "$rate"
for stage in 0 1 2 3; do
    for build in ring mpicoll; do
        bin=build/train_gpt2_z$stage
        [ "$build" = mpicoll ] && bin=build/mpicoll/train_gpt2_z$stage
        run "$CL_DIR/slow_${build}_$stage" "$bin" $((1 + steps))
        echo "slow $stage $build $CL_DIR/slow_${build}_$stage" >>"$results"
    done
done
echo "cluster_bench: $model, 2 hosts x 2 ranks (B 2, T 64 per rank), eth0 at $rate for the timed runs; $(uptime)"
python3 - "$results" "$rate" <<'PY'
import json, sys
rows = [l.split() for l in open(sys.argv[1])]
bytes_ = {(r[1], r[2]): (int(r[3]), int(r[4])) for r in rows if r[0] == "bytes"}
print(f"| stage | collectives | eth0 tx per step node0 / node1 (bytes) | formula x 4 B | measured / formula | step at {sys.argv[2]} (ms) | exposed comm (ms) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r[0] != "slow":
        continue
    stage, build, d = r[1], r[2], r[3]
    recs = [json.loads(l) for l in open(d + "/log.jsonl")]
    cfg = next(x for x in recs if x["kind"] == "config")
    train = [x for x in recs if x["kind"] == "train"][1:]  # after the first step (warm-up)
    ms = sum(x["ms"] for x in train) / len(train)
    wait = sum(x["comm_wait_ms"] for x in train) / len(train)
    f = cfg["elements_sent_formula"] * 4
    b0, b1 = bytes_[(stage, build)]
    name = "ring (engine)" if build == "ring" else "MPI's (libnbc)"
    print(f"| {stage} | {name} | {b0} / {b1} | {f} ({cfg['elements_sent_formula_text']}) | {b0 / f:.3f} / {b1 / f:.3f} | {ms:.0f} | {wait:.0f} |")
PY
