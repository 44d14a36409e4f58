/*
 * zero/tied_rows/tied_rows_cpu.h: stages 0, 1 of the CPU engine with N > 1, the tied wte on the last
 * micro-step (the only one these stages reduce on). Part of the ZeRO engine (the map is in zero.cuh).
 *
 * wte is used twice: by the LM head (backward's first op) and by the encoder (its last). Reduced
 * after the encoder, wte's units (65% of Ψ at d6) would go on the wire when nothing is left to
 * compute. Instead each wte unit's reduction (all-reduce at stage 0, reduce-scatter at stage 1)
 * starts right after its LM-head backward (zero_grads_unit_partly_ready), and the rows the encoder
 * still adds to (this micro-batch's tokens in the unit; unit 0 also wpe's T position rows) are
 * set aside first and zeroed in the buffer. The encoder adds into those rows in a unit-sized
 * buffer (zero_grads_unit); they go back to the arena, and after the last unit one all-gather
 * sends every rank's rows (a block of R = B*T + T rows, each a float id and C values; unused rows
 * carry id -1) to every rank. In the optimizer step each rank adds all ranks' rows, rank 0's
 * first, into the reduced gradient (stage 1: the part of its slice they cover). Every element
 * gets each rank's gradient once: the reduced part without the set-aside rows, plus each rank's
 * set-aside rows with its encoder part. Accumulation: earlier micro-steps add into the full
 * buffer as before; their sum is in the set-aside rows or the reduced remainder. The GNS meter's
 * local norm (this rank's accumulated gradient) is the remainder's norm, read before the unit's
 * collective, plus the rows' norm after the encoder: the same sum of squares, split in two.
 * At N = 2 this adds every element's two contributions in the order stages 2, 3 do, so the grad
 * norm stays bit-exact with stage 3 (t_30_zero_2). The GPU engine (zero/gpu/engine_gpu.cuh) keeps
 * the dense reduction after the encoder.
 */
#ifndef ZERO_TIED_ROWS_CPU_H
#define ZERO_TIED_ROWS_CPU_H
#ifndef ZERO_CUH
#error "zero/tied_rows/tied_rows_cpu.h is part of the ZeRO engine; include zero.cuh"
#endif

#if !ZERO_GPU_BUILD
// Room for the rows (zero_reserve_kept_rows, stages 0, 1): max_rows token rows and `positions`
// wpe rows of row_len = C elements, one block per rank for the all-gather.
static void zero_tied_reserve(ZeroEngine* z, size_t max_rows, int positions, int row_len) {
    const ParamLayout* layout = z->layout;
    size_t block = zero_tied_rows_numel(ZERO_STAGE, z->world_size, max_rows, (size_t)positions, row_len, 0);
    if (block == 0) return;
    const ParamTensor* wpe = &layout->tensors[param_tensor_index(layout, P_WPE, -1)];
    z->tied.early.rows = max_rows + (size_t)positions;
    z->tied.early.row_ids = zero_max_unit_numel(layout) / (size_t)row_len + 1;
    if (wpe->unit != UNIT_EMBEDDING || wpe->unit_offset % (size_t)row_len != 0 ||
        (double)layout->num_units * (double)z->tied.early.row_ids >= 16777216.0) { // ids must be exact floats
        fprintf(stderr, "error: internal: wte rows for the stage-%d exchange: wpe not row-aligned in unit 0, or %d units x %zu rows past 2^24\n",
                ZERO_STAGE, layout->num_units, z->tied.early.row_ids);
        exit(1);
    }
    z->tied.early.wpe_row = (int)(wpe->unit_offset / (size_t)row_len);
    z->tied.early.positions = positions;
    z->tied.early.block_numel = block;
    z->tied.early.gather = (float*)zero_calloc((size_t)z->world_size * block, sizeof(float), "wte rows exchange");
    z->tied.early.unit_buf = (float*)zero_calloc(zero_max_unit_numel(layout), sizeof(float), "wte rows unit");
    z->tied.early.phase = (int*)zero_calloc((size_t)layout->num_units, sizeof(int), "wte early reductions");
    z->tied.kept_ids = (int*)zero_calloc(z->tied.early.rows, sizeof(int), "kept wte rows");
    z->tied.kept_data = z->tied.early.gather + (size_t)z->rank * block + z->tied.early.rows; // this rank's values, after its R ids
    z->tied.kept_capacity = z->tied.early.rows;
    z->tied.kept_row_len = row_len;
    z->tied.kept_used = 0;
    z->bytes_working += zero_tied_rows_bytes(layout, ZERO_STAGE, max_rows, (size_t)positions, row_len, 0);
}

// Is `unit` taking the early path now? (its LM head done on the last micro-step)
static int zero_tied_pending(const ZeroEngine* z, int unit) { return z->tied.early.phase != NULL && z->tied.early.phase[unit] == 1; }

// zero_grads_unit_partly_ready at stages 0, 1: set the rows aside (and unit 0's wpe rows), zero
// them, read the GNS remainder, start the unit's collective.
static void zero_tied_set_aside(ZeroEngine* z, int unit, const int* rows, int count, int row_len) {
    const ParamUnit* u = &z->layout->units[unit];
    float* g = z->grads + u->offset;
    int positions = unit == UNIT_EMBEDDING ? z->tied.early.positions : 0, total = count + positions;
    size_t row = (size_t)row_len, first = z->tied.kept_used;
    if (row_len != z->tied.kept_row_len || z->tied.early.phase[unit] != 0 || first + (size_t)total > z->tied.kept_capacity) {
        fprintf(stderr, "error: internal: unit %d: %d wte rows of %d set aside twice or past the %zu reserved\n", unit, total, row_len,
                z->tied.kept_capacity);
        zero_abort_all_ranks(1);
    }
    for (int i = 0; i < total; i++) {
        size_t k = first + (size_t)i;
        int r = i < count ? rows[i] : z->tied.early.wpe_row + (i - count); // wpe's rows follow wte's in unit 0
        z->tied.kept_ids[k] = r;
        memcpy(z->tied.kept_data + k * row, g + (size_t)r * row, row * sizeof(float));
        memset(g + (size_t)r * row, 0, row * sizeof(float));
    }
    z->tied.kept_first[unit] = first;
    z->tied.kept_count[unit] = total;
    z->tied.kept_used += (size_t)total;
    z->tied.kept_pending++;
    z->tied.early.phase[unit] = 1;
    if (z->gns.measure_local_grad_norm) z->gns.local_grad_norm_sq += norm_squared(g, u->padded_numel); // GNS: the remainder
    zero_grads_reduce_full(z, unit);
}

// zero_grads_unit for the encoder's part of an early unit: the unit-sized buffer with the
// set-aside rows put back (its other elements are never read: the encoder adds to these rows only).
static float* zero_tied_encoder_buffer(ZeroEngine* z, int unit) {
    size_t row = (size_t)z->tied.kept_row_len;
    for (int i = 0; i < z->tied.kept_count[unit]; i++) {
        size_t k = z->tied.kept_first[unit] + (size_t)i;
        memcpy(z->tied.early.unit_buf + (size_t)z->tied.kept_ids[k] * row, z->tied.kept_data + k * row, row * sizeof(float));
    }
    return z->tied.early.unit_buf;
}

// zero_grads_unit_ready for an early unit: its rows back into the block (GNS: their norm); after
// the last one, the ids into the block's head and the all-gather.
static void zero_tied_encoder_done(ZeroEngine* z, int unit) {
    size_t row = (size_t)z->tied.kept_row_len, first = z->tied.kept_first[unit];
    for (int i = 0; i < z->tied.kept_count[unit]; i++) {
        size_t k = first + (size_t)i;
        memcpy(z->tied.kept_data + k * row, z->tied.early.unit_buf + (size_t)z->tied.kept_ids[k] * row, row * sizeof(float));
    }
    if (z->gns.measure_local_grad_norm) z->gns.local_grad_norm_sq += norm_squared(z->tied.kept_data + first * row, (size_t)z->tied.kept_count[unit] * row);
    z->tied.early.phase[unit] = 2;
    if (--z->tied.kept_pending > 0) return;
    float* ids = z->tied.early.gather + (size_t)z->rank * z->tied.early.block_numel;
    for (size_t k = 0; k < z->tied.early.rows; k++) ids[k] = -1.0f;
    for (int v = 0; v < z->layout->num_units; v++)
        for (int i = 0; z->tied.early.phase[v] && i < z->tied.kept_count[v]; i++)
            ids[z->tied.kept_first[v] + (size_t)i] = (float)((size_t)v * z->tied.early.row_ids + (size_t)z->tied.kept_ids[z->tied.kept_first[v] + (size_t)i]);
    zero_op_all_gather(z, &z->tied.early_op, NULL, z->tied.early.gather, (size_t)z->world_size * z->tied.early.block_numel, -1, "wte gradient rows (encoder)");
}

// In the optimizer step, once every unit's reduction is finished (stage 1: each slice moved to its
// place): wait for the rows and add every rank's, rank 0's first, into the reduced gradient
// (stage 1: within this rank's slice of each unit); then the arena is free for the next step.
static void zero_tied_add_rows(ZeroEngine* z) {
    if (z->tied.early.phase == NULL || z->tied.kept_used == 0) return;
    zero_op_wait(z, &z->tied.early_op);
    const ParamLayout* layout = z->layout;
    size_t row = (size_t)z->tied.kept_row_len, R = z->tied.early.rows;
    for (int r = 0; r < z->world_size; r++) {
        const float* ids = z->tied.early.gather + (size_t)r * z->tied.early.block_numel;
        const float* values = ids + R;
        for (size_t k = 0; k < R && ids[k] >= 0.0f; k++) {
            size_t id = (size_t)ids[k], unit = id / z->tied.early.row_ids, lo = (id % z->tied.early.row_ids) * row;
            size_t begin, end;
            zero_update_range(z, (int)unit, &begin, &end);
            size_t from = lo > begin ? lo : begin, to = lo + row < end ? lo + row : end;
            float* g = z->grads + layout->units[unit].offset;
            for (size_t e = from; e < to; e++) g[e] += values[k * row + (e - lo)];
        }
    }
    memset(z->tied.early.phase, 0, (size_t)layout->num_units * sizeof(int));
    memset(z->tied.kept_count, 0, (size_t)layout->num_units * sizeof(int));
    z->tied.kept_used = 0;
    z->tied.kept_pending = 0;
}

// The CPU engine's tied-row hooks (declared in zero/hooks.h, called by zero/engine_cpu.h and
// zero/optimizer_cpu.h), stages 0, 1.
static void zero_hook_tied_reserve(ZeroEngine* z, size_t max_rows, int positions, int row_len) { zero_tied_reserve(z, max_rows, positions, row_len); }
static void zero_hook_tied_set_aside(ZeroEngine* z, int unit, const int* rows, int count, int row_len) {
    if (z->tied.early.block_numel > 0) zero_tied_set_aside(z, unit, rows, count, row_len);
}
static float* zero_hook_tied_grads(ZeroEngine* z, int unit) { return zero_tied_pending(z, unit) ? zero_tied_encoder_buffer(z, unit) : NULL; }
static int zero_hook_tied_ready(ZeroEngine* z, int unit) {
    if (!zero_tied_pending(z, unit)) return 0;
    zero_tied_encoder_done(z, unit);
    return 1;
}
static void zero_hook_tied_add_rows(ZeroEngine* z) { zero_tied_add_rows(z); }
static size_t zero_hook_tied_block_numel(const ZeroEngine* z) { return z->tied.early.block_numel; }
static void zero_hook_tied_op(ZeroEngine* z, int wait) {
    if (wait) zero_op_wait(z, &z->tied.early_op);
#if !ZERO_RING
    else zero_progress_test(&z->tied.early_op);
#endif
}
static void zero_hook_tied_free(ZeroEngine* z) {
    if (z->tied.early.gather != NULL) z->tied.kept_data = NULL; // it points into gather
    free(z->tied.early.gather); free(z->tied.early.unit_buf); free(z->tied.early.phase);
}
#else
// The GPU engine keeps the dense schedule (zero/gpu/engine_gpu.cuh): nothing reduced early.
static size_t zero_hook_tied_block_numel(const ZeroEngine* z) { return 0; }
static void zero_hook_tied_op(ZeroEngine* z, int wait) {}
#endif // !ZERO_GPU_BUILD

#endif // ZERO_TIED_ROWS_CPU_H
