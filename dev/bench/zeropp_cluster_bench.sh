#!/usr/bin/env bash
# ZeRO++ against plain stage 3 across a slow link (not a test): the simulated cluster
# (tests/cluster.sh, 2 hosts x 2 ranks, TCP over veth and a bridge) with each host's eth0 limited
# to RATE (tc tbf), MODEL on the ZeRO tests' synthetic shards, S timed steps after one warm-up:
# stage 3 plain, each of qwZ (-qw 1), hpZ (-hp 0: a host's ranks), qgZ (-qg 1) and all three.
# Per config: mean step time and exposed communication (the log's ms and comm_wait_ms, rank 0),
# bytes each host sent per step (eth0 counter over the timed steps' run / steps: includes start-up,
# so an upper bound; tests/t_75_cluster_5_zeropp.sh measures it exactly), final train loss.
# Usage (root): dev/bench/zeropp_cluster_bench.sh [MODEL (d2)] [RATE (100mbit)] [S steps (4)]
# Prints `uptime` beside the table: ranks share the machine's cores, so times are noisy when it is busy.
set -uo pipefail
cd "$(dirname "$0")/../.."
model=${1:-d2}
rate=${2:-100mbit}
steps=${3:-4}
source tests/cluster.sh
if ! why=$(cluster_can_run); then echo "zeropp_cluster_bench: $why"; exit 1; fi
make -s build/train_gpt2_z3 >/dev/null || exit 1
cluster_up 2 || exit 1
data="$CL_DIR/data"
mkdir -p "$data"
python3 tests/markov_shards.py "$data" 3000 200000 8000 1234
export OMP_NUM_THREADS=1
cluster_rate_limit node0 "$rate"
cluster_rate_limit node1 "$rate"
results="$CL_DIR/results"
: >"$results"
for spec in "plain" "qwZ -qw 1" "hpZ -hp 0" "qgZ -qg 1" "all -qw 1 -hp 0 -qg 1"; do
    set -- $spec; name=$1; shift
    a=($(cluster_tx_bytes node0) $(cluster_tx_bytes node1))
    cluster_exec node0 timeout 3000 "${CL_MPIRUN[@]}" -x OMP_NUM_THREADS -H node0:2,node1:2 -np 4 "$PWD/build/train_gpt2_z3" \
        -e "$model" -b 2 -t 64 -x $((1 + steps)) -v 0 -s 0 -l 1e-4 -wt 1200 -i "$data/train.bin" -o "$CL_DIR/$name" "$@" \
        >"$CL_DIR/$name.out" 2>&1 || { echo "$name failed: $(tail -3 "$CL_DIR/$name.out")"; continue; }
    b=($(cluster_tx_bytes node0) $(cluster_tx_bytes node1))
    echo "$name $CL_DIR/$name $(( (b[0] - a[0]) / (1 + steps) )) $(( (b[1] - a[1]) / (1 + steps) ))" >>"$results"
done
echo "zeropp_cluster_bench: $model, stage 3, 2 hosts x 2 ranks (B 2, T 64 per rank), eth0 at $rate; $(uptime)"
python3 - "$results" <<'PY'
import json, sys
rows = [l.split() for l in open(sys.argv[1])]
base = None
print("| config | step (ms) | exposed comm (ms) | eth0 tx per step node0 / node1 (bytes, upper bound) | speed-up vs plain | last train loss |")
print("|---|---|---|---|---|---|")
for name, d, b0, b1 in rows:
    recs = [json.loads(l) for l in open(d + "/log.jsonl")]
    train = [x for x in recs if x["kind"] == "train"]
    timed = train[1:]  # after the first step (warm-up)
    ms = sum(x["ms"] for x in timed) / len(timed)
    wait = sum(x["comm_wait_ms"] for x in timed) / len(timed)
    base = base or ms
    print(f"| {name} | {ms:.0f} | {wait:.0f} | {b0} / {b1} | {base / ms:.2f}x | {train[-1]['loss']:.4f} |")
PY
