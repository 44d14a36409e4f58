/*
 * gelu.cuh: GELU, tanh approximation (GPT-2), GPU (bf16 storage, fp32 arithmetic).
 * CPU twin: cpu/gelu.h. gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (Hendrycks & Gimpel 2016, "Gaussian Error Linear Units", sec. 2).
 * forward:  out (N) = gelu(inp (N)).
 * backward: dinp (N) = gelu'(inp) * dout. Overwrites (unlike the CPU twin's +=): in the model the
 *           MLP's pre-activation gradient has no other producer, and writing in place of dout
 *           (dinp == dout is allowed) saves a buffer. N % 8 == 0.
 */
#ifndef KERNELS_GELU_CUH
#define KERNELS_GELU_CUH

#include "../common/cuda_utils.cuh"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f

__device__ __forceinline__ float gelu_value(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_derivative(float x) {
    float th = tanhf(GELU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK_BF16;
    if (i >= N) return;
    PackBf16 x = load_pack(inp + i), r;
    for (int k = 0; k < PACK_BF16; k++) r.v[k] = __float2bfloat16(gelu_value(__bfloat162float(x.v[k])));
    store_pack(out + i, r);
}

__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK_BF16;
    if (i >= N) return;
    PackBf16 x = load_pack(inp + i), d = load_pack(dout + i), r;
    for (int k = 0; k < PACK_BF16; k++)
        r.v[k] = __float2bfloat16(gelu_derivative(__bfloat162float(x.v[k])) * __bfloat162float(d.v[k]));
    store_pack(dinp + i, r);
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void gelu_forward_cuda(bf16* out, const bf16* inp, size_t N, cudaStream_t stream) {
    gelu_forward_kernel<<<(unsigned)ceil_div_size(N / PACK_BF16, 256), 256, 0, stream>>>(out, inp, N);
    CUDA_CHECK_LAUNCH();
}

static inline void gelu_backward_cuda(bf16* dinp, const bf16* inp, const bf16* dout, size_t N, cudaStream_t stream) {
    gelu_backward_kernel<<<(unsigned)ceil_div_size(N / PACK_BF16, 256), 256, 0, stream>>>(dinp, inp, dout, N);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_GELU_CUH
