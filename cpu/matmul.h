/*
 * matmul.h: linear layer y = x W^T + b through the BLAS's sgemm (cpu/blas.h), CPU (fp32).
 * Twin of kernels/matmul.cuh (cuBLASLt).
 * forward:  out (N,OC) = inp (N,C) @ weight^T, weight (OC,C) (PyTorch Linear layout), + bias (OC)
 *           if bias != NULL. N = B*T rows.
 * backward: accumulates dinp (N,C) += dout @ weight (matmul_backward_ex: or overwrites it);
 *           dweight (OC,C) += dout^T @ inp; dbias (OC) += column sums of dout (if dbias != NULL).
 */
#ifndef CPU_MATMUL_H
#define CPU_MATMUL_H
#include "blas.h"
#include <omp.h>

// Wall seconds spent in matmul_forward/backward since start: the benchmark reports its share of
// the step time (the rest is the hand-written ops and the optimizer).
static double matmul_seconds = 0.0;

static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC) {
    double t0 = omp_get_wtime();
    blas_sgemm_row_major(0, 1, N, OC, C, inp, C, weight, C, 0.0f, out, OC);
    if (bias != NULL) {
        #pragma omp parallel for
        for (int n = 0; n < N; n++) {
            float* o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
    matmul_seconds += omp_get_wtime() - t0;
}

/*
 * Column sums of x (N,OC) added into sum (OC): parallel over column blocks, each block's rows
 * walked in memory order (a strided walk down each column would miss the cache on every row).
 */
static void column_sums_add(float* sum, const float* x, int N, int OC) {
    enum { COLS = 64 };
    #pragma omp parallel for
    for (int j0 = 0; j0 < OC; j0 += COLS) {
        int nc = OC - j0 < COLS ? OC - j0 : COLS;
        float acc[COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float* row = x + (size_t)n * OC + j0;
            #pragma omp simd
            for (int j = 0; j < nc; j++) acc[j] += row[j];
        }
        for (int j = 0; j < nc; j++) sum[j0 + j] += acc[j];
    }
}

// As matmul_backward; accumulate_dinp = 0 overwrites dinp instead (no zeroed buffer needed),
// as the GPU twin's flag of the same name.
static void matmul_backward_ex(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int N, int C, int OC, int accumulate_dinp) {
    double t0 = omp_get_wtime();
    blas_sgemm_row_major(0, 0, N, C, OC, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    blas_sgemm_row_major(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias != NULL) column_sums_add(dbias, dout, N, OC);
    matmul_seconds += omp_get_wtime() - t0;
}

static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC) {
    matmul_backward_ex(dinp, dweight, dbias, dout, inp, weight, N, C, OC, 1);
}

#endif
