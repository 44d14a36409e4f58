/*
 * attention.h: causal multi-head self-attention, CPU (fp32). Twin of kernels/attention.cuh.
 * Shapes: qkv (B,T,3C) holds q, k, v in that order along the last dim; head h uses channels
 * [h*HS, (h+1)*HS) of each, HS = C/NH. out (B,T,C) is the heads concatenated.
 * att (B,NH,T,T) keeps the softmax probabilities (row t uses columns 0..t, zeros after) for backward.
 * forward:  att = softmax(q k^T / sqrt(HS)) with the causal mask, out = att v
 *           (Vaswani et al. 2017, "Attention Is All You Need", eq. 1).
 * backward: writes dqkv (B,T,3C) (every element: no zeroing needed). With dp = dout v^T,
 *           ds = p * (dp - sum_j p_j dp_j) / sqrt(HS) (softmax backward), dq = ds k, dk = ds^T q,
 *           dv = p^T dout.
 * Every product is an sgemm on strided views of qkv (row stride 3C, no copies), one (b, h) per
 * thread, in blocks of ATTENTION_ROWS query rows: block [r0, r1) only needs keys 0..r1-1, so the
 * causal mask skips all but a triangle of ATTENTION_ROWS^2/2 per block. The CPU build
 * materializes att (T x T per head); the GPU recomputes it from a log-sum-exp.
 */
#ifndef CPU_ATTENTION_H
#define CPU_ATTENTION_H
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "blas.h"
#include "vec_math.h"

#define ATTENTION_ROWS 64

static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * HS;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* p_head = att + ((size_t)b * NH + h) * T * T;
            float* o = out + (size_t)b * T * C + h * HS;
            for (int r0 = 0; r0 < T; r0 += ATTENTION_ROWS) {
                int r1 = r0 + ATTENTION_ROWS < T ? r0 + ATTENTION_ROWS : T;
                float* p = p_head + (size_t)r0 * T;
                // scores (r1-r0, r1) = q[r0:r1] k[0:r1]^T, unscaled
                blas_sgemm_row_major(0, 1, r1 - r0, r1, HS, q + (size_t)r0 * C3, C3, k, C3, 0.0f, p, T);
                for (int t = r0; t < r1; t++) {
                    float* row = p + (size_t)(t - r0) * T;
                    float maxval = -INFINITY;
                    for (int j = 0; j <= t; j++) maxval = row[j] > maxval ? row[j] : maxval;
                    float sum = 0.0f;
                    #pragma omp simd reduction(+ : sum)
                    for (int j = 0; j <= t; j++) { row[j] = vec_expf((row[j] - maxval) * scale); sum += row[j]; }
                    float inv = 1.0f / sum;
                    #pragma omp simd
                    for (int j = 0; j <= t; j++) row[j] *= inv;
                    memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float)); // masked: backward reads them as 0
                }
                // out[r0:r1] = p (r1-r0, r1) v[0:r1]
                blas_sgemm_row_major(0, 0, r1 - r0, HS, r1, p, T, v, C3, 0.0f, o + (size_t)r0 * C, C);
            }
        }
    }
}

static void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                               int B, int T, int C, int NH) {
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel
    {
        float* ds = (float*)malloc((size_t)ATTENTION_ROWS * T * sizeof(float)); // one block of dp, then ds
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float* q = qkv + (size_t)b * T * C3 + h * HS;
                const float* k = q + C;
                const float* v = q + 2 * C;
                float* dq = dqkv + (size_t)b * T * C3 + h * HS;
                float* dk = dq + C;
                float* dv = dq + 2 * C;
                const float* p_head = att + ((size_t)b * NH + h) * T * T;
                const float* d = dout + (size_t)b * T * C + h * HS;
                for (int t = 0; t < T; t++) { // dk, dv accumulate over the blocks below
                    memset(dk + (size_t)t * C3, 0, (size_t)HS * sizeof(float));
                    memset(dv + (size_t)t * C3, 0, (size_t)HS * sizeof(float));
                }
                for (int r0 = 0; r0 < T; r0 += ATTENTION_ROWS) {
                    int r1 = r0 + ATTENTION_ROWS < T ? r0 + ATTENTION_ROWS : T, n = r1 - r0;
                    const float* p = p_head + (size_t)r0 * T;
                    // dv[0:r1] += p^T dout[r0:r1];  dp (n, r1) = dout[r0:r1] v[0:r1]^T
                    blas_sgemm_row_major(1, 0, r1, HS, n, p, T, d + (size_t)r0 * C, C, 1.0f, dv, C3);
                    blas_sgemm_row_major(0, 1, n, r1, HS, d + (size_t)r0 * C, C, v, C3, 0.0f, ds, r1);
                    for (int t = r0; t < r1; t++) {
                        const float* pr = p + (size_t)(t - r0) * T;
                        float* row = ds + (size_t)(t - r0) * r1;
                        float dot = 0.0f;
                        #pragma omp simd reduction(+ : dot)
                        for (int j = 0; j <= t; j++) dot += pr[j] * row[j];
                        #pragma omp simd
                        for (int j = 0; j <= t; j++) row[j] = pr[j] * (row[j] - dot) * scale;
                        for (int j = t + 1; j < r1; j++) row[j] = 0.0f; // masked
                    }
                    // dq[r0:r1] = ds k[0:r1];  dk[0:r1] += ds^T q[r0:r1]
                    blas_sgemm_row_major(0, 0, n, HS, r1, ds, r1, k, C3, 0.0f, dq + (size_t)r0 * C3, C3);
                    blas_sgemm_row_major(1, 0, r1, HS, n, ds, r1, q + (size_t)r0 * C3, C3, 1.0f, dk, C3);
                }
            }
        }
        free(ds);
    }
}

#endif
