/*
 * cuda_utils.cuh: helpers shared by every CUDA translation unit of the GPU build.
 *   - CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK: print the failing call, file, line and the
 *     library's own error string, then exit(1) (STYLE.md "Errors"); NCCL_CHECK first aborts the
 *     communicators and every rank when the engine registered how (nccl_check_abort).
 *   - bf16 (`__nv_bfloat16`) storage type and 128-bit packs of 8 bf16 for vectorized loads.
 *   - stochastic rounding fp32 -> bf16 (used by AdamW when it writes the bf16 parameters).
 *   - block/warp reductions in fp32 with a fixed combination order (deterministic).
 * Nothing here allocates or launches by itself.
 */
#ifndef CUDA_UTILS_CUH
#define CUDA_UTILS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

// ----------------------------------------------------------------------------------------------
// Error checks. NCCL_CHECK expands ncclGetErrorString at the use site, so this header does not
// need nccl.h (test_kernels does not link NCCL).

#define CUDA_CHECK(call)                                                                            \
    do {                                                                                            \
        cudaError_t cuda_check_err_ = (call);                                                       \
        if (cuda_check_err_ != cudaSuccess) {                                                       \
            fprintf(stderr, "error: CUDA call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                    cudaGetErrorString(cuda_check_err_));                                           \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

#define CUBLAS_CHECK(call)                                                                            \
    do {                                                                                              \
        cublasStatus_t cublas_check_status_ = (call);                                                 \
        if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS) {                                          \
            fprintf(stderr, "error: cuBLAS call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                    cublasLtGetStatusString(cublas_check_status_));                                   \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

// On an NCCL error the other ranks are blocked in collectives this rank will never join: exiting
// alone leaves them waiting out their timeout (-wt). The engine (zero/gpu/comm_gpu.cuh) sets
// nccl_check_rank and nccl_check_abort, which aborts the communicators (ncclCommAbort: NCCL docs,
// "Fault Tolerance") and every rank (MPI_Abort), so the peers end within seconds. Unset (tests
// without the engine): the line names no rank and the process exits alone.
static int nccl_check_rank = -1;
static void (*nccl_check_abort)(void) = NULL;

static void nccl_check_failed(const char* call, const char* file, int line, const char* what) {
    if (nccl_check_rank >= 0)
        fprintf(stderr, "error: rank %d: NCCL call %s failed at %s:%d: %s; aborting the communicators and all ranks\n",
                nccl_check_rank, call, file, line, what);
    else
        fprintf(stderr, "error: NCCL call %s failed at %s:%d: %s\n", call, file, line, what);
    void (*abort_all)(void) = nccl_check_abort;
    nccl_check_abort = NULL; // once: the abort's own NCCL calls must not come back here
    if (abort_all != NULL) abort_all();
    exit(1);
}

#define NCCL_CHECK(call)                                                                            \
    do {                                                                                            \
        ncclResult_t nccl_check_result_ = (call);                                                   \
        if (nccl_check_result_ != ncclSuccess)                                                      \
            nccl_check_failed(#call, __FILE__, __LINE__, ncclGetErrorString(nccl_check_result_));   \
    } while (0)

// Launch-error check after a kernel launch (configuration errors surface here, not later).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

static inline size_t ceil_div_size(size_t a, size_t b) { return (a + b - 1) / b; }
static inline int ceil_div_int(int a, int b) { return (a + b - 1) / b; }

// Number of SMs of the current device (cached after the first call; one device per process).
static inline int cuda_num_sms(void) {
    static int num_sms = 0;
    if (num_sms == 0) {
        int device;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    }
    return num_sms;
}

// ----------------------------------------------------------------------------------------------
// 128-bit packs: 8 bf16 moved with one 16-byte load/store. Callers guarantee 16-byte alignment
// (every row length used with packs is a multiple of 8 elements and buffers come from cudaMalloc).

#define PACK_BF16 8

struct __align__(16) PackBf16 {
    bf16 v[PACK_BF16];
};

__device__ __forceinline__ PackBf16 load_pack(const bf16* p) { return *reinterpret_cast<const PackBf16*>(p); }

// Streaming load (evict-first): for data read exactly once, e.g. logits in the classifier.
__device__ __forceinline__ PackBf16 load_pack_streaming(const bf16* p) {
    int4 raw = __ldcs(reinterpret_cast<const int4*>(p));
    return *reinterpret_cast<PackBf16*>(&raw);
}

__device__ __forceinline__ void store_pack(bf16* p, const PackBf16& x) { *reinterpret_cast<PackBf16*>(p) = x; }

__device__ __forceinline__ void store_pack_streaming(bf16* p, const PackBf16& x) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

// ----------------------------------------------------------------------------------------------
// Reductions with a fixed order: the same inputs give the same bits every run.

__device__ __forceinline__ float warp_reduce_sum(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ float warp_reduce_max(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `shared` holds 32 floats. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float block_reduce_sum(float x, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
    x = warp_reduce_sum(x);
    __syncthreads(); // shared may still be read by a previous call
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < num_warps ? shared[lane] : 0.0f;
    return warp_reduce_sum(x);
}

__device__ __forceinline__ float block_reduce_max(float x, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
    x = warp_reduce_max(x);
    __syncthreads();
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    x = lane < num_warps ? shared[lane] : -INFINITY;
    return warp_reduce_max(x);
}

// ----------------------------------------------------------------------------------------------
// Stochastic rounding fp32 -> bf16 (Gupta et al. 2015, "Deep Learning with Limited Numerical
// Precision", sec. 3): round up with probability equal to the discarded fraction, so the
// rounding error is zero in expectation and small AdamW updates are not lost to bf16's 8-bit
// mantissa. bf16 is the top 16 bits of fp32: add 16 random bits to the low half and truncate;
// a carry out of the low half is exactly a round up. NaN/Inf keep round-to-nearest.

// 32-bit integer hash ("lowbias32" constants from Chris Wellons' hash-prospector, public domain);
// a counter-based generator: the same (index, seed) always gives the same bits.
__device__ __forceinline__ uint32_t hash_u32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

__device__ __forceinline__ bf16 float_to_bf16_stochastic(float x, uint32_t random_bits) {
    uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x); // Inf or NaN
    bits += random_bits & 0xffffu;
    bits &= 0xffff0000u;
    return __float2bfloat16_rz(__uint_as_float(bits)); // exact: low half is zero
}

#endif // CUDA_UTILS_CUH
