/*
 * zero/optimizer_cpu.h: the CPU engine's optimizer step (fp32): finish the gradient collectives,
 * average over ranks, the global gradient norm, clipping and AdamW on the slices this rank owns,
 * then (stages 1, 2) the all-gather of the updated parameters. The GPU engine's is
 * zero/gpu/optimizer_gpu.cuh. Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_OPTIMIZER_CPU_H
#define ZERO_OPTIMIZER_CPU_H
#ifndef ZERO_CUH
#error "zero/optimizer_cpu.h is part of the ZeRO engine; include zero.cuh"
#endif

#if !ZERO_GPU_BUILD // the GPU engine's step is zero/gpu/optimizer_gpu.cuh

/*
 * Optimizer step t (from 1) with learning rate lr, on the slices this rank owns:
 *   1. finish the gradient collectives (the exposed part of their time is measured here);
 *      stages 0, 1: add every rank's encoder rows of wte (the tied-rows hook, zero/hooks.h)
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
    if (ZERO_STAGE <= 1) zero_hook_tied_add_rows(z); // the encoder's wte rows of every rank, when reduced early
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
        zero_hook_offload_start_gathers(z, NULL); // -zp nvme (none pending at a step's end; kept collective-safe)
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
    double sums[2] = {norm_sq, z->gns.local_grad_norm_sq};
    zero_all_reduce_sum_doubles(z, sums, 2, "grad norm");
    norm_sq = sums[0];
    z->gns.grad_norm_sq = norm_sq;
    z->gns.local_grad_norm_sq_mean = sums[1] / N;
    float norm = (float)sqrt(norm_sq);
    // 4. Clip coefficient as torch.nn.utils.clip_grad_norm_ computes it: max_norm / (norm + 1e-6), capped at 1.
    float clip_coef = opt->grad_clip > 0.0f ? opt->grad_clip / (norm + 1e-6f) : 1.0f;
    float grad_scale = clip_coef < 1.0f ? clip_coef : 1.0f;
    for (int i = 0; i < layout->num_units; i++) {
        int unit = zero_unit_in_use_order(layout, i);
        const ParamUnit* u = &layout->units[unit];
        size_t begin, end;
        zero_update_range(z, unit, &begin, &end);
        // Each buffer's element `begin` of this unit, full or shard as the stage stores it.
        float* p0 = ZERO_STAGE == 3 ? zero_owned(z, z->params, ZERO_BUF_PARAMS, unit) : z->params + u->offset + begin;
        float* g0 = ZERO_STAGE >= 2 ? zero_owned(z, z->grads, ZERO_BUF_GRADS, unit) : z->grads + u->offset + begin;
        float* m0 = ZERO_STAGE >= 1 ? zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit) : z->m + u->offset + begin;
        float* v0 = ZERO_STAGE >= 1 ? zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit) : z->v + u->offset + begin;
        // The slice in pieces: one, unless -zo/-zp nvme streams it from the disk piece by piece.
        size_t lo, hi;
        for (int k = 0; zero_hook_offload_piece(z, unit, k, &lo, &hi); k++) {
            if (ZERO_STAGE == 0) hi = end - begin; // (stage 0 has no offload: one piece, the whole unit)
            float *p = p0 ? p0 + lo : NULL, *g = g0 + lo, *m = m0 ? m0 + lo : NULL, *v = v0 ? v0 + lo : NULL;
            zero_hook_offload_piece_begin(z, unit, k, &p, &m, &v); // nvme: the staged copies, read and checked
            for (int ti = 0; ti < u->num_tensors; ti++) {
                const ParamTensor* pt = &layout->tensors[u->first_tensor + ti];
                size_t first;
                size_t len = zero_tensor_overlap(pt, begin + lo, begin + hi, &first);
                if (len == 0) continue;
                size_t o = first - begin - lo;
                float wd = pt->ndim == 2 ? opt->weight_decay : 0.0f;
                adamw_update(p + o, g + o, m + o, v + o, len, lr, opt->beta1, opt->beta2, opt->eps, wd, grad_scale, t);
            }
            zero_hook_offload_piece_end(z, unit, k); // nvme: written back while the next pieces update
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

#endif // ZERO_OPTIMIZER_CPU_H
