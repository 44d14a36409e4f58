/*
 * plan/plan_zeropp.h: the planner's ZeRO++ rows (zero/zeropp/zeropp.h; Wang et al. 2023): stage 3 with
 * qwZ (int8 forward all-gather), hpZ (backward all-gather from a secondary shard over K ranks)
 * and qgZ (the gradient reduce-scatter as two all-to-alls of int4/int8 codes), for a world the
 * planner does not run. Part of the planner (the overview in
 * plan/plan.h).
 *
 * Bytes per rank per step, and their split within a node / across nodes, are zero/zeropp/zeropp.h's
 * own formulas (zero_pp_formula_bytes, zero_pp_formula_split_bytes: the functions both builds
 * print their accounting from), evaluated for the planned world with ranks placed node by node;
 * the simulated schedule (plan/plan_schedule.h) issues each unit's share of them (the formula
 * for one unit) where the engine issues it: wte's K vocab-chunk units gathered twice in forward
 * (encoder, LM head) and once in backward (the LM head's recompute: from the hpZ secondary, else
 * as qwZ packets), their gradients reduced twice (the LM head's part, the encoder's rows).
 * Times, alpha-beta as the rings (plan/plan_comm.h):
 *   qwZ gather    a ring all-gather of N packets: N-1 steps of one packet (W words);
 *   hpZ gather    a ring all-gather within the group of K: K-1 steps of P/K elements, on the
 *                 links within a node when the group lies inside one (K divides the ranks per
 *                 node), else on the ring's links across nodes;
 *   qgZ           all-to-all within the group (G-1 messages of H packets each), then across the
 *                 H groups (H-1 messages of one packet), pairwise exchange; across nodes every
 *                 rank of a node sends at once, so each gets 1/rpn of the node's bandwidth;
 *   (de)quantize  streaming passes at quant_bw (the machine's quant_gbs, measured on the cpu
 *                 machine: cpu/quantize.h over 1M elements; else its element-wise memory rate):
 *                 quantize reads e and writes bits/8 bytes an element, dequantize (and add)
 *                 reads bits/8 and writes e (qgZ: reads and writes its fp32 sums, 8). CPU build:
 *                 on the compute side (qwZ quantizes at issue, dequantizes at first use; qgZ
 *                 runs blocking in the unit's gradient hand-off, as zero_pp_grad_reduce_scatter
 *                 does). GPU build (zero/zeropp/zeropp_gpu.cuh): all of it on the comm stream, inside
 *                 the collective's time (the compute side does not wait for qgZ there).
 * Memory per rank: hpZ's secondary shard (Ψ/K elements: fp32 CPU, bf16 GPU), qwZ's packet
 * buffers (one per parameter working unit: N packets of the largest unit's shard) and qgZ's
 * send and receive buffers (N packets, -qbg's blocks) and fp32 partial sums (H shards; the GPU
 * build also the unit in fp32 and its reduced chunk), as zero_pp_setup allocates them
 * (tests/t_66_plan_trace.sh checks the CPU build's against a run's).
 */
#ifndef ZERO_PLAN_ZEROPP_H
#define ZERO_PLAN_ZEROPP_H
#ifndef ZERO_CUH
#error "plan/plan_zeropp.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

// The ZeRO++ flags of a plan (-qw, -hp, -qg, -qgb, -qb, -qbg, as the trainer takes them); given: any set.
typedef struct { int given, qw, qg, qg_bits, hp, block, grad_block; } PlanPPFlags;

typedef struct {
    char label[48];          // "qwZ", "hpZ K=8", "qgZ int4", "qwZ+hpZ+qgZ"
    ZeroPPShape shape;       // flags and groups as zero/zeropp/zeropp.h's formulas take them
    int num_groups;          // H = N / G
    const ParamLayout* layout;
    int N, rpn, nodes, element_bytes;
    double quant_bw;         // bytes/s of the (de)quantize passes
    int gpu_build;           // the (de)quantize kernels and qgZ's sums run on the comm stream
    PlanNet ring;            // the world's ring (plan/plan_comm.h)
    double group_alpha, group_beta; // hpZ's gather and qgZ's first all-to-all
    double cross_alpha, cross_beta; // qgZ's second all-to-all
} PlanPP;

/*
 * Set up a row for the flags (as the trainer takes them: hp 1 off, 0 the ranks of a node) on N
 * ranks, rpn per node. Returns 0, or -1 after one error line (hpZ's K must divide N).
 */
static int plan_pp_init(PlanPP* p, const PlanPPFlags* fl, const ParamLayout* layout, const PlanNet* ring, const PlanMachine* m, int rpn,
                        int element_bytes, int gpu_build, double quant_bw) {
    int qw = fl->qw, qg = fl->qg, qg_bits = fl->qg_bits, hp = fl->hp;
    memset(p, 0, sizeof(*p));
    int N = ring->N, host_block = N % rpn == 0 ? rpn : 0; // zero_pp_host_block: ranks placed node by node
    int K = hp == 0 ? host_block : hp;
    if (hp == 0 && host_block == 0) {
        fprintf(stderr, "error: -hp 0: %d ranks per node do not divide the %d ranks; expected -hp K with K dividing %d\n", rpn, N, N);
        return -1;
    }
    if (K > 1 && N % K != 0) {
        fprintf(stderr, "error: -hp %d: does not divide the %d ranks; expected a divisor of %d (ranks per secondary group)\n", K, N, N);
        return -1;
    }
    int G = K > 1 ? K : host_block > 0 ? host_block : 1;
    ZeroPPShape s = {qw, K > 1 ? K : 1, qg, qg_bits, fl->block, fl->grad_block, G};
    p->shape = s;
    p->num_groups = N / G;
    p->layout = layout;
    p->N = N;
    p->rpn = rpn;
    p->nodes = ring->nodes;
    p->element_bytes = element_bytes;
    p->quant_bw = quant_bw;
    p->gpu_build = gpu_build;
    p->ring = *ring;
    // A group inside one node talks over the node's links; one that spans nodes, over the ring's.
    int group_in_node = G <= rpn && rpn % G == 0;
    p->group_alpha = group_in_node ? m->intra_lat : ring->alpha;
    p->group_beta = group_in_node ? m->intra_bw : ring->beta;
    // qgZ's second all-to-all: peers in other groups; across nodes all of a node's ranks send at once.
    p->cross_alpha = ring->nodes > 1 ? fmax(m->intra_lat, m->inter_lat) : m->intra_lat;
    p->cross_beta = ring->nodes > 1 ? fmin(m->intra_bw, m->inter_bw / rpn) : m->intra_bw;
    char* l = p->label;
    size_t cap = sizeof(p->label);
    l[0] = '\0';
    if (qw) snprintf(l + strlen(l), cap - strlen(l), "qwZ");
    if (s.hp > 1) snprintf(l + strlen(l), cap - strlen(l), "%shpZ K=%d", l[0] ? "+" : "", s.hp);
    if (qg) snprintf(l + strlen(l), cap - strlen(l), "%sqgZ int%d", l[0] ? "+" : "", qg_bits);
    if (!l[0]) snprintf(l, cap, "none");
    return 0;
}

// Is rank r on another node than `rank` (ranks placed node by node, ctx: ranks per node)?
static int plan_pp_across(int rank, int r, const void* ctx) { int rpn = *(const int*)ctx; return r / rpn != rank / rpn; }

// zero/zeropp/zeropp.h's formula at stage 3 in bytes per rank per step: all units (unit -1) or one unit's share.
static ZeroPPFormula plan_pp_formula(const PlanPP* p, int A, int unit) {
    return zero_pp_formula_bytes(p->layout, 3, unit, p->N, A, p->element_bytes, &p->shape);
}

// zero/zeropp/zeropp.h's formula split for `rank`, bytes per step.
static void plan_pp_split(const PlanPP* p, int A, int rank, long long* within, long long* across) {
    ZeroPPFormula f = plan_pp_formula(p, A, -1);
    zero_pp_formula_split_bytes(&f, p->N, &p->shape, rank, plan_pp_across, &p->rpn, within, across);
}

// Bytes leaving each node per step: the split's across part of every rank of the first node.
static double plan_pp_node_across(const PlanPP* p, int A) {
    double sum = 0.0;
    for (int r = 0; r < p->rpn && r < p->N; r++) {
        long long within, across;
        plan_pp_split(p, A, r, &within, &across);
        sum += (double)across;
    }
    return sum;
}

// What ZeRO++ allocates per rank besides plain stage 3 (zero_pp_setup's sizes).
static void plan_pp_memory(const PlanPP* p, size_t* secondary, size_t* buffers) {
    const ZeroPPShape* s = &p->shape;
    size_t max_unit = 0, N = (size_t)p->N;
    for (int u = 0; u < p->layout->num_units; u++) if (p->layout->units[u].padded_numel > max_unit) max_unit = p->layout->units[u].padded_numel;
    *secondary = s->hp > 1 ? p->layout->padded_numel / (size_t)s->hp * (size_t)p->element_bytes : 0;
    *buffers = 0;
    if (s->qw) *buffers += ZERO_WORKING_UNITS * N * zero_pp_packet_words(max_unit / N, 8, s->block) * sizeof(float);
    if (s->qg) *buffers += 2 * N * 4 * zero_pp_packet_words(max_unit / N, s->qg_bits, s->grad_block) +
                           (size_t)p->num_groups * (max_unit / N) * sizeof(float);
    if (s->qg && p->gpu_build) *buffers += (max_unit + max_unit / N) * sizeof(float); // the unit in fp32, the reduced chunk
}

static double plan_pp_stream(const PlanPP* p, double elements, double bytes_per_element) {
    return p->quant_bw > 0 ? elements * bytes_per_element / p->quant_bw : 0.0;
}

/*
 * The stage-3 parameter gather of `unit` for forward (backward = 0) or backward, ZeRO++'s way:
 * returns 0 when it is the plain ring all-gather, else 1 with its link time, elements sent
 * (the formula's share of the unit, in elements of e bytes), the compute side's (de)quantize seconds and its label.
 */
static int plan_pp_gather(const PlanPP* p, int unit, int backward, double* link_s, long long* elements, double* quantize_s,
                          double* dequantize_s, const char** what) {
    const ZeroPPShape* s = &p->shape;
    const ParamUnit* u = &p->layout->units[unit];
    double e = p->element_bytes;
    *quantize_s = *dequantize_s = 0.0;
    ZeroPPFormula f = plan_pp_formula(p, 1, unit); // bytes
    if (backward && s->hp > 1) {
        int K = s->hp;
        *elements = f.backward / (long long)e;
        *link_s = (K - 1) * (p->group_alpha + (double)(u->padded_numel / (size_t)K) * e / p->group_beta);
        *what = "parameters (hpZ secondary shard)";
        return 1;
    }
    // The formula's share of this gather: forward gathers wte's chunks twice (encoder, LM head);
    // a count other than the ring's is qwZ's packets (forward; and backward's gathers of wte's
    // chunks for the LM head's recompute, which the formula counts as packets).
    long long plain = zero_ring_all_gather_elements(u->padded_numel, p->N);
    *elements = (backward ? f.backward : f.forward / (zero_pp_wte_unit(p->layout, unit) ? 2 : 1)) / (long long)e;
    if (s->qw && p->N > 1 && *elements != plain) {
        double packet = 4.0 * zero_pp_packet_words(u->shard_numel, 8, s->block);
        *link_s = plan_ring_chunk_seconds(&p->ring, packet, p->N - 1, 0);
        double q = plan_pp_stream(p, (double)u->shard_numel, e + 1.0), dq = plan_pp_stream(p, (double)u->padded_numel, 1.0 + e);
        if (p->gpu_build) *link_s += q + dq;
        else { *quantize_s = q; *dequantize_s = dq; }
        *what = "parameters (qwZ int8 codes)";
        return 1;
    }
    return 0;
}

/*
 * qgZ's two all-to-alls of one reduction of `unit` (zero_pp_grad_reduce_scatter; a wte chunk
 * has two a micro-step, the formula counts both): elements and link seconds of each, and the
 * (de)quantize seconds before and after each (the compute side's in the CPU build, the comm
 * stream's in the GPU build: planned there as link time).
 */
typedef struct { long long elements[2]; double link_s[2], quantize_s[2], dequantize_s[2]; } PlanPPReduce;
static PlanPPReduce plan_pp_reduce(const PlanPP* p, int unit) {
    const ZeroPPShape* s = &p->shape;
    const ParamUnit* u = &p->layout->units[unit];
    int G = s->group_size, H = p->num_groups;
    double e = p->element_bytes, code = s->qg_bits / 8.0, S = (double)u->shard_numel;
    ZeroPPFormula f = plan_pp_formula(p, 1, unit); // bytes
    long long per = (long long)e * (zero_pp_wte_unit(p->layout, unit) ? 2 : 1); // elements of e bytes, one reduction
    PlanPPReduce r;
    r.elements[0] = f.gradients_within_group / per;
    r.elements[1] = f.gradients_across_groups / per;
    r.link_s[0] = G > 1 ? plan_all_to_all_seconds(G, (double)r.elements[0] * e / (G - 1), p->group_alpha, p->group_beta) : 0.0;
    r.link_s[1] = H > 1 ? plan_all_to_all_seconds(H, (double)r.elements[1] * e / (H - 1), p->cross_alpha, p->cross_beta) : 0.0;
    // Phase 1: quantize (G-1) H chunks, dequantize them into fp32 partial sums; phase 2 the same with H-1.
    double n1 = (double)(G - 1) * H * S, n2 = (double)(H - 1) * S;
    r.quantize_s[0] = plan_pp_stream(p, n1, e + code);
    r.dequantize_s[0] = plan_pp_stream(p, n1, code + 8.0);
    r.quantize_s[1] = plan_pp_stream(p, n2, 4.0 + code);
    r.dequantize_s[1] = plan_pp_stream(p, n2, code + 8.0);
    for (int k = 0; k < 2 && p->gpu_build; k++) { r.link_s[k] += r.quantize_s[k] + r.dequantize_s[k]; r.quantize_s[k] = r.dequantize_s[k] = 0.0; }
    return r;
}

#if !ZERO_GPU_BUILD
// The cpu machine's (de)quantize rate: cpu/quantize.h's int8 round trip over 1M elements, best
// of 3, as bytes streamed per second (4 + 1 quantizing, 1 + 4 dequantizing, per element).
static double plan_pp_measure_quant_bw(int block) {
    size_t n = (size_t)1 << 20;
    float* x = (float*)zero_calloc(n, sizeof(float), "plan quantize");
    float* scales = (float*)zero_calloc(quant_num_blocks(n, block), sizeof(float), "plan quantize");
    uint8_t* codes = (uint8_t*)zero_calloc(n, 1, "plan quantize");
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = zero_clock();
        quantize_blocks(codes, scales, x, n, 8, block);
        dequantize_blocks(x, codes, scales, n, 8, block, 0);
        double t = zero_clock() - t0;
        if (t < best) best = t;
    }
    free(x); free(scales); free(codes);
    return best > 0 ? 10.0 * (double)n / best : 0.0;
}
#endif

#endif // ZERO_PLAN_ZEROPP_H
