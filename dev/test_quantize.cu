/*
 * test_quantize.cu: the quantize/dequantize kernels (kernels/quantize.cuh) against their CPU
 * twin (cpu/quantize.h), for ZeRO++'s quantized collectives. Runs on a GPU (make
 * build/test_quantize_cuda) and in the CPU emulation of CUDA (emu.mk: build/emu/test_quantize).
 * Prints "PASS <name>" or "FAIL <name>: <first mismatch>"; exits 1 on any failure.
 *
 * For int8 and int4, block sizes 32, 64, 2048, lengths that end in a partial block (odd ones and
 * n = 1 for int4) and blocks of magnitudes 10^-3..10^3 with an all-zero block among them:
 *   - codes and scales bit-identical to the twin (the same fp32 operations: absmax / qmax, one
 *     product x * qmax/absmax, rintf), and no byte written past the codes (cudaMalloc'd exactly:
 *     the emulation's fence stops an overrun; on a GPU a canary byte after them is checked);
 *   - dequantized fp32 bit-identical to the twin's (one product q * s);
 *   - dequantized bf16 equal to the twin's fp32 rounded to nearest (__float2bfloat16);
 *   - accumulate (out += q s) bit-identical to the twin's: one fused multiply-add each side
 *     (__fmaf_rn, fmaf), so neither compiler's contraction choice shows.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/cuda_utils.cuh"
#include "../cpu/quantize.h"
#include "../kernels/quantize.cuh"

static int failures = 0;
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float uniform_pm1(void) { // xorshift64* (Vigna 2016), in [-1, 1)
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (float)(((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static void report(int ok, const char* name, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static void check_case(int bits, int block, size_t n) {
    size_t nb = quant_num_blocks(n, block), bytes = quant_code_bytes(n, bits);
    float* x = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (i / block == 2) ? 0.0f : uniform_pm1() * powf(10.0f, (float)((i / block) % 7) - 3.0f);
    // CPU twin
    uint8_t* q_ref = (uint8_t*)malloc(bytes);
    float* s_ref = (float*)malloc(nb * sizeof(float)), *d_ref = (float*)malloc(n * sizeof(float));
    float* acc_ref = (float*)malloc(n * sizeof(float)), *base = (float*)malloc(n * sizeof(float));
    quantize_blocks(q_ref, s_ref, x, n, bits, block);
    dequantize_blocks(d_ref, q_ref, s_ref, n, bits, block, 0);
    for (size_t i = 0; i < n; i++) acc_ref[i] = base[i] = uniform_pm1();
    dequantize_blocks(acc_ref, q_ref, s_ref, n, bits, block, 1);
    // GPU: codes in a buffer of exactly `bytes` plus one canary byte, checked after
    float* x_d; uint8_t* q_d; float* s_d; float* d_d; float* acc_d; bf16* h_d;
    CUDA_CHECK(cudaMalloc(&x_d, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&q_d, bytes + 1));
    CUDA_CHECK(cudaMalloc(&s_d, nb * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_d, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&acc_d, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&h_d, n * sizeof(bf16)));
    CUDA_CHECK(cudaMemcpy(x_d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(q_d, 0xA5, bytes + 1));
    CUDA_CHECK(cudaMemcpy(acc_d, base, n * sizeof(float), cudaMemcpyHostToDevice));
    quantize_blocks_cuda(q_d, s_d, x_d, n, bits, block, 0);
    dequantize_blocks_cuda(d_d, q_d, s_d, n, bits, block, 0, 0);
    dequantize_blocks_cuda(acc_d, q_d, s_d, n, bits, block, 1, 0);
    dequantize_blocks_cuda(h_d, q_d, s_d, n, bits, block, 0, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    uint8_t* q = (uint8_t*)malloc(bytes + 1);
    float* s = (float*)malloc(nb * sizeof(float)), *d = (float*)malloc(n * sizeof(float)), *acc = (float*)malloc(n * sizeof(float));
    bf16* h = (bf16*)malloc(n * sizeof(bf16));
    CUDA_CHECK(cudaMemcpy(q, q_d, bytes + 1, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(s, s_d, nb * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(d, d_d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(acc, acc_d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h, h_d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    char name[96], why[200] = "";
    size_t bad;
    snprintf(name, sizeof(name), "quantize_int%d_block%d_n%zu_codes_scales_match_twin", bits, block, n);
    for (bad = 0; bad < bytes && q[bad] == q_ref[bad]; bad++) {}
    size_t bad_s;
    for (bad_s = 0; bad_s < nb && s[bad_s] == s_ref[bad_s]; bad_s++) {}
    if (bad < bytes) snprintf(why, sizeof(why), "code byte %zu: 0x%02x, twin 0x%02x", bad, q[bad], q_ref[bad]);
    else if (bad_s < nb) snprintf(why, sizeof(why), "scale %zu: %.9g, twin %.9g", bad_s, s[bad_s], s_ref[bad_s]);
    else if (q[bytes] != 0xA5) snprintf(why, sizeof(why), "the byte after the %zu code bytes was written", bytes);
    report(bad == bytes && bad_s == nb && q[bytes] == 0xA5, name, why);
    snprintf(name, sizeof(name), "dequantize_int%d_block%d_n%zu_fp32_bf16_accumulate_match_twin", bits, block, n);
    size_t bad_d = n, bad_h = n, bad_a = n;
    for (size_t i = 0; i < n; i++) {
        if (bad_d == n && d[i] != d_ref[i]) bad_d = i;
        if (bad_h == n && __bfloat162float(h[i]) != __bfloat162float(__float2bfloat16(d_ref[i]))) bad_h = i;
        if (bad_a == n && acc[i] != acc_ref[i]) bad_a = i;
    }
    if (bad_d < n) snprintf(why, sizeof(why), "fp32 element %zu: %.9g, twin %.9g", bad_d, d[bad_d], d_ref[bad_d]);
    else if (bad_h < n) snprintf(why, sizeof(why), "bf16 element %zu: %.9g, twin rounded %.9g", bad_h, __bfloat162float(h[bad_h]),
                                 __bfloat162float(__float2bfloat16(d_ref[bad_h])));
    else if (bad_a < n) snprintf(why, sizeof(why), "accumulated element %zu: %.9g, twin %.9g", bad_a, acc[bad_a], acc_ref[bad_a]);
    report(bad_d == n && bad_h == n && bad_a == n, name, why);
    CUDA_CHECK(cudaFree(x_d)); CUDA_CHECK(cudaFree(q_d)); CUDA_CHECK(cudaFree(s_d));
    CUDA_CHECK(cudaFree(d_d)); CUDA_CHECK(cudaFree(acc_d)); CUDA_CHECK(cudaFree(h_d));
    free(x); free(q_ref); free(s_ref); free(d_ref); free(acc_ref); free(base); free(q); free(s); free(d); free(acc); free(h);
}

int main(void) {
    const int blocks[] = {32, 64, 2048};
    for (int bits = 8; bits >= 4; bits -= 4)
        for (int k = 0; k < 3; k++) check_case(bits, blocks[k], 5 * (size_t)blocks[k] + (bits == 4 ? 19 : 10));
    check_case(4, 32, 1);
    check_case(4, 64, 3);
    return failures ? 1 : 0;
}
