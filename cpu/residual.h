/*
 * residual.h: residual connection out = a + b, CPU (fp32). Twin of kernels/residual.cuh.
 * forward: out (N) = a + b. backward: da += dout, db += dout.
 */
#ifndef CPU_RESIDUAL_H
#define CPU_RESIDUAL_H
#include <stddef.h>

static void residual_forward(float* out, const float* a, const float* b, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

static void residual_backward(float* da, float* db, const float* dout, size_t N) {
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) { da[i] += dout[i]; db[i] += dout[i]; }
}

#endif
