/*
 * zero/gpu/engine_gpu.cuh: the GPU side of the ZeRO engine. zero.cuh includes it under ZERO_GPU_BUILD, after
 * everything the two builds share; nothing else includes it.
 *
 * Same state (ZeroEngine), same interface, same shard layout, working-unit policy and
 * accounting as the CPU engine (zero/engine_cpu.h): the model asks for a unit's parameters
 * (zero_params_unit, zero_params_prefetch, zero_params_unit_done), backward for a unit's
 * gradient buffer (zero_grads_unit) and says when it is final (zero_grads_unit_ready), and the
 * trainer brackets each optimizer step with zero_step_begin and zero_optimizer_step. The
 * functions below keep the CPU engine's names and structure; what differs is where work runs:
 *   - params are bf16 on the device; master weights and Adam m, v are fp32 on the device. Each
 *     micro-step's gradients are bf16 (what the kernels write), accumulated across micro-steps
 *     in fp32 (grads_fp32), which the optimizer reads: stages 0, 1 add every micro-step into a
 *     full fp32 buffer and reduce on the last one (the sum rounded once to bf16 for the
 *     collective, the result back into fp32); stages 2, 3 add each micro-step's reduced slice
 *     into an fp32 shard. Bytes per rank: zero_state_bytes_formula_mixed (2Ψ+(2+4)Ψ+12Ψ at
 *     stage 0 ... (2+4+12)Ψ/N at stage 3);
 *   - the model's kernels run on z->gpu.compute, every bulk collective on z->gpu.comm. A collective
 *     starts behind an event recorded on the stream that produced its input, and records its
 *     own event (op->done); whoever reads the result makes its stream wait on that event
 *     (zero_compute_wait_op). Where the CPU engine's host blocks on an MPI request, the GPU
 *     engine's compute stream waits instead: the host never waits inside forward or backward;
 *   - the fp32 additions run on the comm stream: stages 2-3 right behind the unit's
 *     reduce-scatter (the CPU engine does that addition when it finishes the working unit),
 *     stages 0-1 behind the unit's backward (overlapping the units below it);
 *   - the optimizer step (zero/gpu/optimizer_gpu.cuh) waits for the comm stream and runs on the
 *     device only: norm, its all-reduce over ranks (NCCL), clip factor, one AdamW launch; the
 *     host reads the norm later (zero_step_result), so it never waits inside a step;
 *   - the gradient noise scale meter's local norm (measure_local_grad_norm) is a kernel on the
 *     compute stream that adds into a device scalar, read back with the global norm's.
 * The host waits only for a step's results (zero_step_result, while the next step runs), at
 * set-up, at checkpoints and where the trainer reads a val loss, always through zero_device_wait: a poll with a clock that also checks
 * NCCL for asynchronous errors. Past -wt seconds without a collective finishing, it names the
 * oldest one not finished (rank, collective, unit, step), aborts the NCCL communicator and then
 * every rank (MPI_Abort).
 * Scalar collectives, barriers and checkpoint gathers go over MPI on the host, through the
 * communication code the CPU build uses (zero/comm.h). Parameters and optimizer state in and
 * out (set-up, checkpoints, resume, replica check): zero/gpu/state_io_gpu.cuh; the optimizer
 * step: zero/gpu/optimizer_gpu.cuh.
 *
 * Collective backends (compile time, `make train_gpt2cu ZERO_COMM=nccl|mpi`):
 *   nccl (default)  NCCL on the comm stream, bf16, sum; one rank per GPU.
 *   mpi             host-staged: the unit is copied to the host, converted to fp32, reduced or
 *                   gathered with zero/comm.h's MPI collectives, converted back and copied up. The
 *                   host waits for each collective (no overlap) and sums in fp32, so losses match
 *                   the NCCL backend to bf16 rounding, not bitwise; several ranks may share one
 *                   GPU, which is what it is for (testing the multi-rank schedule on one GPU).
 * With one rank no collective runs and no MPI call is made (train_gpt2cu without mpirun).
 */
#ifndef ZERO_ENGINE_GPU_CUH
#define ZERO_ENGINE_GPU_CUH
#ifndef ZERO_CUH
#error "zero/gpu/engine_gpu.cuh is part of zero.cuh; include zero.cuh"
#endif

#include "common/rng.h" // splitmix64: the per-step AdamW rounding seed (optimizer_gpu.cuh, state_io_gpu.cuh)
#include "kernels/adamw.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/grad_accum.cuh"
#include "kernels/rows.cuh"

// ============================================================================================
// Set-up

/*
 * The multi-tensor AdamW plan (kernels/adamw.cuh): one segment per tensor piece inside what this
 * rank updates (zero_update_range: the unit at stage 0, its slice at stages 1-3), in unit order,
 * with its offsets in each buffer as the stage stores them: params (full, or the shard at stage
 * 3), grads_fp32 (full at stages 0, 1, shard at 2, 3), master / m / v (full at stage 0, shard
 * from stage 1). adamw_unit_chunks[u] is unit u's first chunk, so stages 1, 2 can launch unit by
 * unit and start each unit's all-gather behind its own update.
 */
static void zero_adamw_plan_init(ZeroEngine* z) {
    const ParamLayout* layout = z->layout;
    AdamWSegment* segments = (AdamWSegment*)zero_calloc((size_t)layout->num_tensors + 1, sizeof(AdamWSegment), "adamw plan");
    z->gpu.adamw_unit_chunks = (int*)zero_calloc((size_t)layout->num_units + 1, sizeof(int), "adamw plan");
    int count = 0;
    size_t chunks = 0;
    for (int unit = 0; unit < layout->num_units; unit++) {
        const ParamUnit* u = &layout->units[unit];
        z->gpu.adamw_unit_chunks[unit] = (int)chunks;
        size_t begin, end;
        zero_update_range(z, unit, &begin, &end);
        size_t p0 = ZERO_STAGE == 3 ? zero_owned_offset(layout, ZERO_STAGE, ZERO_BUF_PARAMS, z->rank, unit) : u->offset + begin;
        size_t g0 = ZERO_STAGE >= 2 ? zero_owned_offset(layout, ZERO_STAGE, ZERO_BUF_GRADS, z->rank, unit) : u->offset + begin;
        size_t w0 = ZERO_STAGE >= 1 ? zero_owned_offset(layout, ZERO_STAGE, ZERO_BUF_MASTER, z->rank, unit) : u->offset + begin;
        for (int i = 0; i < u->num_tensors; i++) {
            const ParamTensor* pt = &layout->tensors[u->first_tensor + i];
            size_t first;
            size_t len = zero_tensor_overlap(pt, begin, end, &first);
            if (len == 0) continue;
            size_t o = first - begin;
            segments[count++] = AdamWSegment{p0 + o, w0 + o, g0 + o, len, u->offset + first, pt->ndim == 2};
            chunks += ceil_div_size(len, ADAMW_CHUNK);
        }
    }
    z->gpu.adamw_unit_chunks[layout->num_units] = (int)chunks;
    adamw_plan_build(&z->gpu.adamw_plan, segments, count);
    free(segments);
}

static void zero_op_init(ZeroOp* op) {
    memset(op, 0, sizeof(*op));
    op->kind = ZERO_OP_NONE;
    op->unit = -1;
    CUDA_CHECK(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming));
}

/*
 * Allocate what this rank stores at ZERO_STAGE (zero_buffer_numel with master weights), the
 * working units (zero_working_numel), streams and events, and (NCCL, world_size > 1) the
 * communicator: rank 0 makes the unique id and MPI carries it to every rank (NCCL docs,
 * "Creating a communicator with options" / ncclCommInitRank). Every rank calls it.
 */
static void zero_init_placed(ZeroEngine* z, const ParamLayout* layout, int rank, int world_size, const ZeroOffloadArgs* offload) {
    memset(z, 0, sizeof(*z));
    if (layout->world_size != world_size) {
        fprintf(stderr, "error: internal: layout padded for %d ranks used with %d\n", layout->world_size, world_size);
        exit(1);
    }
    z->layout = layout;
    z->rank = rank;
    z->world_size = world_size;
    z->timeout_s = 300.0f;
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->gpu.compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->gpu.comm, cudaStreamNonBlocking));
    size_t params_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_PARAMS, 1);
    size_t grads_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_GRADS, 1); // fp32: full or shard
    size_t grads_bf16_n = ZERO_STAGE <= 1 ? layout->padded_numel : 0;          // one micro-step (stages 2, 3: working units)
    size_t state_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_ADAM_M, 1); // master, m, v alike
    zero_hook_offload_place(z, offload); // -zo/-zp (zero/offload/offload.h): what is off the device is not allocated here
    int host_optimizer = zero_hook_offload_off_device(z, ZERO_BUF_MASTER), params_off = zero_hook_offload_off_device(z, ZERO_BUF_PARAMS);
    if (!params_off) z->params = (bf16*)zero_device_calloc(params_n, sizeof(bf16), "parameters (bf16)");
    z->grads = (bf16*)zero_device_calloc(grads_bf16_n, sizeof(bf16), "gradients (bf16, one micro-step)");
    z->gpu.grads_fp32 = (float*)zero_device_calloc(grads_n, sizeof(float), "gradients (fp32, accumulated)");
    if (!host_optimizer) {
        z->gpu.master = (float*)zero_device_calloc(zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_MASTER, 1), sizeof(float), "master weights");
        z->m = (float*)zero_device_calloc(state_n, sizeof(float), "Adam m");
        z->v = (float*)zero_device_calloc(state_n, sizeof(float), "Adam v");
    }
    z->bytes_params = params_n * sizeof(bf16);
    z->bytes_grads = zero_grads_bytes(layout, ZERO_STAGE, 1); // = grads_bf16_n bf16 + grads_n fp32 (zero/layout.h)
    z->bytes_optimizer = 3 * state_n * sizeof(float);
    int n = layout->num_units;
    z->gpu.grad_folds = (int*)zero_calloc((size_t)n, sizeof(int), "gradient accumulation counts");
    z->gpu.grad_open = (int*)zero_calloc((size_t)n, sizeof(int), "gradient requests");
    z->gpu.grad_fold_done = (cudaEvent_t*)zero_calloc((size_t)n, sizeof(cudaEvent_t), "gradient accumulation events");
    for (int u = 0; u < n; u++) CUDA_CHECK(cudaEventCreateWithFlags(&z->gpu.grad_fold_done[u], cudaEventDisableTiming));
    if (ZERO_STAGE <= 1) {
        z->grad_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "gradient collectives");
        for (int u = 0; u < n; u++) zero_op_init(&z->grad_ops[u]);
    }
    if (ZERO_STAGE == 1 || ZERO_STAGE == 2) {
        z->param_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "parameter collectives");
        for (int u = 0; u < n; u++) zero_op_init(&z->param_ops[u]);
    }
    size_t unit_n = zero_max_unit_numel(layout); // every working unit: the largest unit (wte is chunked)
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        size_t cap = unit_n;
        ZeroWorkingUnit* units[2] = {&z->param_work[i], &z->grad_work[i]};
        for (int k = 0; k < 2; k++) {
            zero_op_init(&units[k]->op);
            CUDA_CHECK(cudaEventCreateWithFlags(&units[k]->released, cudaEventDisableTiming));
            units[k]->unit = -1;
        }
        if (ZERO_STAGE == 3) {
            z->param_work[i].data = (bf16*)zero_device_calloc(cap, sizeof(bf16), "parameter working unit");
            z->param_work[i].capacity = cap;
        }
        if (ZERO_STAGE >= 2) {
            z->grad_work[i].data = (bf16*)zero_device_calloc(cap, sizeof(bf16), "gradient working unit");
            z->grad_work[i].capacity = cap;
        }
    }
    z->bytes_working = zero_working_numel(layout, ZERO_STAGE) * sizeof(bf16);
    z->tied.kept_count = (int*)zero_calloc((size_t)n, sizeof(int), "kept-row counts");
    z->tied.kept_first = (size_t*)zero_calloc((size_t)n, sizeof(size_t), "kept-row offsets");
    z->tied.kept_tokens = (const int**)zero_calloc((size_t)n, sizeof(int*), "kept-row tokens");
    z->tied.kept_row0 = (int*)zero_calloc((size_t)n, sizeof(int), "kept-row offsets");
    CUDA_CHECK(cudaEventCreateWithFlags(&z->gpu.compute_mark, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&z->gpu.comm_mark, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&z->gpu.host_mark, cudaEventDisableTiming));
    // Stall timers: a step waits at most about 3 times per unit (stage 3: gather before forward
    // and before backward, reduce-scatter of a working unit) plus the optimizer's waits; one set
    // per step slot (one step's are read while the next one's are recorded).
    z->gpu.stall_capacity = 4 * layout->num_units + 8;
    z->gpu.stall_count = 0;
    z->gpu.stall_base = 0;
    z->gpu.stall_begin = (cudaEvent_t*)malloc((size_t)ZERO_STEP_SLOTS * z->gpu.stall_capacity * sizeof(cudaEvent_t));
    z->gpu.stall_end = (cudaEvent_t*)malloc((size_t)ZERO_STEP_SLOTS * z->gpu.stall_capacity * sizeof(cudaEvent_t));
    if (z->gpu.stall_begin == NULL || z->gpu.stall_end == NULL) { fprintf(stderr, "error: out of host memory (stall timers)\n"); exit(1); }
    for (int k = 0; k < ZERO_STEP_SLOTS * z->gpu.stall_capacity; k++) {
        CUDA_CHECK(cudaEventCreate(&z->gpu.stall_begin[k]));
        CUDA_CHECK(cudaEventCreate(&z->gpu.stall_end[k]));
    }
    // norm_device[0]: squared norm of the owned slices; [1]: the GNS meter's local squared norm.
    z->gpu.norm_device = (float*)zero_device_calloc(2, sizeof(float), "gradient norms");
    z->gpu.norm_scratch = (float*)zero_device_calloc(GLOBAL_NORM_BLOCKS, sizeof(float), "gradient norm scratch");
    z->gpu.grad_scale_device = (float*)zero_device_calloc(1, sizeof(float), "gradient scale");
    for (int k = 0; k < ZERO_STEP_SLOTS; k++) {
        ZeroStepSlot* slot = &z->gpu.step_slots[k];
        CUDA_CHECK(cudaEventCreate(&slot->begin));
        CUDA_CHECK(cudaEventCreate(&slot->done));
        CUDA_CHECK(cudaMallocHost((void**)&slot->norm_host, 2 * sizeof(float)));
        slot->pending = 0;
        slot->step = -1;
    }
    zero_adamw_plan_init(z);
    // The memsets above ran on the legacy stream, which the non-blocking streams do not order
    // against: finish them before any engine or model work.
    CUDA_CHECK(cudaDeviceSynchronize());
#if !ZERO_COMM_MPI
    z->gpu.nccl = NULL;
    nccl_check_rank = rank;
    nccl_check_abort = zero_nccl_error_abort;
    if (world_size > 1) {
        ncclUniqueId id;
        if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        zero_startup_bcast(&id, sizeof(id), "the NCCL id from rank 0"); // bounded by -wt (zero/cluster/handshake.h)
        zero_startup_watchdog_arm("NCCL's communicator init (ncclCommInitRank)", zero_cluster.timeout_s,
                                  "a rank did not reach it, or NCCL could not connect the ranks"); // zero/cluster/startup_watchdog.h
        NCCL_CHECK(ncclCommInitRank(&z->gpu.nccl, world_size, id, rank));
        zero_startup_watchdog_disarm();
    }
#endif
    zero_active_engine = z;
    zero_hook_offload_open(z); // -zo/-zp: pinned host state, copy stream; NVMe: the file, preallocated; every rank
}

static void zero_init(ZeroEngine* z, const ParamLayout* layout, int rank, int world_size) {
    zero_init_placed(z, layout, rank, world_size, NULL);
}

// Every collective and kernel still queued has finished (timed): before freeing or reading back.
static void zero_wait_all(ZeroEngine* z) {
    zero_device_synchronize(z, "the last collectives");
}

static void zero_free(ZeroEngine* z) {
    zero_wait_all(z);
    zero_hook_offload_free(z);
    zero_hook_pp_free(z);
#if !ZERO_COMM_MPI
    if (z->gpu.nccl != NULL) NCCL_CHECK(ncclCommDestroy(z->gpu.nccl));
    z->gpu.nccl = NULL;
#endif
    zero_active_engine = NULL;
    CUDA_CHECK(cudaFree(z->params)); CUDA_CHECK(cudaFree(z->grads)); CUDA_CHECK(cudaFree(z->gpu.grads_fp32));
    CUDA_CHECK(cudaFree(z->gpu.master)); CUDA_CHECK(cudaFree(z->m)); CUDA_CHECK(cudaFree(z->v));
    int n = z->layout->num_units;
    for (int u = 0; z->grad_ops && u < n; u++) CUDA_CHECK(cudaEventDestroy(z->grad_ops[u].done));
    for (int u = 0; z->param_ops && u < n; u++) CUDA_CHECK(cudaEventDestroy(z->param_ops[u].done));
    free(z->grad_ops); free(z->param_ops);
    for (int u = 0; u < n; u++) CUDA_CHECK(cudaEventDestroy(z->gpu.grad_fold_done[u]));
    free(z->gpu.grad_folds); free(z->gpu.grad_open); free(z->gpu.grad_fold_done);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        ZeroWorkingUnit* units[2] = {&z->param_work[i], &z->grad_work[i]};
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaFree(units[k]->data));
            CUDA_CHECK(cudaEventDestroy(units[k]->op.done));
            CUDA_CHECK(cudaEventDestroy(units[k]->released));
        }
    }
    CUDA_CHECK(cudaEventDestroy(z->gpu.compute_mark)); CUDA_CHECK(cudaEventDestroy(z->gpu.comm_mark));
    CUDA_CHECK(cudaEventDestroy(z->gpu.host_mark));
    for (int k = 0; k < ZERO_STEP_SLOTS * z->gpu.stall_capacity; k++) {
        CUDA_CHECK(cudaEventDestroy(z->gpu.stall_begin[k]));
        CUDA_CHECK(cudaEventDestroy(z->gpu.stall_end[k]));
    }
    free(z->gpu.stall_begin); free(z->gpu.stall_end);
    CUDA_CHECK(cudaFree(z->gpu.norm_device)); CUDA_CHECK(cudaFree(z->gpu.norm_scratch)); CUDA_CHECK(cudaFree(z->gpu.grad_scale_device));
    for (int k = 0; k < ZERO_STEP_SLOTS; k++) {
        CUDA_CHECK(cudaEventDestroy(z->gpu.step_slots[k].begin));
        CUDA_CHECK(cudaEventDestroy(z->gpu.step_slots[k].done));
        CUDA_CHECK(cudaFreeHost(z->gpu.step_slots[k].norm_host));
    }
    adamw_plan_free(&z->gpu.adamw_plan);
    free(z->gpu.adamw_unit_chunks);
    free(z->gpu.host_float); free(z->gpu.host_bf16); free(z->ring.scratch);
    free(z->tied.kept_count); free(z->tied.kept_first); free(z->tied.kept_tokens); free(z->tied.kept_row0);
    CUDA_CHECK(cudaFree(z->tied.kept_data));
    CUDA_CHECK(cudaStreamDestroy(z->gpu.compute));
    CUDA_CHECK(cudaStreamDestroy(z->gpu.comm));
}

// This rank's slice of a unit in a bf16 buffer (params, grads), as zero_owned for fp32 ones.
static bf16* zero_owned(const ZeroEngine* z, bf16* buffer, ZeroBuffer which, int unit) {
    return buffer + zero_owned_offset(z->layout, ZERO_STAGE, which, z->rank, unit);
}

// ============================================================================================
// Working units (stages 2, 3): zero/work_units.h's zero_work_find / zero_work_take pick them, as on the CPU

// Stage 2/3: the compute stream waits for the unit's reduce-scatter and the addition of its
// slice into the gradient shard, both queued on the comm stream by zero_grads_unit_ready; then
// the working unit is free.
static void zero_grad_work_finish(ZeroEngine* z, ZeroWorkingUnit* w) {
    zero_compute_wait_op(z, &w->op);
    w->unit = -1;
}

// Stage 3: start gathering `unit` into a free working unit; NULL if none is free.
static ZeroWorkingUnit* zero_param_work_gather(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_take(z, z->param_work, unit);
    if (w == NULL) return NULL;
    const ParamUnit* u = &z->layout->units[unit];
    // The gather overwrites the working unit: after the compute stream's last read of it.
    CUDA_CHECK(cudaStreamWaitEvent(z->gpu.comm, w->released, 0));
    if (zero_hook_offload_device_gather(z, w, unit)) { // -zp: the slice came up from the host into its place (-zo: the update is up)
        zero_device_collective(z, &w->op, ZERO_OP_ALL_GATHER, NULL, w->data, u->padded_numel, unit, "parameters");
        return w;
    }
    if (zero_hook_pp_param_gather(z, w, unit)) return w; // ZeRO++: qwZ packets, hpZ's group gather (zero/zeropp/zeropp_gpu.cuh)
    // All-gather: shard_numel elements from each rank's parameter shard into the working unit
    // (padded_numel elements), so every rank holds the whole unit until zero_params_unit_done.
    zero_device_collective(z, &w->op, ZERO_OP_ALL_GATHER, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit), w->data,
                           u->padded_numel, unit, "parameters");
    zero_hook_pp_gather_done(z, w); // ZeRO++ hpZ: forward's gather keeps its secondary slice
    return w;
}

// ============================================================================================
// What the model calls (the CPU engine's functions of the same names, on streams)

/*
 * The unit's full bf16 parameters (padded_numel elements, tensors at their unit offsets), ready
 * for kernels on the compute stream, valid until zero_params_unit_done. Stages 1, 2: the
 * compute stream waits for the unit's all-gather from the last optimizer step. Stage 3: the
 * prefetched working unit, or a gather started now; the compute stream waits for it.
 */
static bf16* zero_params_unit(ZeroEngine* z, int unit) {
    zero_device_progress(z);
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_param_work_get(z, unit); // shared with the CPU engine
        zero_compute_wait_op(z, &w->op);
        return w->data;
    }
    if (z->param_ops) zero_compute_wait_op(z, &z->param_ops[unit]);
    return z->params + z->layout->units[unit].offset;
}

// Start bringing in the unit the model needs next while it computes this one (stage 3 only).
static void zero_params_prefetch(ZeroEngine* z, int unit) {
    if (ZERO_STAGE != 3 || unit < 0 || zero_work_find(z->param_work, unit) != NULL) return;
    zero_param_work_gather(z, unit); // none free: it is gathered when asked for
}

// The model is done with the unit's parameters: stage 3 frees its working unit once the
// compute stream's kernels that read it have run (event; the next gather into it waits).
static void zero_params_unit_done(ZeroEngine* z, int unit) {
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_work_find(z->param_work, unit);
        if (w != NULL) {
            CUDA_CHECK(cudaEventRecord(w->released, z->gpu.compute));
            w->unit = -1;
        }
    }
    zero_device_progress(z);
}

/*
 * Stages 2, 3: room on the device for the rows of wte's gradient zero_grads_unit_partly_ready sets
 * aside: at most one row per token of a micro-batch (B*T rows of row_len = C), counted in the
 * working bytes. The model calls it once, at build.
 */
static void zero_reserve_kept_rows(ZeroEngine* z, size_t max_rows, int row_len) {
    if (ZERO_STAGE < 2) return;
    z->tied.kept_data = (bf16*)zero_device_calloc(max_rows * (size_t)row_len, sizeof(bf16), "kept wte gradient rows");
    z->tied.kept_capacity = max_rows;
    z->tied.kept_row_len = row_len;
    z->bytes_working += zero_kept_rows_bytes(ZERO_STAGE, max_rows, row_len, 1); // zero/layout.h
}

/*
 * The bf16 buffer backward accumulates the unit's gradients into (padded_numel elements) for
 * this micro-step; called once per unit per backward, twice for a wte unit (LM head, then
 * encoder). Stages 0, 1: the unit in the full bf16 buffer, zeroed on the compute stream when
 * backward first asks for it in a micro-step (the encoder's second request adds to the LM
 * head's); its previous micro-step was added into fp32 on the comm stream, which the compute
 * stream waits for first (untimed: engine work, not communication; long done when backward
 * comes back to the unit). Stages 2, 3: a working unit zeroed on the compute stream, into which
 * the rows zero_grads_unit_partly_ready set aside go back; when none is free, the oldest unit's
 * reduce-scatter is finished first (the compute stream waits for it).
 */
static bf16* zero_grads_unit(ZeroEngine* z, int unit) {
    zero_device_progress(z);
    bf16* buffer;
    if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_grad_work_acquire(z, unit); // the policy shared with the CPU engine
        buffer = w->data; // finished: compute waited for its last reduce-scatter and addition
        CUDA_CHECK(cudaMemsetAsync(buffer, 0, z->layout->units[unit].padded_numel * sizeof(bf16), z->gpu.compute));
        int count = z->tied.kept_count[unit];
        if (count > 0) {
            rows_put_cuda(w->data, z->tied.kept_data + z->tied.kept_first[unit] * (size_t)z->tied.kept_row_len, z->tied.kept_tokens[unit],
                          z->tied.kept_row0[unit], count, z->tied.kept_row_len, z->gpu.compute);
            z->tied.kept_count[unit] = 0;
            z->tied.kept_pending--;
        }
        return buffer;
    }
    buffer = z->grads + z->layout->units[unit].offset;
    if (z->gpu.grad_open[unit]) return buffer; // the wte unit's second request (encoder): add to the LM head's
    z->gpu.grad_open[unit] = 1;
    if (z->gpu.grad_folds[unit] > 0) CUDA_CHECK(cudaStreamWaitEvent(z->gpu.compute, z->gpu.grad_fold_done[unit], 0));
    CUDA_CHECK(cudaMemsetAsync(buffer, 0, z->layout->units[unit].padded_numel * sizeof(bf16), z->gpu.compute));
    return buffer;
}

// grads_fp32's part that a unit's reduced gradient lands in: the whole unit at stage 0 (the
// all-reduce leaves it whole), this rank's slice at stages 1-3; n elements.
static float* zero_grads_fp32_target(ZeroEngine* z, int unit, size_t* n) {
    const ParamUnit* u = &z->layout->units[unit];
    *n = ZERO_STAGE == 0 ? u->padded_numel : u->shard_numel;
    if (ZERO_STAGE == 0) return z->gpu.grads_fp32 + u->offset;
    return zero_owned(z, z->gpu.grads_fp32, ZERO_BUF_GRADS, unit);
}

// Stages 2, 3: the unit's working unit is ready (on the compute stream) for its reduce-scatter:
// the GNS meter's local norm first, then in place on the comm stream, padded_numel elements in,
// this rank's shard_numel reduced slice out at w->data + rank*shard_numel, then into the fp32
// shard on the same stream: shard (+)= the reduced slice (the step's first reduction of the unit
// sets it; a wte unit is reduced twice per micro-step, zero_grads_unit_partly_ready). ZeRO++
// qgZ (zero/zeropp/zeropp_gpu.cuh) replaces both: its all-to-alls of codes sum into the shard in fp32.
static void zero_grad_work_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    const ParamUnit* u = &z->layout->units[unit];
    if (z->gns.measure_local_grad_norm) norm_squared_cuda(z->gpu.norm_device + 1, z->gpu.norm_scratch, w->data, u->padded_numel, 1, z->gpu.compute);
    zero_stream_after(z->gpu.comm, z->gpu.compute, z->gpu.compute_mark);
    size_t target_n;
    float* target = zero_grads_fp32_target(z, unit, &target_n);
    if (!zero_hook_pp_device_grad_reduce(z, w, unit, target, z->gpu.grad_folds[unit] == 0)) {
        zero_device_collective(z, &w->op, ZERO_OP_REDUCE_SCATTER, NULL, w->data, u->padded_numel, unit, "gradients");
        grad_accumulate_cuda(target, w->data + (size_t)z->rank * u->shard_numel, target_n,
                             z->gpu.grad_folds[unit] == 0 ? GRAD_SET : GRAD_ADD, z->gpu.comm);
    }
    CUDA_CHECK(cudaEventRecord(w->op.done, z->gpu.comm)); // done = reduced and added
    z->gpu.grad_folds[unit]++;
}

/*
 * The tied wte, backward's first use of one of its units done (the LM head's dwte_k): the
 * encoder adds to `count` rows of it later in this micro-step, the tokens tokens_device[0..count)
 * (ascending, device; row = token - row0, row_len elements each), which must stay valid until
 * then (the model's encoder plan). Stages 2, 3 move those rows aside (compute stream), then
 * reduce-scatter the rest of the unit now; zero_grads_unit puts them back into the unit's second
 * working unit. The CPU engine's function of the same name, on streams. Stages 0, 1: nothing;
 * this engine reduces a wte unit once, after the encoder, as before (the CPU engine starts it
 * here and all-gathers the encoder's rows instead, zero/tied_rows/tied_rows_cpu.h; not built on the GPU).
 */
static void zero_grads_unit_partly_ready(ZeroEngine* z, int unit, const int* tokens_device, int count, int row0, int row_len) {
    if (ZERO_STAGE < 2) return;
    ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
    size_t first = zero_kept_rows_begin(z, w, unit, count, row_len);
    z->tied.kept_tokens[unit] = tokens_device;
    z->tied.kept_row0[unit] = row0;
    rows_take_cuda(z->tied.kept_data + first * (size_t)row_len, w->data, tokens_device, row0, count, row_len, z->gpu.compute);
    zero_kept_rows_end(z, unit, count);
    zero_grad_work_reduce(z, w, unit);
    zero_device_progress(z);
}

/*
 * Backward has finished this unit for this micro-step. Its bf16 gradient goes into the fp32
 * accumulation (the first micro-step of a step sets it, the others add), and on the collective
 * schedule of the stage, each piece on the comm stream behind an event of the compute stream:
 *   stages 0, 1, before the last micro-step: grads_fp32 (full unit) += this micro-step (comm
 *     stream, overlapping the units below), no collective (reduction on the last micro-step);
 *   stages 0, 1, last micro-step, one rank: the same, and that is the unit's gradient;
 *   stages 0, 1, last micro-step, several ranks: the sum so far plus this micro-step, rounded
 *     once to bf16 into the unit's bf16 buffer (compute stream, so the GNS meter reads the rank's
 *     whole batch there, train/noise_scale.h), all-reduce (stage 0) or reduce-scatter (stage 1)
 *     of it, and the reduced result (unit or own slice) back into grads_fp32;
 *   stages 2, 3, every micro-step: reduce-scatter of the working unit, then grads_fp32 (shard)
 *     (+)= this micro-step's reduced slice.
 * last_micro_step as in the CPU engine.
 */
static void zero_grads_unit_ready(ZeroEngine* z, int unit, int last_micro_step) {
    const ParamUnit* u = &z->layout->units[unit];
    int first = z->gpu.grad_folds[unit] == 0, reduce_now = ZERO_STAGE >= 2 || last_micro_step;
    int several = z->world_size > 1;
    if (ZERO_STAGE <= 1 && last_micro_step && several && !first) // the sum, rounded once, for the collective
        grad_accumulate_cuda(z->gpu.grads_fp32 + u->offset, z->grads + u->offset, u->padded_numel, GRAD_ADD_ROUND, z->gpu.compute);
    if (z->gns.measure_local_grad_norm && ZERO_STAGE < 2) {
        // GNS small batch (zero_gns_local_grads, shared with the CPU engine). A kernel on the
        // compute stream, behind backward's kernels for the unit and ahead of the event the
        // collective waits for, adds its squared norm (padded_numel bf16 elements, fp32 sum)
        // into norm_device[1]; no host wait. (Stages 2, 3: in zero_grad_work_reduce.)
        const bf16* local = zero_gns_local_grads(z, unit);
        if (local) norm_squared_cuda(z->gpu.norm_device + 1, z->gpu.norm_scratch, local, u->padded_numel, 1, z->gpu.compute);
    }
    if (ZERO_STAGE <= 1) zero_stream_after(z->gpu.comm, z->gpu.compute, z->gpu.compute_mark); // stages 2, 3: in zero_grad_work_reduce
    size_t target_n;
    float* target = zero_grads_fp32_target(z, unit, &target_n);
    if (ZERO_STAGE <= 1 && !(reduce_now && several)) {
        // No collective: grads_fp32 (full unit) (+)= this micro-step's padded_numel elements.
        grad_accumulate_cuda(z->gpu.grads_fp32 + u->offset, z->grads + u->offset, u->padded_numel, first ? GRAD_SET : GRAD_ADD, z->gpu.comm);
        CUDA_CHECK(cudaEventRecord(z->gpu.grad_fold_done[unit], z->gpu.comm));
    } else if (ZERO_STAGE <= 1) {
        // where the reduced sum lands in the bf16 buffer: the whole unit, or (stage 1) this rank's slice
        bf16* reduced = z->grads + u->offset + (ZERO_STAGE == 0 ? 0 : (size_t)z->rank * u->shard_numel);
        if (ZERO_STAGE == 0) // all-reduce: padded_numel elements of this unit's gradients, in place
            zero_device_collective(z, &z->grad_ops[unit], ZERO_OP_ALL_REDUCE, NULL, z->grads + u->offset, u->padded_numel,
                                   unit, "gradients");
        else // reduce-scatter in place: the unit's padded_numel gradients in, this rank's shard_numel slice out at its place
            zero_device_collective(z, &z->grad_ops[unit], ZERO_OP_REDUCE_SCATTER, NULL, z->grads + u->offset, u->padded_numel,
                                   unit, "gradients");
        grad_accumulate_cuda(target, reduced, target_n, GRAD_SET, z->gpu.comm); // the reduced sum, into fp32
        CUDA_CHECK(cudaEventRecord(z->grad_ops[unit].done, z->gpu.comm)); // done = reduced and in fp32
        CUDA_CHECK(cudaEventRecord(z->gpu.grad_fold_done[unit], z->gpu.comm));
    } else {
        ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
        if (w == NULL) {
            fprintf(stderr, "error: internal: unit %d marked ready without a gradient working unit\n", unit);
            zero_abort_all_ranks(1);
        }
        zero_grad_work_reduce(z, w, unit);
    }
    if (ZERO_STAGE <= 1) z->gpu.grad_folds[unit]++, z->gpu.grad_open[unit] = 0; // stages 2, 3: counted in zero_grad_work_reduce
    // -zo cpu|nvme: the reduced fp32 slice goes down to the host as soon as its last addition is queued.
    if (last_micro_step) {
        cudaEvent_t folded = ZERO_STAGE <= 1 ? z->gpu.grad_fold_done[unit] : zero_work_find(z->grad_work, unit)->op.done;
        zero_hook_offload_grads_down(z, unit, target, folded);
    }
    zero_device_progress(z);
}

#endif // ZERO_ENGINE_GPU_CUH
