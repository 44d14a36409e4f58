# A real Slurm on the simulated cluster (source it after tests/cluster_common.sh; needs root).
# On top of tests/cluster.sh's hosts (own network, hostname and mount namespaces), Debian's
# slurm-wlm: one munged and slurmctld on node0, one slurmd per host, each with its own spool and
# log under the cluster's temp dir; the configuration is generated there (nothing under /etc is
# read or written), so parallel tests never share a daemon, a port or a state file. Every daemon
# runs inside the cluster's namespaces, so cluster_down (the EXIT/INT/TERM trap that cluster_up
# installs) kills them with the ranks; no daemon is started outside.
#
#   slurm_can_run               0 if this machine can host it: the cluster's needs, then Debian's
#                               Slurm and munge (installed by `scripts/setup.sh --slurm` when
#                               missing); else prints why on stdout and returns 1
#   slurm_up NHOSTS             cluster_up NHOSTS local (CL_LOCAL: each host's own disk), then the daemons; returns once every node is idle in
#                               sinfo, or 1 with the daemons' last log lines after SLURM_UP_WAIT
#                               seconds (default 60). Sets SL_DIR (config, spool, logs),
#                               SL_UP_SECONDS (daemons' start, seconds) and exports SLURM_CONF
#   slurm_exec HOST CMD...      CMD inside HOST with SLURM_CONF set (srun, sbatch, scontrol, squeue)
#   slurm_wait_job ID SECS      waits until job ID has left the queue (completed, failed or
#                               cancelled) for good, at most SECS; 0 if it did, 1 if not
#   slurm_job_state ID          the job's state as the controller knows it (COMPLETED, PENDING, ...)
#   slurm_setup NHOSTS          cluster_setup's twin (tests/cluster_common.sh): SKIP or slurm_up
#   srun_run, sbatch_submit     a trainer through srun --mpi=pmix / scripts/sbatch_train.sh
#   slurm_wait_step DIR S SECS  until DIR/log.jsonl has step S
#   slurm_trainers_running      0 while a trainer process runs in the cluster
#
# Slurm settings chosen for a test cluster (slurm.conf(5)):
#   - SlurmUser/SlurmdUser root: the tests run as root and nothing else exists here;
#   - ProctrackType=proctrack/pgid, TaskPlugin=task/none, no accounting: cgroups are not ours to
#     change inside namespaces, and the test's trap, not Slurm, is what must clean up;
#   - SlurmdParameters=config_overrides with CPUs=4 per node: 2 ranks per host on a 2-core machine
#     (the counts in slurm.conf are used, not the hardware's);
#   - ReturnToService=2: a host that was down comes back by itself once its slurmd answers again;
#   - short timeouts (SlurmdTimeout, MessageTimeout, KillWait) so a lost host is noticed in
#     seconds, not the production minutes; the values are written below next to each line.

slurm_can_run() {
    local why
    why=$(cluster_can_run) || { echo "$why"; return 1; }
    if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 ||
       ! command -v srun >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
        local t0=$(date +%s)
        if ! bash scripts/setup.sh --slurm >/tmp/slurm_setup.$$ 2>&1; then
            echo "scripts/setup.sh --slurm failed: $(tail -2 /tmp/slurm_setup.$$ | tr '\n' ' ')"
            rm -f /tmp/slurm_setup.$$; return 1
        fi
        rm -f /tmp/slurm_setup.$$
        SL_INSTALL_SECONDS=$(( $(date +%s) - t0 ))
    fi
    [ -f /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so ] || ls /usr/lib/*/slurm-wlm/mpi_pmix.so >/dev/null 2>&1 ||
        { echo "Slurm has no mpi/pmix plugin (srun --mpi=pmix is what Open MPI's Debian build needs)"; return 1; }
    return 0
}

slurm_write_conf() {
    local n=$1 i nodes
    nodes="node[0-$((n - 1))]"
    {
        echo "ClusterName=${CL_TAG}"
        echo "SlurmctldHost=node0(10.77.0.1)"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        # cred_expire: a requeued job may start again this many s after it ended (production: 120).
        echo "AuthInfo=socket=$SL_DIR/munge.socket,cred_expire=10"
        echo "StateSaveLocation=$SL_DIR/ctld"
        echo "SlurmctldPidFile=$SL_DIR/slurmctld.pid"
        echo "SlurmctldLogFile=$SL_DIR/slurmctld.log"
        echo "SlurmdSpoolDir=$SL_DIR/%n/spool"
        echo "SlurmdPidFile=$SL_DIR/%n/slurmd.pid"
        echo "SlurmdLogFile=$SL_DIR/%n/slurmd.log"
        echo "SlurmdParameters=config_overrides"
        echo "ProctrackType=proctrack/pgid"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobCompType=jobcomp/none"
        echo "SwitchType=switch/none"
        echo "MpiDefault=none"
        echo "SchedulerType=sched/builtin"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "ReturnToService=2"
        # A lost host is DOWN after SlurmdTimeout s without an answer (production: 300).
        echo "SlurmdTimeout=10"
        # One RPC waits at most this long (production: 10; the tests' loopback answers in ms).
        echo "MessageTimeout=5"
        # SIGTERM to SIGKILL for a cancelled or preempted step (production: 30).
        echo "KillWait=10"
        # Finished jobs stay visible to scontrol this long (s), for the tests' checks.
        echo "MinJobAge=600"
        echo "InactiveLimit=0"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "NodeName=$nodes CPUs=4 RealMemory=1000 State=UNKNOWN"
        echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
    } >"$SL_DIR/slurm.conf"
    # slurmd loads a cgroup plugin whatever the ProctrackType and TaskPlugin; autodetection fails in
    # the hosts (`ip netns exec` mounts a fresh /sys without /sys/fs/cgroup). Naming v1 loads it
    # without probing, and with proctrack/pgid and task/none no cgroup is ever made.
    echo "CgroupPlugin=cgroup/v1" >"$SL_DIR/cgroup.conf"
    # PMIx's per-step client directory is <base>/spmix_appdir_<uid>_<job>.<step>, the same name on
    # every host of a step: the base is the node-local disk (cluster_up's `local`), so the hosts,
    # which share /tmp here, never collide, and nothing is left in /tmp (mpi.conf(5)).
    echo "PMIxCliTmpDirBase=$CL_LOCAL/pmix" >"$SL_DIR/mpi.conf"
    for ((i = 0; i < n; i++)); do
        mkdir -p "$SL_DIR/node$i/spool"
        cluster_exec "node$i" mkdir -p "$CL_LOCAL/pmix"
    done
    mkdir -p "$SL_DIR/ctld"
}

slurm_up() {
    local n=$1 t0 host waited=0
    cluster_up "$n" local || return 1
    t0=$(date +%s%N)
    SL_DIR="$CL_DIR/slurm"
    mkdir -p "$SL_DIR"
    chmod 700 "$SL_DIR"
    export SLURM_CONF="$SL_DIR/slurm.conf"
    slurm_write_conf "$n"
    # munge: a fresh key for this cluster; one munged on node0 serves every host through its
    # socket in SL_DIR (a path on the shared filesystem: Unix sockets bound to a path are reached
    # from any network namespace). -f: munged refuses keys and sockets under /tmp without it.
    head -c 1024 /dev/urandom >"$SL_DIR/munge.key"
    chmod 400 "$SL_DIR/munge.key"
    cluster_exec node0 munged -f --socket="$SL_DIR/munge.socket" --key-file="$SL_DIR/munge.key" \
        --log-file="$SL_DIR/munged.log" --pid-file="$SL_DIR/munged.pid" --seed-file="$SL_DIR/munged.seed" \
        >"$SL_DIR/munged.out" 2>&1 || { echo "slurm_up: munged did not start: $(tail -2 "$SL_DIR/munged.log" "$SL_DIR/munged.out" 2>/dev/null | tr '\n' ' ')" >&2; return 1; }
    # -i: ignore the (empty) saved state; each daemon forks into the background, inside its host.
    cluster_exec node0 slurmctld -i -f "$SLURM_CONF" >"$SL_DIR/slurmctld.out" 2>&1 ||
        { echo "slurm_up: slurmctld did not start: $(tail -3 "$SL_DIR/slurmctld.log" "$SL_DIR/slurmctld.out" 2>/dev/null | tr '\n' ' ')" >&2; return 1; }
    for host in "${CL_HOSTS[@]}"; do
        cluster_exec "$host" slurmd -f "$SLURM_CONF" -N "$host" >"$SL_DIR/$host/slurmd.out" 2>&1 ||
            { echo "slurm_up: slurmd on $host did not start: $(tail -3 "$SL_DIR/$host/slurmd.log" "$SL_DIR/$host/slurmd.out" 2>/dev/null | tr '\n' ' ')" >&2; return 1; }
    done
    local limit=$(( ${SLURM_UP_WAIT:-60} * 5 ))
    while true; do
        local idle
        idle=$(slurm_exec node0 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
        [ "$idle" -eq "$n" ] && break
        waited=$((waited + 1))
        if [ $waited -gt $limit ]; then
            echo "slurm_up: $idle of $n nodes idle after ${SLURM_UP_WAIT:-60} s: $(slurm_exec node0 sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' '); slurmctld: $(tail -3 "$SL_DIR/slurmctld.log" 2>/dev/null | tr '\n' ' ')" >&2
            return 1
        fi
        sleep 0.2
    done
    SL_UP_SECONDS=$(python3 -c "print(f'{($(date +%s%N) - $t0) / 1e9:.1f}')")
    return 0
}

slurm_exec() {
    local host=$1; shift
    cluster_exec "$host" env SLURM_CONF="$SLURM_CONF" "$@"
}

slurm_job_state() {
    slurm_exec node0 scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}

slurm_wait_job() {
    local id=$1 secs=$2 i state
    for ((i = 0; i < secs * 2; i++)); do
        state=$(slurm_job_state "$id")
        case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) return 0 ;; esac
        sleep 0.5
    done
    return 1
}

# slurm_setup NHOSTS: cluster_setup's twin for the Slurm groups: SKIP (exit 0) where the
# machine cannot host it (FAIL on CI), builds the trainers, slurm_up, $CT and its shards.
slurm_setup() {
    local why
    if ! why=$(slurm_can_run); then
        if [ "${CI:-}" = "true" ]; then echo "FAIL slurm_can_run: $why; expected root, ip netns and Debian's Slurm on CI"
        else echo "SKIP slurm_tests: $why; the Slurm tests did not run"; fi
        exit 0
    fi
    if ! nice -n 10 make -s zero_binaries >/tmp/slurm_make.$$ 2>&1; then
        echo "FAIL slurm_build: $(tail -3 /tmp/slurm_make.$$ | tr '\n' ' ')"; rm -f /tmp/slurm_make.$$; exit 1
    fi
    rm -f /tmp/slurm_make.$$
    slurm_up "$@" || { echo "FAIL slurm_up: could not start Slurm in the simulated cluster"; exit 1; }
    CT="$CL_DIR/shared"
    mkdir -p "$CT"
    export OMP_NUM_THREADS=1
    python3 tests/markov_shards.py "$CT" 3000 60000 8000 1234
}

# Open MPI's ranks under srun (direct launch, no mpirun): TCP between hosts on eth0 only.
SLURM_MPI_ENV=(OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0 OMP_NUM_THREADS=1)

# srun_run OUT NODES TASKS_PER_NODE STAGE ARGS: build/train_gpt2_zSTAGE through
# `srun --mpi=pmix` from node0 on the small test config (cluster_common.sh's), bounded by timeout.
srun_run() {
    local out=$1 nodes=$2 tpn=$3 stage=$4; shift 4
    slurm_exec node0 env "${SLURM_MPI_ENV[@]}" timeout -k 5 300 \
        srun --mpi=pmix -N "$nodes" --ntasks-per-node="$tpn" --kill-on-bad-exit=1 \
        "$BIN/train_gpt2_z$stage" "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -j "$CT/val.bin" "$@" >"$out" 2>&1
}

# sbatch_submit OUT_DIR STAGE JOB_OUT ARGS: scripts/sbatch_train.sh submitted from node0 (its
# #SBATCH defaults: 2 nodes x 2 tasks), build/train_gpt2_zSTAGE on the small test config, the
# batch output in JOB_OUT; prints the job id.
sbatch_submit() {
    local dir=$1 stage=$2 job_out=$3; shift 3
    slurm_exec node0 env "${SLURM_MPI_ENV[@]}" TRAINER="$BIN/train_gpt2_z$stage" \
        sbatch --parsable -D "$PWD" -o "$job_out" scripts/sbatch_train.sh "$dir" \
        "${CLUSTER_TEST_ARGS[@]}" -i "$CT/train.bin" -j "$CT/val.bin" "$@"
}

# slurm_wait_step DIR STEP SECS: waits until DIR/log.jsonl has a train line for STEP (1-based).
slurm_wait_step() {
    local dir=$1 step=$2 secs=$3 i
    for ((i = 0; i < secs * 5; i++)); do
        [ -f "$dir/log.jsonl" ] && grep -q "\"step\": *$step[,}]" "$dir/log.jsonl" && return 0
        sleep 0.2
    done
    return 1
}

# slurm_trainers_running: 0 if a train_gpt2 process runs anywhere in the cluster.
slurm_trainers_running() {
    local pid
    for pid in $(cluster_procs); do
        grep -q train_gpt2 "/proc/$pid/cmdline" 2>/dev/null && return 0
    done
    return 1
}
