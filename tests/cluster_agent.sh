#!/bin/sh
# tests/cluster_agent.sh [OPTIONS] HOST COMMAND...: Open MPI's remote-shell agent for the simulated
# cluster (tests/cluster.sh; --mca plm_rsh_agent). It does what `ssh HOST COMMAND` does: enters
# HOST's network, hostname and mount namespaces and runs COMMAND there through `sh -c` in a login-
# like environment (PATH, HOME, nothing else of the caller's; Open MPI passes what its daemon
# needs on the command line). Options before HOST (ssh's, e.g. -x) are ignored.
#
# The remote command runs in its own session with stdin, stdout and stderr away from the caller
# (output appended to $CLUSTER_DIR/HOST.agent.log), and the agent waits for it and returns its
# exit status, as ssh does (so mpirun learns that a daemon failed to start). Killing the agent
# does not reach the remote command, and the remote command cannot notice the caller going away:
# the only link between the hosts is the simulated network, as for ssh across a partition, so a
# cut cable cannot be noticed through a pipe that a real cluster would not have.
while [ $# -gt 0 ]; do
    case "$1" in
        -*) shift ;;
        *) break ;;
    esac
done
host=$1
shift
if [ -z "$host" ] || [ ! -s "$CLUSTER_DIR/$host.pid" ]; then
    echo "cluster_agent: $host: no such host in CLUSTER_DIR=$CLUSTER_DIR" >&2
    exit 255
fi
pid=$(cat "$CLUSTER_DIR/$host.pid")
exec nsenter -t "$pid" -n -u -m -- setsid --wait env -i PATH="$PATH" HOME="${HOME:-/root}" CLUSTER_DIR="$CLUSTER_DIR" \
    sh -c "$*" </dev/null >>"$CLUSTER_DIR/$host.agent.log" 2>&1
