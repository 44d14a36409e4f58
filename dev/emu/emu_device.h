/*
 * emu_device.h: the device built-ins as the kernels spell them, for the emulation (see emu.h for the
 * model): __shared__ (a function-static array in the emu_shared section, poisoned before every
 * block), threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __syncwarp, __shfl_xor_sync (full
 * mask), the bit casts, the fast-math intrinsics (__expf, __logf, __fdividef, rsqrtf; exact, or
 * with the device's documented ulp errors under EMU_DEVICE_MATH=1), the explicitly rounded
 * operations (__fmul_rn, __fadd_rn, ...), cache-hinted loads and stores, and atomicAdd on float.
 * EMU_CONTRACT=1 (the contracted flavor, emu.mk) makes __device__ and __global__ contract
 * multiply-adds as nvcc does. Host code in dev/emu reads device_math() too (emu_ptx.h, the
 * cuBLASLt model).
 * Included by emu.h after emu_runtime.h, outside namespace emu (these are global names).
 */
#ifndef EMU_DEVICE_H
#define EMU_DEVICE_H
#ifndef EMU_H
#error "dev/emu/emu_device.h is part of the CPU emulation of CUDA; include dev/emu/emu.h"
#endif

// ----------------------------------------------------------------------------------------------
// Device built-ins as the kernels spell them.

#undef __shared__
// One block runs at a time: a function-static array is the block's shared memory. All of them
// live in one section, poisoned (0xff) before every block, as if each block got fresh memory.
#define __shared__ static __attribute__((section("emu_shared")))
#undef __launch_bounds__
#define __launch_bounds__(...)
// EMU_CONTRACT=1 (emu.mk's contracted flavor, compiled -mfma -ffp-contract=off): multiply-adds
// in device code (__global__ and __device__ functions) contract into fused multiply-adds, host
// code's do not, as in the CUDA build (nvcc contracts device code, --fmad=true by default; the
// host compiler gets no FMA-capable -march there, so the CPU twins and the host AdamW of -zo
// never contract). How close to nvcc: gcc forms an fma from a product whose every use is an add
// or subtract in the same basic block (a*b+c, a*b-c, c-a*b), as NVPTX's fusion does (it fuses
// products with up to 4 add uses, per basic block); in a*b+c*d both fuse the product that comes
// first, but after each compiler's own reassociation and operand order the one kept unrounded
// may differ, and loops vectorised or unrolled differently may pair other terms. One measured
// difference: `out[i] = acc ? out[i] + q * s : q * s` (the dequantize before f7029bd) nvcc fuses
// and gcc does not (the product also feeds the plain store). So an error measured here has the
// size nvcc's contraction gives, not the device's bits, and the PTX check (dev/ptx_contraction.py,
// t_62) stays what holds a kernel to a bit-identity claim. Measured over test_kernels' 53 kernels
// (2026-12-06; nvcc 13.0 PTX -fmad=true minus false, vs gcc 12 vfmadd with EMU_CONTRACT minus
// without): the same 49 contract or not; attention_forward_kernel (nvcc 2, gcc 0) and
// attention_backward_kernel (nvcc 0, gcc 1) differ (their mma fragments are host code here).
// Counts differ in size: nvcc unrolls the 8-element pack loops that gcc keeps. Explicitly
// rounded operations (__fmul_rn, __fadd_rn below) never contract, as on the device. A function
// both __host__ and __device__ contracts here when the host calls it too (only integer ones
// exist: attention_padded_T).
#if defined(EMU_CONTRACT) && EMU_CONTRACT
#if !defined(__FMA__)
#error "EMU_CONTRACT needs an FMA-capable target (-mfma): without FMA instructions gcc contracts nothing"
#endif
#undef __device__
#undef __global__
#define __device__ __attribute__((optimize("fp-contract=fast")))
#define __global__ __attribute__((optimize("fp-contract=fast")))
#endif
#define threadIdx (emu::state.current->idx)
#define blockIdx (emu::state.block_idx)
#define blockDim (emu::state.block)
#define gridDim (emu::state.grid)
#define warpSize 32

#define __syncthreads() emu::block_barrier(__FILE__, __LINE__)
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask, "__syncwarp"); }

template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 64 bits");
    if (width != 32) emu::fail("%s", "__shfl_xor_sync with width != 32 is not modelled");
    emu::Thread* t = emu::state.current;
    emu::Warp& w = emu::state.warps[t->warp];
    int parity = (int)(t->warp_phase & 1);
    memcpy(&w.slots[parity][t->lane], &value, sizeof(T));
    emu::warp_barrier(mask, "__shfl_xor_sync");
    T result;
    int source = (t->lane ^ lane_mask) & 31;
    // the source took part if it reached this exchange's phase (it may have finished since)
    if (source >= w.lanes || emu::state.threads[(size_t)t->warp * 32 + source].warp_phase < t->warp_phase)
        memset(&result, 0xff, sizeof(T)); // an exited or absent lane: undefined on the GPU, poison here
    else
        memcpy(&result, &w.slots[parity][source], sizeof(T));
    return result;
}

static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
// EMU_DEVICE_MATH=1: the fast-math intrinsics and rsqrtf err as much as the device may (CUDA C++
// Programming Guide, "Mathematical Functions": maximum ulp errors of rsqrtf (2, standard
// functions table) and of the intrinsics __expf (2 + floor(|1.173 x|)), __logf (absolute
// 2^-21.41 for x in [0.5, 2], else 3 ulps), __fdividef (2 ulps)), instead of the exact libm value:
// the result is moved by k ulps, k in [-bound, bound] drawn from a hash of the input bits (the
// same input, the same error, as a fixed device approximation). Tensor-core products (mma.sync
// here, the cuBLASLt model) accumulate in fp32 instead of double. Default: off (exact).
namespace emu {
static bool device_math(void) {
    static int on = -1;
    if (on < 0) { const char* e = getenv("EMU_DEVICE_MATH"); on = e != NULL && atoi(e) != 0; }
    return on != 0;
}
static inline uint32_t math_hash(float x) {
    uint32_t h;
    memcpy(&h, &x, 4);
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    return h;
}
// exact moved by k in [-bound, bound] ulps (k from x); zeros, infinities and NaN unchanged.
static inline float perturb_ulps(float exact, float x, float bound) {
    if (!device_math() || !(bound >= 1.0f) || !isfinite(exact) || exact == 0.0f) return exact;
    int64_t b = bound > 1e6f ? 1000000 : (int64_t)bound;
    int64_t k = (int64_t)(math_hash(x) % (uint32_t)(2 * b + 1)) - b;
    uint32_t u;
    memcpy(&u, &exact, 4);
    int64_t mag = (int64_t)(u & 0x7fffffffu) + k; // a finite float's bits grow with its magnitude
    if (mag < 0) mag = 0;
    if (mag > 0x7f7fffff) mag = 0x7f7fffff;
    u = (u & 0x80000000u) | (uint32_t)mag;
    float r;
    memcpy(&r, &u, 4);
    return r;
}
} // namespace emu
static inline float rsqrtf(float x) { return emu::perturb_ulps(1.0f / sqrtf(x), x, 2.0f); }
// declared extern "C" by crt/device_functions.h (as device functions), so defined to match
extern "C" float __expf(float x) __THROW { return emu::perturb_ulps(expf(x), x, 2.0f + floorf(fabsf(1.173f * x))); }
extern "C" float __logf(float x) __THROW {
    float exact = logf(x);
    if (!emu::device_math() || !(x >= 0.5f && x <= 2.0f)) return emu::perturb_ulps(exact, x, 3.0f);
    // absolute error up to 2^-21.41 here: k/8 of it, k in [-8, 8]
    int k = (int)(emu::math_hash(x) % 17u) - 8;
    return exact + (float)k / 8.0f * 3.5877e-7f; // 2^-21.41
}
static inline float __fdividef(float a, float b) { return emu::perturb_ulps(a / b, a * 0.5f + b, 2.0f); }
// The explicitly rounded operations (CUDA Math API, "Single Precision Intrinsics"): IEEE
// round-to-nearest, one rounding each, never fused with a neighbour; fmaf is the fused
// multiply-add with one rounding. In the contracted flavor (EMU_CONTRACT above) each operand and
// result passes through an empty asm, which no fused multiply-add can span.
static inline float emu_rounded(float r) {
#if defined(__x86_64__)
    __asm__("" : "+x"(r));
#endif
    return r;
}
static inline float __fmul_rn(float a, float b) { return emu_rounded(emu_rounded(a) * emu_rounded(b)); }
static inline float __fadd_rn(float a, float b) { return emu_rounded(emu_rounded(a) + emu_rounded(b)); }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int4 __ldcs(const int4* p) { return *p; }
static inline void __stcs(int4* p, int4 v) { *p = v; }
static inline float __ldcg(const float* p) { return *p; }
static inline void __stcg(float* p, float v) { *p = v; }
// Fibers switch only at barriers, so a read-modify-write is atomic here.
static inline float atomicAdd(float* p, float v) { float old = *p; *p = old + v; return old; }

#endif // EMU_DEVICE_H
