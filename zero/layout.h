/*
 * zero/layout.h: shard layout and formulas, pure functions of (layout, stage, rank, world size).
 * Part of the ZeRO engine (the map is in zero.cuh).
 *
 * common/gpt2_config.h pads each unit to a multiple of world_size * ZERO_ALIGN elements; these
 * say which buffers a stage shards, where a rank's slice of a unit lives in the buffer that rank
 * stores, how many working-unit elements a stage keeps, and the formulas of docs/design.md "Stages" for bytes per
 * rank and elements sent per step, which the engine prints its own counts beside.
 *
 * "Elements sent" counts what a ring algorithm sends per rank, for n elements over N ranks (n
 * divisible by N thanks to the padding):
 *   all-reduce 2n(N-1)/N (reduce-scatter then all-gather), reduce-scatter n(N-1)/N,
 *   all-gather n(N-1)/N (n = gathered size).
 * Per optimizer step with A micro-steps (Ψ = padded parameter count, E = the padded units that
 * hold the tied wte, zero_embedding_numel):
 *   stage 0, 1: 2Ψ(N-1)/N (reduction on the last micro-step only, then stage 1 all-gathers),
 *            CPU with N > 1: + (BT+T)(C+1)(N-1), the all-gather of the encoder's wte rows
 *            (zero_tied_rows_numel: wte's units are reduced before the encoder adds to them),
 *   stage 2: ((A+1)Ψ + AE)(N-1)/N (reduce-scatter every micro-step, wte's units twice: the LM
 *            head's part of their gradient as soon as it is done, the encoder's at the end; one
 *            all-gather),
 *   stage 3: (3AΨ + 2AE)(N-1)/N (two all-gathers and one reduce-scatter per micro-step; wte's
 *            units three all-gathers, encoder, LM head forward and backward, and two reduce-scatters),
 * i.e. docs/design.md "Elements sent per rank": 2Ψ(N-1)/N and 3Ψ(N-1)/N at A = 1 plus the tied embedding's second pass: the
 * price of never holding all of wte or its gradient in a working buffer. The two scalar all-reduces per step
 * (grad norm, carrying the GNS meter's local norm too; mean loss) and what MPI's own algorithms
 * actually move are not in that count.
 */
#ifndef ZERO_LAYOUT_H
#define ZERO_LAYOUT_H
#ifndef ZERO_CUH
#error "zero/layout.h is part of the ZeRO engine; include zero.cuh"
#endif

typedef enum { ZERO_BUF_PARAMS, ZERO_BUF_GRADS, ZERO_BUF_MASTER, ZERO_BUF_ADAM_M, ZERO_BUF_ADAM_V, ZERO_NUM_BUFS } ZeroBuffer;
static const char* const zero_buffer_names[ZERO_NUM_BUFS] = {"params", "grads", "master", "adam_m", "adam_v"};

// Is `buffer` sharded at `stage`? Optimizer state (master weights, m, v) from stage 1,
// gradients from stage 2, parameters from stage 3 (ZeRO paper, sec. 5.1-5.3).
static inline int zero_buffer_sharded(int stage, ZeroBuffer buffer) {
    if (buffer == ZERO_BUF_PARAMS) return stage >= 3;
    if (buffer == ZERO_BUF_GRADS) return stage >= 2;
    return stage >= 1;
}

// Elements one rank stores of `buffer`: the padded flat buffer, or its shard (1/world_size).
// has_master = 0 in the fp32 CPU build, whose parameters are their own master copy.
static inline size_t zero_buffer_numel(const ParamLayout* layout, int stage, ZeroBuffer buffer, int has_master) {
    if (buffer == ZERO_BUF_MASTER && !has_master) return 0;
    return zero_buffer_sharded(stage, buffer) ? layout->shard_numel : layout->padded_numel;
}

// Element offset of rank's slice of `unit` in the buffer that rank stores. A full buffer keeps
// the unit at unit->offset with slice r at r*shard_numel inside it; a shard buffer is the
// concatenation of the rank's slices in unit order, and as every padded unit divides by
// world_size, the slices before `unit` add up to unit->offset / world_size.
static inline size_t zero_owned_offset(const ParamLayout* layout, int stage, ZeroBuffer buffer, int rank, int unit) {
    const ParamUnit* u = &layout->units[unit];
    if (zero_buffer_sharded(stage, buffer)) return u->offset / (size_t)layout->world_size;
    return u->offset + (size_t)rank * u->shard_numel;
}

// The part of tensor t inside [begin, end) (offsets inside t's unit): returns its length and
// sets *first to where it starts inside the unit. AdamW runs tensor by tensor on these pieces
// so that weight decay applies to exactly the 2-D tensors' elements, wherever a slice cuts.
static inline size_t zero_tensor_overlap(const ParamTensor* t, size_t begin, size_t end, size_t* first) {
    size_t lo = t->unit_offset > begin ? t->unit_offset : begin;
    size_t hi = t->unit_offset + t->numel < end ? t->unit_offset + t->numel : end;
    *first = lo;
    return hi > lo ? hi - lo : 0;
}

// Largest padded unit of all (wte's vocab chunks included): the size of every working buffer
// once wte is chunked (common/gpt2_config.h keeps a chunk about a layer unit's size).
static inline size_t zero_max_unit_numel(const ParamLayout* layout) {
    size_t n = 0;
    for (int u = 0; u < layout->num_units; u++)
        if (layout->units[u].padded_numel > n) n = layout->units[u].padded_numel;
    return n;
}

// E: the padded elements of the units that hold wte (its vocab chunks; unit 0 also holds wpe).
// Stages 2 and 3 reduce-scatter these units twice per micro-step (the LM head's part of the tied
// gradient, then the encoder's) and stage 3 gathers them three times (encoder, LM head forward,
// LM head backward); the formulas below count it.
static inline size_t zero_embedding_numel(const ParamLayout* layout) {
    size_t n = 0;
    for (int k = 0; k < layout->num_wte_units; k++) n += layout->units[wte_unit(layout, k)].padded_numel;
    return n;
}

// The i-th unit in the order forward first uses them: wte's chunks (the encoder), the layers,
// the final unit. The optimizer updates (and stages 1, 2 all-gather) in this order, so the next
// forward finds the units it needs first ready first.
static inline int zero_unit_in_use_order(const ParamLayout* layout, int i) {
    int K = layout->num_wte_units;
    return i < K ? wte_unit(layout, i) : i - K + 1;
}

/*
 * Working buffers a stage allocates, in elements. Stage 2 keeps gradient working units for
 * backward, stage 3 the same for gathered parameters too: three of the largest unit's size, so
 * one unit's collective overlaps the next unit's compute with one to spare. Stages 0 and 1 work
 * in their full buffers.
 */
#define ZERO_WORKING_UNITS 3
static inline size_t zero_working_numel(const ParamLayout* layout, int stage) {
    size_t one_set = ZERO_WORKING_UNITS * zero_max_unit_numel(layout);
    if (stage == 2) return one_set;
    if (stage == 3) return 2 * one_set;
    return 0;
}

// Bytes of gradients a rank stores, as the engines allocate them (and the planner counts them):
// CPU, fp32, full or shard; GPU (has_master), one micro-step in bf16 (2 bytes, stages 0, 1;
// stages 2, 3 write working units instead) plus the fp32 accumulation, full or shard.
static inline size_t zero_grads_bytes(const ParamLayout* layout, int stage, int has_master) {
    size_t n = zero_buffer_numel(layout, stage, ZERO_BUF_GRADS, has_master);
    if (!has_master) return n * sizeof(float);
    return (stage <= 1 ? layout->padded_numel : 0) * 2 + n * sizeof(float);
}

// Bytes of the rows of wte's gradient that stages 2, 3 set aside while a chunk's LM-head part is
// reduced (zero_reserve_kept_rows, counted in the working bytes): max_rows rows (B*T, one per
// token of a micro-batch) of row_len = C elements; CPU fp32 with one int row index each, GPU
// (has_master) bf16 on the device (the row indices are the model's encoder plan).
static inline size_t zero_kept_rows_bytes(int stage, size_t max_rows, int row_len, int has_master) {
    if (stage < 2) return 0;
    if (has_master) return max_rows * (size_t)row_len * 2;
    return max_rows * (size_t)row_len * sizeof(float) + max_rows * sizeof(int);
}

/*
 * Stages 0, 1 of the CPU engine with N > 1 (zero/tied_rows/tied_rows_cpu.h): on the last micro-step each
 * wte unit's reduction starts right after its LM-head part, with the rows the encoder adds to set
 * aside; after the encoder every rank's rows go to every rank in one all-gather. A rank's block:
 * R = max_rows + positions rows (B*T, one per token of a micro-batch at most, and wpe's T position
 * rows), each row a float id and row_len = C values: R(C+1) elements, the same every step
 * (unused rows are sent too), so the elements sent stay a function of B, T, C and N. 0 where wte
 * is reduced densely after the encoder instead (one rank; stages 2, 3, which set rows aside per
 * unit; the GPU engine, has_master).
 */
static inline size_t zero_tied_rows_numel(int stage, int world_size, size_t max_rows, size_t positions, int row_len, int has_master) {
    if (stage >= 2 || world_size <= 1 || has_master) return 0;
    return (max_rows + positions) * ((size_t)row_len + 1);
}

// Its bytes (counted in the working bytes): the all-gather's N blocks, R int row indices and one
// unit (the largest) that the encoder adds the set-aside rows into.
static inline size_t zero_tied_rows_bytes(const ParamLayout* layout, int stage, size_t max_rows, size_t positions, int row_len, int has_master) {
    size_t block = zero_tied_rows_numel(stage, layout->world_size, max_rows, positions, row_len, has_master);
    if (block == 0) return 0;
    return ((size_t)layout->world_size * block + zero_max_unit_numel(layout)) * sizeof(float) + (max_rows + positions) * sizeof(int);
}

// Elements of the CPU rings' receive buffer (zero/comm_ring.h): one chunk of the largest unit
// (a layer or one of wte's vocab chunks) over world_size ranks; none on one rank.
static inline size_t zero_ring_buffer_numel(const ParamLayout* layout, int world_size) {
    if (world_size <= 1) return 0;
    return zero_max_unit_numel(layout) / (size_t)world_size;
}

// docs/design.md "Memory per rank" for the fp32 CPU build (params + grads + Adam m, v; no master copy),
// in bytes per rank, with psi = padded parameter count (divisible by world_size).
static inline size_t zero_state_bytes_formula(int stage, size_t psi, int world_size) {
    size_t n = (size_t)world_size;
    switch (stage) {
    case 0: return 16 * psi;                  // 16Ψ
    case 1: return 8 * psi + 8 * psi / n;     // 8Ψ + 8Ψ/N
    case 2: return 4 * psi + 12 * psi / n;    // 4Ψ + 12Ψ/N
    default: return 16 * psi / n;             // 16Ψ/N
    }
}
static const char* const zero_state_bytes_formula_text[4] = {"16Ψ", "8Ψ+8Ψ/N", "4Ψ+12Ψ/N", "16Ψ/N"};

// docs/design.md "Memory per rank" for the GPU build, in bytes per rank: bf16 params (2Ψ), gradients as
// one micro-step in bf16 (2Ψ, stages 0, 1; stages 2, 3 write working units instead) plus their
// fp32 accumulation across micro-steps, which the optimizer reads (4Ψ at stages 0, 1, which
// reduce on the last micro-step; the 4Ψ/N shard at stages 2, 3), fp32 master weights and Adam
// m, v (12Ψ, or 12Ψ/N from stage 1).
static inline size_t zero_state_bytes_formula_mixed(int stage, size_t psi, int world_size) {
    size_t n = (size_t)world_size;
    switch (stage) {
    case 0: return 2 * psi + (2 + 4) * psi + 12 * psi;      // 2Ψ+(2+4)Ψ+12Ψ
    case 1: return 2 * psi + (2 + 4) * psi + 12 * psi / n;  // 2Ψ+(2+4)Ψ+12Ψ/N
    case 2: return 2 * psi + (4 + 12) * psi / n;            // 2Ψ+(4+12)Ψ/N
    default: return (2 + 4 + 12) * psi / n;                 // (2+4+12)Ψ/N
    }
}
static const char* const zero_state_bytes_formula_mixed_text[4] = {"2Ψ+(2+4)Ψ+12Ψ", "2Ψ+(2+4)Ψ+12Ψ/N", "2Ψ+(4+12)Ψ/N",
                                                                   "(2+4+12)Ψ/N"};

// Elements a ring algorithm sends per rank (header comment); n divisible by world_size.
static inline long long zero_ring_all_reduce_elements(size_t n, int world_size) { return 2LL * (long long)(n / (size_t)world_size) * (world_size - 1); }
static inline long long zero_ring_reduce_scatter_elements(size_t n, int world_size) { return (long long)(n / (size_t)world_size) * (world_size - 1); }
static inline long long zero_ring_all_gather_elements(size_t n, int world_size) { return (long long)(n / (size_t)world_size) * (world_size - 1); }

// Elements sent per rank per optimizer step with grad_accum_steps micro-steps (header comment);
// embedding_numel = E (zero_embedding_numel), 0 where wte is reduced once per micro-step;
// tied_rows_numel = one rank's block of encoder rows (zero_tied_rows_numel; 0: none), whose
// all-gather adds R(C+1)(N-1) at stages 0, 1.
static inline long long zero_elements_sent_formula(int stage, size_t psi, int world_size, int grad_accum_steps, size_t embedding_numel,
                                                   size_t tied_rows_numel) {
    long long per_pass = (long long)(psi / (size_t)world_size) * (world_size - 1); // Ψ(N-1)/N
    long long emb_pass = (long long)(embedding_numel / (size_t)world_size) * (world_size - 1); // E(N-1)/N
    switch (stage) {
    case 0: case 1: return 2 * per_pass + (long long)tied_rows_numel * (world_size - 1);
    case 2: return (long long)(grad_accum_steps + 1) * per_pass + (long long)grad_accum_steps * emb_pass;
    default: return 3LL * grad_accum_steps * per_pass + 2LL * grad_accum_steps * emb_pass;
    }
}
static const char* const zero_elements_sent_formula_text[4] = {"2Ψ(N-1)/N", "2Ψ(N-1)/N", "((A+1)Ψ+AE)(N-1)/N", "(3AΨ+2AE)(N-1)/N"};
static inline const char* zero_elements_sent_text(int stage, size_t tied_rows_numel) {
    return tied_rows_numel > 0 ? "2Ψ(N-1)/N+(BT+T)(C+1)(N-1)" : zero_elements_sent_formula_text[stage];
}

#endif // ZERO_LAYOUT_H
