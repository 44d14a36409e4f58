#!/usr/bin/env bash
# ZeRO table for the CPU build: for each stage and world size N, a short d6 run (B 1, T 64 per
# rank, OMP_NUM_THREADS=1 per rank) and, per rank per step: mean step time and exposed (waited)
# communication time over the steps after the first, elements sent counted vs docs/design.md "Elements sent per rank"
# formula, bytes of params+grads+optimizer state vs the formula, working-unit bytes, and rank
# 0's peak RSS. Then the accumulation trade-off (stage 2 reduce-scatters every micro-step into
# the shard; stage 1's schedule, reduce once after the last micro-step, is DESIGN's alternative
# and needs the full gradient buffer) at N = 2 with 4 micro-steps.
# Usage: dev/bench/zero_table.sh [steps (default 4)] [world sizes (default "1 2 3 4")]
# Note: on a 2-core machine N > 2 ranks share cores, so step times grow with N; the exposed
# communication time there includes waiting for a rank that is descheduled, not only transfer.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-4}
sizes=${2:-"1 2 3 4"}
make -s zero_binaries >/dev/null
tmp=$(mktemp -d /tmp/zero_table.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source dev/bench/lib.sh
train=$(timing_train_shard "$tmp")
export OMP_NUM_THREADS=1
run() { # run N STAGE DIR ARGS...
    local n=$1 stage=$2 dir=$3; shift 3
    local cmd=(build/train_gpt2_z"$stage" -e d6 -b 1 -t 64 -x "$steps" -v 0 -s 0 -i "$train" -o "$dir" "$@")
    [ "$n" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$n" "${cmd[@]}")
    "${cmd[@]}" >"$dir.out" 2>&1 || { echo "run failed: ${cmd[*]}"; tail -3 "$dir.out"; exit 1; }
}
for stage in 0 1 2 3; do for n in $sizes; do run "$n" "$stage" "$tmp/z${stage}_np$n"; done; done
run 2 1 "$tmp/acc_z1" -d 512
run 2 2 "$tmp/acc_z2" -d 512
python3 - "$tmp" "$sizes" <<'PY'
import json, re, sys
tmp, sizes = sys.argv[1], [int(s) for s in sys.argv[2].split()]
def load(d):
    recs = [json.loads(l) for l in open(f"{tmp}/{d}/log.jsonl")]
    cfg = next(r for r in recs if r["kind"] == "config")
    train = [r for r in recs if r["kind"] == "train"][1:] or [r for r in recs if r["kind"] == "train"]
    rss = re.search(r"peak memory ([0-9.]+) MiB", open(f"{tmp}/{d}.out").read())
    return cfg, train, float(rss.group(1)) if rss else float("nan")
M = 1e6
print(f"d6: Ψ = padded parameters; B 1 x T 64 per rank; mean over steps 2..; MB = 1e6 bytes, M = 1e6 elements")
print(f"| stage | N | step ms | exposed comm ms | sent/step counted (M el) | formula | bytes p+g+opt (MB) | formula | working (MB) | rank-0 peak RSS (MiB) |")
print(f"|---|---|---|---|---|---|---|---|---|---|")
for stage in range(4):
    for n in sizes:
        cfg, train, rss = load(f"z{stage}_np{n}")
        ms = sum(r["ms"] for r in train) / len(train)
        wait = sum(r["comm_wait_ms"] for r in train) / len(train)
        sent = sorted(set(r["sent_elements"] for r in train))
        mem = cfg["bytes_params"] + cfg["bytes_grads"] + cfg["bytes_optimizer"]
        f_sent, f_mem = cfg["elements_sent_formula"], cfg["bytes_state_formula"]
        ok_sent = "=" if sent == [f_sent] else "≠"
        ok_mem = "=" if mem == f_mem else "≠"
        print(f"| {stage} | {n} | {ms:.0f} | {wait:.0f} | {sent[0]/M:.3f} {ok_sent} | {cfg['elements_sent_formula_text']} = {f_sent/M:.3f} | "
              f"{mem/M:.1f} {ok_mem} | {cfg['bytes_state_formula_text']} = {f_mem/M:.1f} | {cfg['bytes_working']/M:.1f} | {rss:.0f} |")
print()
print("Accumulation, N = 2, A = 4 micro-steps (-d 512):")
print("| schedule | step ms | exposed comm ms | sent/step (M el) | grads bytes per rank (MB) |")
print("|---|---|---|---|---|")
for d, label in (("acc_z1", "stage 1: accumulate in full grads, reduce-scatter once (DESIGN's alternative)"),
                 ("acc_z2", "stage 2: reduce-scatter every micro-step, accumulate into the shard")):
    cfg, train, rss = load(d)
    ms = sum(r["ms"] for r in train) / len(train); wait = sum(r["comm_wait_ms"] for r in train) / len(train)
    print(f"| {label} | {ms:.0f} | {wait:.0f} | {train[0]['sent_elements']/M:.3f} | {(cfg['bytes_grads'] + cfg['bytes_working'])/M:.1f} (grads {cfg['bytes_grads']/M:.1f} + working {cfg['bytes_working']/M:.1f}) |")
PY
