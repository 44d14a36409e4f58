/*
 * global_norm.cuh: squared L2 norm of a bf16 slice, fp32 accumulation, result on the device.
 * CPU twin: cpu/global_norm.h (fp32 in, fp64 accumulation).
 * out[0] (fp32) = (accumulate ? out[0] : 0) + sum_i x[i]^2,  x (n) bf16 (a micro-step's local
 * gradient: the noise scale meter) or fp32 (the accumulated gradient the optimizer reads).
 * Deterministic: a fixed grid of GLOBAL_NORM_BLOCKS blocks writes partial sums to scratch
 * (GLOBAL_NORM_BLOCKS floats), one block adds them in a fixed order. The global gradient norm
 * is sqrt of the sum over all owned slices, then (with ranks) one scalar all-reduce.
 * Accuracy: fp32 partial sums over at most n / (GLOBAL_NORM_BLOCKS * 256) terms per thread,
 * then tree reductions: relative error ~ (n / 131072 + 20) * 2^-24, far below what clipping needs.
 */
#ifndef KERNELS_GLOBAL_NORM_CUH
#define KERNELS_GLOBAL_NORM_CUH

#include "../common/cuda_utils.cuh"

#define GLOBAL_NORM_BLOCKS 512

__device__ __forceinline__ float norm_value(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float norm_value(float x) { return x; }

template <typename T>
__global__ void norm_squared_partial_kernel(float* partials, const T* x, size_t n) {
    __shared__ float reduce_scratch[32];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float value = norm_value(x[i]);
        sum += value * value;
    }
    sum = block_reduce_sum(sum, reduce_scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void norm_squared_final_kernel(float* out, const float* partials, int num_partials, int accumulate) {
    __shared__ float reduce_scratch[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) sum += partials[i];
    sum = block_reduce_sum(sum, reduce_scratch);
    if (threadIdx.x == 0) out[0] = (accumulate ? out[0] : 0.0f) + sum;
}

// ----------------------------------------------------------------------------------------------
// Launcher. scratch: GLOBAL_NORM_BLOCKS floats on the device.

template <typename T>
static inline void norm_squared_cuda(float* out, float* scratch, const T* x, size_t n, int accumulate,
                                     cudaStream_t stream) {
    norm_squared_partial_kernel<T><<<GLOBAL_NORM_BLOCKS, 256, 0, stream>>>(scratch, x, n);
    CUDA_CHECK_LAUNCH();
    norm_squared_final_kernel<<<1, 512, 0, stream>>>(out, scratch, GLOBAL_NORM_BLOCKS, accumulate);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_GLOBAL_NORM_CUH
