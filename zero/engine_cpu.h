/*
 * zero/engine_cpu.h: the CPU engine (fp32, MPI), what the CPU model calls: set-up, parameters per
 * unit, gradients per unit (where each unit's collective starts), the optimizer step on the owned
 * slices, and what checkpoints need. The GPU engine (zero/engine_gpu.cuh) has the same functions
 * on streams. Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ENGINE_CPU_H
#define ZERO_ENGINE_CPU_H
#ifndef ZERO_CUH
#error "zero/engine_cpu.h is part of the ZeRO engine; include zero.cuh"
#endif

#if !ZERO_GPU_BUILD // the GPU engine is zero/engine_gpu.cuh
// ---- set-up ----
static void zero_init(ZeroEngine* z, const ParamLayout* layout, int rank, int world_size) {
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
    size_t params_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_PARAMS, 0);
    size_t grads_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_GRADS, 0);
    size_t adam_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_ADAM_M, 0);
    z->params = (float*)zero_calloc(params_n, sizeof(float), "parameters");
    z->grads = (float*)zero_calloc(grads_n, sizeof(float), "gradients");
    z->m = (float*)zero_calloc(adam_n, sizeof(float), "Adam m");
    z->v = (float*)zero_calloc(adam_n, sizeof(float), "Adam v");
    z->bytes_params = params_n * sizeof(float);
    z->bytes_grads = grads_n * sizeof(float);
    z->bytes_optimizer = 2 * adam_n * sizeof(float);
    if (ZERO_STAGE <= 1) z->grad_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "gradient requests");
    if (ZERO_STAGE == 1 || ZERO_STAGE == 2) z->param_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "parameter requests");
    size_t layer_n = zero_max_layer_unit_numel(layout);
    size_t emb_n = layout->units[UNIT_EMBEDDING].padded_numel;
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        size_t cap = i == 0 ? emb_n : layer_n;
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
    z->bytes_working = zero_working_numel(layout, ZERO_STAGE) * sizeof(float);
    // The rings' receive buffer: one chunk of the largest unit (zero/comm_ring.h).
    if (ZERO_RING && world_size > 1) zero_ring_scratch(z, zero_ring_buffer_numel(layout, world_size));
}

// Wait for every collective still in flight: peers may be reading this rank's buffers (Open
// MPI's shared-memory transport copies straight out of them), so none may be freed before.
static void zero_wait_all(ZeroEngine* z) {
    int n = z->layout->num_units;
    if (z->grad_ops) for (int u = 0; u < n; u++) zero_op_wait(z, &z->grad_ops[u]);
    if (z->param_ops) for (int u = 0; u < n; u++) zero_op_wait(z, &z->param_ops[u]);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) { zero_op_wait(z, &z->param_work[i].op); zero_op_wait(z, &z->grad_work[i].op); }
}

static void zero_free(ZeroEngine* z) {
    zero_wait_all(z);
    zero_progress_thread_stop();
    zero_pp_free(z);
    free(z->params); free(z->grads); free(z->m); free(z->v);
    free(z->grad_ops); free(z->param_ops);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) { free(z->param_work[i].data); free(z->grad_work[i].data); }
    zero_ring_forget(z);
    free(z->ring_scratch);
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

// Stage 3: start gathering `unit` into a free working unit; NULL if none is free.
static ZeroWorkingUnit* zero_param_work_gather(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_take(z, z->param_work, unit);
    if (w == NULL) return NULL;
    const ParamUnit* u = &z->layout->units[unit];
    if (zero_pp_param_gather(z, w, unit, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit))) return w; // ZeRO++: qwZ, hpZ
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
 * gathers now; a unit still resident (the LM head's wte kept from forward for backward) is
 * returned as is.
 */
static float* zero_params_unit(ZeroEngine* z, int unit) {
    zero_progress(z);
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_param_work_get(z, unit);
        zero_op_wait(z, &w->op);
        zero_pp_gather_done(z, w); // ZeRO++: dequantize (qwZ), keep the secondary shard (hpZ)
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
    }
    zero_progress(z);
}

/*
 * The buffer backward accumulates the unit's gradients into (padded_numel elements); called
 * once per unit per backward. Stages 0, 1: the unit in the full gradient buffer (accumulating
 * over micro-steps). Stages 2, 3: a zeroed working unit; when none is free, the oldest unit's
 * reduce-scatter is finished first.
 */
static float* zero_grads_unit(ZeroEngine* z, int unit) {
    zero_progress(z);
    if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_grad_work_acquire(z, unit);
        memset(w->data, 0, z->layout->units[unit].padded_numel * sizeof(float));
        return w->data;
    }
    return z->grads + z->layout->units[unit].offset;
}

/*
 * Backward has finished this unit for this micro-step: its collective starts now, while
 * backward goes on with the units below it. last_micro_step says whether the gradients are
 * final for the optimizer step (stages 0, 1 reduce only then; stages 2, 3 reduce every
 * micro-step and accumulate into the shard, so no full gradient buffer outlives a unit).
 */
static void zero_grads_unit_ready(ZeroEngine* z, int unit, int last_micro_step) {
    const ParamUnit* u = &z->layout->units[unit];
    if (z->measure_local_grad_norm) { // GNS small batch, before the collective below
        const float* local = zero_gns_local_grads(z, unit);
        if (local) z->local_grad_norm_sq += norm_squared(local, u->padded_numel);
    }
    if (ZERO_STAGE == 0 && last_micro_step) {
        // All-reduce: padded_numel elements of this unit's gradients, in place in the full buffer.
        zero_op_all_reduce(z, &z->grad_ops[unit], z->grads + u->offset, u->padded_numel, unit, "gradients");
    } else if (ZERO_STAGE == 1 && last_micro_step) {
        // Reduce-scatter in place: the unit's padded_numel gradients in, this rank's reduced
        // shard_numel slice out at its own slice (ring; at the unit's start with ZERO_RING=0,
        // moved there in the optimizer step).
        zero_op_reduce_scatter(z, &z->grad_ops[unit], z->grads + u->offset, u->padded_numel, unit, "gradients");
    } else if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
        if (w == NULL) {
            fprintf(stderr, "error: internal: unit %d marked ready without a gradient working unit\n", unit);
            zero_abort_all_ranks(1);
        }
        // Reduce-scatter in place on the working unit: padded_numel elements in, this rank's
        // shard_numel reduced slice out (zero_reduce_scatter_result), added into the shard when finished.
        // ZeRO++ qgZ: the two-level all-to-all of quantized gradients instead, done on return.
        if (!zero_pp_grad_reduce_scatter(z, w, unit)) zero_op_reduce_scatter(z, &w->op, w->data, u->padded_numel, unit, "gradients");
        if (z->world_size == 1) zero_grad_work_finish(z, w); // nothing in flight: finish now
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
    zero_trace_step_begin(z, step); // -tr: the step's span opens (zero/trace.h)
    z->sent_elements_step = 0;
    z->scalar_all_reduces_step = 0;
    z->comm_wait_s_step = 0.0;
    z->local_grad_norm_sq = 0.0;
    zero_pp_step_begin(z);
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
    if (ZERO_STAGE == 3) memcpy(zero_owned(z, z->params, ZERO_BUF_PARAMS, unit), unit_buf + (size_t)z->rank * u->shard_numel, u->shard_numel * sizeof(float));
    else memcpy(z->params + u->offset, unit_buf, u->padded_numel * sizeof(float));
}

// Gather the full parameters (padded_numel elements) into `full` on rank 0 for a checkpoint;
// every rank calls it, the others pass NULL.
static void zero_get_full_params(ZeroEngine* z, float* full) {
    zero_params_wait_all(z);
    if (ZERO_STAGE == 3) {
        for (int unit = 0; unit < z->layout->num_units; unit++) {
            const ParamUnit* u = &z->layout->units[unit];
            ZeroOp op = {.kind = ZERO_OP_NONE};
            zero_op_gather_to_rank0(z, &op, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit),
                                    full ? full + u->offset : NULL, u->padded_numel, unit, "parameters (checkpoint)");
            zero_op_wait(z, &op);
        }
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

/*
 * Optimizer step t (from 1) with learning rate lr, on the slices this rank owns:
 *   1. finish the gradient collectives (the exposed part of their time is measured here)
 *   2. average: the reduced gradient is a sum over ranks; multiply by 1/world_size
 *   3. global gradient norm: squared norms of the owned slices, one scalar all-reduce
 *   4. clip coefficient, AdamW (weight decay on 2-D tensors only) on the owned slices
 *   5. stages 1, 2: all-gather each unit's updated parameters, waited on by the next forward
 * Returns the global norm before clipping.
 */
static float zero_optimizer_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t) {
    const ParamLayout* layout = z->layout;
    int N = z->world_size;
    // 1. Backward issued the reductions from the final unit down to the embedding: wait in that order.
    for (int unit = layout->num_units - 1; unit >= 0; unit--) {
        const ParamUnit* u = &layout->units[unit];
        if (ZERO_STAGE == 0) zero_op_wait(z, &z->grad_ops[unit]);
        if (ZERO_STAGE == 1) {
            zero_op_wait(z, &z->grad_ops[unit]);
            float* unit_grads = z->grads + u->offset, *own = unit_grads + (size_t)z->rank * u->shard_numel;
            float* reduced = zero_reduce_scatter_result(z, unit_grads, u->padded_numel);
            if (reduced != own) memmove(own, reduced, u->shard_numel * sizeof(float));
        }
    }
    if (ZERO_STAGE >= 2) {
        for (;;) { // oldest first: the order backward started them
            ZeroWorkingUnit* oldest = NULL;
            for (int i = 0; i < ZERO_WORKING_UNITS; i++)
                if (z->grad_work[i].unit != -1 && (oldest == NULL || z->grad_work[i].age < oldest->age)) oldest = &z->grad_work[i];
            if (oldest == NULL) break;
            zero_grad_work_finish(z, oldest);
        }
    }
    if (ZERO_STAGE == 3) { // gathered units are stale once the shard changes: free them
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
            zero_op_wait(z, &z->param_work[i].op);
            z->param_work[i].unit = -1;
        }
    }
    // 2. Average over ranks.
    if (N > 1) {
        float inv_world = 1.0f / (float)N;
        for (int unit = 0; unit < layout->num_units; unit++) {
            size_t begin, end;
            zero_update_range(z, unit, &begin, &end);
            float* g = ZERO_STAGE == 0 ? z->grads + layout->units[unit].offset : zero_owned(z, z->grads, ZERO_BUF_GRADS, unit);
            for (size_t i = 0; i < end - begin; i++) g[i] *= inv_world;
        }
    }
    // 3. Global norm from the owned slices (stage 0 too: each rank sums its slice, then one
    // scalar all-reduce), so every stage adds the same numbers in the same order.
    double norm_sq = 0.0;
    for (int unit = 0; unit < layout->num_units; unit++)
        norm_sq += norm_squared(zero_owned(z, z->grads, ZERO_BUF_GRADS, unit), layout->units[unit].shard_numel);
    // The same all-reduce carries the GNS meter's local squared norm (0 when not measured), so
    // the meter costs no extra collective: [owned slices' sum, this rank's local norm^2], summed.
    double sums[2] = {norm_sq, z->local_grad_norm_sq};
    zero_all_reduce_sum_doubles(z, sums, 2, "grad norm");
    norm_sq = sums[0];
    z->grad_norm_sq = norm_sq;
    z->local_grad_norm_sq_mean = sums[1] / N;
    float norm = (float)sqrt(norm_sq);
    // 4. Clip coefficient as torch.nn.utils.clip_grad_norm_ computes it: max_norm / (norm + 1e-6), capped at 1.
    float clip_coef = opt->grad_clip > 0.0f ? opt->grad_clip / (norm + 1e-6f) : 1.0f;
    float grad_scale = clip_coef < 1.0f ? clip_coef : 1.0f;
    for (int unit = 0; unit < layout->num_units; unit++) {
        const ParamUnit* u = &layout->units[unit];
        size_t begin, end;
        zero_update_range(z, unit, &begin, &end);
        // Each buffer's element `begin` of this unit, full or shard as the stage stores it.
        float* p = ZERO_STAGE == 3 ? zero_owned(z, z->params, ZERO_BUF_PARAMS, unit) : z->params + u->offset + begin;
        float* g = ZERO_STAGE >= 2 ? zero_owned(z, z->grads, ZERO_BUF_GRADS, unit) : z->grads + u->offset + begin;
        float* m = ZERO_STAGE >= 1 ? zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit) : z->m + u->offset + begin;
        float* v = ZERO_STAGE >= 1 ? zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit) : z->v + u->offset + begin;
        for (int i = 0; i < u->num_tensors; i++) {
            const ParamTensor* pt = &layout->tensors[u->first_tensor + i];
            size_t first;
            size_t len = zero_tensor_overlap(pt, begin, end, &first);
            if (len == 0) continue;
            size_t o = first - begin;
            float wd = pt->ndim == 2 ? opt->weight_decay : 0.0f;
            adamw_update(p + o, g + o, m + o, v + o, len, lr, opt->beta1, opt->beta2, opt->eps, wd, grad_scale, t);
        }
        // 5. All-gather in place: this rank's updated shard_numel slice out, the unit's
        // padded_numel parameters in; the next forward waits for it when it reaches this unit.
        if (ZERO_STAGE == 1 || ZERO_STAGE == 2)
            zero_op_all_gather(z, &z->param_ops[unit], NULL, z->params + u->offset, u->padded_numel, unit, "parameters");
        zero_progress(z);
    }
    return norm;
}

#endif // !ZERO_GPU_BUILD

#endif // ZERO_ENGINE_CPU_H
