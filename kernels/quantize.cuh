/*
 * quantize.cuh: blockwise symmetric quantization to int8 or int4, GPU. CPU twin: cpu/quantize.h,
 * whose header gives the format (one fp32 scale absmax/qmax per block of `block` elements,
 * codes rint(x * qmax/absmax) in [-qmax, qmax], int4 packed two a byte, low nibble first) and the
 * error bound. ZeRO++ (Wang et al. 2023, sec. 3.1 qwZ, 3.3 qgZ) sends these codes.
 * quantize:   codes (quant_code_bytes(n, bits) bytes), scales (quant_num_blocks(n, block) fp32)
 *             from x (n, fp32: the master weights or fp32 gradients).
 * dequantize: out (n, fp32 or bf16) = q * s; the fp32 form can add into out (qgZ's reduce).
 * Same arithmetic as the twin (one division for the scale, one product x * inv rounded by
 * rintf, one product q * s, one fused multiply-add out + q * s when accumulating), so codes,
 * scales and the fp32 output are bit-identical to it; bf16 output is that fp32 value rounded to
 * nearest.
 * One warp per quantization block: the lanes stride over its elements (int4: over element
 * pairs, one output byte each), absmax is a warp max-reduction, lane 0 writes the scale.
 */
#ifndef KERNELS_QUANTIZE_CUH
#define KERNELS_QUANTIZE_CUH

#include "../common/cuda_utils.cuh"
#include "../cpu/quantize.h" // format helpers: quant_num_blocks, quant_code_bytes, quant_block_valid

#define QUANT_WARPS_PER_CTA 8

__device__ __forceinline__ int quant_code(float x, float inv, float qmax) {
    return (int)fminf(fmaxf(rintf(x * inv), -qmax), qmax);
}

__global__ void quantize_blocks_kernel(uint8_t* codes, float* scales, const float* x, size_t n, int bits, int block) {
    size_t b = (size_t)blockIdx.x * QUANT_WARPS_PER_CTA + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    size_t nb = (n + (size_t)block - 1) / (size_t)block;
    if (b >= nb) return; // the whole warp: b is the same for its 32 lanes
    size_t lo = b * (size_t)block, hi = lo + (size_t)block < n ? lo + (size_t)block : n;
    float absmax = 0.0f;
    for (size_t i = lo + lane; i < hi; i += 32) absmax = fmaxf(absmax, fabsf(x[i]));
    absmax = warp_reduce_max(absmax);
    const float qmax = bits == 8 ? 127.0f : 7.0f;
    if (lane == 0) scales[b] = absmax / qmax;
    float inv = absmax > 0.0f ? qmax / absmax : 0.0f;
    if (bits == 8) {
        for (size_t i = lo + lane; i < hi; i += 32) codes[i] = (uint8_t)(int8_t)quant_code(x[i], inv, qmax);
    } else {
        for (size_t i = lo + 2 * (size_t)lane; i < hi; i += 64) { // the pair (i, i+1), one byte
            int q0 = quant_code(x[i], inv, qmax);
            int q1 = i + 1 < hi ? quant_code(x[i + 1], inv, qmax) : 0;
            codes[i / 2] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
        }
    }
}

__device__ __forceinline__ float quant_decode(const uint8_t* codes, size_t i, int bits) {
    if (bits == 8) return (float)(int8_t)codes[i];
    unsigned byte = codes[i / 2];
    unsigned nibble = (i % 2 == 0 ? byte : byte >> 4) & 0xFu;
    return (float)((int)(nibble ^ 8u) - 8);
}

// The roundings are explicit (__fmul_rn, __fmaf_rn: never contracted or split by nvcc), as the
// CPU twin's (fmaf), so the accumulated fp32 output is bit-identical to it by construction: the
// accumulate is one fused multiply-add out + q s, the plain output the rounded product q s.
__device__ __forceinline__ void quant_store(float* out, size_t i, float q, float s, int accumulate) {
    out[i] = accumulate ? __fmaf_rn(q, s, out[i]) : __fmul_rn(q, s);
}
__device__ __forceinline__ void quant_store(bf16* out, size_t i, float q, float s, int accumulate) {
    out[i] = __float2bfloat16(__fmul_rn(q, s));
}

// One thread per element: out[i] (=, or += with accumulate, fp32 only) q_i * s_b.
template <typename T>
__global__ void dequantize_blocks_kernel(T* out, const uint8_t* codes, const float* scales, size_t n, int bits, int block,
                                         int accumulate) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    quant_store(out, i, quant_decode(codes, i, bits), scales[i / (size_t)block], accumulate);
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void quantize_blocks_cuda(uint8_t* codes, float* scales, const float* x, size_t n, int bits, int block,
                                        cudaStream_t stream) {
    size_t nb = quant_num_blocks(n, block);
    if (nb == 0) return;
    quantize_blocks_kernel<<<(unsigned)ceil_div_size(nb, QUANT_WARPS_PER_CTA), QUANT_WARPS_PER_CTA * 32, 0, stream>>>(
        codes, scales, x, n, bits, block);
    CUDA_CHECK_LAUNCH();
}

// T = float (accumulate 0 or 1) or bf16 (accumulate 0: the gathered working unit).
template <typename T>
static inline void dequantize_blocks_cuda(T* out, const uint8_t* codes, const float* scales, size_t n, int bits, int block,
                                          int accumulate, cudaStream_t stream) {
    if (n == 0) return;
    dequantize_blocks_kernel<T><<<(unsigned)ceil_div_size(n, 256), 256, 0, stream>>>(out, codes, scales, n, bits, block,
                                                                                     accumulate);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_QUANTIZE_CUH
