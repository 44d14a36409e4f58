#!/usr/bin/env bash
# CPU time per byte moved over the simulated cluster's TCP paths (tests/cluster.sh: 2 hosts, TCP
# over veth + a bridge, each host's eth0 limited by tc tbf), not a test: the planner's
# net_cpu_ns (plan/plan_machine.h), CPU nanoseconds per byte a rank sends, the sender's and the
# receiver's together. Paths and the two ways of measuring: dev/bench/net_cpu_lib.sh. Prints one
# JSON line per path and round, the medians and the load (`uptime`). NET_LOAD=K: K busy processes
# beside the transfers (the rate a stream gets when it competes for the cores).
# Usage (root): dev/bench/net_cpu_bench.sh [RATE_MBIT (1000)] [MB (300)] [ROUNDS (3)]
set -uo pipefail
cd "$(dirname "$0")/../.."
rate=${1:-1000}; mb=${2:-300}; rounds=${3:-3}
source tests/cluster.sh
source dev/bench/net_cpu_lib.sh
if ! why=$(cluster_can_run); then echo "net_cpu_bench: $why"; exit 1; fi
cluster_up 2 || exit 1
trap 'stop_load; cluster_down' EXIT
cluster_rate_limit node0 "${rate}mbit"
cluster_rate_limit node1 "${rate}mbit"
results="$CL_DIR/results"
: >"$results"
echo "net_cpu_bench: before: $(uptime)"
net_cpu_measure "$results" "$mb" "$rounds"
cat "$results"
echo "net_cpu_bench: link ${rate} Mbit (tbf on eth0), ${NET_LOAD:-0} busy processes beside; CPU ns per byte, sender + receiver:"
net_cpu_summary "$results"
echo "net_cpu_bench: $(uptime)"
