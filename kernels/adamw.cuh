/*
 * adamw.cuh: AdamW with fp32 master weights, GPU, all tensors in one launch. CPU twin: cpu/adamw.h.
 * For each element of each segment: g = grads[i] (fp32, the accumulated gradient) * grad_scale
 * (read from device memory: it folds in clipping and the 1/world_size average, computed by
 * adamw_grad_scale_cuda from the global norm on the device, so the host never waits for it):
 *   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2          (m, v fp32)
 *   master -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * master) (master fp32)
 *   params = bf16(master) with stochastic rounding                     (params bf16)
 * mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t), t = step counting from 1.
 * Source: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2.
 * Multi-tensor: a plan (adamw_plan_build, once per run) lists segments, contiguous runs of one
 * tensor inside what this rank updates, each with its offsets in the five buffers and whether it
 * is a 2-D weight (weight decay on those only, as on the CPU); the one launch has a block per
 * chunk of ADAMW_CHUNK elements of a segment. One launch instead of one per tensor and unit
 * (about 150 at d12): the per-launch cost and the tail of each small grid go away.
 * Stochastic rounding (see cuda_utils.cuh) keeps updates smaller than half a bf16 ulp alive in
 * expectation; the random bits come from a hash of (seed, global element index), so a step is
 * reproducible and an element rounds the same way whichever rank or ZeRO stage updates it
 * (segment.index: the flat-buffer index of its first element).
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

#define ADAMW_CHUNK 4096 // elements per block: 512 threads x 8

// One contiguous run of one tensor: element offsets of its first element in each buffer
// (m and v share the master weights' layout), its length, and its flat-buffer index.
typedef struct {
    size_t params, master, grads, length, index;
    int decay; // 1: a 2-D weight (weight decay applies)
} AdamWSegment;

typedef struct { unsigned int segment, chunk; } AdamWChunk; // elements [chunk * ADAMW_CHUNK, +ADAMW_CHUNK) of segment

__global__ void __launch_bounds__(512) adamw_kernel(bf16* params, float* master, const float* grads, float* m, float* v,
                                                    const AdamWSegment* segments, const AdamWChunk* chunks, float lr,
                                                    float beta1, float beta2, float bias1, float bias2, float eps,
                                                    float weight_decay, const float* grad_scale, uint32_t seed) {
    AdamWChunk c = chunks[blockIdx.x]; // the launcher offsets `chunks` to its first chunk
    AdamWSegment s = segments[c.segment];
    float scale = grad_scale[0];
    float decay = s.decay ? weight_decay : 0.0f;
    size_t first = (size_t)c.chunk * ADAMW_CHUNK;
    size_t last = first + ADAMW_CHUNK < s.length ? first + ADAMW_CHUNK : s.length;
    bf16* p = params + s.params;
    float *w = master + s.master, *mm = m + s.master, *vv = v + s.master;
    const float* g = grads + s.grads;
    // Every rounding spelled out (CUDA C++ Programming Guide, "Intrinsic Functions": __fmul_rn,
    // __fadd_rn, __fmaf_rn are never merged by the compiler), in the order and with the fused
    // multiply-adds of the CPU twin (cpu/adamw.h: adamw_element and its vector paths, fmaf), so
    // device and host updates are bit-identical by construction, not by how nvcc contracts
    // a*b + c (by default into fma.rn.f32 where it likes). tests/t_62 checks the PTX for it.
    const float omb1 = __fadd_rn(1.0f, -beta1), omb2 = __fadd_rn(1.0f, -beta2);
    for (size_t i = first + threadIdx.x; i < last; i += blockDim.x) {
        float gi = __fmul_rn(g[i], scale);
        float mi = __fmaf_rn(beta1, mm[i], __fmul_rn(omb1, gi));
        float vi = __fmaf_rn(beta2, vv[i], __fmul_rn(__fmul_rn(omb2, gi), gi));
        mm[i] = mi;
        vv[i] = vi;
        float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, bias2)), eps);
        float wi = w[i];
        float update = __fmaf_rn(decay, wi, __fdiv_rn(__fdiv_rn(mi, bias1), denom));
        wi = __fmaf_rn(-lr, update, wi);
        w[i] = wi;
        p[i] = adamw_round_param(wi, seed, s.index + i);
    }
}

// The gradient scale AdamW multiplies by: clipping as torch.nn.utils.clip_grad_norm_ computes it,
// min(1, grad_clip / (norm + 1e-6)) (no clipping when grad_clip == 0), times inv_world (the
// collectives summed over ranks). norm_sq_sum: the squared norm of the SUMMED gradient, so
// norm = sqrt(norm_sq_sum) * inv_world. One thread. CPU twin: adamw_grad_scale (cpu/adamw.h).
__global__ void adamw_grad_scale_kernel(float* grad_scale, const float* norm_sq_sum, float grad_clip, float inv_world) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    float norm = (float)sqrt((double)norm_sq_sum[0] * (double)inv_world * (double)inv_world);
    float coef = grad_clip > 0.0f ? grad_clip / (norm + 1e-6f) : 1.0f;
    grad_scale[0] = (coef < 1.0f ? coef : 1.0f) * inv_world;
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

// The plan on the device: segments and their chunks (one block each).
typedef struct {
    AdamWSegment* segments;
    AdamWChunk* chunks;
    int num_segments, num_chunks;
} AdamWPlan;

// Upload n segments (host array) and their chunk list; synchronous (set-up).
static inline void adamw_plan_build(AdamWPlan* plan, const AdamWSegment* segments, int n) {
    size_t num_chunks = 0;
    for (int i = 0; i < n; i++) num_chunks += ceil_div_size(segments[i].length, ADAMW_CHUNK);
    if (num_chunks > (size_t)INT32_MAX) { fprintf(stderr, "error: internal: adamw plan of %zu chunks\n", num_chunks); exit(1); }
    AdamWChunk* host = (AdamWChunk*)malloc((num_chunks > 0 ? num_chunks : 1) * sizeof(AdamWChunk));
    if (host == NULL) { fprintf(stderr, "error: out of host memory (adamw plan)\n"); exit(1); }
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t c = 0; c < ceil_div_size(segments[i].length, ADAMW_CHUNK); c++) host[k++] = AdamWChunk{(unsigned)i, (unsigned)c};
    plan->num_segments = n;
    plan->num_chunks = (int)num_chunks;
    CUDA_CHECK(cudaMalloc(&plan->segments, (n > 0 ? n : 1) * sizeof(AdamWSegment)));
    CUDA_CHECK(cudaMalloc(&plan->chunks, (num_chunks > 0 ? num_chunks : 1) * sizeof(AdamWChunk)));
    if (n > 0) CUDA_CHECK(cudaMemcpy(plan->segments, segments, n * sizeof(AdamWSegment), cudaMemcpyHostToDevice));
    if (num_chunks > 0) CUDA_CHECK(cudaMemcpy(plan->chunks, host, num_chunks * sizeof(AdamWChunk), cudaMemcpyHostToDevice));
    free(host);
}

static inline void adamw_plan_free(AdamWPlan* plan) {
    CUDA_CHECK(cudaFree(plan->segments));
    CUDA_CHECK(cudaFree(plan->chunks));
    plan->segments = NULL;
    plan->chunks = NULL;
}

// One AdamW step over chunks [first_chunk, first_chunk + num_chunks) of the plan (all of it:
// 0, plan->num_chunks). t: step counting from 1. seed: one per optimizer step (the same on
// every rank). grad_scale: one float on the device. The five buffers are the bases the plan's
// offsets count from.
static inline void adamw_update_cuda(const AdamWPlan* plan, int first_chunk, int num_chunks, bf16* params, float* master,
                                     const float* grads, float* m, float* v, float lr, float beta1, float beta2, float eps,
                                     float weight_decay, const float* grad_scale, int t, uint32_t seed, cudaStream_t stream) {
    if (num_chunks <= 0) return;
    if (first_chunk < 0 || first_chunk + num_chunks > plan->num_chunks) {
        fprintf(stderr, "error: internal: adamw chunks [%d, +%d) outside the plan's %d\n", first_chunk, num_chunks, plan->num_chunks);
        exit(1);
    }
    float bias1 = 1.0f - powf(beta1, (float)t), bias2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<num_chunks, 512, 0, stream>>>(params, master, grads, m, v, plan->segments, plan->chunks + first_chunk, lr,
                                                beta1, beta2, bias1, bias2, eps, weight_decay, grad_scale, seed);
    CUDA_CHECK_LAUNCH();
}

static inline void adamw_grad_scale_cuda(float* grad_scale, const float* norm_sq_sum, float grad_clip, float inv_world,
                                         cudaStream_t stream) {
    adamw_grad_scale_kernel<<<1, 32, 0, stream>>>(grad_scale, norm_sq_sum, grad_clip, inv_world);
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
