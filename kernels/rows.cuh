/*
 * rows.cuh: moving whole rows of a (rows, C) bf16 matrix by index, GPU: the tied wte's gradient
 * rows that the ZeRO engine sets aside between the LM head's and the encoder's contributions
 * (zero_grads_unit_partly_ready in zero/gpu/engine_gpu.cuh; the CPU engine does the same with memcpy).
 * tokens (count) device int32, ascending and distinct; row r of the matrix is token r + row0.
 *   rows_take: kept (count, C) = data[tokens - row0, :], then those rows of data = 0
 *   rows_put:  data[tokens - row0, :] = kept (count, C)
 * One thread per 8 channels of one row. C % 8 == 0.
 */
#ifndef KERNELS_ROWS_CUH
#define KERNELS_ROWS_CUH

#include "../common/cuda_utils.cuh"

__global__ void rows_take_kernel(bf16* kept, bf16* data, const int* tokens, int row0, int count, int C) {
    size_t packs_per_row = (size_t)C / PACK_BF16;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)count * packs_per_row) return;
    size_t i = idx / packs_per_row, c = (idx % packs_per_row) * PACK_BF16;
    bf16* row = data + (size_t)(tokens[i] - row0) * C + c;
    store_pack(kept + i * C + c, load_pack(row));
    PackBf16 zero;
    for (int k = 0; k < PACK_BF16; k++) zero.v[k] = __float2bfloat16(0.0f);
    store_pack(row, zero);
}

__global__ void rows_put_kernel(bf16* data, const bf16* kept, const int* tokens, int row0, int count, int C) {
    size_t packs_per_row = (size_t)C / PACK_BF16;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)count * packs_per_row) return;
    size_t i = idx / packs_per_row, c = (idx % packs_per_row) * PACK_BF16;
    store_pack(data + (size_t)(tokens[i] - row0) * C + c, load_pack(kept + i * C + c));
}

static inline void rows_take_cuda(bf16* kept, bf16* data, const int* tokens, int row0, int count, int C, cudaStream_t stream) {
    if (count == 0) return;
    size_t threads = (size_t)count * (C / PACK_BF16);
    rows_take_kernel<<<(unsigned)ceil_div_size(threads, 256), 256, 0, stream>>>(kept, data, tokens, row0, count, C);
    CUDA_CHECK_LAUNCH();
}

static inline void rows_put_cuda(bf16* data, const bf16* kept, const int* tokens, int row0, int count, int C, cudaStream_t stream) {
    if (count == 0) return;
    size_t threads = (size_t)count * (C / PACK_BF16);
    rows_put_kernel<<<(unsigned)ceil_div_size(threads, 256), 256, 0, stream>>>(data, kept, tokens, row0, count, C);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_ROWS_CUH
