/*
 * attention.h: causal multi-head self-attention, CPU (fp32). Twin of kernels/attention.cuh.
 * Shapes: qkv (B,T,3C) holds q, k, v in that order along the last dim; head h uses channels
 * [h*HS, (h+1)*HS) of each, HS = C/NH. out (B,T,C) is the heads concatenated.
 * att (B,NH,T,T) keeps the softmax probabilities (row t uses columns 0..t) for backward.
 * forward:  att = softmax(q k^T / sqrt(HS)) with the causal mask, out = att v
 *           (Vaswani et al. 2017, "Attention Is All You Need", eq. 1).
 * backward: accumulates into dqkv (B,T,3C). Softmax backward: dpre = p * (dp - sum_j p_j dp_j).
 * The CPU build materializes att (T x T per head); it is the reference, not the fast path.
 */
#ifndef CPU_ATTENTION_H
#define CPU_ATTENTION_H
#include <math.h>
#include <stdlib.h>

static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                float* p = att + (((size_t)b * NH + h) * T + t) * T;
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) dot += q[i] * k[i];
                    dot *= scale;
                    p[t2] = dot;
                    if (dot > maxval) maxval = dot;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { p[t2] = expf(p[t2] - maxval); sum += p[t2]; }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) p[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) p[t2] = 0.0f;
                float* o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    for (int i = 0; i < HS; i++) o[i] += p[t2] * v[i];
                }
            }
        }
    }
}

static void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                               int B, int T, int C, int NH) {
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    // Parallel over (b, h): every write below lands in this head's channels of batch row b.
    #pragma omp parallel
    {
        float* dp = (float*)malloc((size_t)T * sizeof(float));
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    const float* p = att + (((size_t)b * NH + h) * T + t) * T;
                    const float* d = dout + ((size_t)b * T + t) * C + h * HS;
                    const float* q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                    float* dq = dqkv + ((size_t)b * T + t) * C3 + h * HS;
                    float dot_pdp = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                        float* dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                        float s = 0.0f;
                        for (int i = 0; i < HS; i++) { s += d[i] * v[i]; dv[i] += p[t2] * d[i]; }
                        dp[t2] = s;
                        dot_pdp += p[t2] * s;
                    }
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dpre = p[t2] * (dp[t2] - dot_pdp) * scale;
                        const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                        float* dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                        for (int i = 0; i < HS; i++) { dq[i] += dpre * k[i]; dk[i] += dpre * q[i]; }
                    }
                }
            }
        }
        free(dp);
    }
}

#endif
