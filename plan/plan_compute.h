/*
 * plan/plan_compute.h: the planned model's work, per unit and micro-step: GEMM and attention
 * product FLOPs at the machine's matmul rate plus the element-wise ops' bytes at its memory
 * bandwidth (MFU's numerator is common/flops.h's). Part of the planner (the overview in plan/plan.h).
 */
#ifndef ZERO_PLAN_COMPUTE_H
#define ZERO_PLAN_COMPUTE_H
#ifndef ZERO_CUH
#error "plan/plan_compute.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

// flops at the matmul rate, bytes at the memory rate, seconds measured on the machine (cpu:
// plan/measure_ops.h) of which measured_flops are part (counted for the FLOP totals, not timed twice).
typedef struct { double flops, bytes, seconds, measured_flops; } PlanCost;

// Attention products' FLOPs for one layer and one product (Q K^T or P V): B x NH blocks of
// T/block query rows, each against the keys up to its block's end (causal), HS wide.
static double plan_attention_product_flops(const PlanModel* pm) {
    double B = pm->B, T = pm->T, C = pm->config->channels, blk = pm->attention_block > 0 ? pm->attention_block : 1;
    double blocks = ceil(T / blk), keys = 0.0;
    for (double b = 0; b < blocks; b++) keys += fmin(blk, T - b * blk) * fmin(T, (b + 1) * blk);
    return 2.0 * B * keys * C; // 2 flops per multiply-add; NH x HS = C
}

/*
 * One micro-step's work of each unit: fwd[u], bwd[u] for u = 0 (embedding: encoder), 1..L
 * (layers), L+1 (final LayerNorm); the LM head (tied wte) separately. GEMM FLOPs are 2 M K N
 * (backward 2x: input and weight gradients); layer GEMMs 24 BT C^2 forward. Element-wise bytes
 * (e = element_bytes): per layer forward 2 LayerNorms (read, write BT C), GELU (4 BT C in and
 * out), 2 residual adds (3 BT C), the attention output, and on the CPU the T x T probabilities
 * (written, read back); backward twice the forward's. LM head (over wte's vocab chunks, the
 * logits BT x R at a time; the whole LM head's work here, plan/plan_schedule.h splits it by
 * rows): forward writes and the classifier reads the logits; backward recomputes them (2 BT C Vp
 * more), the classifier reads them and writes dlogits in place.
 * When the machine measured its ops (m->ops_measured: the cpu machine, plan/measure_ops.h), a
 * layer's non-GEMM ops and attention, and the classifier, are those measured seconds instead of
 * bytes and attention FLOPs: their byte counts predicted them poorly (scalar expf over BT x Vp
 * logits, attention's 64-row per-head sgemms, GELU's polynomial; dev/bench/op_profile.c).
 */
static void plan_unit_costs(const PlanModel* pm, const PlanMachine* m, PlanCost* fwd, PlanCost* bwd, PlanCost* head_fwd, PlanCost* head_bwd) {
    const GPT2Config* c = pm->config;
    double BT = (double)pm->B * pm->T, C = c->channels, Vp = c->padded_vocab_size, e = pm->element_bytes;
    double att = plan_attention_product_flops(pm);
    double att_matrix = pm->stores_attention_matrix ? att / (2.0 * C) * c->num_heads * e : 0.0; // B NH (T x T causal) elements
    int L = c->num_layers;
    int measured = m != NULL && m->ops_measured;
    memset(fwd, 0, sizeof(*fwd) * (size_t)(L + 2));
    memset(bwd, 0, sizeof(*bwd) * (size_t)(L + 2));
    memset(head_fwd, 0, sizeof(*head_fwd));
    memset(head_bwd, 0, sizeof(*head_bwd));
    fwd[0].bytes = 3.0 * BT * C * e;          // encoder: gather wte rows, wpe, write
    bwd[0].bytes = 3.0 * BT * C * e;
    for (int l = 1; l <= L; l++) {
        fwd[l].flops = 24.0 * BT * C * C + 2.0 * att;
        fwd[l].bytes = BT * C * e * (2 * 2 + 8 + 2 * 3 + 2) + 2.0 * att_matrix;
        bwd[l].flops = 48.0 * BT * C * C + pm->attention_backward_products * att;
        bwd[l].bytes = 2.0 * fwd[l].bytes;
        if (measured) {
            fwd[l].bytes = bwd[l].bytes = 0.0;
            fwd[l].measured_flops = 2.0 * att;
            bwd[l].measured_flops = pm->attention_backward_products * att;
            fwd[l].seconds = m->op_layer_fwd_s;
            bwd[l].seconds = m->op_layer_bwd_s;
        }
    }
    fwd[L + 1].bytes = 2.0 * BT * C * e;
    bwd[L + 1].bytes = 4.0 * BT * C * e;
    head_fwd->flops = 2.0 * BT * C * Vp;
    head_fwd->bytes = 2.0 * BT * Vp * e;
    head_bwd->flops = 6.0 * BT * C * Vp;
    head_bwd->bytes = 3.0 * BT * Vp * e;
    if (measured) {
        head_fwd->bytes = head_bwd->bytes = 0.0;
        head_fwd->seconds = m->op_head_fwd_s;
        head_bwd->seconds = m->op_head_bwd_s;
    }
}

/*
 * One rank's matmul FLOP/s and memory bytes/s on machine m, its node running rpn ranks. Measured
 * under the sharing when the machine has them (cpu: rank_flops from plan/measure.h's
 * measure_rank_rates, every rank that shares these cores running at once); else the device's
 * rates, peak_flops x gemm_eff and mem_bw, times the share of a CPU node's cores one rank's
 * threads get when the node's ranks oversubscribe it (cores / (rpn x threads) < 1). Returns the
 * share (1: none, or measured).
 */
static double plan_rank_rates(const PlanMachine* m, int rpn, double* flops, double* mem_bw) {
    if (m->rank_flops > 0.0 && m->rank_mem_bw > 0.0) {
        *flops = m->rank_flops;
        *mem_bw = m->rank_mem_bw;
        return 1.0;
    }
    double share = 1.0;
    if (m->cores > 0 && m->threads_per_rank > 0 && (double)rpn * m->threads_per_rank > m->cores)
        share = (double)m->cores / ((double)rpn * m->threads_per_rank);
    *flops = m->peak_flops * m->gemm_eff * share;
    *mem_bw = m->mem_bw * share;
    return share;
}

// ops_scale: how much slower the measured ops run for this rank than they did measured alone
// (plan_ops_scale; 1 when alone).
static double plan_cost_seconds(const PlanCost* c, double flops_rate, double mem_bw, double ops_scale) {
    return (c->flops - c->measured_flops) / flops_rate + c->bytes / mem_bw + c->seconds * ops_scale;
}

/*
 * The measured ops (plan/measure_ops.h) were timed by one rank alone on its threads; when ranks
 * share the cores the plan's rates are the ones one rank gets with all running (rank_flops,
 * rank_mem_bw, or the cores' share): the ops slow down as the GEMMs do (compute: the classifier's
 * exp, attention, GELU) or as the stream does (memory: the optimizer, the zeroing). Returns the
 * GEMM rate's ratio, *mem_scale the streaming rate's (both 1 when not shared).
 */
static double plan_ops_scale(const PlanMachine* m, double flops, double mem_bw, double* mem_scale) {
    double solo_flops = m->peak_flops * m->gemm_eff;
    *mem_scale = m->mem_bw > 0.0 && mem_bw > 0.0 && m->mem_bw > mem_bw ? m->mem_bw / mem_bw : 1.0;
    return solo_flops > 0.0 && flops > 0.0 && solo_flops > flops ? solo_flops / flops : 1.0;
}

#endif // ZERO_PLAN_COMPUTE_H
