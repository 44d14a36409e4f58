/*
 * quantize.h: blockwise symmetric quantization to int8 or int4, CPU (fp32). Twin of
 * kernels/quantize.cuh. ZeRO++'s quantized collectives (zero/zeropp/zeropp.h) send these codes: the
 * stage-3 parameter all-gather (qwZ) and the gradient all-to-all (qgZ), Wang et al. 2023,
 * "ZeRO++: Extremely Efficient Collective Communication for Giant Model Training", sec. 3.1, 3.3.
 *
 * A vector x of n elements is cut into blocks of `block` elements (the last one may be shorter).
 * Each block b has one fp32 scale s_b = absmax_b / qmax (qmax = 127 for int8, 7 for int4; the
 * code range is symmetric, [-qmax, qmax]) and codes q_i = rint(x_i * (qmax / absmax_b)), clamped
 * to that range (rint: round to nearest, ties to even, as the GPU's rintf). Dequantized value:
 * q_i * s_b. Per element |x_i - q_i s_b| <= s_b / 2 up to fp32 rounding of the two products
 * (a few ulps of absmax_b), and an all-zero block (absmax 0) has scale 0 and codes 0: exact.
 * Storage: int8, one byte per element (two's complement); int4, two elements per byte, element
 * 2j in the low nibble and 2j+1 in the high one (two's complement nibbles), so (n + 1) / 2 bytes;
 * an odd n leaves the last byte's high nibble 0. `block` must be even (a byte never holds two
 * blocks) and within QUANT_BLOCK_MIN..QUANT_BLOCK_MAX as a multiple of 32 (quant_block_valid;
 * the GPU kernels give a block to one warp).
 *
 * OpenMP over blocks (big vectors only: each block is a short vectorizable loop, absmax as a
 * max-reduction and the code loop as a straight map).
 */
#ifndef CPU_QUANTIZE_H
#define CPU_QUANTIZE_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define QUANT_BLOCK_MIN 32
#define QUANT_BLOCK_MAX 65536
#define QUANT_OMP_MIN_BLOCKS 64 // below this many blocks a parallel region costs more than it saves

// Is `block` a supported block size (a multiple of 32 in [QUANT_BLOCK_MIN, QUANT_BLOCK_MAX])?
static inline int quant_block_valid(long block) {
    return block >= QUANT_BLOCK_MIN && block <= QUANT_BLOCK_MAX && block % 32 == 0;
}
static inline int quant_bits_valid(long bits) { return bits == 8 || bits == 4; }
static inline int quant_qmax(int bits) { return bits == 8 ? 127 : 7; }
static inline size_t quant_num_blocks(size_t n, int block) { return (n + (size_t)block - 1) / (size_t)block; }
// Bytes of codes for n elements.
static inline size_t quant_code_bytes(size_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }

// int4 nibble (low 4 bits, two's complement) -> value in [-8, 7].
static inline int quant_nibble_value(unsigned nibble) { return (int)((nibble & 0xFu) ^ 8u) - 8; }

/*
 * Quantize x (n floats) to codes (quant_code_bytes(n, bits) bytes) and scales
 * (quant_num_blocks(n, block) floats), block by block as the header says.
 */
static void quantize_blocks(uint8_t* codes, float* scales, const float* x, size_t n, int bits, int block) {
    size_t nb = quant_num_blocks(n, block);
    const float qmax = (float)quant_qmax(bits);
    #pragma omp parallel for if (nb >= QUANT_OMP_MIN_BLOCKS)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * (size_t)block, hi = lo + (size_t)block < n ? lo + (size_t)block : n;
        float absmax = 0.0f;
        #pragma omp simd reduction(max : absmax)
        for (size_t i = lo; i < hi; i++) absmax = fmaxf(absmax, fabsf(x[i]));
        scales[b] = absmax / qmax;
        float inv = absmax > 0.0f ? qmax / absmax : 0.0f; // an all-zero block: codes 0
        if (bits == 8) {
            int8_t* q = (int8_t*)codes;
            #pragma omp simd
            for (size_t i = lo; i < hi; i++) q[i] = (int8_t)fminf(fmaxf(rintf(x[i] * inv), -qmax), qmax);
        } else {
            // Pairs (2j, 2j+1) never straddle blocks: block is even, so lo is.
            for (size_t i = lo; i < hi; i += 2) {
                int q0 = (int)fminf(fmaxf(rintf(x[i] * inv), -qmax), qmax);
                int q1 = i + 1 < hi ? (int)fminf(fmaxf(rintf(x[i + 1] * inv), -qmax), qmax) : 0;
                codes[i / 2] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            }
        }
    }
}

/*
 * Dequantize: out[i] = q_i * s_b (n floats) from codes and scales as quantize_blocks wrote them.
 * accumulate = 1 adds into out instead (qgZ's dequantize-and-reduce: out += q s) as one fused
 * multiply-add (fmaf, one rounding), as the GPU kernel does (kernels/quantize.cuh, __fmaf_rn):
 * the same bits whatever the compiler contracts and whether the CPU has FMA instructions.
 */
static void dequantize_blocks(float* out, const uint8_t* codes, const float* scales, size_t n, int bits, int block,
                              int accumulate) {
    size_t nb = quant_num_blocks(n, block);
    #pragma omp parallel for if (nb >= QUANT_OMP_MIN_BLOCKS)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * (size_t)block, hi = lo + (size_t)block < n ? lo + (size_t)block : n;
        float s = scales[b];
        if (bits == 8) {
            const int8_t* q = (const int8_t*)codes;
            if (accumulate) {
                #pragma omp simd
                for (size_t i = lo; i < hi; i++) out[i] = fmaf((float)q[i], s, out[i]);
            } else {
                #pragma omp simd
                for (size_t i = lo; i < hi; i++) out[i] = (float)q[i] * s;
            }
        } else {
            #pragma omp simd
            for (size_t i = lo; i < hi; i++) {
                unsigned byte = codes[i / 2];
                float q = (float)quant_nibble_value(i % 2 == 0 ? byte : byte >> 4);
                out[i] = accumulate ? fmaf(q, s, out[i]) : q * s;
            }
        }
    }
}

#endif // CPU_QUANTIZE_H
