/*
 * classifier.cuh: fused softmax + cross-entropy + logits gradient, GPU. CPU twin: cpu/classifier.h.
 * logits (N,Vp) bf16, N = B*T rows; only the first V columns are real. targets (N) int32,
 * losses (N) fp32 = -log softmax(logits)[target] = logsumexp(row) - row[target].
 * If dlogits_scale != 0, the logits are overwritten in place with
 *   dloss/dlogits = (softmax - onehot(target)) * dlogits_scale   (bf16),
 * padded columns V..Vp-1 get 0. The caller passes 1/(B*T*grad_accum_steps) for a mean loss.
 * One kernel (fused_classifier_kernel<PACKS>) serves the whole row and the LM head's vocab
 * chunks: one block per row, each thread keeping its share of the row (chunk) in registers
 * (PACKS packs of 8 bf16, the smallest of 1, 2, 4, CLASSIFIER_MAX_PACKS that holds it), so the
 * logits are read from memory exactly once and no fp32 copy of the probabilities ever exists:
 * max, then sum of exp, then the gradient, all from registers. No instantiation spills (ptxas,
 * sm_90; tests/t_62). Limit: Vp (a chunk's columns) <= 1024 * 8 * CLASSIFIER_MAX_PACKS = 65536
 * (GPT-2: 50304). Requires Vp % 8 == 0.
 */
#ifndef KERNELS_CLASSIFIER_CUH
#define KERNELS_CLASSIFIER_CUH

#include "../common/cuda_utils.cuh"

#define CLASSIFIER_MAX_PACKS 8

#define CLASSIFIER_BF16X2_MINUS_INF 0xFF80FF80u // two bf16 -inf

// An empty asm that may change w, as the compiler must assume: no value derived from w (the fp32
// elements) is carried across it, so 4 packed words stay live, not 8 floats (ptxas, sm_90: without
// it the 8-pack kernel spills under __launch_bounds__(1024)'s 64 registers).
__device__ __forceinline__ void classifier_keep_packed(unsigned& w) { asm volatile("" : "+r"(w)); }

// Element k (0..7) of a pack held as 4 words of bf16 pairs, in fp32 (exact: bf16 is fp32's top half).
__device__ __forceinline__ float classifier_element(const unsigned* w, int k) {
    return __uint_as_float(k % 2 == 0 ? w[k / 2] << 16 : w[k / 2] & 0xFFFF0000u);
}

/*
 * The row kernel of both launchers below (fused_classifier_cuda: the whole row;
 * classifier_forward_chunk_cuda: one vocab chunk of it). One block per row; the row's `cols`
 * columns [col0, col0 + cols) (those >= V are padding) are held in registers, PACKS packs of 8
 * bf16 a thread: the launcher instantiates the smallest PACKS that holds cols / 8 / blockDim.x,
 * so a chunk of about Vp/K columns keeps only the registers it needs. The logits are read from
 * memory exactly once (streaming: nothing reads them again before they are rewritten or
 * recomputed) and no fp32 copy of the probabilities ever exists: max, then the sum of
 * exponentials, then (whole row) the gradient, all from registers.
 *   row_max == NULL, the whole row (col0 = 0, cols = Vp): losses[row] = logsumexp(row) -
 *     row[target]; if dlogits_scale != 0 the logits are rewritten in place with the gradient.
 *   row_max != NULL, a chunk: folds it into the row's running max and sum of exponentials (the
 *     online softmax normalizer, Milakov & Gimelshein 2018, Algorithm 3; e^(-inf) = 0 on the
 *     first chunk) and picks up the target's logit when the target is in the chunk.
 */
template <int PACKS>
__global__ void __launch_bounds__(1024) fused_classifier_kernel(bf16* logits, float* losses, float* row_max, float* row_sum,
                                                                float* target_logit, const int* targets, int col0, int cols,
                                                                int V, float dlogits_scale) {
    __shared__ float reduce_scratch[32];
    __shared__ float target_x;
    int row = blockIdx.x;
    bf16* x = logits + (size_t)row * cols;
    int packs = cols / PACK_BF16, real = V - col0 < cols ? V - col0 : cols;
    int target = targets[row] - col0;
    if (threadIdx.x == 0 && target >= 0 && target < real) target_x = __bfloat162float(x[target]); // before anyone writes
    // The packs as 32-bit words of bf16 pairs (element k of a pack: word k/2, the low half for even
    // k), so a pack stays 4 registers; padding columns (>= real) and packs past the row read as
    // -inf: e^(-inf - max) = 0 drops them from the sum and the gradient with no test per element.
    unsigned data[PACKS][4];
#pragma unroll
    for (int j = 0; j < PACKS; j++) {
        int p = j * blockDim.x + threadIdx.x;
        int4 raw = p < packs ? __ldcs(reinterpret_cast<const int4*>(x + (size_t)p * PACK_BF16)) : make_int4(0, 0, 0, 0);
        unsigned w[4] = {(unsigned)raw.x, (unsigned)raw.y, (unsigned)raw.z, (unsigned)raw.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int col = p * PACK_BF16 + 2 * i;
            data[j][i] = col >= real ? CLASSIFIER_BF16X2_MINUS_INF
                         : col + 1 >= real ? (w[i] & 0xFFFFu) | (CLASSIFIER_BF16X2_MINUS_INF & 0xFFFF0000u) : w[i];
        }
    }
    float local_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < PACKS; j++)
#pragma unroll
        for (int k = 0; k < PACK_BF16; k++) local_max = fmaxf(local_max, classifier_element(data[j], k));
    float old_max = row_max != NULL ? row_max[row] : -INFINITY;
    float new_max = fmaxf(old_max, block_reduce_max(local_max, reduce_scratch));
    float local_sum = 0.0f; // (a chunk of padding only: new_max = -inf, the sum NaN and unused)
#pragma unroll
    for (int j = 0; j < PACKS; j++)
#pragma unroll
        for (int k = 0; k < PACK_BF16; k++) local_sum += __expf(classifier_element(data[j], k) - new_max);
    float sum = block_reduce_sum(local_sum, reduce_scratch);
    if (row_max != NULL) { // a chunk: fold it into the running statistics
        if (threadIdx.x == 0 && real > 0) {
            row_sum[row] = row_sum[row] * __expf(old_max - new_max) + sum;
            row_max[row] = new_max;
            if (target >= 0 && target < real) target_logit[row] = target_x;
        }
        return;
    }
    if (threadIdx.x == 0) losses[row] = logf(sum) - (target_x - new_max);
    if (dlogits_scale == 0.0f) return;
    float scale = dlogits_scale / sum;
#pragma unroll
    for (int j = 0; j < PACKS; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) classifier_keep_packed(data[j][i]);
    // This thread's packs from two values (how many, the first one's address), not one index and
    // predicate per pack kept across the reductions: fewer live registers.
    int mine = (int)threadIdx.x < packs ? (packs - 1 - (int)threadIdx.x) / (int)blockDim.x + 1 : 0;
    bf16* out = x + (size_t)threadIdx.x * PACK_BF16;
#pragma unroll
    for (int j = 0; j < PACKS; j++) {
        if (j < mine) {
            int t = target - (j * (int)blockDim.x + (int)threadIdx.x) * PACK_BF16; // the target's place in this pack
            PackBf16 r;
#pragma unroll
            for (int k = 0; k < PACK_BF16; k++) { // padding: e^(-inf) = 0
                float g = __expf(classifier_element(data[j], k) - new_max) * scale;
                if (k == t) g -= dlogits_scale;
                r.v[k] = __float2bfloat16(g);
            }
            store_pack_streaming(out + (size_t)j * blockDim.x * PACK_BF16, r);
        }
    }
}

/*
 * Over wte's vocab chunks (the trainer's LM head never holds the (N,Vp) logits; CPU twins
 * classifier_*_chunk in cpu/classifier.h): a chunk's logits (N, cols) bf16 cover vocab columns
 * [col0, col0 + cols). Forward is fused_classifier_kernel on the chunk (above); the losses then
 * are log(sum) + max - target logit (classifier_losses_kernel). Backward rewrites a chunk's
 * (recomputed) logits in place with dlogits = (e^(x - max) / sum - onehot(target)) * dlogits_scale.
 */
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

// One launch's arguments (N rows, `block` threads each), the same for every instantiation.
struct ClassifierRows {
    bf16* logits;
    float *losses, *row_max, *row_sum, *target_logit;
    const int* targets;
    int N, block, col0, cols, V;
    float dlogits_scale;
};

template <int PACKS>
static inline void classifier_rows_launch(const ClassifierRows& a, cudaStream_t stream) {
    fused_classifier_kernel<PACKS><<<a.N, a.block, 0, stream>>>(a.logits, a.losses, a.row_max, a.row_sum, a.target_logit,
                                                                a.targets, a.col0, a.cols, a.V, a.dlogits_scale);
}

// fused_classifier_kernel<PACKS> on N rows of `cols` columns: min(cols/8, 1024) threads rounded
// up to 32, the smallest PACKS of 1, 2, 4, CLASSIFIER_MAX_PACKS that holds the row's packs.
static inline void classifier_rows_cuda(bf16* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                                        const int* targets, int N, int col0, int cols, int V, float dlogits_scale,
                                        const char* what, cudaStream_t stream) {
    int packs = cols / PACK_BF16;
    int block = ceil_div_int(packs < 1024 ? packs : 1024, 32) * 32;
    int per_thread = ceil_div_int(packs, block);
    if (cols % PACK_BF16 != 0 || per_thread > CLASSIFIER_MAX_PACKS) {
        fprintf(stderr, "error: %s of %d columns unsupported; expected a multiple of 8 up to %d\n", what, cols,
                1024 * PACK_BF16 * CLASSIFIER_MAX_PACKS);
        exit(1);
    }
    ClassifierRows a = {logits, losses, row_max, row_sum, target_logit, targets, N, block, col0, cols, V, dlogits_scale};
    if (per_thread <= 1) classifier_rows_launch<1>(a, stream);
    else if (per_thread <= 2) classifier_rows_launch<2>(a, stream);
    else if (per_thread <= 4) classifier_rows_launch<4>(a, stream);
    else classifier_rows_launch<CLASSIFIER_MAX_PACKS>(a, stream);
    CUDA_CHECK_LAUNCH();
}

static inline void fused_classifier_cuda(bf16* logits, float* losses, const int* targets, int N, int V, int Vp,
                                         float dlogits_scale, cudaStream_t stream) {
    classifier_rows_cuda(logits, losses, NULL, NULL, NULL, targets, N, 0, Vp, V, dlogits_scale, "fused_classifier: a row", stream);
}

static inline void classifier_stats_init_cuda(float* row_max, float* row_sum, float* target_logit, int N, cudaStream_t stream) {
    classifier_stats_init_kernel<<<ceil_div_int(N, 256), 256, 0, stream>>>(row_max, row_sum, target_logit, N);
    CUDA_CHECK_LAUNCH();
}

static inline void classifier_forward_chunk_cuda(const bf16* logits, float* row_max, float* row_sum, float* target_logit,
                                                 const int* targets, int N, int col0, int cols, int V, cudaStream_t stream) {
    // const_cast: a chunk is only read (the kernel writes logits only for the whole row's gradient)
    classifier_rows_cuda(const_cast<bf16*>(logits), NULL, row_max, row_sum, target_logit, targets, N, col0, cols, V, 0.0f,
                         "classifier chunk", stream);
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
