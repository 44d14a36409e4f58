/*
 * blas_bench.c: one BLAS candidate on the trainer's sgemm shapes (not a test). Built once per
 * candidate by dev/bench/blas_candidates.sh (BLAS_OPENBLAS, BLAS_BLIS, BLAS_MKL or
 * BLAS_SCIPY_OPENBLAS), it prints the library, version and kernel it runs, then the GFLOP/s of
 * the matmuls of one d12 (C 768, Vp 50304) training step at B*T = 256 rows: per layer qkv,
 * attproj, fc, fcproj forward (NT), their input grads (NN) and weight grads (TN), and the LM
 * head, with an OpenMP loop over the output between calls, as the trainer has (so a BLAS whose
 * threads fight the trainer's OpenMP pool shows it here).
 * usage: blas_bench [rows (default 256)] [seconds (default 2)] [C (default 768)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "cpu/blas.h"

static void gemm(int transa, int transb, int M, int N, int K, const float* A, const float* B, float* Cm, float beta) {
    blas_sgemm_row_major(transa, transb, M, N, K, A, transa ? M : K, B, transb ? K : N, beta, Cm, N);
}

int main(int argc, char** argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 256;
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    int C = argc > 3 ? atoi(argv[3]) : 768, Vp = 50304;
    char info[512];
    blas_describe(info, sizeof(info));
    printf("%s\n", info);
    size_t big = (size_t)Vp * C;
    float* x = (float*)calloc((size_t)rows * 4 * C, sizeof(float));
    float* w = (float*)calloc(big, sizeof(float));
    float* y = (float*)calloc((size_t)rows * Vp, sizeof(float));
    float* dw = (float*)calloc(big, sizeof(float));
    for (size_t i = 0; i < (size_t)rows * 4 * C; i++) x[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < big; i++) w[i] = (float)(i % 5) * 0.01f;
    int oc[4] = {3 * C, C, 4 * C, C}, ic[4] = {C, C, C, 4 * C};
    double flops = 0.0, layer_s = 0.0, head_s = 0.0;
    int reps = 0;
    double t_end = omp_get_wtime() + seconds;
    while (omp_get_wtime() < t_end || reps < 2) {
        double t0 = omp_get_wtime();
        for (int k = 0; k < 4; k++) {
            gemm(0, 1, rows, oc[k], ic[k], x, w, y, 0.0f);   // forward: y = x w^T
            #pragma omp parallel for
            for (int i = 0; i < rows * oc[k]; i++) y[i] *= 0.5f; // the trainer's next elementwise op
            gemm(0, 0, rows, ic[k], oc[k], y, w, x, 1.0f);   // dinp += dout w
            gemm(1, 0, oc[k], ic[k], rows, y, x, dw, 1.0f);  // dweight += dout^T inp
        }
        double t1 = omp_get_wtime();
        gemm(0, 1, rows, Vp, C, x, w, y, 0.0f);
        #pragma omp parallel for
        for (int i = 0; i < rows * Vp; i++) y[i] *= 0.5f;
        gemm(0, 0, rows, C, Vp, y, w, x, 1.0f);
        gemm(1, 0, Vp, C, rows, y, x, dw, 1.0f);
        double t2 = omp_get_wtime();
        if (reps > 0) { layer_s += t1 - t0; head_s += t2 - t1; } // the first pass warms up
        reps++;
    }
    double layer_flops = 3.0 * 2.0 * rows * C * (3.0 * C + C + 4.0 * C + 4.0 * C);
    double head_flops = 3.0 * 2.0 * rows * (double)C * Vp;
    flops = (layer_flops + head_flops) * (reps - 1);
    printf("C %d rows %d | threads %d | layer sgemms %.1f GFLOP/s | LM head %.1f GFLOP/s | all %.1f GFLOP/s | %d passes\n",
           C, rows, omp_get_max_threads(), layer_flops * (reps - 1) / layer_s / 1e9, head_flops * (reps - 1) / head_s / 1e9,
           flops / (layer_s + head_s) / 1e9, reps - 1);
    free(x); free(w); free(y); free(dw);
    return 0;
}
