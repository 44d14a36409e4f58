/*
 * global_norm.h: squared L2 norm of a slice, CPU (fp32 in, fp64 accumulation).
 * Twin of kernels/global_norm.cuh. The global gradient norm is sqrt of the sum over all slices
 * (and, with ranks, over all ranks' owned slices: one scalar all-reduce).
 */
#ifndef CPU_GLOBAL_NORM_H
#define CPU_GLOBAL_NORM_H
#include <stddef.h>

static double norm_squared(const float* x, size_t n) {
    double sum = 0.0;
    #pragma omp parallel for simd reduction(+ : sum)
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    return sum;
}

#endif
