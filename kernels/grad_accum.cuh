/*
 * grad_accum.cuh: gradient accumulation across micro-steps in fp32, GPU. Backward writes each
 * micro-step's gradient in bf16 (what cuBLASLt and the kernels produce); the engine adds it into
 * an fp32 buffer, so small contributions are not rounded away by a bf16 running sum (with 8
 * micro-steps a bf16 sum loses up to 3 of its 8 significant bits: measured 5e-3 relative L2 on
 * the reference model, test_gpt2cu's gradient_accumulation check; 1e-7 in fp32).
 *   acc (n) fp32, grad (n) bf16, n % 8 == 0, both 16-byte aligned:
 *   GRAD_SET        acc  = grad                 (a step's first micro-step; no memset needed)
 *   GRAD_ADD        acc += grad
 *   GRAD_ADD_ROUND  acc += grad, then grad = bf16(acc) (round to nearest): the accumulated
 *                   gradient, once rounded, as the bf16 input of a collective
 * CPU twin: the same three lines in dev/test_kernels.cu (the CPU build accumulates in fp32 as
 * it goes and needs none of this).
 */
#ifndef KERNELS_GRAD_ACCUM_CUH
#define KERNELS_GRAD_ACCUM_CUH

#include "../common/cuda_utils.cuh"

typedef enum { GRAD_SET, GRAD_ADD, GRAD_ADD_ROUND } GradAccumMode;

// One thread per 8 elements: one 16-byte bf16 load, two 16-byte fp32 loads and stores.
__global__ void grad_accumulate_kernel(float* acc, bf16* grad, size_t n, int mode) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK_BF16;
    if (i >= n) return;
    PackBf16 g = load_pack(grad + i);
    float4* a = reinterpret_cast<float4*>(acc + i);
    float4 lo = mode == GRAD_SET ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : a[0];
    float4 hi = mode == GRAD_SET ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : a[1];
    lo.x += __bfloat162float(g.v[0]); lo.y += __bfloat162float(g.v[1]);
    lo.z += __bfloat162float(g.v[2]); lo.w += __bfloat162float(g.v[3]);
    hi.x += __bfloat162float(g.v[4]); hi.y += __bfloat162float(g.v[5]);
    hi.z += __bfloat162float(g.v[6]); hi.w += __bfloat162float(g.v[7]);
    a[0] = lo;
    a[1] = hi;
    if (mode == GRAD_ADD_ROUND) {
        PackBf16 r;
        r.v[0] = __float2bfloat16(lo.x); r.v[1] = __float2bfloat16(lo.y);
        r.v[2] = __float2bfloat16(lo.z); r.v[3] = __float2bfloat16(lo.w);
        r.v[4] = __float2bfloat16(hi.x); r.v[5] = __float2bfloat16(hi.y);
        r.v[6] = __float2bfloat16(hi.z); r.v[7] = __float2bfloat16(hi.w);
        store_pack(grad + i, r);
    }
}

static inline void grad_accumulate_cuda(float* acc, bf16* grad, size_t n, GradAccumMode mode, cudaStream_t stream) {
    if (n == 0) return;
    if (n % PACK_BF16 != 0 || ((uintptr_t)acc % 16) != 0 || ((uintptr_t)grad % 16) != 0) {
        fprintf(stderr, "error: internal: grad_accumulate: n = %zu must be a multiple of 8 and both buffers 16-byte aligned\n", n);
        exit(1);
    }
    grad_accumulate_kernel<<<(unsigned)ceil_div_size(n / PACK_BF16, 256), 256, 0, stream>>>(acc, grad, n, (int)mode);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_GRAD_ACCUM_CUH
