/*
 * gelu.h: GELU, tanh approximation (GPT-2), CPU (fp32). Twin of kernels/gelu.cuh.
 * gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (Hendrycks & Gimpel 2016, eq. in sec. 2)
 * forward: out (N) from inp (N). backward: dinp (N) = gelu'(inp) * dout (overwrites, as the GPU
 * twin). tanh is vec_tanhf (cpu/vec_math.h), so both loops vectorize.
 */
#ifndef CPU_GELU_H
#define CPU_GELU_H
#include <math.h>
#include "vec_math.h"

#define GELU_SCALE 0.7978845608028654f // sqrt(2/pi)

static void gelu_forward(float* out, const float* inp, size_t N) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + vec_tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = vec_tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

#endif
