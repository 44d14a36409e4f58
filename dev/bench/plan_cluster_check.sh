#!/usr/bin/env bash
# The planner (--plan cpu, zero/plan.h) against the simulated cluster (tests/cluster.sh: 2 hosts
# x 2 ranks, TCP over veth and a bridge, each host's eth0 limited by tc tbf), not a test.
# For each link rate and ZeRO stage: a run of the engine's rings (steps 2..S traced), its mean
# step time and exposed communication (rank 0's comm wait) over steps 2..S, and the trace's
# achieved bandwidth of the large collectives; then --plan cpu with the same model, batch and
# world (-np 4, rpn=2, inter_gbit = the rate, cores = this machine's cores / 2 hosts, one
# thread per rank), and the gap. Prints one row per run and the load beside it.
# Usage (root): dev/bench/plan_cluster_check.sh [MODEL (d2)] [RATES (100 1000), Mbit/s] [STAGES (0 1 2 3)] [S (4)]
set -uo pipefail
cd "$(dirname "$0")/../.."
model=${1:-d2}; rates=${2:-100 1000}; stages=${3:-0 1 2 3}; steps=${4:-4}
source tests/cluster.sh
if ! why=$(cluster_can_run); then echo "plan_cluster_check: $why"; exit 1; fi
make -s zero_binaries >/dev/null || exit 1
cluster_up 2 || exit 1
data="$CL_DIR/data"
mkdir -p "$data"
python3 tests/markov_shards.py "$data" 3000 200000 8000 1234
export OMP_NUM_THREADS=1
cores=$(( $(nproc) / 2 )); [ "$cores" -ge 1 ] || cores=1
printf "| rate | stage | predicted step | measured step | gap | predicted exposed | measured exposed | achieved link (trace) | load |\n"
printf "|---|---|---|---|---|---|---|---|---|\n"
for rate in $rates; do
    cluster_rate_limit node0 "${rate}mbit"
    cluster_rate_limit node1 "${rate}mbit"
    inter_gbit=$(python3 -c "print($rate / 1000)")
    for stage in $stages; do
        run="$CL_DIR/r${rate}_z$stage"
        if ! cluster_exec node0 timeout 900 "${CL_MPIRUN[@]}" -x OMP_NUM_THREADS -H node0:2,node1:2 -np 4 \
                "$PWD/build/train_gpt2_z$stage" -e "$model" -b 2 -t 64 -x "$steps" -v 0 -s 0 -n 0 -l 1e-4 -wt 600 \
                -i "$data/train.bin" -o "$run" -tr "$run.json" -ts 2-"$steps" >"$run.out" 2>&1; then
            echo "run failed: stage $stage at $rate Mbit: $(tail -2 "$run.out" | tr '\n' ' ')"; continue
        fi
        build/train_gpt2_z0 --plan "cpu,rpn=2,inter_gbit=$inter_gbit,cores=$cores,threads=1" -e "$model" -b 2 -t 64 -np 4 \
            >"$run.plan" 2>&1 || { echo "plan failed: $(tail -1 "$run.plan")"; continue; }
        python3 - "$run" "$run.plan" "$stage" "$rate" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import glob, json, sys
run, plan_out, stage, rate, load = sys.argv[1:]
plan = [json.loads(l[10:]) for l in open(plan_out) if l.startswith("plan_json ")][int(stage)]
train = [r for r in map(json.loads, open(run + "/log.jsonl")) if r["kind"] == "train" and r["step"] >= 2]
ms = sum(r["ms"] for r in train) / len(train)
wait = sum(r["comm_wait_ms"] for r in train) / len(train)
# achieved link rate of the large collectives (>= 1 MB): ring bytes sent per rank / their span
# (one ring edge per host crosses the link, so this is the link's payload rate while busy)
bw = sorted(e["args"]["bytes"] * 8 / (e["dur"] * 1e-6) / 1e6 for f in glob.glob(run + ".rank*.json")
            for e in json.load(open(f))["traceEvents"] if e.get("cat") == "comm" and e["args"]["bytes"] >= 1 << 20 and e["dur"] > 0)
med = f"{bw[len(bw) // 2]:.0f} Mbit/s" if bw else "-"
print(f"| {rate} Mbit | {stage} | {plan['step_ms']:.0f} ms | {ms:.0f} ms | {100 * (plan['step_ms'] - ms) / ms:+.0f}% | "
      f"{plan['exposed_ms']:.0f} ms | {wait:.0f} ms | {med} | {load} |")
PY
    done
done
echo "plan_cluster_check: $model, 2 hosts x 2 ranks (B 2, T 64 per rank, 1 thread), steps 2-$steps; $(uptime)"
