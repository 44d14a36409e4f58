/*
 * zero/engine_cpu.h: the CPU engine (fp32, MPI), what the CPU model calls: set-up, parameters per
 * unit, gradients per unit (where each unit's collective starts), and what checkpoints need; the
 * optimizer step on the owned slices is zero/optimizer_cpu.h. The GPU engine has the same functions
 * on streams (zero/gpu/engine_gpu.cuh; set-up and checkpoint transfers zero/gpu/state_io_gpu.cuh). Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ENGINE_CPU_H
#define ZERO_ENGINE_CPU_H
#ifndef ZERO_CUH
#error "zero/engine_cpu.h is part of the ZeRO engine; include zero.cuh"
#endif

#if !ZERO_GPU_BUILD // the GPU engine is zero/gpu/engine_gpu.cuh
// ---- set-up ----
// offload: where the optimizer state and the stage-3 parameter shard live (-zo, -zp: the offload
// hooks of zero/hooks.h); NULL: in RAM. What lives on NVMe is not allocated here.
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
    zero_progress_thread_start(world_size); // collectives move while the model computes
    int n = layout->num_units;
    zero_hook_offload_setup(z, offload);
    size_t params_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_PARAMS, 0);
    size_t grads_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_GRADS, 0);
    size_t adam_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_ADAM_M, 0);
    if (!zero_hook_offload_on_nvme(z, ZERO_BUF_PARAMS)) z->params = (float*)zero_calloc(params_n, sizeof(float), "parameters");
    z->grads = (float*)zero_calloc(grads_n, sizeof(float), "gradients");
    if (!zero_hook_offload_on_nvme(z, ZERO_BUF_ADAM_M)) z->m = (float*)zero_calloc(adam_n, sizeof(float), "Adam m");
    if (!zero_hook_offload_on_nvme(z, ZERO_BUF_ADAM_V)) z->v = (float*)zero_calloc(adam_n, sizeof(float), "Adam v");
    z->bytes_params = params_n * sizeof(float);
    z->bytes_grads = grads_n * sizeof(float);
    z->bytes_optimizer = 2 * adam_n * sizeof(float);
    if (ZERO_STAGE <= 1) z->grad_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "gradient requests");
    if (ZERO_STAGE == 1 || ZERO_STAGE == 2) z->param_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "parameter requests");
    size_t unit_n = zero_max_unit_numel(layout); // every working unit: the largest unit (wte is chunked)
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        size_t cap = unit_n;
        z->param_work[i].unit = z->grad_work[i].unit = -1;
        if (ZERO_STAGE == 3) {
            z->param_work[i].data = (float*)zero_calloc(cap, sizeof(float), "parameter working unit");
            z->param_work[i].capacity = cap;
        }
        if (ZERO_STAGE >= 2) {
            z->grad_work[i].data = (float*)zero_calloc(cap, sizeof(float), "gradient working unit");
            z->grad_work[i].capacity = cap;
        }
    }
    z->bytes_working += zero_working_numel(layout, ZERO_STAGE) * sizeof(float); // (+ offload's staging)
    z->tied.kept_count = (int*)zero_calloc((size_t)n, sizeof(int), "kept-row counts");
    z->tied.kept_first = (size_t*)zero_calloc((size_t)n, sizeof(size_t), "kept-row offsets");
    // The rings' receive buffer: one chunk of the largest unit (zero/comm_ring.h).
    if (ZERO_RING && world_size > 1) zero_ring_scratch(z, zero_ring_buffer_numel(layout, world_size));
}

static void zero_init(ZeroEngine* z, const ParamLayout* layout, int rank, int world_size) {
    zero_init_placed(z, layout, rank, world_size, NULL);
}

/*
 * Room for the rows of wte's gradient that zero_grads_unit_partly_ready sets aside: at most one
 * row per token of a micro-batch (max_rows = B*T rows of row_len = C elements), counted in the
 * working bytes; stages 0, 1 with N > 1 also wpe's `positions` (T) rows and the all-gather's
 * blocks (zero/tied_rows/tied_rows_cpu.h). The model calls it once, at build.
 */
static void zero_reserve_kept_rows(ZeroEngine* z, size_t max_rows, int positions, int row_len) {
    if (ZERO_STAGE < 2) { zero_hook_tied_reserve(z, max_rows, positions, row_len); return; }
    z->tied.kept_ids = (int*)zero_calloc(max_rows, sizeof(int), "kept wte rows");
    z->tied.kept_data = (float*)zero_calloc(max_rows * (size_t)row_len, sizeof(float), "kept wte gradient rows");
    z->tied.kept_capacity = max_rows;
    z->tied.kept_row_len = row_len;
    z->bytes_working += zero_kept_rows_bytes(ZERO_STAGE, max_rows, row_len, 0); // zero/layout.h
}

// Wait for every collective still in flight: peers may be reading this rank's buffers (Open
// MPI's shared-memory transport copies straight out of them), so none may be freed before.
static void zero_wait_all(ZeroEngine* z) {
    int n = z->layout->num_units;
    if (z->grad_ops) for (int u = 0; u < n; u++) zero_op_wait(z, &z->grad_ops[u]);
    if (z->param_ops) for (int u = 0; u < n; u++) zero_op_wait(z, &z->param_ops[u]);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) { zero_op_wait(z, &z->param_work[i].op); zero_op_wait(z, &z->grad_work[i].op); }
    zero_hook_tied_op(z, 1); // stages 0, 1: the tied rows' all-gather (zero/tied_rows/)
}

static void zero_free(ZeroEngine* z) {
    zero_wait_all(z);
    zero_progress_thread_stop();
    zero_hook_offload_free(z);
    zero_hook_pp_free(z);
    free(z->params); free(z->grads); free(z->m); free(z->v);
    free(z->grad_ops); free(z->param_ops);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) { free(z->param_work[i].data); free(z->grad_work[i].data); }
    zero_hook_tied_free(z); // stages 0, 1: the rows' buffers (kept_data, pointing into them, set to NULL)
    free(z->tied.kept_count); free(z->tied.kept_first); free(z->tied.kept_ids); free(z->tied.kept_data);
    zero_ring_forget(z);
    free(z->ring.scratch);
}
// Stage 2/3: finish the reduce-scatter of a gradient working unit and add the rank's reduced
// slice (shard_numel elements, where zero_reduce_scatter_result says) into its gradient shard;
// free the unit. Accumulation over micro-steps happens here: shard += this micro-step's slice.
static void zero_grad_work_finish(ZeroEngine* z, ZeroWorkingUnit* w) {
    zero_op_wait(z, &w->op);
    const ParamUnit* u = &z->layout->units[w->unit];
    float* shard = zero_owned(z, z->grads, ZERO_BUF_GRADS, w->unit);
    const float* reduced = zero_reduce_scatter_result(z, w->data, u->padded_numel);
    for (size_t i = 0; i < u->shard_numel; i++) shard[i] += reduced[i];
    w->unit = -1;
}

// Stage 3: start gathering `unit` into a free working unit; NULL if none is free. An extension
// may start it its own way: -zp nvme reads the shard first (gathered when the read is back),
// ZeRO++ gathers int8 packets (qwZ) or within the group from the secondary shard (hpZ).
static ZeroWorkingUnit* zero_param_work_gather(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_take(z, z->param_work, unit);
    if (w == NULL) return NULL;
    if (zero_hook_offload_param_gather(z, w, unit) || zero_hook_pp_param_gather(z, w, unit)) return w;
    const ParamUnit* u = &z->layout->units[unit];
    // All-gather: shard_numel elements from each rank's parameter shard into the working unit
    // (padded_numel elements), so every rank holds the whole unit until zero_params_unit_done.
    zero_op_all_gather(z, &w->op, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit), w->data, u->padded_numel, unit,
                       "parameters");
    return w;
}

// ---- what the model calls ----

/*
 * The unit's full parameters (padded_numel elements, tensors at their unit offsets), valid
 * until zero_params_unit_done. Stages 1, 2: waits for the unit's all-gather from the last
 * optimizer step (the first place it is needed). Stage 3: uses the prefetched working unit or
 * gathers now.
 */
static float* zero_params_unit(ZeroEngine* z, int unit) {
    zero_progress(z);
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_param_work_get(z, unit);
        zero_hook_offload_start_gathers(z, w); // -zp nvme: its shard is read back: gather it now
        zero_op_wait(z, &w->op);
        zero_hook_pp_gather_done(z, w); // ZeRO++: dequantize (qwZ), keep the secondary shard (hpZ)
        return w->data;
    }
    if (z->param_ops) zero_op_wait(z, &z->param_ops[unit]);
    return z->params + z->layout->units[unit].offset;
}

// Start bringing in the unit the model needs next while it computes this one (stage 3 only).
static void zero_params_prefetch(ZeroEngine* z, int unit) {
    if (ZERO_STAGE != 3 || unit < 0 || zero_work_find(z->param_work, unit) != NULL) return;
    zero_param_work_gather(z, unit); // none free: it is gathered when asked for
}

// The model is done with the unit's parameters: stage 3 frees its working unit.
static void zero_params_unit_done(ZeroEngine* z, int unit) {
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_work_find(z->param_work, unit);
        if (w != NULL) { zero_op_wait(z, &w->op); w->unit = -1; }
        zero_hook_offload_start_gathers(z, NULL); // -zp nvme: the shards read back so far
    }
    zero_progress(z);
}

/*
 * The buffer backward accumulates the unit's gradients into (padded_numel elements); called
 * once per unit per backward, twice for a wte unit (LM head, then encoder). Stages 0, 1: the unit
 * in the full gradient buffer (accumulating over micro-steps and both uses), except the encoder's
 * part of a wte unit already being reduced (zero/tied_rows/tied_rows_cpu.h). Stages 2, 3: a
 * zeroed working unit, into which the rows zero_grads_unit_partly_ready set aside go back; when
 * none is free, the oldest unit's reduce-scatter is finished first.
 */
static float* zero_grads_unit(ZeroEngine* z, int unit) {
    zero_progress(z);
    if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_grad_work_acquire(z, unit);
        memset(w->data, 0, z->layout->units[unit].padded_numel * sizeof(float));
        int count = z->tied.kept_count[unit];
        size_t row = (size_t)z->tied.kept_row_len;
        for (int i = 0; i < count; i++) {
            size_t k = z->tied.kept_first[unit] + (size_t)i;
            memcpy(w->data + (size_t)z->tied.kept_ids[k] * row, z->tied.kept_data + k * row, row * sizeof(float));
        }
        if (count > 0) { z->tied.kept_count[unit] = 0; z->tied.kept_pending--; }
        return w->data;
    }
    float* tied = zero_hook_tied_grads(z, unit); // a wte unit reduced early: its encoder rows' buffer
    return tied ? tied : z->grads + z->layout->units[unit].offset;
}

// Reduce-scatter in place on a gradient working unit (stages 2, 3): padded_numel elements in,
// this rank's shard_numel reduced slice out (where zero_reduce_scatter_result says), added into
// the shard when finished. ZeRO++ qgZ: the two-level all-to-all of quantized gradients instead,
// done on return. Both halves of a wte unit (zero_grads_unit_partly_ready, then the encoder's
// rows) come through here, each a reduction of its own: their reduced slices add in the shard.
static void zero_grad_work_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    const ParamUnit* u = &z->layout->units[unit];
    zero_gns_add_local(z, w->data, u->padded_numel); // GNS small batch
    if (!zero_hook_pp_grad_reduce(z, w, unit)) zero_op_reduce_scatter(z, &w->op, w->data, u->padded_numel, unit, "gradients");
    if (z->world_size == 1) zero_grad_work_finish(z, w); // nothing in flight: finish now
}

/*
 * The tied wte, backward's first use of one of its units done (the LM head's dwte_k): the
 * encoder will add to `count` rows of it (row indices inside the unit, row_len elements each: the
 * tokens of this micro-batch in that vocab chunk) at the end of backward; every other element's
 * gradient is final for this micro-step. Stages 2, 3 set those rows aside, zero them and
 * reduce-scatter the unit now, so no wte unit's gradient waits through the whole backward in a
 * working buffer (they would add up to all of wte); the rows go back into the unit's second
 * working unit (zero_grads_unit), whose reduce-scatter zero_grads_unit_ready starts. The two
 * reduced parts add up in the shard: every element gets both contributions, LM head and encoder.
 * Stages 0, 1 reduce on the last micro-step only: then, with N > 1, the rows are set aside and the
 * unit's collective starts now (zero/tied_rows/tied_rows_cpu.h); otherwise nothing (the full buffer holds
 * both until zero_grads_unit_ready).
 */
static void zero_grads_unit_partly_ready(ZeroEngine* z, int unit, const int* rows, int count, int row_len, int last_micro_step) {
    if (ZERO_STAGE < 2) {
        if (last_micro_step) zero_hook_tied_set_aside(z, unit, rows, count, row_len);
        zero_progress(z);
        return;
    }
    ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
    size_t first = zero_kept_rows_begin(z, w, unit, count, row_len), row = (size_t)row_len;
    for (int i = 0; i < count; i++) {
        size_t k = first + (size_t)i;
        z->tied.kept_ids[k] = rows[i];
        memcpy(z->tied.kept_data + k * row, w->data + (size_t)rows[i] * row, row * sizeof(float));
        memset(w->data + (size_t)rows[i] * row, 0, row * sizeof(float));
    }
    zero_kept_rows_end(z, unit, count);
    zero_grad_work_reduce(z, w, unit);
    zero_progress(z);
}

// Stages 0, 1, the last micro-step: the unit's collective in the full gradient buffer.
static void zero_grads_reduce_full(ZeroEngine* z, int unit) {
    const ParamUnit* u = &z->layout->units[unit];
    if (ZERO_STAGE == 0) {
        // All-reduce: padded_numel elements of this unit's gradients, in place in the full buffer.
        zero_op_all_reduce(z, &z->grad_ops[unit], z->grads + u->offset, u->padded_numel, unit, "gradients");
    } else if (ZERO_STAGE == 1) {
        // Reduce-scatter in place: the unit's padded_numel gradients in, this rank's reduced
        // shard_numel slice out at its own slice (ring; at the unit's start with ZERO_RING=0,
        // moved there in the optimizer step).
        zero_op_reduce_scatter(z, &z->grad_ops[unit], z->grads + u->offset, u->padded_numel, unit, "gradients");
    }
}

/*
 * Backward has finished this unit for this micro-step: its collective starts now, while
 * backward goes on with the units below it. last_micro_step says whether the gradients are
 * final for the optimizer step (stages 0, 1 reduce only then; stages 2, 3 reduce every
 * micro-step and accumulate into the shard, so no full gradient buffer outlives a unit).
 */
static void zero_grads_unit_ready(ZeroEngine* z, int unit, int last_micro_step) {
    const ParamUnit* u = &z->layout->units[unit];
    if (last_micro_step) zero_hook_offload_prefetch(z); // -zo/-zp nvme: the first units' state, read during backward
    if (ZERO_STAGE < 2 && zero_hook_tied_ready(z, unit)) { // a wte unit reduced early: its encoder rows taken
        zero_progress(z);
        return;
    }
    if (ZERO_STAGE < 2) zero_gns_add_local(z, zero_gns_local_grads(z, unit), u->padded_numel); // GNS small batch, before the collective
    if (ZERO_STAGE < 2 && last_micro_step) {
        zero_grads_reduce_full(z, unit);
    } else if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
        if (w == NULL) {
            fprintf(stderr, "error: internal: unit %d marked ready without a gradient working unit\n", unit);
            zero_abort_all_ranks(1);
        }
        zero_grad_work_reduce(z, w, unit); // GNS small batch read there, before the collective
    }
    zero_progress(z);
}

// Zero the stored gradients (full buffer or shard) before a step's first micro-step.
static void zero_grads_zero(ZeroEngine* z) {
    memset(z->grads, 0, zero_buffer_numel(z->layout, ZERO_STAGE, ZERO_BUF_GRADS, 0) * sizeof(float));
}

// Start optimizer step `step` (from 1, as printed): per-step counters and gradients to zero.
static void zero_step_begin(ZeroEngine* z, int step) {
    z->step = step;
    zero_trace_step_begin(z, step); // -tr: the step's span opens (zero/trace/trace.h)
    zero_hook_offload_step_begin(z);
    z->sent_elements_step = 0;
    z->scalar_all_reduces_step = 0;
    z->comm_wait_s_step = 0.0;
    z->gns.local_grad_norm_sq = 0.0;
    zero_hook_pp_step_begin(z);
    zero_grads_zero(z);
}

// Wait for every all-gather of parameters still in flight (stages 1, 2).
static void zero_params_wait_all(ZeroEngine* z) {
    if (z->param_ops) for (int u = 0; u < z->layout->num_units; u++) zero_op_wait(z, &z->param_ops[u]);
}

// Set one unit's parameters from a full copy of it (init or a loaded checkpoint): each rank
// keeps what its stage stores.
static void zero_set_unit_params(ZeroEngine* z, int unit, const float* unit_buf) {
    const ParamUnit* u = &z->layout->units[unit];
    zero_params_wait_all(z);
    if (zero_hook_offload_on_nvme(z, ZERO_BUF_PARAMS)) zero_hook_offload_unit_io(z, unit, ZERO_BUF_PARAMS, (void*)(unit_buf + (size_t)z->rank * u->shard_numel), 1);
    else if (ZERO_STAGE == 3) memcpy(zero_owned(z, z->params, ZERO_BUF_PARAMS, unit), unit_buf + (size_t)z->rank * u->shard_numel, u->shard_numel * sizeof(float));
    else memcpy(z->params + u->offset, unit_buf, u->padded_numel * sizeof(float));
}

// Gather the full parameters (padded_numel elements) into `full` on rank 0 for a checkpoint;
// every rank calls it, the others pass NULL.
static void zero_get_full_params(ZeroEngine* z, float* full) {
    zero_params_wait_all(z);
    if (ZERO_STAGE == 3) {
        int on_nvme = zero_hook_offload_on_nvme(z, ZERO_BUF_PARAMS);
        float* staged = on_nvme ? (float*)zero_calloc(zero_max_unit_numel(z->layout), sizeof(float), "checkpoint parameter shard") : NULL;
        for (int unit = 0; unit < z->layout->num_units; unit++) {
            const ParamUnit* u = &z->layout->units[unit];
            ZeroOp op = {.kind = ZERO_OP_NONE};
            if (on_nvme) zero_hook_offload_unit_io(z, unit, ZERO_BUF_PARAMS, staged, 0);
            zero_op_gather_to_rank0(z, &op, on_nvme ? staged : zero_owned(z, z->params, ZERO_BUF_PARAMS, unit),
                                    full ? full + u->offset : NULL, u->padded_numel, unit, "parameters (checkpoint)");
            zero_op_wait(z, &op);
        }
        free(staged);
    } else if (full != NULL) {
        memcpy(full, z->params, z->layout->padded_numel * sizeof(float));
    }
}

// This rank's slice of Adam m and v, every unit in order (layout->shard_numel elements each):
// the per-rank checkpoint payload, the same at every stage (stage 0 writes slice r of its
// replicated state), so a checkpoint converts between stages by its header alone.
static void zero_get_optimizer_shard(ZeroEngine* z, float* m_out, float* v_out) {
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        size_t dst = u->offset / (size_t)z->world_size;
        if (zero_hook_offload_optimizer_io(z, unit, m_out + dst, v_out + dst, 0)) continue; // -zo nvme: read back from the file
        memcpy(m_out + dst, zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit), u->shard_numel * sizeof(float));
        memcpy(v_out + dst, zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit), u->shard_numel * sizeof(float));
    }
}

// Inverse of zero_get_optimizer_shard. Stage 0 then all-gathers m and v unit by unit, as every
// rank keeps all of them.
static void zero_set_optimizer_shard(ZeroEngine* z, const float* m_in, const float* v_in) {
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        size_t src = u->offset / (size_t)z->world_size;
        if (zero_hook_offload_optimizer_io(z, unit, (float*)(m_in + src), (float*)(v_in + src), 1)) continue; // -zo nvme (stages 1-3)
        memcpy(zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit), m_in + src, u->shard_numel * sizeof(float));
        memcpy(zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit), v_in + src, u->shard_numel * sizeof(float));
        if (ZERO_STAGE == 0) {
            ZeroOp op = {.kind = ZERO_OP_NONE};
            zero_op_all_gather(z, &op, NULL, z->m + u->offset, u->padded_numel, unit, "Adam m (resume)");
            zero_op_wait(z, &op);
            zero_op_all_gather(z, &op, NULL, z->v + u->offset, u->padded_numel, unit, "Adam v (resume)");
            zero_op_wait(z, &op);
        }
    }
}

// Stages 0-2 keep replicated parameters (stage 0 also replicated m, v): check the replicas are
// bit-identical across ranks. Returns 1 when they are (always at stage 3: nothing replicated).
static int zero_replicas_agree(ZeroEngine* z) {
    if (ZERO_STAGE == 3 || z->world_size == 1) return 1;
    zero_params_wait_all(z);
    uint64_t h = fnv1a64_words(z->params, z->layout->padded_numel, FNV1A64_INIT);
    if (ZERO_STAGE == 0) {
        h = fnv1a64_words(z->m, z->layout->padded_numel, h);
        h = fnv1a64_words(z->v, z->layout->padded_numel, h);
    }
    return zero_all_ranks_equal_u64(z, h, "replica check");
}

#endif // !ZERO_GPU_BUILD

#endif // ZERO_ENGINE_CPU_H
