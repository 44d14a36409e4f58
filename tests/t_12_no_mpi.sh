#!/usr/bin/env bash
# Builds without Open MPI (zero/cluster/mpi_single.h; make NO_USE_MPI=1, chosen by itself where no mpicc
# is found): the CPU trainer and test_gpt2 built with plain gcc, run as one process.
#   - test_gpt2 without MPI passes the same PyTorch reference checks as with it;
#   - a short run of the one-process trainer (with accumulation, val, the GNS meter) logs the
#     same losses and noise-scale values as the MPI build run as one process: at world size 1
#     the engine makes no MPI call, so the stand-in changes nothing;
#   - a launch of several tasks (the launcher variables of mpirun, PMIx/PMI, srun) is one error
#     line from the task of rank 0 and exit 1 in every task, with a real mpirun -np 2 too;
#   - the Makefile picks the one-process build when mpicc does not work, and NO_USE_MPI forces it.
# The CUDA build's one-process binary: compiled in t_60 (build/cuda/train_gpt2cu_nompi_sm90_zero0),
# run under the emulation in t_65. About 20 s on 2 cores.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
why=$(ensure_tinyshakespeare) || { echo "FAIL tinyshakespeare_data: $why"; exit 1; }
log=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$log"' EXIT
if ! make -s -j2 build/train_gpt2_nompi build/test_gpt2_nompi train_gpt2 >"$log" 2>&1; then
    echo "FAIL no_mpi_build: $(grep -m3 -E 'error' "$log" | tr '\n' ' ')"
    exit 0
fi
echo "PASS no_mpi_build"
check "no_mpi_binary_links_no_mpi_library" bash -c "! ldd build/train_gpt2_nompi | grep -q libmpi"

# The reference checks, one line each, as in t_10, prefixed.
./build/test_gpt2_nompi | sed -E 's/^(PASS|FAIL) /\1 no_mpi_/'

TRAIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
run() { local bin=$1; shift; "$bin" -i "$TRAIN" -j "$VAL" -e d1 -b 2 -t 32 -l 1e-3 -v 2 -m 2 -s 0 "$@"; }
run ./train_gpt2 -x 4 -d 128 -o "$tmp/mpi" >"$tmp/mpi.txt" 2>&1
run ./build/train_gpt2_nompi -x 4 -d 128 -o "$tmp/nompi" >"$tmp/nompi.txt" 2>&1
check "no_mpi_run_identical_to_mpi_build_one_process" python3 tests/zero_logcheck.py same "$tmp/mpi" "$tmp/nompi"
check "no_mpi_run_says_it_is_one_process" grep -q "world size 1" "$tmp/nompi.txt"

# Several tasks: rank 0 prints the error, every task exits 1.
launched() { # VARS...: the one-process trainer under those launcher variables
    env "$@" ./build/train_gpt2_nompi -i "$TRAIN" -j "$VAL" -e d1 -b 2 -t 16 -x 1 -v 0 -s 0
}
check_fails "no_mpi_mpirun_rank0_is_an_error" "error: launcher: OMPI_COMM_WORLD_SIZE=2 says several processes" \
    launched OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0
check "no_mpi_other_ranks_exit_1_silently" bash -c "out=\$(env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 ./build/train_gpt2_nompi -e d1 -x 1 -v 0 -s 0 -i $TRAIN 2>&1); [ \$? -eq 1 ] && [ -z \"\$out\" ]"
check_fails "no_mpi_srun_step_is_an_error" "error: launcher: SLURM_STEP_NUM_TASKS=4" launched SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=0
check_fails "no_mpi_pmi_size_is_an_error" "error: launcher: PMI_SIZE=3" launched PMI_SIZE=3 PMI_RANK=0
check "no_mpi_pmix_task_of_rank_1_exits_1_silently" bash -c "out=\$(env PMIX_RANK=1 ./build/train_gpt2_nompi -e d1 -x 1 -v 0 -s 0 -i $TRAIN 2>&1); [ \$? -eq 1 ] && [ -z \"\$out\" ]"
# An sbatch script's own process has SLURM_NTASKS of the allocation but is no task of a step.
check "no_mpi_sbatch_script_process_runs" launched SLURM_NTASKS=4
one_error_line() {
    local out rc
    out=$(OMP_NUM_THREADS=1 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 ./build/train_gpt2_nompi \
          -i "$TRAIN" -e d1 -b 2 -t 16 -x 1 -v 0 -s 0 2>&1); rc=$?
    [ "$rc" -ne 0 ] && [ "$(grep -c 'error: launcher: OMPI_COMM_WORLD_SIZE=2' <<<"$out")" -eq 1 ]
}
if command -v mpirun >/dev/null 2>&1; then check "no_mpi_binary_under_mpirun_np2_one_error_line" one_error_line
else echo "SKIP no_mpi_binary_under_mpirun_np2_one_error_line: no mpirun"; fi

# The Makefile's choice: no working mpicc -> the one-process build, with gcc; NO_USE_MPI forces it.
check "makefile_without_mpicc_builds_one_process" bash -c "make -n -B train_gpt2 MPICC=/nonexistent/mpicc | grep -q -- '-DZERO_NO_MPI=1'"
check "makefile_no_use_mpi_forces_one_process" bash -c "make -n -B train_gpt2 NO_USE_MPI=1 | grep -q -- '-DZERO_NO_MPI=1'"
check "makefile_with_mpicc_uses_mpi" bash -c "! command -v mpicc >/dev/null || ! make -n -B train_gpt2 | grep -q -- '-DZERO_NO_MPI'"
