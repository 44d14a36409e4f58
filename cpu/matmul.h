/*
 * matmul.h: linear layer y = x W^T + b through the BLAS's sgemm (cpu/blas.h), CPU (fp32).
 * Twin of kernels/matmul.cuh (cuBLASLt).
 * forward:  out (N,OC) = inp (N,C) @ weight^T, weight (OC,C) (PyTorch Linear layout), + bias (OC)
 *           if bias != NULL. N = B*T rows.
 * backward: accumulates dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp;
 *           dbias (OC) += column sums of dout (if dbias != NULL).
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

static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC) {
    double t0 = omp_get_wtime();
    blas_sgemm_row_major(0, 0, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
    blas_sgemm_row_major(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias != NULL) {
        #pragma omp parallel for
        for (int j = 0; j < OC; j++) {
            float sum = 0.0f;
            for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + j];
            dbias[j] += sum;
        }
    }
    matmul_seconds += omp_get_wtime() - t0;
}

#endif
