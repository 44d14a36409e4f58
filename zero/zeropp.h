/*
 * zero/zeropp.h: ZeRO++ on top of stages 2-3 (Wang et al. 2023, "ZeRO++: Extremely Efficient
 * Collective Communication for Giant Model Training", arXiv 2306.10209), CPU build (fp32, MPI):
 *   qwZ  (-qw 1, stage 3; sec. 3.1): the forward all-gather of a unit sends each rank's shard as
 *        blockwise int8 codes + one fp32 scale per block (cpu/quantize.h), dequantized into the
 *        working unit. The master weights (the fp32 shard) and AdamW stay exact; only the
 *        gathered copy forward computes with is coarse.
 *   hpZ  (-hp K, stage 3; sec. 3.2): every forward gather also keeps this rank's 1/K slice of the
 *        gathered unit (a secondary shard, split over groups of K consecutive ranks, by default
 *        the ranks of one host); backward's all-gather reads it from the K ranks of the group
 *        only, so nothing crosses hosts. With qwZ the secondary holds the dequantized values,
 *        so backward computes with the very weights forward did.
 *   qgZ  (-qg 1, stages 2-3; sec. 3.3): the gradient reduce-scatter of a unit as a two-level
 *        all-to-all of blockwise int4 (-qgb 4) or int8 (-qgb 8) codes: within the group first
 *        (each rank gets the chunks of the ranks with its own place in every group, dequantizes
 *        and sums them in fp32), requantize, then across groups (each rank gets its own chunk's
 *        partial sums from every group), a final dequantize and fp32 sum into the owned slice.
 *        A rank's own contribution is never quantized; sums run in a fixed order (deterministic).
 * The switches are DeepSpeed's zero_quantized_weights, zero_hpz_partition_size and
 * zero_quantized_gradients. -qb: elements per quantization block for both (default
 * ZERO_PP_DEFAULT_BLOCK).
 *
 * Formats on the wire. A packet of S elements (one rank's slice of a unit, or one chunk) is
 * ceil(S/b) fp32 scales then the codes (S bytes for int8, ceil(S/2) for int4), padded to whole
 * 4-byte words; qwZ's packets travel in the engine's rings (zero/comm_ring.h) as fp32 words
 * (MPI moves the bytes unchanged; nothing adds them), so qwZ's gather is counted, like every ring,
 * in 4-byte words. hpZ's group gather and qgZ's all-to-alls are MPI's own collectives on the
 * group and cross-group communicators, waited on with the engine's timed wait (-wt).
 *
 * Bytes per rank per step (zero_pp_formula, printed at start-up beside the counts of every step):
 * with S_u = unit u's shard (P_u/N), W(S) = packet words, G ranks a group, H = N/G groups,
 *   forward gathers  A (N-1) [sum_u W8(S_u) + W8(S_emb)] words (qwZ; the embedding unit is
 *                    gathered twice: input embedding and LM head), else the same with S for W;
 *   backward gathers A (K-1) sum_{u != emb} P_u/K elements, all within the group (hpZ), else
 *                    A (N-1) sum_{u != emb} S_u along the ring;
 *   gradients        A sum_u [(G-1) H + (H-1)] Wq(S_u) words (qgZ: (G-1)/G of the unit's codes
 *                    within the group, (H-1)/N across), else A (N-1) sum_u S_u along the ring.
 * In the paper's terms (Ψ parameters, fp16 baseline): 0.5Ψ forward, 0 across nodes backward,
 * 0.25Ψ gradients across nodes; here the baseline is fp32, so int8 is Ψ/4 + scales and int4 Ψ/8.
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ZEROPP_H
#define ZERO_ZEROPP_H
#ifndef ZERO_CUH
#error "zero/zeropp.h is part of the ZeRO engine; include zero.cuh"
#endif
#include "cpu/quantize.h"

#define ZERO_PP_DEFAULT_BLOCK 2048 // tests/test_quantize.c's INFO line: int8 error ~0.4% rms at 2048, scales 0.2% of the bytes

// The flags alone (stage, formats): one error line in err, returns nonzero when they are wrong.
static int zero_pp_check_flags(int qw, int qg, int qg_bits, int hp, int block, int stage, int gpu_build, char* err, size_t cap) {
    if ((qg || hp != 1) && gpu_build) { // the GPU build has qwZ only (zero/zeropp_gpu.cuh)
        snprintf(err, cap, "error: %s: hpZ and qgZ run in the CPU build only so far; expected %s in train_gpt2cu",
                 qg ? "-qg 1" : "-hp", qg ? "-qg 0" : "-hp 1");
        return 1;
    }
    if (qw && stage != 3) {
        snprintf(err, cap, "error: -qw 1: quantized weights apply to the stage-3 parameter all-gather, this binary is stage %d; "
                 "expected -qw 0, or a stage-3 build (build/train_gpt2_z3)", stage);
        return 1;
    }
    if (hp != 1 && stage != 3) {
        snprintf(err, cap, "error: -hp %d: the secondary parameter shard serves stage 3's backward all-gather, this binary is stage %d; "
                 "expected -hp 1, or a stage-3 build", hp, stage);
        return 1;
    }
    if (qg && stage < 2) {
        snprintf(err, cap, "error: -qg 1: quantized gradients replace the reduce-scatter of stages 2-3, this binary is stage %d "
                 "(all-reduce or one reduce-scatter per step); expected -qg 0, or a stage 2 or 3 build", stage);
        return 1;
    }
    if (!quant_block_valid(block)) {
        snprintf(err, cap, "error: -qb %d: unsupported quantization block size; expected a multiple of 32 in [%d, %d]", block,
                 QUANT_BLOCK_MIN, QUANT_BLOCK_MAX);
        return 1;
    }
    if (!quant_bits_valid(qg_bits)) {
        snprintf(err, cap, "error: -qgb %d: unsupported gradient code width; expected 4 or 8 (bits)", qg_bits);
        return 1;
    }
    if (hp < 0) {
        snprintf(err, cap, "error: -hp %d: invalid secondary group size; expected 1 (off), 0 (the ranks of one host) or K > 1", hp);
        return 1;
    }
    return 0;
}

// Words (4 bytes) of one packet of S elements: ceil(S/block) scales, then the codes, padded.
static inline size_t zero_pp_packet_words(size_t S, int bits, int block) {
    return quant_num_blocks(S, block) + (quant_code_bytes(S, bits) + 3) / 4;
}

#if !ZERO_GPU_BUILD
typedef struct ZeroPP {
    int qw, qg, qg_bits, hp, block; // flags: hp = K (1: off)
    int group_size, num_groups;     // G ranks a group (hpZ's K when on, else the ranks of a host), H = N/G
    int group_rank, group_index;    // this rank = group_index * G + group_rank
    MPI_Comm group_comm, cross_comm; // this rank's group; the ranks at its place in every group
    int backward;                   // the model's pass: 1 while backward asks for parameters
    float* packets[ZERO_WORKING_UNITS]; // qwZ: per parameter working unit, N packets (gathered codes)
    long long dequantize_age[ZERO_WORKING_UNITS]; // the working unit's age (take) whose packets await dequantizing, else -1
    float* secondary;               // hpZ: unit u's slice group_rank of K at units[u].offset / K
    int* secondary_ready;           // per unit: a forward gather has filled it
    uint8_t *send, *recv;           // qgZ: the two all-to-alls' buffers (one unit)
    float* partial;                 // qgZ: H chunks summed within the group
    size_t bytes_buffers, bytes_secondary;
    long long words_offring_step;   // sent outside the rings this step (group gathers, all-to-alls), in words
    long long words_offring_across_step;
} ZeroPP;

static const ParamUnit* zero_pp_unit(const ZeroEngine* z, int unit) { return &z->layout->units[unit]; }

// Is rank r on another host than this rank? (the handshake filled every rank's host)
static int zero_pp_across(int r) { return strcmp(zero_rank_host(r), zero_cluster.host) != 0; }

/*
 * Ranks per host when the ranks are placed host by host (ranks g*L .. g*L+L-1 on one host, the
 * same L on every host), else 0.
 */
static int zero_pp_host_block(void) {
    int L = zero_cluster.local_size, N = zero_cluster.world_size;
    if (L < 1 || N % L != 0) return 0;
    for (int r = 0; r < N; r++) if (strcmp(zero_rank_host(r), zero_rank_host(r - r % L)) != 0) return 0;
    return L;
}

// -hp against the world: K must divide N; -hp 0 needs ranks placed host by host. One error line.
static int zero_pp_check_group(int hp, int world_size, char* err, size_t cap) {
    if (hp == 0 && zero_pp_host_block() == 0) {
        snprintf(err, cap, "error: -hp 0: the ranks are not placed host by host with the same count on each host; expected "
                 "such a placement (mpirun's default by slot) or an explicit -hp K");
        return 1;
    }
    if (hp > 1 && world_size % hp != 0) {
        snprintf(err, cap, "error: -hp %d: does not divide the %d ranks; expected a divisor of %d (ranks per secondary group)", hp,
                 world_size, world_size);
        return 1;
    }
    return 0;
}

// Set up ZeRO++ on an initialized engine (every rank, flags checked): communicators and buffers.
static void zero_pp_setup(ZeroEngine* z, int qw, int qg, int qg_bits, int hp, int block) {
    if (!qw && !qg && hp == 1) return;
    ZeroPP* pp = (ZeroPP*)zero_calloc(1, sizeof(ZeroPP), "ZeRO++ state");
    const ParamLayout* layout = z->layout;
    int N = z->world_size;
    pp->qw = qw; pp->qg = qg; pp->qg_bits = qg_bits; pp->block = block;
    pp->hp = hp == 0 ? zero_pp_host_block() : hp;
    int host_block = zero_pp_host_block();
    pp->group_size = pp->hp > 1 ? pp->hp : host_block > 0 ? host_block : 1;
    pp->num_groups = N / pp->group_size;
    pp->group_rank = z->rank % pp->group_size;
    pp->group_index = z->rank / pp->group_size;
    pp->group_comm = pp->cross_comm = MPI_COMM_NULL;
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) pp->dequantize_age[i] = -1;
    if (N > 1) {
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, pp->group_index, pp->group_rank, &pp->group_comm));
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, pp->group_rank, pp->group_index, &pp->cross_comm));
    }
    size_t max_unit = 0;
    for (int u = 0; u < layout->num_units; u++) if (layout->units[u].padded_numel > max_unit) max_unit = layout->units[u].padded_numel;
    if (qw) {
        size_t words = (size_t)N * zero_pp_packet_words(max_unit / (size_t)N, 8, block);
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) pp->packets[i] = (float*)zero_calloc(words, sizeof(float), "qwZ packets");
        pp->bytes_buffers += ZERO_WORKING_UNITS * words * sizeof(float);
    }
    if (pp->hp > 1) {
        size_t n = layout->padded_numel / (size_t)pp->hp;
        pp->secondary = (float*)zero_calloc(n, sizeof(float), "hpZ secondary shard");
        pp->secondary_ready = (int*)zero_calloc((size_t)layout->num_units, sizeof(int), "hpZ flags");
        pp->bytes_secondary = n * sizeof(float);
    }
    if (qg) {
        size_t chunk_bytes = 4 * zero_pp_packet_words(max_unit / (size_t)N, qg_bits, block);
        size_t bytes = (size_t)N * chunk_bytes; // phase 1 sends G x H packets, phase 2 H
        pp->send = (uint8_t*)zero_calloc(bytes, 1, "qgZ send buffer");
        pp->recv = (uint8_t*)zero_calloc(bytes, 1, "qgZ receive buffer");
        pp->partial = (float*)zero_calloc((size_t)pp->num_groups * (max_unit / (size_t)N), sizeof(float), "qgZ partial sums");
        pp->bytes_buffers += 2 * bytes + (size_t)pp->num_groups * (max_unit / (size_t)N) * sizeof(float);
    }
    z->pp = pp;
}

static void zero_pp_free(ZeroEngine* z) {
    ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) free(pp->packets[i]);
    free(pp->secondary); free(pp->secondary_ready); free(pp->send); free(pp->recv); free(pp->partial);
    if (pp->group_comm != MPI_COMM_NULL) MPI_Comm_free(&pp->group_comm);
    if (pp->cross_comm != MPI_COMM_NULL) MPI_Comm_free(&pp->cross_comm);
    free(pp);
    z->pp = NULL;
}

// The model says which pass asks for parameters next (hpZ serves backward from the secondary).
static void zero_pp_pass(ZeroEngine* z, int backward) { if (z->pp) z->pp->backward = backward; }

// Packet of S elements at `packet` (words) <-> floats.
static void zero_pp_pack(float* packet, const float* x, size_t S, int bits, int block) {
    quantize_blocks((uint8_t*)(packet + quant_num_blocks(S, block)), packet, x, S, bits, block);
}
static void zero_pp_unpack(float* out, const float* packet, size_t S, int bits, int block, int accumulate) {
    dequantize_blocks(out, (const uint8_t*)(packet + quant_num_blocks(S, block)), packet, S, bits, block, accumulate);
}

/*
 * Stage 3: start the all-gather of `unit` into working unit w the ZeRO++ way, from this rank's
 * fp32 shard `mine` (S_u elements); returns 0 when ZeRO++ does not apply (plain all-gather).
 *   backward pass, hpZ, secondary ready: all-gather of P_u/K elements a rank within the group
 *       (MPI_Iallgather on group_comm, in place in w->data), (K-1) P_u/K elements sent;
 *   forward pass, qwZ: quantize the shard into packet `rank` (W words), ring all-gather of the
 *       N packets ((N-1) W words sent); zero_pp_gather_done dequantizes them into w->data.
 */
static int zero_pp_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit, const float* mine) {
    ZeroPP* pp = z->pp;
    if (pp == NULL) return 0;
    const ParamUnit* u = zero_pp_unit(z, unit);
    int N = z->world_size, i = (int)(w - z->param_work);
    pp->dequantize_age[i] = -1;
    if (pp->backward && pp->hp > 1 && pp->secondary_ready[unit]) {
        int K = pp->hp;
        size_t part = u->padded_numel / (size_t)K;
        memcpy(w->data + (size_t)pp->group_rank * part, pp->secondary + u->offset / (size_t)K, part * sizeof(float));
        long long words = (long long)(K - 1) * (long long)part;
        zero_op_begin(z, &w->op, ZERO_OP_GROUP_ALL_GATHER, unit, "parameters (hpZ secondary shard)", words);
        pp->words_offring_step += words;
        for (int k = 0; k < K; k++)
            if (k != pp->group_rank && zero_pp_across(pp->group_index * K + k)) pp->words_offring_across_step += (long long)part;
        MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w->data, (int)part, MPI_FLOAT, pp->group_comm, &w->op.request));
        return 1;
    }
    if (pp->qw && !pp->backward) {
        size_t S = u->shard_numel, W = zero_pp_packet_words(S, 8, pp->block);
        float* packets = pp->packets[i];
        zero_pp_pack(packets + (size_t)z->rank * W, mine, S, 8, pp->block);
        zero_op_all_gather(z, &w->op, NULL, packets, (size_t)N * W, unit, "parameters (qwZ int8 codes)");
        pp->dequantize_age[i] = w->age; // a later take of this working unit has another age: never stale
        return 1;
    }
    return 0;
}

// Stage 3: w's gather has completed: dequantize qwZ's packets into the unit, and keep this
// rank's 1/K slice of a forward-gathered unit as the hpZ secondary shard.
static void zero_pp_gather_done(ZeroEngine* z, ZeroWorkingUnit* w) {
    ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    int i = (int)(w - z->param_work);
    const ParamUnit* u = zero_pp_unit(z, w->unit);
    if (pp->dequantize_age[i] == w->age) {
        size_t S = u->shard_numel, W = zero_pp_packet_words(S, 8, pp->block);
        for (int r = 0; r < z->world_size; r++) zero_pp_unpack(w->data + (size_t)r * S, pp->packets[i] + (size_t)r * W, S, 8, pp->block, 0);
        pp->dequantize_age[i] = -1;
    }
    if (pp->hp > 1 && !pp->backward) {
        size_t part = u->padded_numel / (size_t)pp->hp;
        memcpy(pp->secondary + u->offset / (size_t)pp->hp, w->data + (size_t)pp->group_rank * part, part * sizeof(float));
        pp->secondary_ready[w->unit] = 1;
    }
}

/*
 * Stages 2-3, qgZ: reduce `unit`'s gradients (w->data, P_u elements, this micro-step's) over all
 * ranks, leaving the sum of this rank's chunk where the ring reduce-scatter would
 * (zero_reduce_scatter_result). Returns 0 when qgZ is off (the ring runs instead). Chunk c
 * (S = P_u/N elements) is rank c's; rank (g, l) = g*G + l.
 *   1. within the group: to local rank l' the packets of chunks m*G + l' for every group m
 *      (H packets); from each local rank the packets of chunks m*G + l; their fp32 sum
 *      (own chunks unquantized, local ranks in order) = this group's partial sums;
 *   2. across groups: partial m requantized to group m's rank with local index l; from every
 *      group its partial of this rank's chunk; their fp32 sum (groups in order) is the result.
 * Both are MPI_Ialltoall on one packet size, waited with the -wt clock (exposed time).
 */
static int zero_pp_grad_reduce_scatter(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    ZeroPP* pp = z->pp;
    if (pp == NULL || !pp->qg || z->world_size == 1) return 0;
    const ParamUnit* u = zero_pp_unit(z, unit);
    int G = pp->group_size, H = pp->num_groups, l = pp->group_rank, g = pp->group_index, bits = pp->qg_bits, b = pp->block;
    size_t S = u->shard_numel, Q = 4 * zero_pp_packet_words(S, bits, b); // bytes a packet
    const float* grads = w->data;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    // 1. Within the group: H packets to each local rank (the own ones are not read back).
    if (G > 1) {
        for (int lp = 0; lp < G; lp++)
            for (int m = 0; m < H; m++)
                if (lp != l) zero_pp_pack((float*)(pp->send + ((size_t)lp * H + m) * Q), grads + (size_t)(m * G + lp) * S, S, bits, b);
        long long words = (long long)(G - 1) * H * (long long)(Q / 4);
        zero_op_begin(z, &op, ZERO_OP_ALL_TO_ALL, unit, bits == 4 ? "gradients (qgZ int4, within the group)" : "gradients (qgZ int8, within the group)", words);
        pp->words_offring_step += words;
        for (int lp = 0; lp < G; lp++)
            if (lp != l && zero_pp_across(g * G + lp)) pp->words_offring_across_step += (long long)H * (long long)(Q / 4);
        MPI_CHECK(MPI_Ialltoall(pp->send, (int)(H * Q), MPI_BYTE, pp->recv, (int)(H * Q), MPI_BYTE, pp->group_comm, &op.request));
        zero_op_wait(z, &op);
    }
    for (int m = 0; m < H; m++) {
        float* partial = pp->partial + (size_t)m * S;
        for (int lp = 0; lp < G; lp++) {
            if (lp == l) {
                const float* own = grads + (size_t)(m * G + l) * S;
                if (lp == 0) memcpy(partial, own, S * sizeof(float));
                else for (size_t i = 0; i < S; i++) partial[i] += own[i];
            } else {
                zero_pp_unpack(partial, (const float*)(pp->recv + ((size_t)lp * H + m) * Q), S, bits, b, lp > 0);
            }
        }
    }
    float* result = zero_reduce_scatter_result(z, w->data, u->padded_numel);
    // 2. Across groups: partial m to group m (its rank at place l), from every group ours.
    if (H > 1) {
        for (int m = 0; m < H; m++) if (m != g) zero_pp_pack((float*)(pp->send + (size_t)m * Q), pp->partial + (size_t)m * S, S, bits, b);
        long long words = (long long)(H - 1) * (long long)(Q / 4);
        zero_op_begin(z, &op, ZERO_OP_ALL_TO_ALL, unit, bits == 4 ? "gradients (qgZ int4, across groups)" : "gradients (qgZ int8, across groups)", words);
        pp->words_offring_step += words;
        for (int m = 0; m < H; m++) if (m != g && zero_pp_across(m * G + l)) pp->words_offring_across_step += (long long)(Q / 4);
        MPI_CHECK(MPI_Ialltoall(pp->send, (int)Q, MPI_BYTE, pp->recv, (int)Q, MPI_BYTE, pp->cross_comm, &op.request));
        zero_op_wait(z, &op);
        for (int m = 0; m < H; m++) {
            if (m == g) {
                const float* own = pp->partial + (size_t)g * S;
                if (m == 0) memcpy(result, own, S * sizeof(float));
                else for (size_t i = 0; i < S; i++) result[i] += own[i];
            } else {
                zero_pp_unpack(result, (const float*)(pp->recv + (size_t)m * Q), S, bits, b, m > 0);
            }
        }
    } else {
        memcpy(result, pp->partial, S * sizeof(float)); // one group: its partial is the sum
    }
    return 1;
}

// Start a step's per-step byte counters.
static void zero_pp_step_begin(ZeroEngine* z) {
    if (z->pp) z->pp->words_offring_step = z->pp->words_offring_across_step = 0;
}

// Bytes this rank sent this step, within its host and to other hosts: the rings' words go to
// the right neighbour (rank + 1), the rest as counted where it was sent.
static void zero_pp_step_bytes(const ZeroEngine* z, long long* within, long long* across) {
    long long offring = z->pp ? z->pp->words_offring_step : 0, offring_across = z->pp ? z->pp->words_offring_across_step : 0;
    long long ring = z->sent_elements_step - offring;
    int right_across = z->world_size > 1 && zero_pp_across((z->rank + 1) % z->world_size);
    *across = 4 * (offring_across + (right_across ? ring : 0));
    *within = 4 * (offring - offring_across + (right_across ? 0 : ring));
}

#endif // !ZERO_GPU_BUILD

/*
 * The formulas of the header, per rank per step with A micro-steps: parameter gathers for
 * forward (stage 2: the one all-gather after AdamW, untouched by ZeRO++), for backward (stage 3),
 * and the gradient reduction (qgZ: its all-to-all within the group and across groups). Both
 * builds: the engine prints them (zero_pp_formula, CPU build) and the planner plans with them
 * (zero/plan_zeropp.h, for a world it does not run), so a ZeroPPShape carries what they need of
 * ZeroPP: the flags and the groups. Counted in elements of element_bytes (the unquantized values:
 * 4 in the CPU build, where an element is a word, 2 for bf16), a packet word as 4 / element_bytes
 * of them; pp NULL: plain stage `stage`; unit_only >= 0: that unit's share alone.
 */
typedef struct { int qw, qg, qg_bits, hp, block, group_size, num_groups; } ZeroPPShape;
typedef struct { long long forward, backward, gradients, gradients_within_group, gradients_across_groups; } ZeroPPFormula;
static ZeroPPFormula zero_pp_formula_of(const ParamLayout* layout, int stage, long long N, long long A, const ZeroPPShape* pp,
                                        int element_bytes, int unit_only) {
    long long pe = 4 / element_bytes; // elements a packet word takes
    ZeroPPFormula f = {0, 0, 0, 0, 0};
    for (int unit = 0; unit < layout->num_units; unit++) {
        if (unit_only >= 0 && unit != unit_only) continue;
        size_t S = layout->units[unit].shard_numel, P = layout->units[unit].padded_numel;
        long long plain = (long long)S * (N - 1); // a ring all-gather or reduce-scatter of the unit
        if (stage == 3) {
            long long gathered = pp && pp->qw ? pe * (long long)zero_pp_packet_words(S, 8, pp->block) * (N - 1) : plain;
            f.forward += A * (unit == UNIT_EMBEDDING ? 2 : 1) * gathered; // the embedding: input and LM head
            if (unit != UNIT_EMBEDDING) f.backward += A * (pp && pp->hp > 1 ? (long long)(pp->hp - 1) * (long long)(P / (size_t)pp->hp) : plain);
        } else {
            f.forward += plain;
        }
        if (pp && pp->qg && N > 1) {
            long long G = pp->group_size, H = pp->num_groups, W = pe * (long long)zero_pp_packet_words(S, pp->qg_bits, pp->block);
            f.gradients_within_group += A * (G - 1) * H * W;
            f.gradients_across_groups += A * (H - 1) * W;
            f.gradients += A * ((G - 1) * H + (H - 1)) * W;
        } else {
            f.gradients += A * plain;
        }
    }
    return f;
}

/*
 * The formula split for `rank`, in bytes per step: what goes to ranks on its own host and to
 * other hosts (across(rank, r, ctx): is rank r on another host than `rank`?). The ring's words go
 * to rank + 1; hpZ's group gather and qgZ's first all-to-all to the group's other ranks (rank =
 * group index x G + place), qgZ's second to the other groups' rank at this place, in equal shares.
 */
typedef int (*ZeroPPAcross)(int rank, int r, const void* ctx);
static void zero_pp_formula_split_of(const ParamLayout* layout, int stage, int N, int grad_accum_steps, const ZeroPPShape* pp,
                                     int element_bytes, int rank, ZeroPPAcross is_across, const void* ctx, long long* within,
                                     long long* across) {
    ZeroPPFormula f = zero_pp_formula_of(layout, stage, N, grad_accum_steps, pp, element_bytes, -1);
    int G = pp->group_size, H = pp->num_groups, group_rank = rank % G, group_index = rank / G;
    int hp = pp->hp > 1, qg = pp->qg && N > 1;
    long long ring = f.forward + (hp ? 0 : f.backward), phase1 = f.gradients_within_group, phase2 = f.gradients_across_groups;
    if (!qg) ring += f.gradients;
    int group_across = 0, cross_across = 0; // peers on other hosts
    for (int k = 0; k < G; k++) group_across += k != group_rank && is_across(rank, group_index * G + k, ctx);
    for (int m = 0; m < H; m++) cross_across += m != group_index && is_across(rank, m * G + group_rank, ctx);
    long long a = N > 1 && is_across(rank, (rank + 1) % N, ctx) ? ring : 0;
    if (hp && G > 1) a += f.backward / (G - 1) * group_across;
    if (G > 1) a += phase1 / (G - 1) * group_across;
    if (H > 1) a += phase2 / (H - 1) * cross_across;
    *across = element_bytes * a;
    *within = element_bytes * (f.forward + f.backward + f.gradients) - *across;
}

#if !ZERO_GPU_BUILD
static ZeroPPShape zero_pp_shape(const ZeroPP* pp) {
    ZeroPPShape s = {pp->qw, pp->qg, pp->qg_bits, pp->hp, pp->block, pp->group_size, pp->num_groups};
    return s;
}

// The engine's formulas (fp32: words) for its own stage, world and ZeRO++ setup.
static ZeroPPFormula zero_pp_formula(const ZeroEngine* z, int grad_accum_steps) {
    ZeroPPShape shape = {0, 0, 4, 1, ZERO_PP_DEFAULT_BLOCK, 1, 1};
    if (z->pp) shape = zero_pp_shape(z->pp);
    return zero_pp_formula_of(z->layout, ZERO_STAGE, z->world_size, grad_accum_steps, z->pp ? &shape : NULL, (int)sizeof(float), -1);
}

static int zero_pp_across_of(int rank, int r, const void* ctx) { (void)rank; (void)ctx; return zero_pp_across(r); }

// This rank's split of the formula (the hosts from the handshake), in bytes per step.
static void zero_pp_formula_split(const ZeroEngine* z, int grad_accum_steps, long long* within, long long* across) {
    ZeroPPShape shape = zero_pp_shape(z->pp);
    zero_pp_formula_split_of(z->layout, ZERO_STAGE, z->world_size, grad_accum_steps, &shape, (int)sizeof(float), z->rank,
                             zero_pp_across_of, NULL, within, across);
}

// Start-up lines (rank 0): what ZeRO++ does, the memory it adds, the per-step formulas.
static void zero_pp_print_setup(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    ZeroPPFormula f = zero_pp_formula(z, grad_accum_steps);
    fprintf(out, "zero++: qwZ %s | hpZ %s | qgZ %s | block %d elements | groups of %d ranks (%d groups)\n",
            pp->qw ? "on (int8 forward all-gather)" : "off", pp->hp > 1 ? "on" : "off",
            pp->qg ? (pp->qg_bits == 4 ? "on (int4 all-to-all)" : "on (int8 all-to-all)") : "off", pp->block, pp->group_size,
            pp->num_groups);
    if (pp->hp > 1)
        fprintf(out, "zero++: hpZ secondary shard %zu bytes per rank; formula 4Ψ/K = 4 x %zu / %d = %zu (%s)\n", pp->bytes_secondary,
                z->layout->padded_numel, pp->hp, 4 * (z->layout->padded_numel / (size_t)pp->hp),
                pp->bytes_secondary == 4 * (z->layout->padded_numel / (size_t)pp->hp) ? "equal" : "DIFFERENT");
    fprintf(out, "zero++: bytes per rank per step (A = %d): forward gathers %lld, backward gathers %lld, gradients %lld = %lld "
            "(formulas in zero/zeropp.h; plain stage %d: %lld) | buffers %zu bytes\n",
            grad_accum_steps, 4 * f.forward, 4 * f.backward, 4 * f.gradients, 4 * (f.forward + f.backward + f.gradients), ZERO_STAGE,
            4 * zero_elements_sent_formula(ZERO_STAGE, z->layout->padded_numel, z->world_size, grad_accum_steps), pp->bytes_buffers);
    long long within, across;
    zero_pp_formula_split(z, grad_accum_steps, &within, &across);
    fprintf(out, "zero++: rank 0's bytes per step by formula: within its host %lld, to other hosts %lld (counted on each "
            "\"zero++ step\" line)\n", within, across);
}

// JSON fields for the config record (formulas, words) and each train record (counted bytes).
static const char* zero_pp_config_fields(const ZeroEngine* z, int grad_accum_steps, char* buf, size_t cap) {
    const ZeroPP* pp = z->pp;
    ZeroPPFormula f = zero_pp_formula(z, grad_accum_steps);
    snprintf(buf, cap, "\"zeropp_qw\":%d,\"zeropp_qg\":%d,\"zeropp_qg_bits\":%d,\"zeropp_hp\":%d,\"zeropp_block\":%d,"
             "\"zeropp_group_size\":%d,\"zeropp_formula_forward_words\":%lld,\"zeropp_formula_backward_words\":%lld,"
             "\"zeropp_formula_gradient_words\":%lld,\"zeropp_bytes_secondary\":%zu",
             pp ? pp->qw : 0, pp ? pp->qg : 0, pp ? pp->qg_bits : 0, pp ? pp->hp : 1, pp ? pp->block : 0, pp ? pp->group_size : 1,
             f.forward, f.backward, f.gradients, pp ? pp->bytes_secondary : 0);
    return buf;
}
#else // the GPU build's part is zero/zeropp_gpu.cuh, after the GPU engine (it uses its helpers)
static int zero_pp_device_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit);
static void zero_pp_free(ZeroEngine* z);
// zero_pp_check_flags refuses -hp in the GPU build: nothing to check against the world here.
static int zero_pp_check_group(int hp, int world_size, char* err, size_t cap) {
    (void)hp; (void)world_size; (void)err; (void)cap;
    return 0;
}
#endif // !ZERO_GPU_BUILD

#endif // ZERO_ZEROPP_H
