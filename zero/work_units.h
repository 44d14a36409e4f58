/*
 * zero/work_units.h: owned slices and the working-unit policy, shared by the CPU and GPU engines:
 * which elements of a unit this rank updates, where its slice lives, which working unit a
 * stage-2/3 unit's gradients or gathered parameters use, and the gradient noise scale meter's
 * view of a rank's local gradients. Each engine supplies zero_grad_work_finish and
 * zero_param_work_gather (declared in zero/backend.h).
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_WORK_UNITS_H
#define ZERO_WORK_UNITS_H
#ifndef ZERO_CUH
#error "zero/work_units.h is part of the ZeRO engine; include zero.cuh"
#endif

// Unit-relative [begin, end) of the elements this rank updates: its slice, or (stage 0, whose
// optimizer state is replicated) the whole unit.
static void zero_update_range(const ZeroEngine* z, int unit, size_t* begin, size_t* end) {
    const ParamUnit* u = &z->layout->units[unit];
    if (ZERO_STAGE == 0) { *begin = 0; *end = u->padded_numel; return; }
    *begin = (size_t)z->rank * u->shard_numel;
    *end = *begin + u->shard_numel;
}

// Pointers to this rank's slice of a unit in each stored buffer.
static float* zero_owned(const ZeroEngine* z, float* buffer, ZeroBuffer which, int unit) {
    if (buffer == NULL) return NULL; // placed on NVMe (zero/offload/offload.h)
    return buffer + zero_owned_offset(z->layout, ZERO_STAGE, which, z->rank, unit);
}

// ---- working units (stages 2, 3) ----

static ZeroWorkingUnit* zero_work_find(ZeroWorkingUnit* work, int unit) {
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) if (work[i].unit == unit) return &work[i];
    return NULL;
}

// The working units `unit` may use: any (all are of the largest unit's size, wte being chunked).
static void zero_work_slots(int unit, int* first, int* last) {
    (void)unit;
    *first = 0;
    *last = ZERO_WORKING_UNITS - 1;
}

// A free working unit for `unit`, or NULL if none is free.
static ZeroWorkingUnit* zero_work_take(ZeroEngine* z, ZeroWorkingUnit* work, int unit) {
    int first, last;
    zero_work_slots(unit, &first, &last);
    for (int i = first; i <= last; i++) {
        if (work[i].unit == -1) {
            work[i].unit = unit;
            work[i].age = ++z->work_clock;
            return &work[i];
        }
    }
    return NULL;
}

// Stage 3: the working unit holding `unit`'s gathered parameters: the one already resident (a
// prefetch, or wte kept from the LM head for backward) or a gather started now.
static ZeroWorkingUnit* zero_param_work_get(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_find(z->param_work, unit);
    if (w == NULL) w = zero_param_work_gather(z, unit);
    if (w == NULL) {
        fprintf(stderr, "error: internal: no free working unit for unit %d (a unit was not handed back)\n", unit);
        zero_abort_all_ranks(1);
    }
    return w;
}

/*
 * Stages 2, 3: the working unit backward will accumulate `unit`'s gradients into. If the unit
 * is still being reduced (a wte unit: its LM-head part, or the previous micro-step's), that
 * reduce-scatter is finished first; when no working unit is free, the oldest one's is. The
 * caller zeroes the returned buffer.
 */
static ZeroWorkingUnit* zero_grad_work_acquire(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
    if (w != NULL) zero_grad_work_finish(z, w);
    w = zero_work_take(z, z->grad_work, unit);
    if (w == NULL) {
        ZeroWorkingUnit* oldest = NULL;
        int first, last;
        zero_work_slots(unit, &first, &last);
        for (int i = first; i <= last; i++)
            if (oldest == NULL || z->grad_work[i].age < oldest->age) oldest = &z->grad_work[i];
        zero_grad_work_finish(z, oldest);
        w = zero_work_take(z, z->grad_work, unit);
    }
    return w;
}

/*
 * GNS small batch: this rank's gradient of `unit` as backward left it, before the unit's
 * collective sums it with the other ranks'. Stages 0, 1: the unit in the full buffer, i.e.
 * everything accumulated so far this step; stages 2, 3: its working unit, this micro-step alone.
 * padded_numel elements, or NULL when there is none.
 */
static const ZeroFloat* zero_gns_local_grads(ZeroEngine* z, int unit) {
    if (ZERO_STAGE < 2) return z->grads + z->layout->units[unit].offset;
    ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
    return w ? w->data : NULL;
}

#if !ZERO_GPU_BUILD // GNS small batch: `local`'s squared norm (n elements; NULL: none) into the step's local norm, when measured
static void zero_gns_add_local(ZeroEngine* z, const float* local, size_t n) { if (z->gns.measure_local_grad_norm && local) z->gns.local_grad_norm_sq += norm_squared(local, n); }
#endif

// zero_grads_unit_partly_ready's bookkeeping of the set-aside wte rows, both engines. Begin: the
// unit must hold a gradient working unit with no rows set aside yet and the rows must fit the
// arena (zero_reserve_kept_rows); returns the arena row where its `count` rows go. End: counts
// them (they go back in zero_grads_unit when the encoder asks for the unit again).
static size_t zero_kept_rows_begin(ZeroEngine* z, const ZeroWorkingUnit* w, int unit, int count, int row_len) {
    if (w == NULL || row_len != z->tied.kept_row_len || z->tied.kept_count[unit] != 0) {
        fprintf(stderr, "error: internal: unit %d marked partly ready without a gradient working unit, rows of %d, or twice\n", unit, row_len);
        zero_abort_all_ranks(1);
    }
    if (z->tied.kept_pending == 0) z->tied.kept_used = 0; // every set-aside row went back: the arena is free
    if (z->tied.kept_used + (size_t)count > z->tied.kept_capacity) {
        fprintf(stderr, "error: internal: %zu kept wte rows exceed the %zu reserved (zero_reserve_kept_rows)\n", z->tied.kept_used + count, z->tied.kept_capacity);
        zero_abort_all_ranks(1);
    }
    z->tied.kept_first[unit] = z->tied.kept_used;
    return z->tied.kept_used;
}

static void zero_kept_rows_end(ZeroEngine* z, int unit, int count) {
    z->tied.kept_used += (size_t)count;
    if (count > 0) { z->tied.kept_count[unit] = count; z->tied.kept_pending++; }
}

#endif // ZERO_WORK_UNITS_H
