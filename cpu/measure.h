/*
 * measure.h: what this CPU does per second, for the planner's cpu machine (zero/plan.h):
 *   - the sgemm rate (FLOP/s) of one step's GEMMs at the model's shapes: every layer GEMM
 *     (qkv C->3C, attproj C->C, fc C->4C, fcproj 4C->C) and the LM head (C->Vp), forward and
 *     backward, N = B*T rows (at most 1024), through the trainer's own matmul_forward / matmul_backward_ex
 *     (cpu/matmul.h) on the trainer's OpenMP threads; the better of two rounds;
 *   - the memory bandwidth (bytes/s) of a streaming y = y + a*x over 64 MiB arrays (12 bytes
 *     an element), the rate of the element-wise ops and the optimizer; the best of a few rounds.
 * About 2 s for d4 at B*T = 1024 on 2 idle cores (the LM head dominates). Host C (fp32).
 */
#ifndef CPU_MEASURE_H
#define CPU_MEASURE_H
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu/matmul.h"

static float* measure_buffer(size_t n) {
    float* p = (float*)malloc((n > 0 ? n : 1) * sizeof(float));
    if (p == NULL) { fprintf(stderr, "error: out of host memory measuring this CPU (%zu floats)\n", n); exit(1); }
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

// FLOP/s of the step's GEMMs (L layers of 4, plus the LM head) at N rows, C channels, Vp vocab.
static double measure_sgemm_flops(int N, int C, int Vp, int L) {
    const int shapes[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, Vp}};
    size_t in_n = (size_t)N * 4 * C, out_n = (size_t)N * (Vp > 4 * C ? Vp : 4 * C), w_n = (size_t)C * (Vp > 4 * C ? Vp : 4 * C);
    float *in = measure_buffer(in_n), *out = measure_buffer(out_n), *w = measure_buffer(w_n), *dw = measure_buffer(w_n);
    float* din = measure_buffer(in_n);
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int round = 0; round < 2; round++) {
        for (int s = 0; s < 5; s++) {
            int K = shapes[s][0], OC = shapes[s][1];
            double t0 = omp_get_wtime();
            matmul_forward(out, in, w, NULL, N, K, OC);
            matmul_backward_ex(din, dw, NULL, out, in, w, N, K, OC, 0);
            double t = omp_get_wtime() - t0;
            if (t < best[s]) best[s] = t;
        }
    }
    free(in); free(out); free(w); free(dw); free(din);
    // The step's mix: L times one layer's four GEMMs, once the LM head's (d4: 1/4 of the FLOPs).
    double layer_flops = 0.0, layer_s = 0.0;
    for (int s = 0; s < 4; s++) { layer_flops += 6.0 * N * shapes[s][0] * (double)shapes[s][1]; layer_s += best[s]; }
    double head_flops = 6.0 * N * (double)C * Vp;
    return (L * layer_flops + head_flops) / (L * layer_s + best[4]);
}

// Bytes/s of y = y + a*x streamed over n = 16M floats per array.
static double measure_memory_bandwidth(void) {
    size_t n = (size_t)16 << 20;
    float *x = measure_buffer(n), *y = measure_buffer(n);
    double best = 1e30;
    for (int round = 0; round < 4; round++) {
        double t0 = omp_get_wtime();
        #pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) y[i] += 0.5f * x[i];
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    volatile float sink = y[n / 2];
    (void)sink;
    free(x); free(y);
    return 12.0 * (double)n / best;
}

#endif // CPU_MEASURE_H
