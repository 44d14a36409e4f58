#!/usr/bin/env bash
# Simulated cluster, group 4: the GPU build's ranks and devices across hosts, run through the
# CPU emulation of CUDA (dev/emu, emu.mk; EMU_DEVICE_COUNT emulated GPUs per process), NCCL's
# collectives carried by MPI between the hosts (dev/emu/nccl_emu.h). The reference model's
# config (V 1000, L 2, C 64), T 32, global batch 8 sequences, 3 steps.
#   - one emulated GPU per host, one rank per host: each rank takes device 0 from its launcher's
#     local rank (OMPI_COMM_WORLD_LOCAL_RANK, read before MPI_Init); losses match one rank
#   - one visible GPU per task, two ranks per host (srun --gpus-per-task=1's situation): local
#     rank 1 also takes device 0; losses match one rank
#   - no launcher variable (a wrapper removes them): MPI_COMM_TYPE_SHARED groups the ranks per
#     simulated host (rank 2 is local rank 0 on node1), 2 GPUs per host: ranks 1 and 3 take GPU 1
#   - more ranks on a host than its GPUs (NCCL build): one error line naming rank, host, local rank
# Loss tolerance 2e-3 (t_65_cuda_emulation's, same reason: bf16 gradients reduced over ranks
# against one rank's bf16 gradient of the whole batch; measured there at most 1.9e-4).
source "$(dirname "$0")/cluster_common.sh"
cuda_headers cluster_gpu_emu_cuda_headers_present "the emulated GPU cluster tests" || exit 0
cluster_setup 2
if ! make -s -j2 build/emu/train_gpt2cu_z2 >"$CL_DIR/emu_make.log" 2>&1; then
    echo "FAIL cluster_gpu_emu_build: $(grep -m3 error "$CL_DIR/emu_make.log" | tr '\n' ' ')"; exit 0
fi
python3 tests/markov_shards.py "$CT" 1000 20000 4000 7
EMU_ARGS=(-e "$PWD/dev/reference/gpt2_ref_model.bin" -t 32 -x 3 -v 0 -s 0 -n 0 -l 1e-3 -i "$CT/train.bin")
# erun OUT DEVICES HOSTS NP B [WRAPPER]: the emulated NCCL trainer at stage 2.
erun() {
    local out=$1 devices=$2 hosts=$3 np=$4 b=$5 wrapper=${6:-}
    cl_launch "$out.out" cluster_exec node0 env EMU_DEVICE_COUNT="$devices" timeout -k 5 600 "${CL_MPIRUN[@]}" "${KEEPALIVE[@]}" -x OMP_NUM_THREADS \
        -x EMU_DEVICE_COUNT -H "$hosts" -np "$np" $wrapper "$BIN/emu/train_gpt2cu_z2" "${EMU_ARGS[@]}" -b "$b" -o "$out"
}
if ! EMU_DEVICE_COUNT=1 timeout 600 "$BIN/emu/train_gpt2cu_z2" "${EMU_ARGS[@]}" -b 8 -o "$CT/ref" >"$CT/ref.out" 2>&1; then
    echo "FAIL cluster_gpu_emu_reference_run: $(grep -v -i tokenizer "$CT/ref.out" | tail -2 | tr '\n' ' ')"; exit 0
fi
TOL=2e-3
if erun "$CT/one" 1 node0:1,node1:1 2 4; then
    check cluster_gpu_emu_one_gpu_per_host_each_rank_takes_device0_from_launcher \
        bash -c "grep -q '^rank 0 (node0): GPU 0 of 1 visible (local rank 0, from OMPI_COMM_WORLD_LOCAL_RANK)' '$CT/one.out' &&
                 grep -q '^rank 1 (node1): GPU 0 of 1 visible (local rank 0, from OMPI_COMM_WORLD_LOCAL_RANK)' '$CT/one.out'"
    check cluster_gpu_emu_one_gpu_per_host_matches_one_rank python3 tests/zero_logcheck.py losses "$CT/ref" "$CT/one" "$TOL" --norm-rtol "$TOL"
else echo "FAIL cluster_gpu_emu_one_gpu_per_host_runs: $(grep -v -i tokenizer "$CT/one.out" | tail -3 | tr '\n' ' ')"; fi
if erun "$CT/task" 1 node0:2,node1:2 4 2; then
    check cluster_gpu_emu_one_visible_gpu_per_task_local_rank1_takes_device0 \
        bash -c "grep -q '^rank 1 (node0): GPU 0 of 1 visible (local rank 1, from OMPI_COMM_WORLD_LOCAL_RANK)' '$CT/task.out' &&
                 grep -q '^rank 3 (node1): GPU 0 of 1 visible (local rank 1, from OMPI_COMM_WORLD_LOCAL_RANK)' '$CT/task.out'"
    check cluster_gpu_emu_one_visible_gpu_per_task_matches_one_rank python3 tests/zero_logcheck.py losses "$CT/ref" "$CT/task" "$TOL" --norm-rtol "$TOL"
else echo "FAIL cluster_gpu_emu_one_visible_gpu_per_task_runs: $(grep -v -i tokenizer "$CT/task.out" | tail -3 | tr '\n' ' ')"; fi
# Without the launcher's local rank: the shared-memory split after MPI_Init.
printf '#!/bin/sh\nexec env -u OMPI_COMM_WORLD_LOCAL_RANK -u MPI_LOCALRANKID -u MV2_COMM_WORLD_LOCAL_RANK -u SLURM_LOCALID "$@"\n' >"$CT/nolocal.sh"
chmod +x "$CT/nolocal.sh"
EMU_ARGS+=(-x 1)
if erun "$CT/split" 2 node0:2,node1:2 4 2 "$CT/nolocal.sh"; then
    check cluster_gpu_emu_shared_memory_split_groups_ranks_per_host \
        bash -c "grep -q '^rank 1 (node0): GPU 1 of 2 visible (local rank 1, from MPI_COMM_TYPE_SHARED)' '$CT/split.out' &&
                 grep -q '^rank 2 (node1): GPU 0 of 2 visible (local rank 0, from MPI_COMM_TYPE_SHARED)' '$CT/split.out' &&
                 grep -q '^rank 3 (node1): GPU 1 of 2 visible (local rank 1, from MPI_COMM_TYPE_SHARED)' '$CT/split.out'"
else echo "FAIL cluster_gpu_emu_shared_memory_split_runs: $(grep -v -i tokenizer "$CT/split.out" | tail -3 | tr '\n' ' ')"; fi
erun "$CT/over" 2 node0:3,node1:1 4 2
if [ $? -ne 0 ] && grep -q "^error: rank 2 (node0): local rank 2 (OMPI_COMM_WORLD_LOCAL_RANK) but only 2 GPUs visible on this node; expected at most one rank per GPU" "$CT/over.out"; then
    echo "PASS cluster_gpu_emu_more_ranks_than_gpus_on_a_host_named"
else echo "FAIL cluster_gpu_emu_more_ranks_than_gpus_on_a_host_named: $(grep -m2 '^error' "$CT/over.out" | tr '\n' ' ')"; fi
