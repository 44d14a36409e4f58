# Helpers for the simulated-cluster test groups (tests/t_75_cluster_*.sh); source it.
#   cluster_setup NHOSTS [local]  SKIP (exit 0) where the machine cannot host the cluster (no root,
#                                 no ip netns; never on CI, where that is a FAIL); builds the
#                                 trainers; brings the cluster up (tests/cluster.sh); $CT: a dir
#                                 every host sees (synthetic train/val shards in it)
#   crun OUT HOSTS NP STAGE ARGS  build/train_gpt2_zSTAGE on NP ranks placed by -H HOSTS, launched
#                                 from node0 over the rsh agent, TCP between hosts; the small test
#                                 config, output in OUT (stdout and stderr); bounded by timeout
#   cl_launch OUT CMD...          CMD (an mpirun across the cluster), output in OUT, run once more
#                                 when Open MPI's remote daemon did not start (crun's launcher)
#   ref_run DIR B ARGS            the same config as one process on this machine (the reference)
#   took_since START              seconds since START (date +%s)
# Open MPI needs --allow-run-as-root as root and --oversubscribe for more ranks than cores; the
# keepalive options let mpirun notice a lost host before -wt (zero/cluster/faults.h, README "Many nodes").
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tests/lib.sh
source tests/cluster.sh

cluster_setup() {
    local why
    if ! why=$(cluster_can_run); then
        if [ "${CI:-}" = "true" ]; then echo "FAIL cluster_can_run: $why; expected root and ip netns on CI"
        else echo "SKIP cluster_tests: $why; the simulated-cluster tests did not run"; fi
        exit 0
    fi
    if ! make -s zero_binaries >/tmp/cluster_make.$$ 2>&1; then
        echo "FAIL cluster_build: $(tail -3 /tmp/cluster_make.$$ | tr '\n' ' ')"; rm -f /tmp/cluster_make.$$; exit 1
    fi
    rm -f /tmp/cluster_make.$$
    cluster_up "$@" || { echo "FAIL cluster_up: could not make the simulated cluster"; exit 1; }
    CT="$CL_DIR/shared"
    mkdir -p "$CT"
    export OMP_NUM_THREADS=1
    # The ZeRO tests' synthetic shards (tests/zero_common.sh): a noisy Markov chain over 3000 ids.
    python3 tests/markov_shards.py "$CT" 3000 60000 8000 1234
}

KEEPALIVE=(--mca oob_tcp_keepalive_time 3 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3)
# d2 (2 layers: prefetch runs), T = 8, lr 1e-3 so the losses move; no val (-v 0): stage 3's val
# forward gathers parameters, which would blur the per-step byte count.
CLUSTER_TEST_ARGS=(-e d2 -t 8 -l 1e-3 -s 0 -v 0)
BIN="$PWD/build"

# cl_launch OUT CMD...: CMD (an mpirun from node0 onto the cluster), stdout and stderr in OUT.
# Once only, it runs CMD again when Open MPI's remote daemon never came up (its
# "failed-daemon-launch" or "failed-daemon" message, and no rank having printed a line): seen once
# on CI with two groups sharing 2 cores, before any of the trainer's code ran; the retry is said on
# stdout (INFO) and sets $start (the caller's, for limits measured from it) anew: what is timed is
# the run that ran. Every mpirun across the cluster goes through here.
cl_launch() {
    local out=$1; shift
    local attempt rc
    for attempt in 1 2; do
        "$@" >"$out" 2>&1
        rc=$?
        [ "$rc" -ne 0 ] && [ "$attempt" -eq 1 ] && ! grep -qE "^(GPT-2 (CPU|GPU) trainer|error: rank|test fault|step )" "$out" &&
            grep -q "unable to reliably start one or more daemons\|daemon has unexpectedly failed after launch" "$out" || return "$rc"
        echo "INFO launch $(basename "$out"): Open MPI's daemon did not start on a host (exit $rc, no rank started); running it again"
        mv "$out" "$out.first"
        start=$(date +%s)
    done
}

# crun OUT HOSTS NP STAGE ARGS: mpirun of build/train_gpt2_zSTAGE from node0 onto HOSTS, output in OUT.
crun() {
    local out=$1 hosts=$2 np=$3 stage=$4; shift 4
    cl_launch "$out" cluster_exec node0 timeout -k 5 300 "${CL_MPIRUN[@]}" "${KEEPALIVE[@]}" -x OMP_NUM_THREADS -x ZERO_TEST_FAULT="${ZERO_TEST_FAULT:-}" -H "$hosts" -np "$np" \
        "$BIN/train_gpt2_z$stage" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -j "$CT/val.bin" "$@"
}

ref_run() {
    local dir=$1 b=$2; shift 2
    timeout 300 "$BIN/train_gpt2_z0" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -j "$CT/val.bin" -b "$b" -o "$dir" "$@" >"$dir.out" 2>&1
}

took_since() { echo $(( $(date +%s) - $1 )); }

# The processes left inside the cluster besides the hosts' holders (daemons, ranks), one a line.
cluster_leftovers() {
    local pid holders=" $(cat "$CL_DIR"/*.pid | tr '\n' ' ') "
    for pid in $(cluster_procs); do
        [[ "$holders" == *" $pid "* ]] && continue
        echo "$pid $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-60)"
    done
}
