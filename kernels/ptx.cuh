/*
 * ptx.cuh: the warp-level PTX instructions the flash attention kernels (kernels/attention.cuh)
 * are built from, as small inline functions. Source: NVIDIA, "PTX ISA", sections "Warp-level
 * matrix multiply-accumulate instructions: mma" (9.7.14.5.8, the m16n8k16 fragment layouts),
 * "ldmatrix" (9.7.14.5.15) and "cp.async" / "cp.async.commit_group" / "cp.async.wait_group"
 * (9.7.9.25). sm_80 or newer.
 *
 * Fragments (per thread of a warp; g = lane / 4, t = lane % 4; a .b32 register holds two bf16,
 * the lower-indexed element in the low 16 bits):
 *   A (16 x 16, row-major), 4 registers: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1],
 *                                         a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9]
 *   B (16 x 8, "col"),      2 registers: b[0] = B[2t..2t+1][g],  b[1] = B[2t+8..2t+9][g]
 *   C, D (16 x 8, fp32),    4 floats:    c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
 * The accumulator of two neighbouring 16 x 8 tiles, packed to bf16, is exactly an A fragment
 * (FlashAttention-2 keeps P in registers this way).
 * ldmatrix_x4: lanes 8m..8m+7 give the row addresses (16 bytes each, 16-byte aligned, shared
 * memory) of 8 x 8 bf16 matrix m; register m of lane l receives row l/4, elements 2(l%4)..+1 of
 * matrix m, or with .trans its column l/4, rows 2(l%4)..+1.
 * cp_async_16: 16 bytes global -> shared that complete only at a later cp_async_wait<N> of the
 * same thread (then, for other threads, after a __syncthreads); valid = false zero-fills them.
 *
 * In the CPU emulation (CUDA_EMULATION) the same functions come from dev/emu/emu_ptx.h, which
 * models the layouts above element by element and makes the undefined cases fail or poison.
 */
#ifndef KERNELS_PTX_CUH
#define KERNELS_PTX_CUH

#include <stdint.h>
#include "../common/cuda_utils.cuh"

// Two floats rounded to bf16 (round to nearest even) and packed: lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

#ifndef CUDA_EMULATION

// d += a b: one 16 x 8 x 16 tensor-core product, bf16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row_address) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row_address);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row_address) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row_address);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

// .cg: cache in L2 only (each tile is read once per block). src must be a valid address even
// when valid is false (no byte is read then; callers pass the tensor's first row).
__device__ __forceinline__ void cp_async_16(void* smem, const void* src, bool valid) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif // !CUDA_EMULATION

#endif // KERNELS_PTX_CUH
