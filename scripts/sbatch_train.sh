#!/usr/bin/env bash
# scripts/sbatch_train.sh: the Slurm batch recipe for training across nodes (docs/slurm.md).
#
#   sbatch [--nodes=N] [--ntasks-per-node=R] scripts/sbatch_train.sh OUT_DIR [TRAINER FLAGS...]
#
# Runs TRAINER (default build/train_gpt2_z1; relative paths from the directory sbatch was called
# in) on every task through `srun --mpi=pmix`, always with `-o OUT_DIR -y 1`: the first start finds
# no checkpoint and starts from scratch, every later start resumes the latest checkpoint in
# OUT_DIR (which must be on a filesystem every node sees, or node-local with the state files
# reachable as docs/slurm.md says). The run's other flags (-i, -j, -e, -x, -n, ...) follow OUT_DIR
# and are the same on every start, so a requeued job continues the same run.
#
# Signals (the trainer's -sig, default USR1,TERM: finish the step, write the checkpoint, exit 75):
#   - `--signal=B:USR1@120` below: Slurm sends SIGUSR1 to this script 120 s before the time
#     limit; the script passes it to srun, which passes it to every task;
#   - preemption, `scontrol requeue` and `scancel`: Slurm sends SIGTERM to every task (and this
#     script), then SIGKILL KillWait seconds later (slurm.conf; 30 s by default);
#   - exit status 75 from the tasks ("checkpointed on a signal, requeue me"): the script asks
#     Slurm to requeue the job (`scontrol requeue`), which then starts again from the top on
#     whatever nodes are free, and -y 1 resumes. Any other status is the job's own.
# Ranks: srun starts (nodes the job has now) x (tasks per node) tasks, so a job requeued onto
# fewer nodes (after a lost node, `scontrol update JobId=ID NumNodes=1`) runs with fewer ranks, and
# -y 1 reshards the checkpoint on load (docs/checkpoints.md). Keep the global batch with a fixed
# -d among the trainer flags. Tasks per node: TASKS_PER_NODE if set, else --ntasks-per-node
# (SLURM_NTASKS_PER_NODE), else the first count of SLURM_TASKS_PER_NODE ("2(x2)" -> 2).
# Environment: TRAINER (the binary), TASKS_PER_NODE, SRUN_FLAGS (more srun options, e.g.
# --cpu-bind=cores).
#SBATCH --job-name=gpt2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
set -u
if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "sbatch_train.sh: expected the output dir as the first argument: sbatch scripts/sbatch_train.sh OUT_DIR [trainer flags]" >&2
    exit 2
fi
out_dir=$1
shift
trainer=${TRAINER:-build/train_gpt2_z1}
if [ ! -x "$trainer" ]; then
    echo "sbatch_train.sh: $trainer (TRAINER) is not an executable in $PWD on $(hostname); build it first (make zero_binaries)" >&2
    exit 2
fi
mkdir -p "$out_dir" || { echo "sbatch_train.sh: cannot make the output dir $out_dir on $(hostname)" >&2; exit 2; }

# The job's ranks from the nodes it has on this start; Slurm keeps SLURM_NTASKS of the first start
# on a requeued job, so it is not used.
nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
tpn=${TASKS_PER_NODE:-${SLURM_NTASKS_PER_NODE:-}}
if [ -z "$tpn" ]; then
    tpn=${SLURM_TASKS_PER_NODE:-1}
    tpn=${tpn%%[(,]*}
fi
case "$nodes$tpn" in
    *[!0-9]* | "") echo "sbatch_train.sh: cannot tell the ranks from nodes '$nodes' x tasks per node '$tpn' on $(hostname); set TASKS_PER_NODE" >&2; exit 2 ;;
esac
ntasks=$((nodes * tpn))
echo "sbatch_train.sh: job ${SLURM_JOB_ID:-?} start ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NODELIST:-?}, $trainer -o $out_dir -y 1 $*"

if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
    echo "sbatch_train.sh: resuming on $nodes nodes x $tpn ranks ($ntasks ranks)"
else
    echo "sbatch_train.sh: starting on $nodes nodes x $tpn ranks ($ntasks ranks)"
fi

# srun in the background, so that this shell can take signals while the tasks run (bash runs a
# trap only between commands, and `wait` is one it interrupts).
# shellcheck disable=SC2086
srun --mpi=pmix -N "$nodes" -n "$ntasks" ${SRUN_FLAGS:-} "$trainer" -o "$out_dir" -y 1 "$@" &
srun_pid=$!
forward() { kill -"$1" "$srun_pid" 2>/dev/null; }
trap 'forward USR1' USR1
trap 'forward TERM' TERM
while kill -0 "$srun_pid" 2>/dev/null; do wait "$srun_pid"; done
wait "$srun_pid"
status=$?
trap - USR1 TERM
if [ "$status" -eq 75 ]; then
    echo "sbatch_train.sh: the trainer checkpointed on a signal (exit 75); requeueing job ${SLURM_JOB_ID:-?}"
    # After preemption or `scontrol requeue` Slurm has requeued the job already; this then fails
    # harmlessly (the job is no longer running).
    scontrol requeue "${SLURM_JOB_ID:-}" 2>&1 || true
fi
exit "$status"
