/*
 * attention.cuh: causal multi-head self-attention, flash style, GPU. CPU twin: cpu/attention.h.
 * Shapes: qkv (B,T,3C) bf16 holds q, k, v along the last dim; head h uses channels
 * [h*HS, (h+1)*HS) of each, HS = C/NH. out (B,T,C) bf16 is the heads concatenated.
 * lse (B,NH,T) fp32: per query row, the natural-log logsumexp of its scaled scores.
 * forward:  out = softmax(q k^T / sqrt(HS) + causal mask) v  (Vaswani et al. 2017, eq. 1),
 *           computed tile by tile with the online softmax (Milakov & Gimelshein 2018,
 *           "Online normalizer calculation for softmax"; Dao et al. 2022, "FlashAttention",
 *           Algorithm 1; Dao 2023, "FlashAttention-2", Algorithm 1): a block owns 64 query rows
 *           (4 warps x 16 rows) and walks the key tiles of 64 keys up to the diagonal, keeping a
 *           running max m and sum l per row and rescaling its output accumulator. No T x T
 *           matrix ever exists; only lse = m + log l is saved for backward.
 * backward: writes (does not accumulate) dqkv (B,T,3C) bf16 from dout (B,T,C), following
 *           FlashAttention-2 Algorithm 2: D = rowsum(dout * out) first; then the probabilities
 *           are recomputed tile by tile from q, k and lse, P = exp(s - lse), and
 *           dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q.
 *           Two kernels, one over key blocks (dK, dV in registers) and one over query blocks
 *           (dQ in registers), so every output has one writer: no atomics, deterministic, at
 *           the price of recomputing S and dP twice.
 * Matrix products run on tensor cores through WMMA (bf16 16x16x16 fragments, fp32 accumulate;
 * CUDA C++ Programming Guide, "Warp Matrix Functions"). The softmax works on fp32 scores in
 * shared memory, because WMMA's fragment-to-element mapping is opaque; P and dS are rounded to
 * bf16 before they enter a product, as in FlashAttention.
 * Supported head sizes: HS = 16 (the test reference model) and 64 (every GPT-2 size).
 * T is arbitrary (partial tiles are zero-filled and masked). Requires sm_80+.
 */
#ifndef KERNELS_ATTENTION_CUH
#define KERNELS_ATTENTION_CUH

#include <mma.h>
#include "../common/cuda_utils.cuh"

#define ATTENTION_TILE 64          // query rows per block = keys per tile
#define ATTENTION_WARPS 4          // 16 query (or key) rows per warp
#define ATTENTION_THREADS (32 * ATTENTION_WARPS)
#define ATTENTION_SCORE_LD 68      // fp32 score rows: 64 + 4 so lane pairs hit different banks
#define ATTENTION_PROB_LD 72       // bf16 probability rows: 64 + 8 (WMMA wants multiples of 8)
#define ATTENTION_LOG2E 1.4426950408889634f
#define ATTENTION_LN2 0.6931471805599453f

namespace attention_wmma = nvcuda::wmma;
typedef attention_wmma::fragment<attention_wmma::matrix_a, 16, 16, 16, bf16, attention_wmma::row_major> FragmentA;
typedef attention_wmma::fragment<attention_wmma::matrix_b, 16, 16, 16, bf16, attention_wmma::row_major> FragmentB;
typedef attention_wmma::fragment<attention_wmma::matrix_b, 16, 16, 16, bf16, attention_wmma::col_major> FragmentBT;
typedef attention_wmma::fragment<attention_wmma::accumulator, 16, 16, 16, float> FragmentAcc;

extern __shared__ __align__(128) unsigned char attention_smem[];

// Copy rows t0..t0+63 (zero past T) of one head's HS channels into a [64][HS+8] bf16 tile.
// src points at (b, t=0, this head's first channel); rows are row_stride elements apart.
template <int HS>
__device__ __forceinline__ void attention_load_tile(bf16* tile, const bf16* src, size_t row_stride, int t0, int T) {
    const int packs_per_row = HS / PACK_BF16;
    for (int idx = threadIdx.x; idx < ATTENTION_TILE * packs_per_row; idx += blockDim.x) {
        int row = idx / packs_per_row, pc = idx % packs_per_row;
        PackBf16 p;
        if (t0 + row < T) p = load_pack(src + (size_t)(t0 + row) * row_stride + pc * PACK_BF16);
        else for (int k = 0; k < PACK_BF16; k++) p.v[k] = __float2bfloat16(0.0f);
        store_pack(tile + row * (HS + 8) + pc * PACK_BF16, p);
    }
}

// scores (16 x 64, fp32, ld ATTENTION_SCORE_LD) = rows (16 x HS, fragments) @ tile^T, tile [64][HS+8].
template <int HS>
__device__ __forceinline__ void attention_rows_times_tile_t(float* scores, const FragmentA* rows, const bf16* tile) {
    for (int j = 0; j < ATTENTION_TILE / 16; j++) {
        FragmentAcc acc;
        attention_wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < HS / 16; kk++) {
            FragmentBT b; // tile^T as a column-major (HS x 64) matrix is the row-major tile itself
            attention_wmma::load_matrix_sync(b, tile + (j * 16) * (HS + 8) + kk * 16, HS + 8);
            attention_wmma::mma_sync(acc, rows[kk], b, acc);
        }
        attention_wmma::store_matrix_sync(scores + j * 16, acc, ATTENTION_SCORE_LD, attention_wmma::mem_row_major);
    }
}

// acc[d] (16 x HS) += probs (16 x 64, bf16, ld ATTENTION_PROB_LD) @ tile (64 x HS), tile [64][HS+8].
template <int HS>
__device__ __forceinline__ void attention_probs_times_tile(FragmentAcc* acc, const bf16* probs, const bf16* tile) {
    for (int j = 0; j < ATTENTION_TILE / 16; j++) {
        FragmentA a;
        attention_wmma::load_matrix_sync(a, probs + j * 16, ATTENTION_PROB_LD);
        for (int d = 0; d < HS / 16; d++) {
            FragmentB b;
            attention_wmma::load_matrix_sync(b, tile + (j * 16) * (HS + 8) + d * 16, HS + 8);
            attention_wmma::mma_sync(acc[d], a, b, acc[d]);
        }
    }
}

// Per-warp buffer sizes in bytes (all multiples of 32, so every WMMA pointer stays 256-bit aligned).
#define ATTENTION_SCORES_BYTES (16 * ATTENTION_SCORE_LD * 4)
#define ATTENTION_PROBS_BYTES (16 * ATTENTION_PROB_LD * 2)
#define ATTENTION_TILE_BYTES(HS) (ATTENTION_TILE * ((HS) + 8) * 2)

template <int HS>
static size_t attention_forward_smem_bytes(void) {
    return 2 * ATTENTION_TILE_BYTES(HS) + ATTENTION_WARPS * (ATTENTION_SCORES_BYTES + ATTENTION_PROBS_BYTES + 16 * (HS + 4) * 4);
}

/*
 * Forward. grid (ceil(T/64), B*NH), block 128. Warp w owns query rows q0 + 16w .. +15; lane
 * pair (2r, 2r+1) owns row r of those for the softmax and the output rescale, so the running
 * max m and sum l of a row live in that pair's registers. Scores are kept in the log2 domain
 * (scaled by log2(e)/sqrt(HS)) so exp2f does the exponentials.
 */
template <int HS>
__global__ void __launch_bounds__(ATTENTION_THREADS) attention_forward_kernel(bf16* out, float* lse, const bf16* qkv,
                                                                            int T, int C, int NH) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane >> 1, half = lane & 1;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int q0 = blockIdx.x * ATTENTION_TILE;
    const size_t C3 = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * C3 + h * HS;
    const float scale_log2 = ATTENTION_LOG2E * rsqrtf((float)HS);

    bf16* k_tile = (bf16*)attention_smem;
    bf16* v_tile = (bf16*)(attention_smem + ATTENTION_TILE_BYTES(HS));
    unsigned char* warp_base = attention_smem + 2 * ATTENTION_TILE_BYTES(HS) +
                               warp * (ATTENTION_SCORES_BYTES + ATTENTION_PROBS_BYTES + 16 * (HS + 4) * 4);
    float* scores = (float*)warp_base;
    bf16* probs = (bf16*)(warp_base + ATTENTION_SCORES_BYTES);
    float* o_acc = (float*)(warp_base + ATTENTION_SCORES_BYTES + ATTENTION_PROBS_BYTES);
    const int o_ld = HS + 4;

    // This warp's 16 query rows as A fragments, staged through the K tile buffer.
    attention_load_tile<HS>(k_tile, q_base, C3, q0, T);
    __syncthreads();
    FragmentA q_frag[HS / 16];
    for (int kk = 0; kk < HS / 16; kk++)
        attention_wmma::load_matrix_sync(q_frag[kk], k_tile + (warp * 16) * (HS + 8) + kk * 16, HS + 8);
    for (int j = 0; j < HS / 2; j++) o_acc[r * o_ld + half * (HS / 2) + j] = 0.0f;

    const int qrow = q0 + warp * 16 + r;
    float m_run = -INFINITY, l_run = 0.0f;
    for (int k0 = 0; k0 <= q0; k0 += ATTENTION_TILE) {
        __syncthreads(); // everyone is done with the previous tiles (and with the Q staging)
        attention_load_tile<HS>(k_tile, q_base + C, C3, k0, T);
        attention_load_tile<HS>(v_tile, q_base + 2 * C, C3, k0, T);
        __syncthreads();
        attention_rows_times_tile_t<HS>(scores, q_frag, k_tile);
        __syncwarp();

        // Online softmax on row r: columns half, half+2, ... (interleaved: 2-way bank conflicts).
        // Every processed tile has key k0 <= qrow, so tile_max is finite.
        float s[ATTENTION_TILE / 2];
        float tile_max = -INFINITY;
        for (int j = 0; j < ATTENTION_TILE / 2; j++) {
            int col = 2 * j + half;
            s[j] = k0 + col > qrow ? -INFINITY : scores[r * ATTENTION_SCORE_LD + col] * scale_log2;
            tile_max = fmaxf(tile_max, s[j]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        float m_new = fmaxf(m_run, tile_max);
        float alpha = exp2f(m_run - m_new); // 0 on the first tile (m_run = -inf)
        float p_sum = 0.0f;
        for (int j = 0; j < ATTENTION_TILE / 2; j++) {
            float p = exp2f(s[j] - m_new);
            probs[r * ATTENTION_PROB_LD + 2 * j + half] = __float2bfloat16(p);
            p_sum += p;
        }
        p_sum += __shfl_xor_sync(0xffffffffu, p_sum, 1);
        l_run = l_run * alpha + p_sum;
        m_run = m_new;
        for (int j = 0; j < HS / 2; j++) o_acc[r * o_ld + half * (HS / 2) + j] *= alpha;
        __syncwarp();

        // o_acc += P V
        FragmentAcc acc[HS / 16];
        for (int d = 0; d < HS / 16; d++)
            attention_wmma::load_matrix_sync(acc[d], o_acc + d * 16, o_ld, attention_wmma::mem_row_major);
        attention_probs_times_tile<HS>(acc, probs, v_tile);
        for (int d = 0; d < HS / 16; d++)
            attention_wmma::store_matrix_sync(o_acc + d * 16, acc[d], o_ld, attention_wmma::mem_row_major);
        __syncwarp();
    }

    if (qrow < T) {
        float inv_l = 1.0f / l_run;
        bf16* o = out + ((size_t)b * T + qrow) * C + h * HS + half * (HS / 2);
        for (int j = 0; j < HS / 2; j += PACK_BF16) {
            PackBf16 p;
            for (int k = 0; k < PACK_BF16; k++) p.v[k] = __float2bfloat16(o_acc[r * o_ld + half * (HS / 2) + j + k] * inv_l);
            store_pack(o + j, p);
        }
        if (half == 0) lse[((size_t)b * NH + h) * T + qrow] = (m_run + log2f(l_run)) * ATTENTION_LN2;
    }
}

// D (B,NH,T) fp32 = rowsum(dout * out) per head: thread per (b, t, h).
template <int HS>
__global__ void attention_backward_dot_kernel(float* d_rows, const bf16* dout, const bf16* out, int B, int T, int C,
                                              int NH) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * NH) return;
    int h = (int)(idx % NH);
    size_t bt = idx / NH;
    int b = (int)(bt / T), t = (int)(bt % T);
    const bf16* dp = dout + bt * C + h * HS;
    const bf16* op = out + bt * C + h * HS;
    float sum = 0.0f;
    for (int c = 0; c < HS; c += PACK_BF16) {
        PackBf16 x = load_pack(dp + c), y = load_pack(op + c);
        for (int k = 0; k < PACK_BF16; k++) sum += __bfloat162float(x.v[k]) * __bfloat162float(y.v[k]);
    }
    d_rows[((size_t)b * NH + h) * T + t] = sum;
}

template <int HS>
static size_t attention_backward_dq_smem_bytes(void) {
    return 2 * ATTENTION_TILE_BYTES(HS) + ATTENTION_WARPS * (2 * ATTENTION_SCORES_BYTES + ATTENTION_PROBS_BYTES);
}

/*
 * dQ. grid (ceil(T/64), B*NH), block 128. Warp w owns query rows q0 + 16w .. +15 and keeps their
 * Q, dO (A fragments) and dQ (accumulators) in registers while walking key tiles 0..diagonal.
 */
template <int HS>
__global__ void __launch_bounds__(ATTENTION_THREADS) attention_backward_dq_kernel(bf16* dqkv, const bf16* dout,
                                                                                const bf16* qkv, const float* lse,
                                                                                const float* d_rows, int T, int C, int NH) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane >> 1, half = lane & 1;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int q0 = blockIdx.x * ATTENTION_TILE;
    const size_t C3 = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * C3 + h * HS;
    const float scale = rsqrtf((float)HS), scale_log2 = ATTENTION_LOG2E * scale;

    bf16* k_tile = (bf16*)attention_smem;
    bf16* v_tile = (bf16*)(attention_smem + ATTENTION_TILE_BYTES(HS));
    unsigned char* warp_base = attention_smem + 2 * ATTENTION_TILE_BYTES(HS) +
                               warp * (2 * ATTENTION_SCORES_BYTES + ATTENTION_PROBS_BYTES);
    float* scores = (float*)warp_base;
    float* dprobs = (float*)(warp_base + ATTENTION_SCORES_BYTES);
    bf16* dscores = (bf16*)(warp_base + 2 * ATTENTION_SCORES_BYTES);

    attention_load_tile<HS>(k_tile, q_base, C3, q0, T);
    attention_load_tile<HS>(v_tile, dout + (size_t)b * T * C + h * HS, C, q0, T);
    __syncthreads();
    FragmentA q_frag[HS / 16], do_frag[HS / 16];
    for (int kk = 0; kk < HS / 16; kk++) {
        attention_wmma::load_matrix_sync(q_frag[kk], k_tile + (warp * 16) * (HS + 8) + kk * 16, HS + 8);
        attention_wmma::load_matrix_sync(do_frag[kk], v_tile + (warp * 16) * (HS + 8) + kk * 16, HS + 8);
    }
    FragmentAcc dq[HS / 16];
    for (int d = 0; d < HS / 16; d++) attention_wmma::fill_fragment(dq[d], 0.0f);

    const int qrow = q0 + warp * 16 + r;
    const size_t stat_index = ((size_t)b * NH + h) * T + qrow;
    const float lse_log2 = qrow < T ? lse[stat_index] * ATTENTION_LOG2E : INFINITY; // padded rows: P = 0
    const float d_row = qrow < T ? d_rows[stat_index] : 0.0f;

    for (int k0 = 0; k0 <= q0; k0 += ATTENTION_TILE) {
        __syncthreads();
        attention_load_tile<HS>(k_tile, q_base + C, C3, k0, T);
        attention_load_tile<HS>(v_tile, q_base + 2 * C, C3, k0, T);
        __syncthreads();
        attention_rows_times_tile_t<HS>(scores, q_frag, k_tile);  // S = Q K^T
        attention_rows_times_tile_t<HS>(dprobs, do_frag, v_tile); // dP = dO V^T
        __syncwarp();
        for (int j = 0; j < ATTENTION_TILE / 2; j++) {
            int col = 2 * j + half;
            float p = k0 + col > qrow ? 0.0f : exp2f(scores[r * ATTENTION_SCORE_LD + col] * scale_log2 - lse_log2);
            float ds = p * (dprobs[r * ATTENTION_SCORE_LD + col] - d_row);
            dscores[r * ATTENTION_PROB_LD + col] = __float2bfloat16(ds);
        }
        __syncwarp();
        attention_probs_times_tile<HS>(dq, dscores, k_tile); // dQ += dS K
    }

    // Through shared memory to bf16 rows (scores buffer: 16 x 68 fp32 holds 16 x HS, HS <= 64).
    __syncwarp();
    for (int d = 0; d < HS / 16; d++)
        attention_wmma::store_matrix_sync(scores + d * 16, dq[d], ATTENTION_SCORE_LD, attention_wmma::mem_row_major);
    __syncwarp();
    if (qrow < T) {
        bf16* dst = dqkv + ((size_t)b * T + qrow) * C3 + h * HS + half * (HS / 2);
        for (int j = 0; j < HS / 2; j += PACK_BF16) {
            PackBf16 p;
            for (int k = 0; k < PACK_BF16; k++)
                p.v[k] = __float2bfloat16(scores[r * ATTENTION_SCORE_LD + half * (HS / 2) + j + k] * scale);
            store_pack(dst + j, p);
        }
    }
}

template <int HS>
static size_t attention_backward_dkv_smem_bytes(void) {
    return 2 * ATTENTION_TILE_BYTES(HS) + 2 * ATTENTION_TILE * 4 +
           ATTENTION_WARPS * (2 * ATTENTION_SCORES_BYTES + 2 * ATTENTION_PROBS_BYTES);
}

/*
 * dK, dV. grid (ceil(T/64), B*NH), block 128. Warp w owns keys k0 + 16w .. +15, keeps their K, V
 * (A fragments) and dK, dV (accumulators) in registers, and walks query tiles diagonal..end.
 * Works on transposed score tiles S^T (keys x queries) so the key rows stay the A operand.
 */
template <int HS>
__global__ void __launch_bounds__(ATTENTION_THREADS) attention_backward_dkv_kernel(bf16* dqkv, const bf16* dout,
                                                                                 const bf16* qkv, const float* lse,
                                                                                 const float* d_rows, int T, int C, int NH) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane >> 1, half = lane & 1;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int k0 = blockIdx.x * ATTENTION_TILE;
    const size_t C3 = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * C3 + h * HS;
    const bf16* do_base = dout + (size_t)b * T * C + h * HS;
    const float* lse_base = lse + ((size_t)b * NH + h) * T;
    const float* d_base = d_rows + ((size_t)b * NH + h) * T;
    const float scale = rsqrtf((float)HS), scale_log2 = ATTENTION_LOG2E * scale;

    bf16* q_tile = (bf16*)attention_smem;
    bf16* do_tile = (bf16*)(attention_smem + ATTENTION_TILE_BYTES(HS));
    float* lse_tile = (float*)(attention_smem + 2 * ATTENTION_TILE_BYTES(HS)); // log2 domain
    float* d_tile = lse_tile + ATTENTION_TILE;
    unsigned char* warp_base = attention_smem + 2 * ATTENTION_TILE_BYTES(HS) + 2 * ATTENTION_TILE * 4 +
                               warp * (2 * ATTENTION_SCORES_BYTES + 2 * ATTENTION_PROBS_BYTES);
    float* scores_t = (float*)warp_base;
    float* dprobs_t = (float*)(warp_base + ATTENTION_SCORES_BYTES);
    bf16* probs_t = (bf16*)(warp_base + 2 * ATTENTION_SCORES_BYTES);
    bf16* dscores_t = (bf16*)(warp_base + 2 * ATTENTION_SCORES_BYTES + ATTENTION_PROBS_BYTES);

    attention_load_tile<HS>(q_tile, q_base + C, C3, k0, T);      // K block, staged
    attention_load_tile<HS>(do_tile, q_base + 2 * C, C3, k0, T); // V block, staged
    __syncthreads();
    FragmentA k_frag[HS / 16], v_frag[HS / 16];
    for (int kk = 0; kk < HS / 16; kk++) {
        attention_wmma::load_matrix_sync(k_frag[kk], q_tile + (warp * 16) * (HS + 8) + kk * 16, HS + 8);
        attention_wmma::load_matrix_sync(v_frag[kk], do_tile + (warp * 16) * (HS + 8) + kk * 16, HS + 8);
    }
    FragmentAcc dk[HS / 16], dv[HS / 16];
    for (int d = 0; d < HS / 16; d++) {
        attention_wmma::fill_fragment(dk[d], 0.0f);
        attention_wmma::fill_fragment(dv[d], 0.0f);
    }

    const int key = k0 + warp * 16 + r;
    for (int q0 = k0; q0 < T; q0 += ATTENTION_TILE) {
        __syncthreads();
        attention_load_tile<HS>(q_tile, q_base, C3, q0, T);
        attention_load_tile<HS>(do_tile, do_base, C, q0, T);
        for (int i = threadIdx.x; i < ATTENTION_TILE; i += blockDim.x) {
            bool valid = q0 + i < T;
            lse_tile[i] = valid ? lse_base[q0 + i] * ATTENTION_LOG2E : INFINITY; // padded queries: P = 0
            d_tile[i] = valid ? d_base[q0 + i] : 0.0f;
        }
        __syncthreads();
        attention_rows_times_tile_t<HS>(scores_t, k_frag, q_tile);  // S^T = K Q^T
        attention_rows_times_tile_t<HS>(dprobs_t, v_frag, do_tile); // dP^T = V dO^T
        __syncwarp();
        for (int j = 0; j < ATTENTION_TILE / 2; j++) {
            int col = 2 * j + half; // query q0 + col
            float p = key > q0 + col ? 0.0f
                                     : exp2f(scores_t[r * ATTENTION_SCORE_LD + col] * scale_log2 - lse_tile[col]);
            probs_t[r * ATTENTION_PROB_LD + col] = __float2bfloat16(p);
            dscores_t[r * ATTENTION_PROB_LD + col] =
                __float2bfloat16(p * (dprobs_t[r * ATTENTION_SCORE_LD + col] - d_tile[col]));
        }
        __syncwarp();
        attention_probs_times_tile<HS>(dv, probs_t, do_tile);  // dV += P^T dO
        attention_probs_times_tile<HS>(dk, dscores_t, q_tile); // dK += dS^T Q
    }

    __syncwarp();
    for (int d = 0; d < HS / 16; d++) {
        attention_wmma::store_matrix_sync(scores_t + d * 16, dk[d], ATTENTION_SCORE_LD, attention_wmma::mem_row_major);
        attention_wmma::store_matrix_sync(dprobs_t + d * 16, dv[d], ATTENTION_SCORE_LD, attention_wmma::mem_row_major);
    }
    __syncwarp();
    if (key < T) {
        bf16* dst = dqkv + ((size_t)b * T + key) * C3 + h * HS + half * (HS / 2);
        for (int j = 0; j < HS / 2; j += PACK_BF16) {
            PackBf16 pk, pv;
            for (int k = 0; k < PACK_BF16; k++) {
                pk.v[k] = __float2bfloat16(scores_t[r * ATTENTION_SCORE_LD + half * (HS / 2) + j + k] * scale);
                pv.v[k] = __float2bfloat16(dprobs_t[r * ATTENTION_SCORE_LD + half * (HS / 2) + j + k]);
            }
            store_pack(dst + C + j, pk);
            store_pack(dst + 2 * C + j, pv);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Launchers

template <int HS>
static void attention_forward_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                     cudaStream_t stream) {
    static int configured = 0; // opt in to more than 48 KiB of dynamic shared memory, once
    size_t smem = attention_forward_smem_bytes<HS>();
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        configured = 1;
    }
    dim3 grid(ceil_div_int(T, ATTENTION_TILE), B * NH);
    attention_forward_kernel<HS><<<grid, ATTENTION_THREADS, smem, stream>>>(out, lse, qkv, T, C, NH);
    CUDA_CHECK_LAUNCH();
}

template <int HS>
static void attention_backward_launch(bf16* dqkv, float* d_rows, const bf16* dout, const bf16* qkv, const bf16* out,
                                      const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    static int configured = 0;
    size_t smem_dq = attention_backward_dq_smem_bytes<HS>(), smem_dkv = attention_backward_dkv_smem_bytes<HS>();
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq));
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkv));
        configured = 1;
    }
    size_t rows = (size_t)B * T * NH;
    attention_backward_dot_kernel<HS><<<(unsigned)ceil_div_size(rows, 256), 256, 0, stream>>>(d_rows, dout, out, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    dim3 grid(ceil_div_int(T, ATTENTION_TILE), B * NH);
    attention_backward_dq_kernel<HS><<<grid, ATTENTION_THREADS, smem_dq, stream>>>(dqkv, dout, qkv, lse, d_rows, T, C, NH);
    CUDA_CHECK_LAUNCH();
    attention_backward_dkv_kernel<HS><<<grid, ATTENTION_THREADS, smem_dkv, stream>>>(dqkv, dout, qkv, lse, d_rows, T, C, NH);
    CUDA_CHECK_LAUNCH();
}

static inline void attention_check_head_size(int C, int NH) {
    int HS = C / NH;
    if (C % NH != 0 || (HS != 16 && HS != 64)) {
        fprintf(stderr, "error: attention: head size C/NH = %d/%d unsupported; expected 16 or 64\n", C, NH);
        exit(1);
    }
}

// out (B,T,C) bf16, lse (B,NH,T) fp32 from qkv (B,T,3C) bf16.
static inline void attention_forward_cuda(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                          cudaStream_t stream) {
    attention_check_head_size(C, NH);
    if (C / NH == 16) attention_forward_launch<16>(out, lse, qkv, B, T, C, NH, stream);
    else attention_forward_launch<64>(out, lse, qkv, B, T, C, NH, stream);
}

// dqkv (B,T,3C) bf16 written from dout (B,T,C); needs the forward's qkv, out and lse, and
// d_rows: scratch of B*NH*T floats.
static inline void attention_backward_cuda(bf16* dqkv, float* d_rows, const bf16* dout, const bf16* qkv,
                                           const bf16* out, const float* lse, int B, int T, int C, int NH,
                                           cudaStream_t stream) {
    attention_check_head_size(C, NH);
    if (C / NH == 16) attention_backward_launch<16>(dqkv, d_rows, dout, qkv, out, lse, B, T, C, NH, stream);
    else attention_backward_launch<64>(dqkv, d_rows, dout, qkv, out, lse, B, T, C, NH, stream);
}

#endif // KERNELS_ATTENTION_CUH
