/*
 * zero/zeropp/zeropp.h: ZeRO++ on top of stages 2-3 (Wang et al. 2023, "ZeRO++: Extremely Efficient
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
 * zero_quantized_gradients. -qb: elements per quantization block of qwZ's weight codes (default
 * ZERO_PP_DEFAULT_BLOCK), -qbg: of qgZ's gradient codes (default ZERO_PP_DEFAULT_GRAD_BLOCK):
 * gradients need smaller blocks than weights (their magnitudes spread wider within a block, and
 * int4 has 15 levels), dev/bench/quant_grad_blocks.c measured by how much.
 *
 * Formats on the wire. A packet of S elements (one rank's slice of a unit, or one chunk) is
 * ceil(S/b) fp32 scales then the codes (S bytes for int8, ceil(S/2) for int4), padded to whole
 * 4-byte words; qwZ's packets travel in the engine's rings (zero/comm_ring.h) as fp32 words
 * (MPI moves the bytes unchanged; nothing adds them), so qwZ's gather is counted, like every ring,
 * in 4-byte words. hpZ's group gather and qgZ's all-to-alls are MPI's own collectives on the
 * group and cross-group communicators, waited on with the engine's timed wait (-wt).
 *
 * The tied wte is K vocab-chunk units (e in wte below; zero/layout.h's E): forward gathers each
 * twice (encoder, LM head), backward once more to recompute the LM head's logits, and its
 * gradient is reduced twice per micro-step (the LM head's part early, the encoder's rows at the
 * end: zero_grads_unit_partly_ready). The recompute must see the weights forward's softmax
 * statistics came from, so it is gathered as forward's weights: from the hpZ secondary (which
 * holds them) when hpZ is on, else as qwZ packets when qwZ is on (zero_pp_param_gather).
 * Bytes per rank per step (zero_pp_formula, printed at start-up beside the counts of every step):
 * with S_u = unit u's shard (P_u/N), W(S) = packet words (W8 with -qb's block, Wq with -qbg's:
 * zero_pp_weight_packet_words, zero_pp_grad_packet_words), G ranks a group, H = N/G groups,
 *   forward gathers  A (N-1) [sum_u W8(S_u) + sum_{e in wte} W8(S_e)] words (qwZ; the wte units
 *                    are gathered twice: encoder and LM head), else the same with S for W;
 *   backward gathers A (K-1) sum_u P_u/K elements, all within the group (hpZ), else
 *                    A (N-1) [sum_{u not wte} S_u + sum_{e in wte} W8(S_e) (qwZ) or S_e];
 *   gradients        A sum_u r_u [(G-1) H + (H-1)] Wq(S_u) words (qgZ: (G-1)/G of the unit's
 *                    codes within the group, (H-1)/N across), else A (N-1) sum_u r_u S_u along
 *                    the ring, with r_u = 2 for the wte units, 1 for the others.
 * In the paper's terms (Ψ parameters, fp16 baseline): 0.5Ψ forward, 0 across nodes backward,
 * 0.25Ψ gradients across nodes; here the baseline is fp32, so int8 is Ψ/4 + scales and int4 Ψ/8.
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ZEROPP_H
#define ZERO_ZEROPP_H
#ifndef ZERO_CUH
#error "zero/zeropp/zeropp.h is part of the ZeRO engine; include zero.cuh"
#endif
#include "cpu/quantize.h"

#define ZERO_PP_DEFAULT_BLOCK 2048 // tests/test_quantize.c's INFO line: int8 error 2.7% rms at 2048 (weights with outliers), scales 0.2% of the bytes
/*
 * -qbg's default. dev/bench/quant_grad_blocks.c on d2's tinyshakespeare gradients (steps 1, 25,
 * 50, 4 chunks a unit), int4 relative RMS error / share of non-zero gradients coded 0 / bytes per
 * element: block 2048 14.5% / 18.2% / 0.502, 512 11.5% / 9.7% / 0.508, 256 10.3% / 7.1% / 0.516,
 * 128 9.4% / 5.4% / 0.531, 64 8.6% / 5.0% / 0.562. 256 cuts 2048's error by 29% and its lost
 * (zeroed) gradients by 61% for 3% more bytes; halving it again buys a tenth of the error for 3%
 * more. int8: 0.64% rms at 256, 1.15% at 2048.
 */
#define ZERO_PP_DEFAULT_GRAD_BLOCK 256

// The flags alone (stage, formats): one error line in err, returns nonzero when they are wrong.
static int zero_pp_check_flags(int qw, int qg, int qg_bits, int hp, int block, int stage, int gpu_build, char* err, size_t cap) {
    (void)gpu_build; // both builds have all three (GPU: zero/zeropp/zeropp_gpu.cuh)
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

// -qbg against the same rules as -qb (zero_pp_check_flags). One error line, nonzero when wrong.
static int zero_pp_check_grad_block(int grad_block, char* err, size_t cap) {
    if (quant_block_valid(grad_block)) return 0;
    snprintf(err, cap, "error: -qbg %d: unsupported gradient quantization block size; expected a multiple of 32 in [%d, %d]",
             grad_block, QUANT_BLOCK_MIN, QUANT_BLOCK_MAX);
    return 1;
}

// Words (4 bytes) of one packet of S elements: ceil(S/block) scales, then the codes, padded.
static inline size_t zero_pp_packet_words(size_t S, int bits, int block) {
    return quant_num_blocks(S, block) + (quant_code_bytes(S, bits) + 3) / 4;
}

/*
 * ZeRO++ beside offload (zero/offload/offload.h), one error line, nonzero when refused. CPU build: qwZ
 * and hpZ start their gathers from the parameter shard in RAM, which -zp nvme replaces by the
 * NVMe read's gather. GPU build: qwZ quantizes the fp32 master shard on the device, which -zo
 * and -zp keep on the host; hpZ keeps its secondary from the device gathers that offload's
 * parameter path replaces.
 */
static int zero_pp_check_offload(int qw, int hp, const ZeroOffloadArgs* offload, int gpu_build, char* err, size_t cap) {
    if (!gpu_build && (qw || hp != 1) && offload->params == ZERO_PLACE_NVME) {
        char flag[32];
        if (qw) snprintf(flag, sizeof(flag), "-qw 1");
        else snprintf(flag, sizeof(flag), "-hp %d", hp);
        snprintf(err, cap, "error: %s with -zp nvme: ZeRO++'s parameter gathers start from the shard in RAM, -zp nvme gathers "
                 "from its NVMe reads; expected -zp none with %s, or -qw 0 -hp 1", flag, flag);
        return 1;
    }
    if (gpu_build && qw && (offload->optimizer != ZERO_PLACE_NONE || offload->params != ZERO_PLACE_NONE)) {
        snprintf(err, cap, "error: -qw 1 with -zo %s -zp %s: the GPU build's qwZ quantizes the fp32 master shard on the device, "
                 "offload keeps it on the host; expected -zo none -zp none with -qw 1, or -qw 0",
                 zero_placement_names[offload->optimizer], zero_placement_names[offload->params]);
        return 1;
    }
    if (gpu_build && hp != 1 && (offload->optimizer != ZERO_PLACE_NONE || offload->params != ZERO_PLACE_NONE)) {
        snprintf(err, cap, "error: -hp %d with -zo %s -zp %s: the GPU build's hpZ fills its secondary shard from forward's device "
                 "all-gathers, which offload's parameter path replaces; expected -zo none -zp none with -hp %d, or -hp 1", hp,
                 zero_placement_names[offload->optimizer], zero_placement_names[offload->params], hp);
        return 1;
    }
    return 0;
}

// Is `unit` one of wte's vocab chunks? In backward they are gathered only for the LM head's
// recompute of forward's logits (the encoder's backward needs no parameters).
static int zero_pp_wte_unit(const ParamLayout* layout, int unit) {
    for (int k = 0; k < layout->num_wte_units; k++) if (wte_unit(layout, k) == unit) return 1;
    return 0;
}

/*
 * The header's formulas in bytes per rank per step with A micro-steps, for both builds and the
 * planner (plan/plan_zeropp.h, for a world it does not run): the CPU build prints them through
 * zero_pp_formula, the GPU build's zero/zeropp/zeropp_gpu.cuh as they are. elem_bytes is the width of
 * what the unquantized collectives move (4: the CPU build's fp32, 2: the GPU build's bf16);
 * packets are the same bytes in both. A ZeroPPShape holds the flags as set up (hp = K, 1: off;
 * block and grad_block the elements per block of qwZ's and qgZ's codes) and G ranks a group
 * (H = N/G groups); NULL: plain stage `stage`. `stage`: the engine's ZERO_STAGE, the planner's
 * rows stage 3 in any binary. unit >= 0: that unit's terms alone (the planner issues each
 * unit's share where the engine issues it), -1: all units. Parameter gathers for forward
 * (stage 2: the one all-gather after AdamW, untouched by ZeRO++), for backward (stage 3), the
 * gradient reduction, and of it qgZ's all-to-all within the group and across groups (the split
 * within/across hosts needs them apart; 0 without qgZ).
 */
typedef struct { int qw, hp, qg, qg_bits, block, grad_block, group_size; } ZeroPPShape;
typedef struct { long long forward, backward, gradients, gradients_within_group, gradients_across_groups; } ZeroPPFormula;
static ZeroPPFormula zero_pp_formula_bytes(const ParamLayout* layout, int stage, int unit_only, int world_size, int grad_accum_steps,
                                           int elem_bytes, const ZeroPPShape* pp) {
    static const ZeroPPShape off = {0, 1, 0, 8, ZERO_PP_DEFAULT_BLOCK, ZERO_PP_DEFAULT_GRAD_BLOCK, 1};
    if (pp == NULL) pp = &off;
    long long N = world_size, A = grad_accum_steps, E = elem_bytes, G = pp->group_size, H = N / pp->group_size;
    int qw = pp->qw, hp = pp->hp, qg = pp->qg && N > 1;
    ZeroPPFormula f = {0, 0, 0, 0, 0};
    for (int unit = 0; unit < layout->num_units; unit++) {
        if (unit_only >= 0 && unit != unit_only) continue;
        size_t S = layout->units[unit].shard_numel, P = layout->units[unit].padded_numel;
        long long plain = E * (long long)S * (N - 1); // a ring all-gather or reduce-scatter of the unit
        int wte = zero_pp_wte_unit(layout, unit), reductions = wte ? 2 : 1; // wte: LM head's part, encoder's rows
        if (stage == 3) {
            long long gathered = qw ? 4 * (long long)zero_pp_packet_words(S, 8, pp->block) * (N - 1) : plain;
            f.forward += A * (wte ? 2 : 1) * gathered; // wte's chunks: encoder and LM head
            if (hp > 1) f.backward += A * E * (long long)(hp - 1) * (long long)(P / (size_t)hp);
            else f.backward += A * (wte ? gathered : plain); // wte's chunks: the LM head's recompute, as forward's weights
        } else {
            f.forward += plain;
        }
        if (qg) {
            long long W = 4 * (long long)zero_pp_packet_words(S, pp->qg_bits, pp->grad_block); // a packet's bytes
            f.gradients_within_group += A * reductions * (G - 1) * H * W;
            f.gradients_across_groups += A * reductions * (H - 1) * W;
            f.gradients += A * reductions * ((G - 1) * H + (H - 1)) * W;
        } else {
            f.gradients += A * reductions * plain;
        }
    }
    return f;
}

/*
 * The formula f (bytes) split for `rank`: what it sends to ranks on its own host and to other
 * hosts (is_across(rank, r, ctx): is rank r on another host than `rank`?). The ring's bytes go to
 * rank + 1; hpZ's group gather and qgZ's first all-to-all to the group's other ranks (rank =
 * group index x G + place), qgZ's second to the other groups' rank at this place, in equal
 * shares. The engine splits with the handshake's hosts, the planner with ranks placed node by node.
 */
typedef int (*ZeroPPAcross)(int rank, int r, const void* ctx);
static void zero_pp_formula_split_bytes(const ZeroPPFormula* f, int world_size, const ZeroPPShape* pp, int rank,
                                        ZeroPPAcross is_across, const void* ctx, long long* within, long long* across) {
    int N = world_size, G = pp->group_size, H = N / G, group_rank = rank % G, group_index = rank / G;
    int hp = pp->hp > 1, qg = pp->qg && N > 1;
    long long ring = f->forward + (hp ? 0 : f->backward) + (qg ? 0 : f->gradients);
    int group_across = 0, cross_across = 0; // peers on other hosts
    for (int k = 0; k < G; k++) group_across += k != group_rank && is_across(rank, group_index * G + k, ctx);
    for (int m = 0; m < H; m++) cross_across += m != group_index && is_across(rank, m * G + group_rank, ctx);
    long long a = N > 1 && is_across(rank, (rank + 1) % N, ctx) ? ring : 0;
    if (hp && G > 1) a += f->backward / (G - 1) * group_across;
    if (qg && G > 1) a += f->gradients_within_group / (G - 1) * group_across;
    if (qg && H > 1) a += f->gradients_across_groups / (H - 1) * cross_across;
    *across = a;
    *within = f->forward + f->backward + f->gradients - a;
}

#if !ZERO_GPU_BUILD // (the state, ZeroPP: zero/zeropp/zeropp_state.h)
static const ParamUnit* zero_pp_unit(const ZeroEngine* z, int unit) { return &z->layout->units[unit]; }
#endif // !ZERO_GPU_BUILD (the host helpers and -hp's check below serve the GPU build too)

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

#if !ZERO_GPU_BUILD
// The packet words of one rank's slice (qwZ) or one chunk (qgZ) of S elements: every count of
// the bytes (buffers, the collectives, the formulas below) takes them from here.
static size_t zero_pp_weight_packet_words(const ZeroPP* pp, size_t S) { return zero_pp_packet_words(S, 8, pp->block); }
static size_t zero_pp_grad_packet_words(const ZeroPP* pp, size_t S) { return zero_pp_packet_words(S, pp->qg_bits, pp->grad_block); }

// Set up ZeRO++ on an initialized engine (every rank, flags checked): communicators and buffers.
// block: -qb (weights), grad_block: -qbg (gradients).
static void zero_pp_setup(ZeroEngine* z, int qw, int qg, int qg_bits, int hp, int block, int grad_block) {
    if (!qw && !qg && hp == 1) return;
    ZeroPP* pp = (ZeroPP*)zero_calloc(1, sizeof(ZeroPP), "ZeRO++ state");
    const ParamLayout* layout = z->layout;
    int N = z->world_size;
    pp->qw = qw; pp->qg = qg; pp->qg_bits = qg_bits; pp->block = block; pp->grad_block = grad_block;
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
        size_t words = (size_t)N * zero_pp_weight_packet_words(pp, max_unit / (size_t)N);
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
        size_t chunk_bytes = 4 * zero_pp_grad_packet_words(pp, max_unit / (size_t)N);
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

/*
 * The model says which pass the gathers from now on serve: 0 forward, 1 backward (hpZ serves
 * backward from the secondary). A prefetch belongs to the pass of its use: the trainer switches
 * to 1 before forward's last LM-head chunk prefetches backward's first wte unit.
 */
static void zero_pp_pass(ZeroEngine* z, int backward) { if (z->pp) z->pp->backward = backward; }
static int zero_pp_on(const ZeroEngine* z) { return z->pp != NULL; } // any of -qw, -qg, -hp

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
 *   forward pass, or a wte unit for backward's LM-head recompute (hpZ off), qwZ: quantize the
 *       shard into packet `rank` (W words), ring all-gather of the N packets ((N-1) W words
 *       sent); zero_pp_gather_done dequantizes them into w->data. The recompute so computes with
 *       the weights forward's softmax statistics came from (hpZ's secondary holds them too).
 */
static int zero_pp_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit, const float* mine) {
    ZeroPP* pp = z->pp;
    if (pp == NULL) return 0;
    const ParamUnit* u = zero_pp_unit(z, unit);
    int N = z->world_size, i = (int)(w - z->param_work);
    pp->dequantize_age[i] = -1;
    pp->forward_gather[i] = !pp->backward;
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
    if (pp->qw && (!pp->backward || zero_pp_wte_unit(z->layout, unit))) {
        size_t S = u->shard_numel, W = zero_pp_weight_packet_words(pp, S);
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
        size_t S = u->shard_numel, W = zero_pp_weight_packet_words(pp, S);
        for (int r = 0; r < z->world_size; r++) zero_pp_unpack(w->data + (size_t)r * S, pp->packets[i] + (size_t)r * W, S, 8, pp->block, 0);
        pp->dequantize_age[i] = -1;
    }
    if (pp->hp > 1 && pp->forward_gather[i]) {
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
    int G = pp->group_size, H = pp->num_groups, l = pp->group_rank, g = pp->group_index, bits = pp->qg_bits, b = pp->grad_block;
    size_t S = u->shard_numel, Q = 4 * zero_pp_grad_packet_words(pp, S); // bytes a packet
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

static ZeroPPShape zero_pp_shape(const ZeroPP* pp) {
    ZeroPPShape s = {pp->qw, pp->hp, pp->qg, pp->qg_bits, pp->block, pp->grad_block, pp->group_size};
    return s;
}

// The formulas of the header (zero_pp_formula_bytes) in words (fp32) per rank per step.
static ZeroPPFormula zero_pp_formula(const ZeroEngine* z, int grad_accum_steps) {
    ZeroPPShape shape = {0};
    if (z->pp) shape = zero_pp_shape(z->pp);
    ZeroPPFormula f = zero_pp_formula_bytes(z->layout, ZERO_STAGE, -1, z->world_size, grad_accum_steps, 4, z->pp ? &shape : NULL);
    f.forward /= 4, f.backward /= 4, f.gradients /= 4, f.gradients_within_group /= 4, f.gradients_across_groups /= 4;
    return f;
}

static int zero_pp_across_of(int rank, int r, const void* ctx) { (void)rank; (void)ctx; return zero_pp_across(r); }

// This rank's split of the formula (the hosts from the handshake), in bytes per step.
static void zero_pp_formula_split(const ZeroEngine* z, int grad_accum_steps, long long* within, long long* across) {
    ZeroPPShape shape = zero_pp_shape(z->pp);
    ZeroPPFormula f = zero_pp_formula_bytes(z->layout, ZERO_STAGE, -1, z->world_size, grad_accum_steps, 4, &shape);
    zero_pp_formula_split_bytes(&f, z->world_size, &shape, z->rank, zero_pp_across_of, NULL, within, across);
}

// Start-up lines (rank 0): what ZeRO++ does, the memory it adds, the per-step formulas.
static void zero_pp_print_setup(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    ZeroPPFormula f = zero_pp_formula(z, grad_accum_steps);
    fprintf(out, "zero++: qwZ %s | hpZ %s | qgZ %s | blocks: weights %d, gradients %d elements | groups of %d ranks (%d groups)\n",
            pp->qw ? "on (int8 forward all-gather)" : "off", pp->hp > 1 ? "on" : "off",
            pp->qg ? (pp->qg_bits == 4 ? "on (int4 all-to-all)" : "on (int8 all-to-all)") : "off", pp->block, pp->grad_block,
            pp->group_size, pp->num_groups);
    if (pp->hp > 1)
        fprintf(out, "zero++: hpZ secondary shard %zu bytes per rank; formula 4Ψ/K = 4 x %zu / %d = %zu (%s)\n", pp->bytes_secondary,
                z->layout->padded_numel, pp->hp, 4 * (z->layout->padded_numel / (size_t)pp->hp),
                pp->bytes_secondary == 4 * (z->layout->padded_numel / (size_t)pp->hp) ? "equal" : "DIFFERENT");
    fprintf(out, "zero++: bytes per rank per step (A = %d): forward gathers %lld, backward gathers %lld, gradients %lld = %lld "
            "(formulas in zero/zeropp/zeropp.h; plain stage %d: %lld) | buffers %zu bytes\n",
            grad_accum_steps, 4 * f.forward, 4 * f.backward, 4 * f.gradients, 4 * (f.forward + f.backward + f.gradients), ZERO_STAGE,
            4 * zero_elements_sent_formula(ZERO_STAGE, z->layout->padded_numel, z->world_size, grad_accum_steps,
                                         zero_embedding_numel(z->layout), zero_hook_tied_block_numel(z)), pp->bytes_buffers);
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
             "\"zeropp_grad_block\":%d,\"zeropp_group_size\":%d,\"zeropp_formula_forward_words\":%lld,\"zeropp_formula_backward_words\":%lld,"
             "\"zeropp_formula_gradient_words\":%lld,\"zeropp_bytes_secondary\":%zu",
             pp ? pp->qw : 0, pp ? pp->qg : 0, pp ? pp->qg_bits : 0, pp ? pp->hp : 1, pp ? pp->block : 0,
             pp ? pp->grad_block : 0, pp ? pp->group_size : 1,
             f.forward, f.backward, f.gradients, pp ? pp->bytes_secondary : 0);
    return buf;
}

// The CPU engine's ZeRO++ hooks (declared in zero/hooks.h, called by zero/engine_cpu.h).
static int zero_hook_pp_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    return zero_pp_param_gather(z, w, unit, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit));
}
static void zero_hook_pp_gather_done(ZeroEngine* z, ZeroWorkingUnit* w) { zero_pp_gather_done(z, w); }
static int zero_hook_pp_grad_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit) { return zero_pp_grad_reduce_scatter(z, w, unit); }
static void zero_hook_pp_step_begin(ZeroEngine* z) { zero_pp_step_begin(z); }
static void zero_hook_pp_free(ZeroEngine* z) { zero_pp_free(z); }
#endif // !ZERO_GPU_BUILD (the GPU build's part: zero/zeropp/zeropp_gpu.cuh)

#endif // ZERO_ZEROPP_H
