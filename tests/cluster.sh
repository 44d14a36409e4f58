# A simulated cluster on one machine, for the multi-node tests (source it; needs root, ip netns,
# unshare and nsenter). Each host is
#   - a network namespace with one interface, eth0 (a veth), whose peer sits on a bridge in one
#     more namespace, the switch; addresses 10.77.0.1, .2, ... exist only inside these namespaces,
#     so no packet leaves them;
#   - a UTS namespace with its own hostname (node0, node1, ...), so Open MPI sees separate nodes
#     and MPI_COMM_TYPE_SHARED groups ranks per host, and a mount namespace in which /etc/hosts
#     names every host and, optionally, $CL_LOCAL is that host's own disk (a bind mount of
#     $CL_DIR/disk_<host>): a node-local directory at the same path on every host.
# A holder process per host keeps the namespaces alive; tests/cluster_agent.sh enters them the
# way `ssh host command` logs in, and is Open MPI's remote-shell agent (--mca plm_rsh_agent).
# mpirun runs on node0, as it would on a cluster's first node.
#
#   cluster_up NHOSTS [local]  make the cluster; sets CL_HOSTS (names), CL_DIR (its temp dir),
#                              CL_LOCAL (node-local dir, with `local`), CL_MPIRUN (mpirun and
#                              the options that carry it over TCP between hosts)
#   cluster_exec HOST CMD...   run CMD inside HOST (as the test's user, its environment kept)
#   cluster_link HOST up|down  plug or unplug HOST's cable (its port on the switch)
#   cluster_tx_bytes HOST      bytes sent so far by HOST's eth0 (interface counter)
#   cluster_rate_limit HOST R  HOST's eth0 sends at most R (tc tbf, e.g. 100mbit)
#   cluster_procs              pids of every process inside the cluster's namespaces
#   cluster_down               kill what runs inside, remove the namespaces and CL_DIR
# cluster_up installs cluster_down as the EXIT/INT/TERM trap (a caller with its own trap calls
# cluster_down from it), and the holders exit by themselves after CL_LIFETIME seconds (default
# 1800), so nothing outlives an interrupted test for long; the namespaces and temp dir of a test
# killed outright (no trap runs) are removed by the next cluster_up. Every name carries a tag made
# from the shell's pid and the time, so parallel test runs (other users of this machine) never collide.

# cluster_can_run: 0 if this machine can host the cluster (root, ip netns, unshare, nsenter),
# else prints why on stdout and returns 1.
cluster_can_run() {
    if [ "$(id -u)" -ne 0 ]; then echo "not root (network namespaces need it)"; return 1; fi
    for tool in ip unshare nsenter; do command -v $tool >/dev/null 2>&1 || { echo "no $tool"; return 1; }; done
    local probe="clprobe$$"
    if ! ip netns add "$probe" 2>/dev/null; then echo "ip netns add fails here"; return 1; fi
    ip netns del "$probe"
    return 0
}

# A cluster whose test was killed (SIGKILL: no trap runs) leaves its namespaces and temp dir:
# removed here when the shell that made it (the pid in its tag) is gone and nothing runs inside.
cluster_reap_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^cl[0-9]+x[0-9]+(sw|h[0-9]+)$'); do
        pid=${ns#cl}; pid=${pid%%x*}
        kill -0 "$pid" 2>/dev/null && continue
        [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] || continue
        ip netns del "$ns" 2>/dev/null
        rm -rf /tmp/cluster."${ns%%[hs]*}".* 2>/dev/null
    done
}

cluster_up() {
    local n=$1 with_local=${2:-}
    cluster_reap_stale
    CL_TAG="cl$$x$(date +%s%N | tail -c 7)"
    CL_DIR=$(mktemp -d "/tmp/cluster.$CL_TAG.XXXXXX")
    CL_HOSTS=()
    CL_LOCAL=""
    [ "$with_local" = local ] && CL_LOCAL="$CL_DIR/local"
    local lifetime=${CL_LIFETIME:-1800}
    trap cluster_down EXIT
    trap 'cluster_down; exit 130' INT TERM
    local sw="${CL_TAG}sw"
    ip netns add "$sw" || return 1
    ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || return 1
    printf '127.0.0.1 localhost\n' >"$CL_DIR/hosts"
    local i
    for ((i = 0; i < n; i++)); do
        CL_HOSTS+=("node$i")
        printf '10.77.0.%d node%d\n' $((i + 1)) "$i" >>"$CL_DIR/hosts"
    done
    [ -n "$CL_LOCAL" ] && mkdir -p "$CL_LOCAL"
    for ((i = 0; i < n; i++)); do
        local host="node$i" ns="${CL_TAG}h$i"
        ip netns add "$ns" || return 1
        # The cable: eth0 inside the host, port p<i> on the switch; made in place, so no
        # interface name ever exists in the machine's own namespace.
        ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$sw" || return 1
        ip -n "$sw" link set "p$i" master br0 && ip -n "$sw" link set "p$i" up || return 1
        ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0 && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
        mkdir -p "$CL_DIR/disk_$host"
        local mounts="mount --bind '$CL_DIR/hosts' /etc/hosts"
        [ -n "$CL_LOCAL" ] && mounts="$mounts && mount --bind '$CL_DIR/disk_$host' '$CL_LOCAL'"
        # The holder: own hostname and mounts, then sleeps; its pid is the handle to enter it.
        # (In a subshell: not a job of the caller's shell, which would report its death.)
        (ip netns exec "$ns" unshare --uts --mount --propagation private \
            sh -c "hostname $host && $mounts && echo \$\$ >'$CL_DIR/$host.pid' && exec sleep $lifetime" \
            </dev/null >"$CL_DIR/$host.holder.log" 2>&1 &)
    done
    local waited=0
    for host in "${CL_HOSTS[@]}"; do
        while [ ! -s "$CL_DIR/$host.pid" ]; do
            sleep 0.1; waited=$((waited + 1))
            # 60 s for all hosts (before: 10 s, which a loaded machine's namespace set-up can take)
            if [ $waited -gt 600 ]; then echo "cluster_up: $host did not start: $(cat "$CL_DIR/$host.holder.log")" >&2; return 1; fi
        done
    done
    # The agent finds the holders through CLUSTER_DIR (passed on to every host it logs into).
    export CLUSTER_DIR="$CL_DIR"
    CL_AGENT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster_agent.sh"
    # TCP between hosts on eth0 only (MPI traffic: btl; Open MPI's own daemons: oob).
    CL_MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca plm_rsh_agent "$CL_AGENT"
               --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0)
    return 0
}

cluster_pid() { cat "$CL_DIR/$1.pid"; }

cluster_exec() {
    local host=$1; shift
    nsenter -t "$(cluster_pid "$host")" -n -u -m -- "$@"
}

cluster_link() {
    ip -n "${CL_TAG}sw" link set "p${1#node}" "$2"
    [ "$2" = up ] || return 0
    # Back up once node0 reaches the host again: a TCP connect to a closed port is refused at
    # once by a reachable host, and hangs while the cable is still out.
    local i
    for i in $(seq 1 50); do
        cluster_exec node0 timeout 1 bash -c "exec 3<>/dev/tcp/$1/9" 2>/dev/null
        [ $? -ne 124 ] && return 0
    done
    echo "cluster_link: $1 still unreachable after its cable was plugged back" >&2
    return 1
}

cluster_tx_bytes() {
    ip netns exec "${CL_TAG}h${1#node}" cat /sys/class/net/eth0/statistics/tx_bytes
}

cluster_rate_limit() {
    # Token bucket: rate R, a 64 KiB burst, packets wait at most 200 ms in the queue (tc-tbf(8)).
    ip netns exec "${CL_TAG}h${1#node}" tc qdisc replace dev eth0 root tbf rate "$2" burst 64kb latency 200ms
}

cluster_procs() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${CL_TAG}"); do ip netns pids "$ns" 2>/dev/null; done
}

cluster_down() {
    [ -n "${CL_TAG:-}" ] || return 0
    local pid pids ns
    # Everything inside our namespaces was started by this test (the holders, daemons, ranks).
    pids=$(cluster_procs)
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${CL_TAG}"); do ip netns del "$ns" 2>/dev/null; done
    [ -n "${CL_DIR:-}" ] && rm -rf "$CL_DIR"
    CL_TAG=""
}
