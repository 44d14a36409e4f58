#!/usr/bin/env bash
# The planner (--plan cpu, plan/plan.h) against the simulated cluster (tests/cluster.sh: 2 hosts
# x 2 ranks, TCP over veth and a bridge, each host's eth0 limited by tc tbf), not a test.
# For each link rate and ZeRO stage: a run of the engine's rings (steps 2..S traced), its mean
# step time and exposed communication (rank 0's comm wait) over steps 2..S, and the trace's
# achieved bandwidth of the large collectives; then --plan cpu with the same model, batch and
# world (-np 4, rpn=2, inter_gbit = one TCP stream's payload rate through the link, measured just
# before (PLAN_LINK=nominal: the tbf rate), hosts_here=2: both hosts' ranks share this machine's
# cores, so the plan measures one rank's rates with all 4 running at once; one thread per rank),
# net_cpu_ns = the network stack's CPU per byte a rank sends, measured just before in the same
# cluster (dev/bench/net_cpu_lib.sh: the sender's and receiver's CPU of one TCP stream on each
# path; a 2-ranks-per-host ring sends half its bytes within a host, half across: their mean;
# PLAN_NET_CPU=X: X instead), and the gap; beside it the plan without the stack's CPU
# (net_cpu_ns=0, the model before it). Compute = a step's span less its waits, every rank's mean
# (the trace). The large collectives (>= 1 MB) against the plan's prediction of each: from the
# rank's own start, and from the last rank's start (the ring cannot finish before every rank
# has started it: the rest is skew). busy cores = the machine's /proc/stat busy time over the run
# / its wall time (2 = both cores all the time). Prints one row per run and the load beside it.
# Usage (root): dev/bench/plan_cluster_check.sh [MODEL (d2)] [RATES (100 1000), Mbit/s] [STAGES (0 1 2 3)] [S (4)]
set -uo pipefail
cd "$(dirname "$0")/../.."
model=${1:-d2}; rates=${2:-100 1000}; stages=${3:-0 1 2 3}; steps=${4:-4}
source tests/cluster.sh
source dev/bench/net_cpu_lib.sh
if ! why=$(cluster_can_run); then echo "plan_cluster_check: $why"; exit 1; fi
make -s zero_binaries >/dev/null || exit 1
cluster_up 2 || exit 1
data="$CL_DIR/data"
mkdir -p "$data"
python3 tests/markov_shards.py "$data" 3000 200000 8000 1234
export OMP_NUM_THREADS=1
# link_mbit: one TCP stream's payload rate node0 -> node1 right now (Mbit/s; 25 MB, python sockets)
link_mbit() {
    cluster_exec node1 python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("10.77.0.2", 5999)); s.listen(1)
s.settimeout(60); c, _ = s.accept(); c.settimeout(60); n = 0; t0 = None
while True:
    d = c.recv(1 << 20)
    if not d: break
    t0 = t0 or time.time(); n += len(d)
print(f"{n * 8 / (time.time() - t0) / 1e6:.0f}")' >"$CL_DIR/link.out" 2>&1 &
    local srv=$!
    cluster_exec node0 python3 -c '
import socket, time
for i in range(200):  # the receiver may still be starting
    try: s = socket.create_connection(("10.77.0.2", 5999)); break
    except ConnectionRefusedError: time.sleep(0.1)
b = b"x" * (1 << 20)
for i in range(25): s.sendall(b)
s.close()'
    wait "$srv"
    cat "$CL_DIR/link.out"
}
busy_jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
hz=$(getconf CLK_TCK)
printf "| rate | stage | predicted step (net_cpu_ns=0) | predicted step | measured step | gap (net_cpu_ns=0) | gap | predicted compute (of it the stack's CPU) | measured compute | predicted exposed | measured exposed | achieved link (trace) | large collectives: measured / predicted | the same from the last rank's start | busy cores | load |\n"
printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
for rate in $rates; do
    cluster_rate_limit node0 "${rate}mbit"
    cluster_rate_limit node1 "${rate}mbit"
    payload=$(link_mbit)
    echo "link ${rate} Mbit: one TCP stream's payload ${payload} Mbit/s | load $(cut -d' ' -f1-3 /proc/loadavg)"
    # The network stack's CPU per byte on both paths, now, in this cluster (2 rounds, medians)
    : >"$CL_DIR/net_cpu_$rate"
    net_cpu_measure "$CL_DIR/net_cpu_$rate" $((rate >= 500 ? 200 : 40)) 2
    net_cpu_summary "$CL_DIR/net_cpu_$rate" | sed "s/^/net_cpu $rate Mbit: /"
    net_cpu_ns=$(python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open('$CL_DIR/net_cpu_$rate')]
m = {p: statistics.median(r['${NET_CPU_FROM:-stat}_ns'] for r in rows if r['path'] == p) for p in ('within', 'across')}
print(f\"{(m['within'] + m['across']) / 2:.4f}\")")
    net_cpu_ns=${PLAN_NET_CPU:-$net_cpu_ns}
    echo "link ${rate} Mbit: net_cpu_ns=$net_cpu_ns (${NET_CPU_FROM:-stat}: the mean of within and across)"
    # The plan's link: what one TCP stream gets through it now (PLAN_LINK=nominal: the tbf rate)
    if [ "${PLAN_LINK:-measured}" = measured ]; then inter_gbit=$(python3 -c "print($payload / 1000)"); else inter_gbit=$(python3 -c "print($rate / 1000)"); fi
    for stage in $stages; do
        run="$CL_DIR/r${rate}_z$stage"
        j0=$(busy_jiffies); w0=$(date +%s.%N)
        if ! cluster_exec node0 timeout 900 "${CL_MPIRUN[@]}" -x OMP_NUM_THREADS -H node0:2,node1:2 -np 4 \
                "$PWD/build/train_gpt2_z$stage" -e "$model" -b 2 -t 64 -x "$steps" -v 0 -s 0 -n 0 -l 1e-4 -wt 600 \
                -i "$data/train.bin" -o "$run" -tr "$run.json" -ts 2-"$steps" >"$run.out" 2>&1; then
            echo "run failed: stage $stage at $rate Mbit: $(tail -2 "$run.out" | tr '\n' ' ')"; continue
        fi
        busy=$(python3 -c "print(f'{($(busy_jiffies) - $j0) / $hz / ($(date +%s.%N) - $w0):.2f}')")
        build/train_gpt2_z0 --plan "cpu,rpn=2,inter_gbit=$inter_gbit,hosts_here=2,threads=1,net_cpu_ns=$net_cpu_ns" -pj - -e "$model" -b 2 -t 64 -np 4 \
            -tr "$run.pred.json" >"$run.plan" 2>&1 || { echo "plan failed: $(tail -1 "$run.plan")"; continue; }
        build/train_gpt2_z0 --plan "cpu,rpn=2,inter_gbit=$inter_gbit,hosts_here=2,threads=1,net_cpu_ns=0" -pj - -e "$model" -b 2 -t 64 -np 4 \
            >"$run.plan0" 2>&1 || { echo "plan failed: $(tail -1 "$run.plan0")"; continue; }
        python3 - "$run" "$run.plan" "$stage" "$rate" "$(cut -d' ' -f1-3 /proc/loadavg)" "$busy" <<'PY'
import glob, json, sys
run, plan_out, stage, rate, load, busy = sys.argv[1:]
plan = [json.loads(l[10:]) for l in open(plan_out) if l.startswith("plan_json ")][int(stage)]
plan0 = [json.loads(l[10:]) for l in open(plan_out + "0") if l.startswith("plan_json ")][int(stage)]
train = [r for r in map(json.loads, open(run + "/log.jsonl")) if r["kind"] == "train" and r["step"] >= 2]
ms = sum(r["ms"] for r in train) / len(train)
wait = sum(r["comm_wait_ms"] for r in train) / len(train)
# per rank and traced step: compute = the step's span less its waits (every rank, not just 0)
compute, waits = [], []
bw = []
for f in glob.glob(run + ".rank*.json"):
    ev = [e for e in json.load(open(f))["traceEvents"] if e.get("ph") == "X"]
    for st in (e for e in ev if e["cat"] == "step"):
        w = sum(e["dur"] for e in ev if e["cat"] == "wait" and e["args"]["step"] == st["args"]["step"])
        compute.append((st["dur"] - w) / 1e3)
        waits.append(w / 1e3)
    # achieved link rate of the large collectives (>= 1 MB): ring bytes sent per rank / their span
    # (one ring edge per host crosses the link, so this is the link's payload rate while busy)
    bw += [e["args"]["bytes"] * 8 / (e["dur"] * 1e-6) / 1e6 for e in ev
           if e["cat"] == "comm" and e["args"]["bytes"] >= 1 << 20 and e["dur"] > 0]
bw.sort()
med = f"{bw[len(bw) // 2]:.0f} Mbit/s" if bw else "-"
# Each large collective (>= 1 MB) against the plan's own (its predicted timeline, step 3): the
# alpha-beta ring time alone, apart from when the ranks got there (skew, cores).
def large(ev, step):
    seen, out = {}, {}
    for e in sorted((e for e in ev if e.get("ph") == "X" and e["cat"] == "comm" and e["args"]["step"] == step), key=lambda e: e["ts"]):
        k = (e["args"]["kind"], e["args"]["unit"]); seen[k] = seen.get(k, 0) + 1
        if e["args"]["bytes"] >= 1 << 20: out[k + (seen[k],)] = e
    return out
pred = {k: e["dur"] for k, e in large(json.load(open(run + ".pred.plan.stage" + stage + ".json"))["traceEvents"], 3).items()}
ratios, after_last = [], []
ranks = [json.load(open(f))["traceEvents"] for f in glob.glob(run + ".rank*.json")]
for ev in ranks:
    for st in {e["args"]["step"] for e in ev if e.get("ph") == "X" and e["cat"] == "step"}:
        ratios += [e["dur"] / pred[k] for k, e in large(ev, st).items() if k in pred and pred[k] > 0]
# the same collective on every rank: from the last rank's start (trace times share one clock) to each rank's end
steps = {e["args"]["step"] for e in ranks[0] if e.get("ph") == "X" and e["cat"] == "step"} if ranks else set()
for st in steps:
    per = [large(ev, st) for ev in ranks]
    for k in per[0]:
        if k not in pred or pred[k] <= 0 or not all(k in p for p in per): continue
        last_start = max(p[k]["ts"] for p in per)  # the last rank to start it (its queue reached it)
        after_last += [(p[k]["ts"] + p[k]["dur"] - last_start) / pred[k] for p in per]
def spread(v):
    v = sorted(v)
    return f"{v[len(v) // 2]:.2f} (median of {len(v)}; {v[0]:.2f}-{v[-1]:.2f})" if v else "-"
mc = sum(compute) / len(compute) if compute else float("nan")
mw = sum(waits) / len(waits) if waits else float("nan")
print(f"| {rate} Mbit | {stage} | {plan0['step_ms']:.0f} ms | {plan['step_ms']:.0f} ms | {ms:.0f} ms | {100 * (plan0['step_ms'] - ms) / ms:+.0f}% | "
      f"{100 * (plan['step_ms'] - ms) / ms:+.0f}% | {plan['compute_ms']:.0f} ms ({plan['net_cpu_ms']:.0f}) | {mc:.0f} ms | "
      f"{plan['exposed_ms']:.0f} ms | {wait:.0f} ms (ranks' mean {mw:.0f}) | {med} | {spread(ratios)} | {spread(after_last)} | {busy} | {load} |")
PY
    done
done
# PLAN_KEEP=DIR: keep the runs' traces, logs and plans there
[ -n "${PLAN_KEEP:-}" ] && mkdir -p "$PLAN_KEEP" && cp -r "$CL_DIR"/r*_z* "$PLAN_KEEP"/
for f in "$CL_DIR"/r*_z*.plan; do echo "$(basename "$f"): $(grep -m1 '^plan: machine' "$f")"; done
echo "plan_cluster_check: $model, 2 hosts x 2 ranks (B 2, T 64 per rank, 1 thread), steps 2-$steps; $(uptime)"
