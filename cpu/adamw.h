/*
 * adamw.h: AdamW update over a contiguous slice, CPU (fp32). Twin of kernels/adamw.cuh; the CPU
 * build's optimizer and the host optimizer of ZeRO-Offload (zero/offload/offload.h).
 * For i < n: g = grads[i] * grad_scale (grad_scale folds in clipping);
 *   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
 *   params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params)
 * with mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t), t = step counting from 1.
 * Source: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2.
 * The caller passes weight_decay = 0 for the slices that are not 2-D weights.
 *
 * adamw_update_scalar is the reference: the formula above one element at a time. adamw_update is
 * the one the engines call: the same operations in the same order on 16 lanes (AVX-512) or 8
 * lanes (AVX2 + FMA), picked once at run time from what the CPU supports (else the scalar loop),
 * over OpenMP threads that each take contiguous blocks. One pass over memory: every element's
 * p, g, m, v is read once and p, m, v written once, 28 bytes per parameter, so the update runs at
 * the machine's memory bandwidth (dev/bench/adamw_bench.sh measures it against a triad kernel).
 * The scalar path spells its fused multiply-adds out (fmaf) as the vector paths do, so all paths
 * (and the GPU kernel, kernels/adamw.cuh) round identically whatever the compiler contracts.
 * Every engine (and every placement of the optimizer state) calls the same adamw_update, so their
 * trajectories stay bit-identical to each other.
 */
#ifndef CPU_ADAMW_H
#define CPU_ADAMW_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
// The vector paths are host x86 code: not in nvcc's device pass (__CUDA_ARCH__).
#if defined(__x86_64__) && !defined(__CUDA_ARCH__) && !defined(ADAMW_NO_SIMD)
#include <immintrin.h>
#define ADAMW_X86 1
#else
#define ADAMW_X86 0
#endif

// The per-step constants every path uses.
typedef struct {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, bias1, bias2, eps, weight_decay, grad_scale;
} AdamWStep;

static inline AdamWStep adamw_step_constants(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    AdamWStep s = {lr, beta1, beta2, 1.0f - beta1, 1.0f - beta2, 1.0f - powf(beta1, (float)t), 1.0f - powf(beta2, (float)t),
                   eps, weight_decay, grad_scale};
    return s;
}

// One element, the reference arithmetic (also the vector paths' tail). The fused multiply-adds
// are explicit (fmaf: one rounding) and are exactly those of the vector paths and of the GPU
// kernel (kernels/adamw.cuh, __fmaf_rn), every other product and sum rounded on its own, so the
// result does not depend on what the compiler contracts (-ffp-contract) or on the path.
static inline void adamw_element(float* p, const float* g_in, float* m, float* v, const AdamWStep* s) {
    float g = *g_in * s->grad_scale;
    float mi = fmaf(s->beta1, *m, s->one_minus_beta1 * g);
    float omb2_g = s->one_minus_beta2 * g;
    float vi = fmaf(s->beta2, *v, omb2_g * g);
    *m = mi;
    *v = vi;
    float vhat = vi / s->bias2;
    float denom = sqrtf(vhat) + s->eps;
    float mhat = mi / s->bias1;
    float update = fmaf(s->weight_decay, *p, mhat / denom);
    *p = fmaf(-s->lr, update, *p);
}

static void adamw_update_scalar(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                                float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    AdamWStep s = adamw_step_constants(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    for (size_t i = 0; i < n; i++) adamw_element(params + i, grads + i, m + i, v + i, &s);
}

#if ADAMW_X86
// 8 lanes: the reference's operations as AVX2 + FMA instructions, element i in lane i % 8.
__attribute__((target("avx2,fma"))) static void adamw_block_avx2(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* s) {
    const __m256 beta1 = _mm256_set1_ps(s->beta1), beta2 = _mm256_set1_ps(s->beta2);
    const __m256 omb1 = _mm256_set1_ps(s->one_minus_beta1), omb2 = _mm256_set1_ps(s->one_minus_beta2);
    const __m256 bias1 = _mm256_set1_ps(s->bias1), bias2 = _mm256_set1_ps(s->bias2), eps = _mm256_set1_ps(s->eps);
    const __m256 lr = _mm256_set1_ps(s->lr), wd = _mm256_set1_ps(s->weight_decay), scale = _mm256_set1_ps(s->grad_scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), scale);
        __m256 mi = _mm256_fmadd_ps(beta1, _mm256_loadu_ps(m + i), _mm256_mul_ps(omb1, gi));
        __m256 vi = _mm256_fmadd_ps(beta2, _mm256_loadu_ps(v + i), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, bias2)), eps);
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 update = _mm256_fmadd_ps(wd, pi, _mm256_div_ps(_mm256_div_ps(mi, bias1), denom));
        _mm256_storeu_ps(p + i, _mm256_fnmadd_ps(lr, update, pi));
    }
    for (; i < n; i++) adamw_element(p + i, g + i, m + i, v + i, s);
}

// 16 lanes: the same with AVX-512F.
__attribute__((target("avx512f"))) static void adamw_block_avx512(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep* s) {
    const __m512 beta1 = _mm512_set1_ps(s->beta1), beta2 = _mm512_set1_ps(s->beta2);
    const __m512 omb1 = _mm512_set1_ps(s->one_minus_beta1), omb2 = _mm512_set1_ps(s->one_minus_beta2);
    const __m512 bias1 = _mm512_set1_ps(s->bias1), bias2 = _mm512_set1_ps(s->bias2), eps = _mm512_set1_ps(s->eps);
    const __m512 lr = _mm512_set1_ps(s->lr), wd = _mm512_set1_ps(s->weight_decay), scale = _mm512_set1_ps(s->grad_scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), scale);
        __m512 mi = _mm512_fmadd_ps(beta1, _mm512_loadu_ps(m + i), _mm512_mul_ps(omb1, gi));
        __m512 vi = _mm512_fmadd_ps(beta2, _mm512_loadu_ps(v + i), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        __m512 vhat = _mm512_div_ps(vi, bias2);
        // sqrt on all 16 lanes; the masked form (its pass-through operand defined) rather than
        // _mm512_sqrt_ps, whose undefined operand GCC 12 flags under -Werror=maybe-uninitialized
        __m512 denom = _mm512_add_ps(_mm512_mask_sqrt_ps(vhat, (__mmask16)0xFFFF, vhat), eps);
        __m512 pi = _mm512_loadu_ps(p + i);
        __m512 update = _mm512_fmadd_ps(wd, pi, _mm512_div_ps(_mm512_div_ps(mi, bias1), denom));
        _mm512_storeu_ps(p + i, _mm512_fnmadd_ps(lr, update, pi));
    }
    for (; i < n; i++) adamw_element(p + i, g + i, m + i, v + i, s);
}
#endif

typedef enum { ADAMW_PATH_SCALAR, ADAMW_PATH_AVX2, ADAMW_PATH_AVX512 } AdamWPath;
static const char* const adamw_path_names[] = {"scalar", "avx2", "avx512"};

// The widest path this CPU runs; ADAMW_PATH=scalar|avx2|avx512 in the environment caps it (tests
// and benchmarks compare the paths on one machine). Decided once.
static AdamWPath adamw_path(void) {
    static int path = -1;
    if (path < 0) {
        int best = ADAMW_PATH_SCALAR;
#if ADAMW_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = ADAMW_PATH_AVX2;
        if (__builtin_cpu_supports("avx512f")) best = ADAMW_PATH_AVX512;
#endif
        const char* cap = getenv("ADAMW_PATH");
        if (cap != NULL) {
            for (int k = 0; k < 3; k++)
                if (strcmp(cap, adamw_path_names[k]) == 0 && k < best) best = k;
        }
        path = best;
    }
    return (AdamWPath)path;
}

// Elements per OpenMP work item: contiguous 64 KiB of each of the four arrays, large enough that
// the hardware prefetchers stream, small enough to balance the threads.
#define ADAMW_BLOCK 16384

static void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    AdamWStep s = adamw_step_constants(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    AdamWPath path = adamw_path();
    long long blocks = (long long)((n + ADAMW_BLOCK - 1) / ADAMW_BLOCK);
    #pragma omp parallel for schedule(static) if (blocks > 1)
    for (long long b = 0; b < blocks; b++) {
        size_t i = (size_t)b * ADAMW_BLOCK, len = n - i < ADAMW_BLOCK ? n - i : ADAMW_BLOCK;
#if ADAMW_X86
        if (path == ADAMW_PATH_AVX512) { adamw_block_avx512(params + i, grads + i, m + i, v + i, len, &s); continue; }
        if (path == ADAMW_PATH_AVX2) { adamw_block_avx2(params + i, grads + i, m + i, v + i, len, &s); continue; }
#endif
        for (size_t j = i; j < i + len; j++) adamw_element(params + j, grads + j, m + j, v + j, &s);
    }
    (void)path;
}

/*
 * The GPU build's AdamW on the host (ZeRO-Offload, -zo cpu|nvme; zero/offload/offload_gpu.cuh): the
 * operations of kernels/adamw.cuh's adamw_kernel, fp32 master weights and Adam m, v, the fp32
 * gradient (the accumulated one the kernel reads), the parameters bf16 (passed as their 16-bit
 * patterns), the parameters rounded stochastically with the same bits the kernel draws (a hash
 * of the step's seed and the flat index), so an element is updated as the device would update
 * it. OpenMP over contiguous blocks.
 */
static inline uint32_t adamw_hash_u32(uint32_t x) { // kernels' hash_u32 (common/cuda_utils.cuh)
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

// bf16 bits of w as adamw_round_param(w, seed, index) makes them (stochastic rounding).
static inline uint16_t adamw_round_param_host(float w, uint32_t seed, size_t index) {
    uint32_t bits;
    memcpy(&bits, &w, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u) // Inf keeps its bits; NaN stays a (quiet) NaN
        return (uint16_t)((bits & 0x007fffffu) ? ((bits >> 16) | 0x0040u) : (bits >> 16));
    uint32_t random_bits = adamw_hash_u32(((uint32_t)index * 0x9e3779b9u) ^ adamw_hash_u32(seed));
    bits += random_bits & 0xffffu;
    return (uint16_t)(bits >> 16);
}

static void adamw_update_mixed(uint16_t* params, float* master, const float* grads, float* m, float* v, size_t n, float lr,
                               float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t,
                               uint32_t seed, size_t index_base) {
    float bias1 = 1.0f - powf(beta1, (float)t), bias2 = 1.0f - powf(beta2, (float)t);
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    // kernels/adamw.cuh's roundings one for one (its __fmaf_rn are these fmaf), so the host
    // update equals the device's bit for bit whatever either compiler contracts.
    #pragma omp parallel for schedule(static) if (n > ADAMW_BLOCK)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = fmaf(beta1, m[i], omb1 * g);
        float omb2_g = omb2 * g;
        float vi = fmaf(beta2, v[i], omb2_g * g);
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi / bias2) + eps;
        float w = master[i];
        float update = fmaf(weight_decay, w, (mi / bias1) / denom);
        w = fmaf(-lr, update, w);
        master[i] = w;
        params[i] = adamw_round_param_host(w, seed, index_base + i);
    }
}

// The gradient scale of a step: clipping as torch.nn.utils.clip_grad_norm_ computes it,
// min(1, grad_clip / (norm + 1e-6)) (grad_clip 0: none), times inv_world, where norm =
// sqrt(norm_sq_sum) * inv_world (norm_sq_sum: squared norm of the gradient summed over ranks).
// Twin of adamw_grad_scale_kernel (kernels/adamw.cuh).
static float adamw_grad_scale(double norm_sq_sum, float grad_clip, float inv_world) {
    float norm = (float)sqrt(norm_sq_sum * (double)inv_world * (double)inv_world);
    float coef = grad_clip > 0.0f ? grad_clip / (norm + 1e-6f) : 1.0f;
    return (coef < 1.0f ? coef : 1.0f) * inv_world;
}

#endif
