#!/usr/bin/env bash
# The planner's offload rows (--plan cpu -zo/-zp, plan/plan_offload.h) against measured runs on
# this machine (not a test). For each model, placement and N: a run with the offload files in
# -zd DIR (default: a fresh directory under /tmp, this machine's disk), the mean of steps 2..X of
# the step time and of the I/O wait the engine times (exposed), then --plan cpu with the same
# model, batch, N, threads per rank, placement and -z stage, and the gap. N ranks share this
# machine's cores (OMP_NUM_THREADS = cores / N, at least 1). One table row per run, load beside it.
# Usage: dev/bench/offload_plan_check.sh [models (d4)] [Ns (1)] [steps (5)] [B (2)] [T (64)]
#   OFFLOAD_CONFIGS="1:-zo nvme;3:-zo nvme -zp nvme" to choose (stage:flags; default stages 1-3 -zo
#   nvme and stage 3 -zo nvme -zp nvme); PLAN_MACHINE=cpu,nvme_read_gbs=... to try other disk rates;
#   OFFLOAD_DIR=dir for the offload files; PLAIN=1 also runs the stage in memory (its measured step
#   beside the plan's plain row).
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-d4}; ns=${2:-1}; steps=${3:-5}; B=${4:-2}; T=${5:-64}
machine=${PLAN_MACHINE:-cpu}
configs=${OFFLOAD_CONFIGS:-1:-zo nvme;2:-zo nvme;3:-zo nvme;3:-zo nvme -zp nvme}
cores=$(nproc)
make -s zero_binaries
W=$(mktemp -d /tmp/offload_plan_check.XXXXXX)
trap 'rm -rf "$W"' EXIT
NV=${OFFLOAD_DIR:-$W/nvme}; mkdir -p "$NV"
python3 tests/markov_shards.py "$W" 3000 400000 8000 1234
echo "offload files in $NV ($(df -h --output=source,fstype "$NV" | tail -1 | tr -s ' ')); $(nproc) cores; machine $machine"
printf "%-5s %-24s %-3s %-4s | %12s %12s %7s | %12s %12s | %12s %12s | %s | %s\n" model "stage, placement" N thr "pred step" "meas step" gap \
    "pred io exp" "meas io wait" "pred plain" "meas plain" "disk r/w per rank" "load (1 5 15 min)"
IFS=';' read -r -a cfgs <<<"$configs"
mean_ms() { python3 -c 'import json,sys; t=[r["ms"] for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "train" and r["step"] >= 2]; print(f"{sum(t)/len(t):.1f}")' "$1/log.jsonl"; }
for model in $models; do for n in $ns; do for cfg in "${cfgs[@]}"; do
    stage=${cfg%%:*}; flags=${cfg#*:}
    thr=$(( cores / n )); [ "$thr" -ge 1 ] || thr=1
    tag=$(echo "$flags" | tr -d ' -'); run="$W/${model}_z${stage}_${tag}_np$n"
    # shellcheck disable=SC2206
    cmd=(build/train_gpt2_z"$stage" -e "$model" -b "$B" -t "$T" -x "$steps" -v 0 -n 0 -s 0 -i "$W/train.bin" -o "$run" $flags -zd "$NV")
    [ "$n" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -np "$n" "${cmd[@]}")
    if ! OMP_NUM_THREADS=$thr timeout 1200 "${cmd[@]}" >"$run.out" 2>&1; then echo "run failed: $(tail -2 "$run.out")"; continue; fi
    plain="-"
    if [ "${PLAIN:-0}" = 1 ]; then
        pcmd=(build/train_gpt2_z"$stage" -e "$model" -b "$B" -t "$T" -x "$steps" -v 0 -n 0 -s 0 -i "$W/train.bin" -o "$run.plain")
        [ "$n" -gt 1 ] && pcmd=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -np "$n" "${pcmd[@]}")
        OMP_NUM_THREADS=$thr timeout 1200 "${pcmd[@]}" >"$run.plain.out" 2>&1 && plain="$(mean_ms "$run.plain") ms"
    fi
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=$thr build/train_gpt2_z0 --plan "$machine" -pj - -e "$model" -b "$B" -t "$T" -np "$n" -z "$stage" $flags -zd "$NV" >"$run.plan"
    python3 - "$run" "$run.plan" "$stage" "$model" "$n" "$thr" "$flags" "$(cut -d' ' -f1-3 /proc/loadavg)" "$plain" <<'PY'
import json, sys
run, plan_out, stage, model, n, thr, flags, load, plain = sys.argv[1:]
row = [json.loads(l[len("plan_offload_json "):]) for l in open(plan_out) if l.startswith("plan_offload_json ")][0]
train = [r for r in map(json.loads, open(run + "/log.jsonl")) if r["kind"] == "train" and r["step"] >= 2]
ms = sum(r["ms"] for r in train) / len(train)
io = sum(r.get("io_wait_ms", 0.0) for r in train) / len(train)
label = f"{stage} {flags}"
print(f"{model:<5} {label:<24} {n:<3} {thr:<4} | {row['step_ms']:9.1f} ms {ms:9.1f} ms {100 * (row['step_ms'] - ms) / ms:+6.0f}% | "
      f"{row['io_exposed_ms']:9.1f} ms {io:9.1f} ms | {row['plain_step_ms']:9.1f} ms {plain:>12} | "
      f"{1e3 * row['nvme_read_gbs']:.0f}/{1e3 * row['nvme_write_gbs']:.0f} MB/s | {load}")
PY
done; done; done
