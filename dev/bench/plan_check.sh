#!/usr/bin/env bash
# The planner (--plan cpu, plan/plan.h) against measured runs on this machine (not a test).
# For each model, stage and N: a traced run (mean over steps 2..X of the step time and of the
# exposed communication, the comm wait the engine times; the trace gives the collectives' achieved
# bandwidth), then --plan cpu with the same model, batch, N and threads per rank, and the gap.
# N ranks share this machine's cores (OMP_NUM_THREADS = cores / N, at least 1; N above the core
# count is oversubscribed and says so). Prints one table row per run and the load beside it.
# Usage: dev/bench/plan_check.sh [models (d4)] [stages (0 1 2 3)] [Ns (1 2 4)] [steps (5)] [B (2)] [T (64)]
#   PLAN_MACHINE=cpu,intra_gbs=... to try other link values; PLAN_TRACE_DIR=dir keeps the traces.
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-d4}; stages=${2:-0 1 2 3}; ns=${3:-1 2 4}; steps=${4:-5}; B=${5:-2}; T=${6:-64}
machine=${PLAN_MACHINE:-cpu}
cores=$(nproc)
make -s zero_binaries
W=${PLAN_TRACE_DIR:-$(mktemp -d /tmp/plan_check.XXXXXX)}
mkdir -p "$W"
[ -n "${PLAN_TRACE_DIR:-}" ] || trap 'rm -rf "$W"' EXIT
python3 tests/markov_shards.py "$W" 3000 400000 8000 1234
printf "%-5s %-5s %-3s %-4s | %12s %12s | %12s %12s | %8s %8s | %s\n" model stage N thr "pred step" "meas step" "pred exposed" "meas exposed" "gap" "bus GB/s" "load"
for model in $models; do for stage in $stages; do for n in $ns; do
    thr=$(( cores / n )); [ "$thr" -ge 1 ] || thr=1
    over=""; [ $((n * thr)) -gt "$cores" ] && over=" (oversubscribed)"
    run="$W/${model}_z${stage}_np$n"
    cmd=(build/train_gpt2_z"$stage" -e "$model" -b "$B" -t "$T" -x "$steps" -v 0 -n 0 -s 0 -i "$W/train.bin" -o "$run"
         -tr "$run.json" -ts 2-"$steps")
    [ "$n" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -np "$n" "${cmd[@]}")
    if ! OMP_NUM_THREADS=$thr timeout 1200 "${cmd[@]}" >"$run.out" 2>&1; then echo "run failed: $(tail -2 "$run.out")"; continue; fi
    OMP_NUM_THREADS=$thr build/train_gpt2_z0 --plan "$machine" -pj - -e "$model" -b "$B" -t "$T" -np "$n" >"$run.plan"
    python3 - "$run" "$run.plan" "$stage" "$model" "$n" "$thr$over" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import glob, json, sys
run, plan_out, stage, model, n, thr, load = sys.argv[1:]
plan = [json.loads(l[10:]) for l in open(plan_out) if l.startswith("plan_json ")][int(stage)]
train = [r for r in map(json.loads, open(run + "/log.jsonl")) if r["kind"] == "train" and r["step"] >= 2]
ms = sum(r["ms"] for r in train) / len(train)
wait = sum(r["comm_wait_ms"] for r in train) / len(train)
# achieved bus bandwidth of the big collectives (>= 1 MB): ring bytes sent per rank / their span
bus = []
for f in glob.glob(run + ".rank*.json"):
    for e in json.load(open(f))["traceEvents"]:
        if e.get("cat") == "comm" and e["args"]["bytes"] >= 1 << 20 and e["dur"] > 0:
            bus.append(e["args"]["bytes"] / (e["dur"] * 1e-6) / 1e9)
bus.sort()
med = f"{bus[len(bus) // 2]:.2f}" if bus else "-"
print(f"{model:<5} {stage:<5} {n:<3} {thr:<4} | {plan['step_ms']:9.1f} ms {ms:9.1f} ms | {plan['exposed_ms']:9.1f} ms {wait:9.1f} ms | "
      f"{100 * (plan['step_ms'] - ms) / ms:+7.0f}% {med:>8} | {load}")
PY
done; done; done
