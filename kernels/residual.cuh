/*
 * residual.cuh: residual connection, GPU (bf16 storage, fp32 add). CPU twin: cpu/residual.h.
 * forward:  out (N) = a + b.
 * backward: da += dout, db += dout (N). The trainer mostly avoids this kernel by letting the
 *           branch's last matmul accumulate straight into the residual gradient (beta = 1);
 *           it is here for the twin and for any branch that cannot do that. N % 8 == 0.
 */
#ifndef KERNELS_RESIDUAL_CUH
#define KERNELS_RESIDUAL_CUH

#include "../common/cuda_utils.cuh"

__global__ void residual_forward_kernel(bf16* out, const bf16* a, const bf16* b, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK_BF16;
    if (i >= N) return;
    PackBf16 x = load_pack(a + i), y = load_pack(b + i), r;
    for (int k = 0; k < PACK_BF16; k++) r.v[k] = __float2bfloat16(__bfloat162float(x.v[k]) + __bfloat162float(y.v[k]));
    store_pack(out + i, r);
}

__global__ void residual_backward_kernel(bf16* da, bf16* db, const bf16* dout, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PACK_BF16;
    if (i >= N) return;
    PackBf16 d = load_pack(dout + i), x = load_pack(da + i), y = load_pack(db + i), rx, ry;
    for (int k = 0; k < PACK_BF16; k++) {
        float g = __bfloat162float(d.v[k]);
        rx.v[k] = __float2bfloat16(__bfloat162float(x.v[k]) + g);
        ry.v[k] = __float2bfloat16(__bfloat162float(y.v[k]) + g);
    }
    store_pack(da + i, rx);
    store_pack(db + i, ry);
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void residual_forward_cuda(bf16* out, const bf16* a, const bf16* b, size_t N, cudaStream_t stream) {
    residual_forward_kernel<<<(unsigned)ceil_div_size(N / PACK_BF16, 256), 256, 0, stream>>>(out, a, b, N);
    CUDA_CHECK_LAUNCH();
}

static inline void residual_backward_cuda(bf16* da, bf16* db, const bf16* dout, size_t N, cudaStream_t stream) {
    residual_backward_kernel<<<(unsigned)ceil_div_size(N / PACK_BF16, 256), 256, 0, stream>>>(da, db, dout, N);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_RESIDUAL_CUH
