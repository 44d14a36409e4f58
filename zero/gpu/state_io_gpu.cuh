/*
 * zero/gpu/state_io_gpu.cuh: the GPU engine's parameters and optimizer state in and out of the
 * device: set-up (zero_set_unit_params, from init or a model file), checkpoints
 * (zero_get_full_params, zero_get_optimizer_shard), resume (zero_set_optimizer_shard,
 * zero_params_round_as_step) and the replica check (zero_replicas_agree). zero.cuh includes it
 * under ZERO_GPU_BUILD after zero/gpu/engine_gpu.cuh (its zero_owned); the host staging buffers
 * and the waits are zero/gpu/comm_gpu.cuh's. zero/checkpoint.h, included after it, calls these
 * as it calls the CPU engine's twins (zero/engine_cpu.h).
 *
 * Every rank calls each of these at the same point (they contain collectives over MPI on the
 * host); each is host-synchronous: it waits for the device first (zero_device_synchronize), so
 * no collective is still reading or writing what it copies. Units move one at a time through the
 * engine's pinned host staging (zero_host_staging), never the whole model; with -zo/-zp the
 * offloaded buffers are read and written where they rest (zero/hooks.h's offload hooks).
 * Shapes: fp32 host buffers, padded_numel (a unit, or the whole model for zero_get_full_params)
 * or shard_numel per unit (optimizer slices, concatenated unit by unit). Errors: a failed CUDA
 * call exits through CUDA_CHECK; a collective past -wt names itself and aborts (zero/comm.h).
 */
#ifndef ZERO_STATE_IO_GPU_CUH
#define ZERO_STATE_IO_GPU_CUH
#ifndef ZERO_ENGINE_GPU_CUH
#error "zero/gpu/state_io_gpu.cuh is part of zero.cuh; include zero.cuh"
#endif

#include "common/hash.h" // fnv1a64: the replica check
#include "common/rng.h"  // splitmix64: the per-step AdamW rounding seed


/*
 * Set one unit's parameters from a full fp32 copy of it on the host (init or a model file): the
 * master weights get the part this rank stores exactly, the bf16 parameters (full unit, or the
 * shard at stage 3) their round-to-nearest value. Host-synchronous.
 */
static void zero_set_unit_params(ZeroEngine* z, int unit, const float* unit_buf) {
    const ParamUnit* u = &z->layout->units[unit];
    zero_device_synchronize(z, "setting parameters"); // no collective is still reading or writing them
    size_t begin, end;
    zero_update_range(z, unit, &begin, &end);
    if (zero_hook_offload_off_device(z, ZERO_BUF_MASTER)) zero_hook_offload_unit_io(z, unit, ZERO_BUF_MASTER, (float*)unit_buf + begin, 1);
    else {
        float* master = ZERO_STAGE >= 1 ? zero_owned(z, z->gpu.master, ZERO_BUF_MASTER, unit) : z->gpu.master + u->offset;
        CUDA_CHECK(cudaMemcpyAsync(master, unit_buf + begin, (end - begin) * sizeof(float), cudaMemcpyHostToDevice, z->gpu.compute));
    }
    bf16* host_half;
    zero_host_staging(z, NULL, &host_half);
    size_t from = ZERO_STAGE == 3 ? (size_t)z->rank * u->shard_numel : 0, n = ZERO_STAGE == 3 ? u->shard_numel : u->padded_numel;
    for (size_t i = 0; i < n; i++) host_half[i] = __float2bfloat16(unit_buf[from + i]);
    if (zero_hook_offload_off_device(z, ZERO_BUF_PARAMS)) { // -zp: it rests on the host or NVMe (stage 3: nothing gathered is kept)
        zero_hook_offload_unit_io(z, unit, ZERO_BUF_PARAMS, host_half, 1);
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) z->param_work[i].unit = -1;
        return;
    }
    bf16* params = ZERO_STAGE == 3 ? zero_owned(z, z->params, ZERO_BUF_PARAMS, unit) : z->params + u->offset;
    CUDA_CHECK(cudaMemcpyAsync(params, host_half, n * sizeof(bf16), cudaMemcpyHostToDevice, z->gpu.compute));
    zero_stream_synchronize(z, z->gpu.compute, "setting parameters"); // host_half is reused
    if (ZERO_STAGE == 3) // a gathered copy of the old values is stale
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) z->param_work[i].unit = -1;
}

/*
 * Resume: rewrite the bf16 parameters from the fp32 master weights exactly as AdamW step t
 * wrote them (the same stochastic rounding, keyed by step and global index: kernels/adamw.cuh),
 * then stages 1-2 all-gather them as that step did. The master weights come from the model file
 * (fp32, exact), so the bf16 parameters are bit-identical to those of the run that wrote the
 * checkpoint. (The CPU build needs no such step: its parameters are their own master copy.)
 */
static void zero_params_round_as_step(ZeroEngine* z, int t) {
    const ParamLayout* layout = z->layout;
    uint32_t seed = (uint32_t)splitmix64((uint64_t)t);
    zero_device_synchronize(z, "rounding parameters");
    for (int unit = 0; unit < layout->num_units; unit++) {
        const ParamUnit* u = &layout->units[unit];
        size_t begin, end;
        zero_update_range(z, unit, &begin, &end);
        bf16* p = zero_hook_offload_off_device(z, ZERO_BUF_PARAMS) ? NULL : ZERO_STAGE == 3 ? zero_owned(z, z->params, ZERO_BUF_PARAMS, unit) : z->params + u->offset + begin;
        if (zero_hook_offload_off_device(z, ZERO_BUF_MASTER)) { // the master weights are on the host: round there, the same bits
            float* host;
            bf16* host_half;
            zero_host_staging(z, &host, &host_half);
            zero_hook_offload_unit_io(z, unit, ZERO_BUF_MASTER, host, 0);
            for (size_t i = 0; i < end - begin; i++) {
                uint16_t b = adamw_round_param_host(host[i], seed, u->offset + begin + i);
                memcpy((void*)&host_half[i], &b, sizeof(b));
            }
            if (p == NULL) zero_hook_offload_unit_io(z, unit, ZERO_BUF_PARAMS, host_half, 1);
            else {
                CUDA_CHECK(cudaMemcpyAsync(p, host_half, (end - begin) * sizeof(bf16), cudaMemcpyHostToDevice, z->gpu.compute));
                zero_stream_synchronize(z, z->gpu.compute, "rounding parameters"); // host_half is reused
            }
        } else {
            float* w = ZERO_STAGE >= 1 ? zero_owned(z, z->gpu.master, ZERO_BUF_MASTER, unit) : z->gpu.master + u->offset + begin;
            params_from_master_stochastic_cuda(p, w, end - begin, seed, u->offset + begin, z->gpu.compute);
        }
        if (ZERO_STAGE == 1 || ZERO_STAGE == 2) {
            zero_stream_after(z->gpu.comm, z->gpu.compute, z->gpu.compute_mark);
            zero_device_collective(z, &z->param_ops[unit], ZERO_OP_ALL_GATHER, NULL, z->params + u->offset, u->padded_numel,
                                   unit, "parameters (resume)");
        }
    }
    if (ZERO_STAGE == 3)
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) z->param_work[i].unit = -1;
    zero_device_synchronize(z, "rounding parameters");
}

// Gather the full fp32 master weights (padded_numel elements) into `full` on rank 0 for a
// checkpoint; every rank calls it, the others pass NULL. Stages 1-3: unit by unit over MPI
// (zero/comm.h's gather, outside the per-step count), through a host copy of this rank's slice.
static void zero_get_full_params(ZeroEngine* z, float* full) {
    const ParamLayout* layout = z->layout;
    zero_device_synchronize(z, "checkpoint parameters");
    if (ZERO_STAGE == 0) {
        if (full != NULL) CUDA_CHECK(cudaMemcpy(full, z->gpu.master, layout->padded_numel * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    float* host;
    zero_host_staging(z, &host, NULL);
    for (int unit = 0; unit < layout->num_units; unit++) {
        const ParamUnit* u = &layout->units[unit];
        if (zero_hook_offload_off_device(z, ZERO_BUF_MASTER)) zero_hook_offload_unit_io(z, unit, ZERO_BUF_MASTER, host, 0);
        else CUDA_CHECK(cudaMemcpy(host, zero_owned(z, z->gpu.master, ZERO_BUF_MASTER, unit), u->shard_numel * sizeof(float),
                                   cudaMemcpyDeviceToHost));
        ZeroOp op = {.kind = ZERO_OP_NONE};
        zero_op_gather_to_rank0(z, &op, host, full ? full + u->offset : NULL, u->padded_numel, unit, "master weights (checkpoint)");
        zero_op_wait(z, &op);
    }
}

// This rank's slice of Adam m and v, every unit in order (layout->shard_numel elements each): the
// per-rank checkpoint payload, the same at every stage and in both builds.
static void zero_get_optimizer_shard(ZeroEngine* z, float* m_out, float* v_out) {
    zero_device_synchronize(z, "checkpoint optimizer state");
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        size_t dst = u->offset / (size_t)z->world_size;
        if (zero_hook_offload_optimizer_io(z, unit, m_out + dst, v_out + dst, 0)) continue; // -zo: on the host or NVMe
        CUDA_CHECK(cudaMemcpy(m_out + dst, zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit), u->shard_numel * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(v_out + dst, zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit), u->shard_numel * sizeof(float), cudaMemcpyDeviceToHost));
    }
}

// Inverse of zero_get_optimizer_shard. Stage 0 keeps all of m and v on every rank: each unit is
// all-gathered on the host (zero/comm.h's MPI all-gather) and copied up whole.
static void zero_set_optimizer_shard(ZeroEngine* z, const float* m_in, const float* v_in) {
    zero_device_synchronize(z, "setting optimizer state");
    float* host;
    zero_host_staging(z, &host, NULL);
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        size_t src = u->offset / (size_t)z->world_size;
        const float* in[2] = {m_in + src, v_in + src};
        float* state[2] = {z->m, z->v};
        if (zero_hook_offload_optimizer_io(z, unit, (float*)in[0], (float*)in[1], 1)) continue; // -zo (stages 1-3 only): the rank's slices
        for (int k = 0; k < 2; k++) {
            if (ZERO_STAGE == 0) {
                ZeroOp op = {.kind = ZERO_OP_NONE};
                zero_op_all_gather(z, &op, in[k], host, u->padded_numel, unit, k == 0 ? "Adam m (resume)" : "Adam v (resume)");
                zero_op_wait(z, &op);
                CUDA_CHECK(cudaMemcpy(state[k] + u->offset, host, u->padded_numel * sizeof(float), cudaMemcpyHostToDevice));
            } else {
                CUDA_CHECK(cudaMemcpy(zero_owned(z, state[k], k == 0 ? ZERO_BUF_ADAM_M : ZERO_BUF_ADAM_V, unit), in[k],
                                      u->shard_numel * sizeof(float), cudaMemcpyHostToDevice));
            }
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize()); // legacy-stream copies above: done before the streams use m, v
}

// Stages 0-2 keep replicated parameters (stage 0 also replicated master weights, m and v): check
// the replicas are bit-identical across ranks, unit by unit through the host. Returns 1 when they
// are (always at stage 3: nothing replicated).
static int zero_replicas_agree(ZeroEngine* z) {
    if (ZERO_STAGE == 3 || z->world_size == 1) return 1;
    zero_device_synchronize(z, "replica check");
    float* host;
    zero_host_staging(z, &host, NULL);
    uint64_t h = FNV1A64_INIT;
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        // bf16 parameters: padded_numel is even (a multiple of ZERO_ALIGN), so they hash as words.
        CUDA_CHECK(cudaMemcpy(host, z->params + u->offset, u->padded_numel * sizeof(bf16), cudaMemcpyDeviceToHost));
        h = fnv1a64_words(host, u->padded_numel / 2, h);
        const float* state[3] = {z->gpu.master, z->m, z->v};
        for (int k = 0; ZERO_STAGE == 0 && k < 3; k++) {
            CUDA_CHECK(cudaMemcpy(host, state[k] + u->offset, u->padded_numel * sizeof(float), cudaMemcpyDeviceToHost));
            h = fnv1a64_words(host, u->padded_numel, h);
        }
    }
    return zero_all_ranks_equal_u64(z, h, "replica check");
}

#endif // ZERO_STATE_IO_GPU_CUH
