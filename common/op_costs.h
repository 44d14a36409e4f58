/*
 * op_costs.h: floating-point operations and the fewest device-memory bytes of each op family of
 * one GPU training step (forward, backward, optimizer), for GPT-2 at (B, T, C, L, NH, Vp) with A
 * micro-steps, as the CUDA build computes it (bf16 activations and weights, fp32 master weights,
 * Adam state and accumulated gradients). The per-kernel table of train_gpt2cu -ot reads measured
 * times against these; dev/op_table.py computes the same numbers independently (t_65 compares
 * them) and prints the theoretical table for any config. Host C, header-only.
 *
 * Counting rules (per micro-step unless said; N = B*T tokens; bytes: each operand read once,
 * each result written once, 2 bytes per bf16 and 4 per fp32 element; what a kernel re-reads from
 * cache is not counted):
 *   GEMM (M rows, K -> OUT): 2 M K OUT FLOPs. Forward bytes: input M K, weight OUT K, output
 *     M OUT (+ M OUT for the GELU input the GELU_AUX epilogue stores). Backward: the input
 *     gradient (dout, weight in; dinp out; + the GELU input read by DGELU) and the weight
 *     gradient (input, dout in; dweight read and written: it accumulates) GEMMs, 4 M K OUT FLOPs.
 *   Layer GEMMs: qkv (C -> 3C), attproj (C -> C), fc (C -> 4C, GELU), fcproj (4C -> C):
 *     24 N C^2 forward FLOPs per layer. LM head (C -> Vp) separately.
 *   Attention (causal, FlashAttention-style, no T x T matrix in memory): QK^T and PV are
 *     2 B T^2 C FLOPs each without the mask, half of it causal: 2 B T^2 C forward; the backward
 *     recomputes S (one product) and forms dV, dP, dQ, dK: 5 products, 5 B T^2 C. Bytes:
 *     forward q, k, v in (3 N C), out (N C) and the log-sum-exp rows (B NH T fp32) out;
 *     backward q, k, v, out, dout, lse in, dq, dk, dv out.
 *   LayerNorm: forward reads its input (and the residual branch, fused: layers' ln1 past the
 *     first, ln2, lnf), writes the residual stream (fused) and the output, and mean, rstd (fp32);
 *     backward reads x, dout, dinp (it accumulates), mean, rstd, writes dinp. 2L + 1 of them.
 *   Classifier: logits read, dlogits written in place (N Vp each), targets and losses.
 *   Encoder: forward gathers N rows of wte, reads wpe (T C), writes N C; backward reads dout and
 *     adds into the wpe rows and the distinct tokens' wte rows (counted as N rows: an upper bound).
 *   Engine (per micro-step, compute stream): each unit's bf16 gradient zeroed before backward
 *     writes it (2 Ψ bytes); the fp32 accumulation runs on the comm stream, beside compute.
 *   Optimizer (per step): global norm of the fp32 gradient (4 Ψ), AdamW reading the gradient,
 *     master weights, m, v and writing master, m, v (fp32) and the bf16 parameters: 30 Ψ.
 * FLOPs count only the tensor-core work (GEMMs, attention products); the element-wise ops'
 * arithmetic is small beside their bytes and is left out (their rows are memory-bound).
 * The model's 6N + 6LCT per token (MFU, train_gpt2.cu) counts the same GEMM FLOPs (6 x the
 * GEMM weights; the embedding, LayerNorm and bias parameters are 1% of N) and 3 x the causal
 * attention forward; the backward here is 2.5 x (the recompute of S).
 */
#ifndef COMMON_OP_COSTS_H
#define COMMON_OP_COSTS_H
#include <stddef.h>

typedef enum {
    OP_ENCODER, OP_LAYERNORM_FWD, OP_LAYERNORM_BWD, OP_MATMUL_FWD, OP_MATMUL_BWD, OP_ATTENTION_FWD, OP_ATTENTION_BWD,
    OP_LM_HEAD_FWD, OP_LM_HEAD_BWD, OP_CLASSIFIER, OP_OPTIMIZER, OP_ENGINE, OP_OTHER, OP_NUM_FAMILIES
} OpFamily;

static const char* const op_family_names[OP_NUM_FAMILIES] = {
    "encoder fwd+bwd", "layernorm fwd (+residual)", "layernorm bwd", "matmul fwd (layers, +GELU)",
    "matmul bwd (layers, +dGELU, dbias)", "attention fwd", "attention bwd", "lm head fwd (matmul)",
    "lm head bwd (matmul)", "classifier (softmax, loss, dlogits)", "optimizer (norm, clip, AdamW)",
    "engine (grad zeroing, waits on comm)", "other (inputs, GNS norm)"};

typedef struct { double flops, bytes; } OpCost;

// 2-byte elements of a bf16 tensor, 4 of an fp32 one.
#define OP_BF16 2.0
#define OP_FP32 4.0

static inline OpCost op_gemm_forward(double M, double K, double OUT, int gelu_aux) {
    OpCost c = {2.0 * M * K * OUT, OP_BF16 * (M * K + OUT * K + M * OUT * (gelu_aux ? 2.0 : 1.0))};
    return c;
}

static inline OpCost op_gemm_backward(double M, double K, double OUT, int dgelu) {
    double dinp = M * OUT + OUT * K + M * K + (dgelu ? M * K : 0.0);
    double dweight = M * K + M * OUT + 2.0 * OUT * K;
    OpCost c = {4.0 * M * K * OUT, OP_BF16 * (dinp + dweight)};
    return c;
}

/*
 * The cost of every family for one step: A micro-steps of B x T, psi = padded parameter count.
 * The engine's waits on the communication stream have no cost here (they are what the measured
 * table shows as exposed communication).
 */
static inline void op_costs_step(OpCost cost[OP_NUM_FAMILIES], int B, int T, int C, int L, int NH, int Vp, int A,
                                 size_t psi) {
    double N = (double)B * T, c = C, l = L, vp = Vp, a = A, p = (double)psi;
    for (int f = 0; f < OP_NUM_FAMILIES; f++) cost[f].flops = cost[f].bytes = 0.0;
    // Layer GEMMs, forward and backward: qkv, attproj, fc (GELU), fcproj (DGELU on its input gradient).
    const double shapes[4][3] = {{c, 3 * c, 0}, {c, c, 0}, {c, 4 * c, 1}, {4 * c, c, 0}};
    for (int g = 0; g < 4; g++) {
        OpCost f = op_gemm_forward(N, shapes[g][0], shapes[g][1], shapes[g][2] != 0);
        OpCost b = op_gemm_backward(N, shapes[g][0], shapes[g][1], g == 3);
        cost[OP_MATMUL_FWD].flops += l * f.flops; cost[OP_MATMUL_FWD].bytes += l * f.bytes;
        cost[OP_MATMUL_BWD].flops += l * b.flops; cost[OP_MATMUL_BWD].bytes += l * b.bytes;
    }
    OpCost head_f = op_gemm_forward(N, c, vp, 0), head_b = op_gemm_backward(N, c, vp, 0);
    cost[OP_LM_HEAD_FWD] = head_f;
    cost[OP_LM_HEAD_BWD] = head_b;
    double lse = (double)B * NH * T * OP_FP32;
    cost[OP_ATTENTION_FWD].flops = l * 2.0 * B * (double)T * T * c;
    cost[OP_ATTENTION_FWD].bytes = l * (OP_BF16 * (3 * N * c + N * c) + lse);
    cost[OP_ATTENTION_BWD].flops = l * 5.0 * B * (double)T * T * c;
    cost[OP_ATTENTION_BWD].bytes = l * (OP_BF16 * (3 * N * c + N * c + N * c + 3 * N * c) + lse);
    // LayerNorms: 2L + 1; all but the first layer's ln1 read a residual branch and write the stream.
    double stats = 2.0 * N * OP_FP32, n_ln = 2 * l + 1, fused = 2 * l;
    cost[OP_LAYERNORM_FWD].bytes = n_ln * (OP_BF16 * 2 * N * c + stats) + fused * OP_BF16 * 2 * N * c;
    cost[OP_LAYERNORM_BWD].bytes = n_ln * (OP_BF16 * 4 * N * c + stats);
    cost[OP_CLASSIFIER].bytes = OP_BF16 * 2 * N * vp + N * (4.0 + OP_FP32);
    cost[OP_ENCODER].bytes = OP_BF16 * (N * c + (double)T * c + N * c) + N * 4.0     // forward
                           + OP_BF16 * (N * c + 2 * (double)T * c + 2 * N * c);       // backward
    cost[OP_ENGINE].bytes = OP_BF16 * p;                                             // zeroing
    for (int f = 0; f < OP_NUM_FAMILIES; f++) { cost[f].flops *= a; cost[f].bytes *= a; }
    cost[OP_OPTIMIZER].bytes = (OP_FP32 + 30.0) * p;                                 // per step
}

#endif // COMMON_OP_COSTS_H
