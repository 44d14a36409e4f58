/*
 * layernorm.h: LayerNorm over the last dimension, CPU (fp32). Twin of kernels/layernorm.cuh.
 * forward:  out = (inp - mean) * rstd * weight + bias, per row of C; eps = 1e-5 (GPT-2).
 *           inp/out (N,C) with N = B*T rows; mean, rstd (N) saved for backward.
 * backward: accumulates into dinp (N,C), dweight (C), dbias (C).
 * Source: Ba, Kiros, Hinton 2016, "Layer Normalization", eq. 4; the backward is the standard
 * derivative: dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight.
 */
#ifndef CPU_LAYERNORM_H
#define CPU_LAYERNORM_H
#include <math.h>

static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+ : sum)
        for (int i = 0; i < C; i++) sum += x[i];
        float m = sum / C;
        float var = 0.0f;
        #pragma omp simd reduction(+ : var)
        for (int i = 0; i < C; i++) { float d = x[i] - m; var += d * d; }
        float s = 1.0f / sqrtf(var / C + eps);
        float* o = out + (size_t)n * C;
        #pragma omp simd
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float mean_g = 0.0f, mean_gx = 0.0f;
        #pragma omp simd reduction(+ : mean_g, mean_gx)
        for (int i = 0; i < C; i++) {
            float g = d[i] * weight[i];
            mean_g += g;
            mean_gx += g * (x[i] - m) * s;
        }
        mean_g /= C;
        mean_gx /= C;
        float* di = dinp + (size_t)n * C;
        #pragma omp simd
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            di[i] += s * (d[i] * weight[i] - mean_g - xhat * mean_gx);
        }
    }
    // Parameter grads reduce over rows: each thread takes a block of channels (race-free) and
    // walks the rows in memory order over it.
    enum { COLS = 64 };
    #pragma omp parallel for
    for (int i0 = 0; i0 < C; i0 += COLS) {
        int nc = C - i0 < COLS ? C - i0 : COLS;
        float dw[COLS] = {0}, db[COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C + i0;
            const float* x = inp + (size_t)n * C + i0;
            float m = mean[n], s = rstd[n];
            #pragma omp simd
            for (int i = 0; i < nc; i++) { dw[i] += d[i] * (x[i] - m) * s; db[i] += d[i]; }
        }
        for (int i = 0; i < nc; i++) { dweight[i0 + i] += dw[i]; dbias[i0 + i] += db[i]; }
    }
}

#endif
