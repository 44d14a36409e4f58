/*
 * classifier.cuh: fused softmax + cross-entropy + logits gradient, GPU. CPU twin: cpu/classifier.h.
 * logits (N,Vp) bf16, N = B*T rows; only the first V columns are real. targets (N) int32,
 * losses (N) fp32 = -log softmax(logits)[target] = logsumexp(row) - row[target].
 * If dlogits_scale != 0, the logits are overwritten in place with
 *   dloss/dlogits = (softmax - onehot(target)) * dlogits_scale   (bf16),
 * padded columns V..Vp-1 get 0. The caller passes 1/(B*T*grad_accum_steps) for a mean loss.
 * One block per row. Each thread keeps its share of the row in registers (at most
 * CLASSIFIER_MAX_PACKS packs of 8 bf16), so the logits are read from memory exactly once and
 * no fp32 copy of the probabilities ever exists: max, then sum of exp, then the gradient, all
 * from registers. Limit: Vp <= 1024 * 8 * CLASSIFIER_MAX_PACKS = 65536 (GPT-2: 50304).
 * Requires Vp % 8 == 0.
 */
#ifndef KERNELS_CLASSIFIER_CUH
#define KERNELS_CLASSIFIER_CUH

#include "../common/cuda_utils.cuh"

#define CLASSIFIER_MAX_PACKS 8

__global__ void __launch_bounds__(1024) fused_classifier_kernel(bf16* logits, float* losses, const int* targets,
                                                                int V, int Vp, float dlogits_scale) {
    __shared__ float reduce_scratch[32];
    __shared__ float target_logit;
    int row = blockIdx.x;
    bf16* x = logits + (size_t)row * Vp;
    int packs = Vp / PACK_BF16;
    int target = targets[row];
    if (threadIdx.x == 0) target_logit = __bfloat162float(x[target]); // read before anyone writes
    PackBf16 data[CLASSIFIER_MAX_PACKS];
    float local_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < CLASSIFIER_MAX_PACKS; j++) {
        int p = j * blockDim.x + threadIdx.x;
        if (p < packs) {
            data[j] = load_pack_streaming(x + (size_t)p * PACK_BF16);
            for (int k = 0; k < PACK_BF16; k++)
                if (p * PACK_BF16 + k < V) local_max = fmaxf(local_max, __bfloat162float(data[j].v[k]));
        }
    }
    float row_max = block_reduce_max(local_max, reduce_scratch);
    float local_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < CLASSIFIER_MAX_PACKS; j++) {
        int p = j * blockDim.x + threadIdx.x;
        if (p < packs)
            for (int k = 0; k < PACK_BF16; k++)
                if (p * PACK_BF16 + k < V) local_sum += __expf(__bfloat162float(data[j].v[k]) - row_max);
    }
    float sum = block_reduce_sum(local_sum, reduce_scratch); // its __syncthreads also publishes target_logit
    if (threadIdx.x == 0) losses[row] = logf(sum) - (target_logit - row_max);
    if (dlogits_scale == 0.0f) return;
    float scale = dlogits_scale / sum;
#pragma unroll
    for (int j = 0; j < CLASSIFIER_MAX_PACKS; j++) {
        int p = j * blockDim.x + threadIdx.x;
        if (p < packs) {
            PackBf16 r;
            for (int k = 0; k < PACK_BF16; k++) {
                int col = p * PACK_BF16 + k;
                float g = 0.0f;
                if (col < V) {
                    g = __expf(__bfloat162float(data[j].v[k]) - row_max) * scale;
                    if (col == target) g -= dlogits_scale;
                }
                r.v[k] = __float2bfloat16(g);
            }
            store_pack_streaming(x + (size_t)p * PACK_BF16, r);
        }
    }
}

/*
 * The same loss and gradient over wte's vocab chunks (the trainer's LM head never holds the
 * (N,Vp) logits; CPU twins classifier_*_chunk in cpu/classifier.h). A chunk's logits (N, cols)
 * bf16 cover vocab columns [col0, col0 + cols); columns >= V are padding. Forward folds each
 * chunk into every row's running max and sum of exponentials (fp32; the online softmax
 * normalizer, Milakov & Gimelshein 2018, Algorithm 3) and picks up the target's logit; the
 * losses then are log(sum) + max - target logit. Backward rewrites a chunk's (recomputed) logits
 * in place with dlogits = (e^(x - max) / sum - onehot(target)) * dlogits_scale. One block per
 * row, the row's part of the chunk held in registers as in fused_classifier_kernel.
 */
__global__ void __launch_bounds__(1024) classifier_forward_chunk_kernel(const bf16* logits, float* row_max, float* row_sum,
                                                                        float* target_logit, const int* targets,
                                                                        int col0, int cols, int V) {
    __shared__ float reduce_scratch[32];
    int row = blockIdx.x;
    const bf16* x = logits + (size_t)row * cols;
    int packs = cols / PACK_BF16, real = V - col0 < cols ? V - col0 : cols;
    PackBf16 data[CLASSIFIER_MAX_PACKS];
    float local_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < CLASSIFIER_MAX_PACKS; j++) {
        int p = j * blockDim.x + threadIdx.x;
        if (p < packs) {
            data[j] = load_pack(x + (size_t)p * PACK_BF16);
            for (int k = 0; k < PACK_BF16; k++)
                if (p * PACK_BF16 + k < real) local_max = fmaxf(local_max, __bfloat162float(data[j].v[k]));
        }
    }
    float chunk_max = block_reduce_max(local_max, reduce_scratch);
    float old_max = row_max[row], new_max = fmaxf(old_max, chunk_max);
    float local_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < CLASSIFIER_MAX_PACKS; j++) {
        int p = j * blockDim.x + threadIdx.x;
        if (p < packs)
            for (int k = 0; k < PACK_BF16; k++)
                if (p * PACK_BF16 + k < real) local_sum += __expf(__bfloat162float(data[j].v[k]) - new_max);
    }
    float sum = block_reduce_sum(local_sum, reduce_scratch);
    if (threadIdx.x == 0 && real > 0) {
        row_sum[row] = row_sum[row] * __expf(old_max - new_max) + sum; // e^(-inf) = 0 on the first chunk
        row_max[row] = new_max;
        int t = targets[row] - col0;
        if (t >= 0 && t < real) target_logit[row] = __bfloat162float(x[t]);
    }
}

__global__ void __launch_bounds__(1024) classifier_backward_chunk_kernel(bf16* logits, const float* row_max, const float* row_sum,
                                                                         const int* targets, int col0, int cols, int V,
                                                                         float dlogits_scale) {
    int row = blockIdx.x;
    bf16* x = logits + (size_t)row * cols;
    int packs = cols / PACK_BF16, real = V - col0 < cols ? V - col0 : cols;
    int target = targets[row] - col0;
    float m = row_max[row], scale = dlogits_scale / row_sum[row];
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        PackBf16 d = load_pack(x + (size_t)p * PACK_BF16), r;
        for (int k = 0; k < PACK_BF16; k++) {
            int col = p * PACK_BF16 + k;
            float g = 0.0f;
            if (col < real) {
                g = __expf(__bfloat162float(d.v[k]) - m) * scale;
                if (col == target) g -= dlogits_scale;
            }
            r.v[k] = __float2bfloat16(g);
        }
        store_pack(x + (size_t)p * PACK_BF16, r);
    }
}

// row_max = -inf, row_sum = 0 (before the first chunk); losses = log(sum) + max - target logit (after the last).
__global__ void classifier_stats_init_kernel(float* row_max, float* row_sum, float* target_logit, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) { row_max[n] = -INFINITY; row_sum[n] = 0.0f; target_logit[n] = 0.0f; }
}
__global__ void classifier_losses_kernel(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) losses[n] = logf(row_sum[n]) - (target_logit[n] - row_max[n]);
}

// out[0] += scale * sum(losses[0..N)): one block, fixed order, so the mean loss of a step can be
// accumulated on the device over micro-steps and read once.
__global__ void losses_sum_kernel(float* out, const float* losses, int N, float scale) {
    __shared__ float reduce_scratch[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) sum += losses[i];
    sum = block_reduce_sum(sum, reduce_scratch);
    if (threadIdx.x == 0) out[0] += scale * sum;
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void fused_classifier_cuda(bf16* logits, float* losses, const int* targets, int N, int V, int Vp,
                                         float dlogits_scale, cudaStream_t stream) {
    int packs = Vp / PACK_BF16;
    int block = ceil_div_int(packs < 1024 ? packs : 1024, 32) * 32;
    if (Vp % PACK_BF16 != 0 || ceil_div_int(packs, block) > CLASSIFIER_MAX_PACKS) {
        fprintf(stderr, "error: fused_classifier: Vp=%d unsupported; expected a multiple of 8 up to %d\n", Vp,
                1024 * PACK_BF16 * CLASSIFIER_MAX_PACKS);
        exit(1);
    }
    fused_classifier_kernel<<<N, block, 0, stream>>>(logits, losses, targets, V, Vp, dlogits_scale);
    CUDA_CHECK_LAUNCH();
}

static inline int classifier_chunk_block(int cols) {
    int packs = cols / PACK_BF16;
    int block = ceil_div_int(packs < 1024 ? packs : 1024, 32) * 32;
    if (cols % PACK_BF16 != 0 || ceil_div_int(packs, block) > CLASSIFIER_MAX_PACKS) {
        fprintf(stderr, "error: classifier chunk of %d columns unsupported; expected a multiple of 8 up to %d\n", cols,
                1024 * PACK_BF16 * CLASSIFIER_MAX_PACKS);
        exit(1);
    }
    return block;
}

static inline void classifier_stats_init_cuda(float* row_max, float* row_sum, float* target_logit, int N, cudaStream_t stream) {
    classifier_stats_init_kernel<<<ceil_div_int(N, 256), 256, 0, stream>>>(row_max, row_sum, target_logit, N);
    CUDA_CHECK_LAUNCH();
}

static inline void classifier_forward_chunk_cuda(const bf16* logits, float* row_max, float* row_sum, float* target_logit,
                                                 const int* targets, int N, int col0, int cols, int V, cudaStream_t stream) {
    classifier_forward_chunk_kernel<<<N, classifier_chunk_block(cols), 0, stream>>>(logits, row_max, row_sum, target_logit,
                                                                                     targets, col0, cols, V);
    CUDA_CHECK_LAUNCH();
}

static inline void classifier_losses_cuda(float* losses, const float* row_max, const float* row_sum, const float* target_logit,
                                          int N, cudaStream_t stream) {
    classifier_losses_kernel<<<ceil_div_int(N, 256), 256, 0, stream>>>(losses, row_max, row_sum, target_logit, N);
    CUDA_CHECK_LAUNCH();
}

static inline void classifier_backward_chunk_cuda(bf16* logits, const float* row_max, const float* row_sum, const int* targets,
                                                  int N, int col0, int cols, int V, float dlogits_scale, cudaStream_t stream) {
    classifier_backward_chunk_kernel<<<N, 256, 0, stream>>>(logits, row_max, row_sum, targets, col0, cols, V, dlogits_scale);
    CUDA_CHECK_LAUNCH();
}

static inline void losses_sum_cuda(float* out, const float* losses, int N, float scale, cudaStream_t stream) {
    losses_sum_kernel<<<1, 1024, 0, stream>>>(out, losses, N, scale);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_CLASSIFIER_CUH
