/*
 * vec_math.h: exp and tanh for fp32 loops that the compiler vectorizes (AVX2, AVX-512), CPU.
 * glibc's expf/tanhf are scalar calls (its vector versions need -ffast-math, which would also
 * reorder every sum in the reference build), so GELU and the attention softmax use these.
 * vec_expf: range reduction x = n ln2 + r, |r| <= ln2/2 (ln2 split in two parts, Cody & Waite
 * 1980), then a degree-6 Taylor polynomial for e^r and 2^n put into the exponent bits.
 * Measured against expf over [-87, 88] (dev/test: tests/test_vec_math.c): at most 2 ulp.
 * vec_tanhf: tanh|u| = (1 - e^{-2|u|}) / (1 + e^{-2|u|}), sign restored; absolute error below
 * 2e-7 (relative error grows for |u| < 1e-3, where tanh u ~ u is tiny against the 1 it is added to
 * in GELU).
 */
#ifndef CPU_VEC_MATH_H
#define CPU_VEC_MATH_H
#include <stdint.h>
#include <string.h>

#pragma omp declare simd notinbranch
static inline float vec_expf(float x) {
    x = x < -87.3f ? -87.3f : x > 88.7f ? 88.7f : x; // e^x stays a normal float
    float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;                   // ln2, high part (exact in fp32)
    r = r - n * -2.12194440e-4f;                      // ln2 - high part
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666667e-1f + r * (4.16666667e-2f + r * (8.33333333e-3f + r * 1.38888889e-3f)))));
    int32_t bits = ((int32_t)n + 127) << 23;          // 2^n
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

#pragma omp declare simd notinbranch
static inline float vec_tanhf(float u) {
    float a = u < 0.0f ? -u : u;
    float e = vec_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return u < 0.0f ? -t : t;
}

#endif
