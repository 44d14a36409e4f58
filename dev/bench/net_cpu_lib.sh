# The network stack's CPU per byte over the simulated cluster's TCP paths (tests/cluster.sh),
# sourced by dev/bench/net_cpu_bench.sh and dev/bench/plan_cluster_check.sh (a cluster must be
# up: CL_DIR, cluster_exec). net_cpu_measure OUT MB ROUNDS appends one JSON line per path and
# round to OUT: within (node0 -> node0's own address: a host's two ranks, the kernel's loopback
# inside the namespace) and across (node0 -> node1: eth0 with its tbf, veth, the bridge, veth);
# one TCP stream of MB megabytes each (within: 5 x MB) (python sockets, 4 MiB sendall / recv_into: one copy each
# side, as the btl's writev/readv), its CPU measured two ways:
#   procs_ns  the sender's and the receiver's own CPU (getrusage user + sys over the transfer)
#   stat_ns   every core's busy time (/proc/stat user + nice + system + irq + softirq) over the
#             transfer less the busy rate of an idle 2 s just before (others' work; exact only
#             on a quiet machine); softirq_ns its softirq part
# NET_LOAD=K: K busy processes (a Python loop each, half on each host) run during the transfers.
# net_cpu_summary OUT prints the medians as a table and the lines net_cpu_ns_within=X,
# net_cpu_ns_across=Y.
# busy: the machine's busy and total jiffies (all cores), softirq apart
busy_py='
def busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = f[:7]
    return user + nice + system + irq + softirq, softirq, sum(f[:8])
'
# recv HOST ADDR PORT OUT: receive one stream, print {"bytes","s","procs_s","busy_j","softirq_j","total_j"}
recv() {
    cluster_exec "$1" python3 -c "$busy_py"'
import json, resource, socket, sys, time
addr, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, port)); s.listen(1)
s.settimeout(120); c, _ = s.accept(); c.settimeout(120)
buf = bytearray(4 << 20); view = memoryview(buf); n = 0
first = c.recv_into(view)
t0 = time.time(); r0 = resource.getrusage(resource.RUSAGE_SELF); b0 = busy()
while True:
    k = c.recv_into(view)
    if k == 0: break
    n += k
t1 = time.time(); r1 = resource.getrusage(resource.RUSAGE_SELF); b1 = busy()
print(json.dumps({"bytes": n, "s": t1 - t0, "procs_s": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime,
                  "busy_j": b1[0] - b0[0], "softirq_j": b1[1] - b0[1], "total_j": b1[2] - b0[2]}))' "$2" "$3" >"$4" 2>&1
}
# send HOST ADDR PORT MB: send one stream, print the sender's CPU seconds over its send loop
send() {
    cluster_exec "$1" python3 -c '
import resource, socket, sys, time
addr, port, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(300):  # the receiver may still be starting
    try: s = socket.create_connection((addr, port)); break
    except ConnectionRefusedError: time.sleep(0.05)
view = memoryview(bytearray(4 << 20))
s.sendall(view[:1 << 20])  # the receiver starts its clock here
r0 = resource.getrusage(resource.RUSAGE_SELF)
for i in range(mb // 4): s.sendall(view)
s.shutdown(socket.SHUT_WR)
s.recv(1)  # returns at the receiver close: every byte was read
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)' "$2" "$3" "$4"
}
hz=$(getconf CLK_TCK)
# idle_rate: busy jiffies per second of the machine over 2 s, nothing of ours running
idle_rate() { python3 -c "$busy_py"'
import time
a = busy(); time.sleep(2); b = busy()
print((b[0] - a[0]) / 2)'; }
busy_pids=()
start_load() {
    local i
    for ((i = 0; i < ${NET_LOAD:-0}; i++)); do
        cluster_exec "node$((i % 2))" python3 -c 'while True: pass' & busy_pids+=($!)
    done
}
stop_load() { local p; for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; busy_pids=(); }
net_cpu_measure() {
    local out=$1 mb=$2 rounds=$3 round path dst addr base rpid sender_s hz
    hz=$(getconf CLK_TCK)
    for round in $(seq 1 "$rounds"); do
        for path in within across; do
            if [ "$path" = within ]; then dst=node0; addr=10.77.0.1; else dst=node1; addr=10.77.0.2; fi
            local n=$mb
            [ "$path" = within ] && n=$((mb * 5)) # loopback runs ~10x faster: a longer transfer for /proc/stat's 10 ms ticks
            base=$(idle_rate)
            start_load
            net_cpu_port=$((${net_cpu_port:-6100} + 1))
            recv "$dst" "$addr" "$net_cpu_port" "$CL_DIR/net_cpu_recv.out" & rpid=$!
            sender_s=$(send node0 "$addr" "$net_cpu_port" "$n")
            wait "$rpid"
            stop_load
            python3 - "$path" "$round" "$sender_s" "$base" "$hz" "$CL_DIR/net_cpu_recv.out" >>"$out" <<'PY'
import json, sys
path, rnd, sender_s, base, hz, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
r = json.loads(open(out).read().strip().splitlines()[-1])
print(json.dumps({"path": path, "round": rnd, "bytes": r["bytes"], "mbit_s": r["bytes"] * 8 / r["s"] / 1e6,
                  "procs_ns": (sender_s + r["procs_s"]) / r["bytes"] * 1e9, "stat_ns": (r["busy_j"] - base * r["s"]) / hz / r["bytes"] * 1e9,
                  "stat_raw_ns": r["busy_j"] / hz / r["bytes"] * 1e9, "softirq_ns": r["softirq_j"] / hz / r["bytes"] * 1e9,
                  "sender_ns": sender_s / r["bytes"] * 1e9, "receiver_ns": r["procs_s"] / r["bytes"] * 1e9, "idle_busy_cores": base / hz}))
PY
        done
    done
}

net_cpu_summary() {
    python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| path | payload Mbit/s | procs ns/B (sender + receiver) | stat ns/B (all cores, less idle) | softirq ns/B | idle busy cores | rounds |")
print("|---|---|---|---|---|---|---|")
med = {}
for p in ("within", "across"):
    r = [x for x in rows if x["path"] == p]
    if not r: continue
    m = lambda k: statistics.median(x[k] for x in r)
    med[p] = m("procs_ns")
    print(f"| {p} | {m('mbit_s'):.0f} | {m('procs_ns'):.2f} (sender {m('sender_ns'):.2f}, receiver {m('receiver_ns'):.2f}) | "
          f"{m('stat_ns'):.2f} (raw {m('stat_raw_ns'):.2f}) | {m('softirq_ns'):.2f} | {m('idle_busy_cores'):.2f} | {len(r)} |")
for p, v in med.items(): print(f"net_cpu_ns_{p}={v:.3f}")
PY
}
