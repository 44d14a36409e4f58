/*
 * test_kernels.cu: every CUDA kernel in kernels/ against its fp32 CPU twin in cpu/.
 * Build: make test_kernels (-> build/test_kernels). Needs a GPU (sm_80+) to run.
 * Each test draws random inputs, rounds them to bf16 once, and feeds the *same* bf16 values to
 * the GPU kernel and (as floats) to the CPU twin, so the comparison isolates the kernel's own
 * arithmetic. Prints "PASS <name>" or "FAIL <name>: <first mismatch>" per test; exits 1 on any
 * failure.
 *
 * Tolerances. bf16 keeps 8 significant bits: rounding to nearest moves a value by at most half
 * an ulp, 2^-8 of a value just above a power of two, so one final rounding of an fp32 result
 * gives |gpu - cpu| <= 2^-8 |cpu| + (the fp32 difference before the rounding): rtol = 2^-8
 * (BF16_RTOL) is that rounding's bound exactly (measured: 0.00389-0.00391 relative on every
 * bf16 output), and each atol bounds the fp32 difference. Sums accumulated in fp32 in a
 * different order than the CPU differ by at most n 2^-24 sum|terms| (worst case; typically
 * sqrt(n) 2^-24 sum|terms|); with n <= 256 and O(1) terms that stays below 1e-4, so an atol of
 * 1e-3 covers it, while an indexing bug changes an element by O(1). Where the kernel rounds
 * intermediates to bf16 (attention's P and dS), the bound is derived at that check.
 * Measured: every check prints an "INFO err" line (largest error, and the smallest atol that
 * passes at its rtol: "needed"). "measured" below is the largest over eight runs in the
 * emulation (t_65, 2026-12-06): plain, scheduling seeds 1 and 2, unfused epilogues
 * (EMU_CUBLASLT_NO_FUSED=1), device math (EMU_DEVICE_MATH=1), and the contracted flavor
 * (test_kernels_fma: device code's multiply-adds fused as nvcc fuses them, emu.mk) alone and with
 * device math at seeds 1, 2 and unfused. Contraction moved no check's worst error by more than
 * the fp32 noise (rstd 3.4e-7 -> 2.4e-7 relative; bf16 outputs and the bit-identity checks
 * unchanged). Where the device's order or arithmetic is not the emulation's (cuBLASLt's own
 * kernels, atomics' order, tensor-core accumulation), the analytic bound stays and says so.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cuda_utils.cuh"
#include "../kernels/adamw.cuh"
#include "../kernels/attention.cuh"
#include "../kernels/classifier.cuh"
#include "../kernels/encoder.cuh"
#include "../kernels/gelu.cuh"
#include "../kernels/global_norm.cuh"
#include "../kernels/grad_accum.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/matmul.cuh"
#include "../kernels/residual.cuh"
#include "../kernels/rows.cuh"

#include "../cpu/adamw.h"
#include "../cpu/attention.h"
#include "../cpu/classifier.h"
#include "../cpu/encoder.h"
#include "../cpu/gelu.h"
#include "../cpu/global_norm.h"
#include "../cpu/layernorm.h"
#include "../cpu/matmul.h"
#include "../cpu/residual.h"

#define BF16_RTOL 0.00390625f // 2^-8: the worst relative error of one bf16 rounding (header)

// ----------------------------------------------------------------------------------------------
// Host helpers

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

// xorshift64* (Vigna 2016), uniform in [-1, 1).
static float random_uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t x = rng_state * 0x2545f4914f6cdd1dull;
    return (float)((x >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

// host: n random values * scale, rounded to bf16 (bits) and the same values as floats.
static void random_bf16(bf16* bits, float* values, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        bits[i] = __float2bfloat16(random_uniform() * scale);
        values[i] = __bfloat162float(bits[i]);
    }
}

static void* device_copy_of(const void* host, size_t bytes) {
    void* device;
    CUDA_CHECK(cudaMalloc(&device, bytes));
    CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    return device;
}

// bf16 device array -> host floats.
static void download_bf16(float* host, const bf16* device, size_t n) {
    bf16* tmp = (bf16*)malloc(n * sizeof(bf16));
    CUDA_CHECK(cudaMemcpy(tmp, device, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) host[i] = __bfloat162float(tmp[i]);
    free(tmp);
}

static void download_f32(float* host, const float* device, size_t n) {
    CUDA_CHECK(cudaMemcpy(host, device, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static float max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static int failures = 0;

// 1 if |got - want| <= atol + rtol |want| everywhere; otherwise prints the worst element (once
// per test: `*reported` suppresses further lines) and returns 0. Always prints what it measured
// (the INFO line: largest |got - want|, largest relative error where |want| > atol, and the
// largest share of the tolerance an element used), from which the tolerances were derived.
static int close_enough(const char* test, const char* what, const float* got, const float* want, size_t n,
                        float rtol, float atol, int* reported) {
    size_t worst = 0;
    float worst_excess = 0.0f;
    double max_abs_err = 0.0, max_rel_err = 0.0, atol_needed = 0.0;
    for (size_t i = 0; i < n; i++) {
        float diff = fabsf(got[i] - want[i]);
        float excess = diff - (atol + rtol * fabsf(want[i]));
        if (!(excess <= worst_excess)) { worst_excess = excess; worst = i; } // also catches NaN
        if (diff > max_abs_err) max_abs_err = diff;
        if (fabsf(want[i]) > atol && diff / fabsf(want[i]) > max_rel_err) max_rel_err = diff / fabsf(want[i]);
        double beyond_rtol = (double)diff - (double)rtol * fabsf(want[i]);
        if (beyond_rtol > atol_needed) atol_needed = beyond_rtol;
    }
    printf("INFO err %s %s: max abs %.3g, max rel %.3g, atol needed at rtol %.3g: %.3g (atol %.3g)\n", test, what,
           max_abs_err, max_rel_err, rtol, atol_needed, atol);
    if (worst_excess == 0.0f && !isnan(got[worst])) return 1;
    if (!*reported) {
        printf("FAIL %s: %s[%zu] = %.6g, expected %.6g (rtol %.3g, atol %.3g)\n", test, what, worst, got[worst],
               want[worst], rtol, atol);
        *reported = 1;
    }
    return 0;
}

static void report(const char* test, int ok) {
    if (ok) printf("PASS %s\n", test);
    else failures++;
}

// ----------------------------------------------------------------------------------------------
// Tests, one file per op family (each defines static test_* functions, called by main in order)

#include "test_kernels/encoder.cuh"
#include "test_kernels/layernorm.cuh"
#include "test_kernels/matmul.cuh"
#include "test_kernels/attention.cuh"
#include "test_kernels/gelu_residual.cuh"
#include "test_kernels/classifier.cuh"
#include "test_kernels/optimizer.cuh"

int main(void) {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        fprintf(stderr, "error: test_kernels: no CUDA device; expected a GPU (sm_80 or newer)\n");
        return 1;
    }
    CUDA_CHECK(cudaSetDevice(0));
    test_encoder();
    test_layernorm_case("layernorm_forward_backward", 300, 192);      // N not a multiple of the 8 rows per block
    test_layernorm_case("layernorm_forward_backward_C768", 70, 768);  // d12's width: 3 packs per lane
    test_layernorm_case("layernorm_forward_backward_C1600", 37, 1600); // d48's: 7 packs, > 48 KiB shared in backward
    test_matmul();
    test_matmul_dgelu();
    test_attention(&attention_flash);
#ifdef USE_CUDNN
    test_attention(&attention_cudnn); // cuDNN's fused attention (built with USE_CUDNN=1)
#endif
    test_gelu_residual();
    test_classifier_case("classifier_V1000_Vp1024", 64, 1000, 1024);
    test_classifier_case("classifier_V50257_Vp50304", 8, 50257, 50304); // 7 packs per thread
    test_classifier_chunks_case("classifier_chunks_V1000_Vp1024", 64, 1000, 1024, 384); // chunks 384, 384, 256 (crosses V)
    test_classifier_chunks_case("classifier_chunks_V50257_Vp50304", 4, 50257, 50304, 8448); // d12's chunk width: 2 packs
    test_classifier_chunks_case("classifier_chunks_V50257_Vp50304_w24576", 2, 50257, 50304, 24576); // 4 packs a thread
    test_encoder_chunks();
    test_adamw();
    test_grad_accumulate();
    test_global_norm();
    printf("%d failed\n", failures);
    return failures == 0 ? 0 : 1;
}
