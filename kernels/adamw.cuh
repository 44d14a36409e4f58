/*
 * adamw.cuh: AdamW over a contiguous slice, GPU, with fp32 master weights. CPU twin: cpu/adamw.h.
 * For i < n: g = grads[i] (bf16) * grad_scale (grad_scale folds in clipping);
 *   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2          (m, v fp32)
 *   master -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * master) (master fp32)
 *   params = bf16(master) with stochastic rounding                     (params bf16)
 * mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t), t = step counting from 1.
 * Source: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2.
 * Stochastic rounding (see cuda_utils.cuh) keeps updates smaller than half a bf16 ulp alive in
 * expectation; the random bits come from a hash of (seed, global element index), so a step is
 * reproducible and an element rounds the same way whichever rank or ZeRO stage updates it
 * (index_base: flat-buffer index of the slice's first element).
 * All five arrays are the same slice (a rank's shard of a unit, or part of it); the caller
 * passes weight_decay = 0 for slices that are not 2-D weights, as on the CPU.
 */
#ifndef KERNELS_ADAMW_CUH
#define KERNELS_ADAMW_CUH

#include "../common/cuda_utils.cuh"

// The bf16 value AdamW stores for master weight w at flat-buffer index `index` in the step whose
// seed is `seed`: stochastic rounding with 16 bits hashed from (seed, index). One function, so
// that params_from_master_stochastic_kernel reproduces AdamW's parameters bit for bit.
__device__ __forceinline__ bf16 adamw_round_param(float w, uint32_t seed, size_t index) {
    uint32_t random_bits = hash_u32(((uint32_t)index * 0x9e3779b9u) ^ hash_u32(seed));
    return float_to_bf16_stochastic(w, random_bits);
}

__global__ void adamw_kernel(bf16* params, float* master, const bf16* grads, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float bias1, float bias2, float eps, float weight_decay,
                             float grad_scale, uint32_t seed, size_t index_base) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = __bfloat162float(grads[i]) * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bias1, vhat = vi / bias2;
    float w = master[i];
    w -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * w);
    master[i] = w;
    params[i] = adamw_round_param(w, seed, index_base + i);
}

// params (bf16, round to nearest) from master (fp32): after loading fp32 weights into master.
__global__ void master_to_params_kernel(bf16* params, const float* master, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) params[i] = __float2bfloat16(master[i]);
}

// params (bf16) from master (fp32) exactly as adamw_kernel with `seed` wrote them: on resume,
// where the master weights come from the checkpoint and the bf16 copy must match the run's.
__global__ void params_from_master_stochastic_kernel(bf16* params, const float* master, size_t n, uint32_t seed,
                                                     size_t index_base) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) params[i] = adamw_round_param(master[i], seed, index_base + i);
}

// master (fp32) from params (bf16): after loading bf16 weights.
__global__ void params_to_master_kernel(float* master, const bf16* params, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) master[i] = __bfloat162float(params[i]);
}

// ----------------------------------------------------------------------------------------------
// Launchers

// t: step counting from 1. seed: one per optimizer step (the same on every rank).
static inline void adamw_update_cuda(bf16* params, float* master, const bf16* grads, float* m, float* v, size_t n,
                                     float lr, float beta1, float beta2, float eps, float weight_decay,
                                     float grad_scale, int t, uint32_t seed, size_t index_base, cudaStream_t stream) {
    if (n == 0) return;
    float bias1 = 1.0f - powf(beta1, (float)t), bias2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<(unsigned)ceil_div_size(n, 512), 512, 0, stream>>>(params, master, grads, m, v, n, lr, beta1, beta2,
                                                                     bias1, bias2, eps, weight_decay, grad_scale, seed,
                                                                     index_base);
    CUDA_CHECK_LAUNCH();
}

static inline void master_to_params_cuda(bf16* params, const float* master, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    master_to_params_kernel<<<(unsigned)ceil_div_size(n, 512), 512, 0, stream>>>(params, master, n);
    CUDA_CHECK_LAUNCH();
}

static inline void params_from_master_stochastic_cuda(bf16* params, const float* master, size_t n, uint32_t seed,
                                                     size_t index_base, cudaStream_t stream) {
    if (n == 0) return;
    params_from_master_stochastic_kernel<<<(unsigned)ceil_div_size(n, 512), 512, 0, stream>>>(params, master, n, seed, index_base);
    CUDA_CHECK_LAUNCH();
}

static inline void params_to_master_cuda(float* master, const bf16* params, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    params_to_master_kernel<<<(unsigned)ceil_div_size(n, 512), 512, 0, stream>>>(master, params, n);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_ADAMW_CUH
