/*
 * attention.cuh: causal multi-head self-attention, GPU. CPU twin: cpu/attention.h.
 * Shapes: qkv (B,T,3C) bf16 holds q, k, v along the last dim; head h uses channels
 * [h*HS, (h+1)*HS) of each, HS = C/NH. out (B,T,C) bf16 is the heads concatenated.
 * lse (B,NH,T) fp32: per query row, the natural-log logsumexp of its scaled scores.
 *
 * Two implementations behind one interface (attention_forward_cuda, attention_backward_cuda):
 *   - the own flash kernels below (default), FlashAttention-2 style (Dao 2023, "FlashAttention-2:
 *     Faster Attention with Better Parallelism and Work Partitioning", Algorithms 1 and 2);
 *   - cuDNN's fused attention (SDPA) when built with USE_CUDNN=1 (kernels/attention_cudnn.h).
 *
 * forward:  out = softmax(q k^T / sqrt(HS) + causal mask) v (Vaswani et al. 2017, eq. 1), tile by
 *           tile with the online softmax (Milakov & Gimelshein 2018): a block owns 64 query rows
 *           (4 warps x 16) and walks the 64-key tiles up to the diagonal (tiles above it are
 *           skipped). S = Q K^T, P and the output accumulator O stay in registers: S is the
 *           accumulator of mma.sync (bf16 m16n8k16, fp32 accumulate, kernels/ptx.cuh), P is
 *           packed to bf16 in place as the A operand of O += P V. K/V tiles come in by cp.async,
 *           double-buffered: tile j+1 loads while tile j computes. Only lse is saved.
 * backward: writes (does not accumulate) dqkv (B,T,3C) bf16 from dout (B,T,C). FA2 Algorithm 2,
 *           5 tensor-core products per (key tile, query tile): S^T = K Q^T, dP^T = V dO^T (P^T
 *           = exp(S^T - lse), dS^T = P^T (dP^T - D) in registers), dV += P^T dO, dK += dS^T Q in
 *           registers, dQ += dS K from dS staged in shared memory. D = rowsum(dO * out) first.
 *           One block per (b, h) walks the key tiles in order and, for each, the query tiles from
 *           the diagonal down; dQ of a query tile collects over the key tiles in an fp32 scratch
 *           that only this block touches, so the sum has one fixed order: deterministic, no
 *           cross-block atomics (FA2's deterministic schedule: one split per head when B*NH
 *           fills the GPU). dQ of a tile is final at its diagonal pair, which converts it to bf16.
 * P and dS are rounded to bf16 before they enter a product, as in FlashAttention.
 * Supported head sizes: HS = 16 (the test reference model) and 64 (every GPT-2 size). T is
 * arbitrary (partial tiles are zero-filled and masked). Requires sm_80+.
 */
#ifndef KERNELS_ATTENTION_CUH
#define KERNELS_ATTENTION_CUH

#include "../common/cuda_utils.cuh"
#include "ptx.cuh"

#define ATTENTION_TILE 64 // query rows per block tile = keys per tile
#define ATTENTION_WARPS 4 // 16 query (or key) rows per warp
#define ATTENTION_THREADS (32 * ATTENTION_WARPS)
#define ATTENTION_LOG2E 1.4426950408889634f
#define ATTENTION_LN2 0.6931471805599453f

// Shared-memory tile: 64 rows of W bf16 (W = HS for Q, K, V, dO; 64 for dS^T), rows padded by
// 16 bytes so the 8 row addresses of an ldmatrix fall in 8 different 4-bank groups (no bank
// conflicts for W = 16 and 64).
template <int W>
struct AttentionTile {
    static const int ld = W + 8; // elements per row
    static const int bytes = ATTENTION_TILE * ld * 2;
};

extern __shared__ __align__(128) unsigned char attention_smem[];

// Two packed bf16 (pack_bf16x2) to dst, 4-byte aligned.
__device__ __forceinline__ void attention_store_pair(bf16* dst, uint32_t v) { memcpy((void*)dst, &v, 4); }

// Rows t0..t0+63 of one head's HS channels (rows >= T zero-filled) into a tile, by cp.async.
// src points at (b, t=0, this head's first channel); rows are row_stride elements apart.
template <int HS>
__device__ __forceinline__ void attention_tile_async(bf16* tile, const bf16* src, size_t row_stride, int t0, int T) {
    const int chunks_per_row = HS / 8; // 16-byte chunks
    for (int c = threadIdx.x; c < ATTENTION_TILE * chunks_per_row; c += ATTENTION_THREADS) {
        int row = c / chunks_per_row, col = (c % chunks_per_row) * 8;
        bool valid = t0 + row < T;
        cp_async_16(tile + row * AttentionTile<HS>::ld + col, src + (valid ? (size_t)(t0 + row) * row_stride + col : 0), valid);
    }
}

// A fragments of 16 rows (row0..row0+15) x 16 columns (col0..) of a row-major tile.
template <int W>
__device__ __forceinline__ void attention_load_a(uint32_t a[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4(a, tile + (row0 + (m % 2) * 8 + lane % 8) * AttentionTile<W>::ld + col0 + (m / 2) * 8);
}

// B fragments for two 8-column tiles of X^T, where X is a row-major tile: B[k][n] = X[n][k] for
// n = row0..row0+15 (b[0..1]: rows row0..+7, b[2..3]: rows row0+8..+15), k = col0..col0+15.
template <int W>
__device__ __forceinline__ void attention_load_b_rows(uint32_t b[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4(b, tile + (row0 + (m / 2) * 8 + lane % 8) * AttentionTile<W>::ld + col0 + (m % 2) * 8);
}

// B fragments for two 8-column tiles of X itself (row-major tile, rows are k): B[k][n] = X[k][n]
// for k = row0..row0+15, n = col0..col0+15 (b[0..1]: n col0..+7, b[2..3]: n col0+8..+15).
template <int W>
__device__ __forceinline__ void attention_load_b_cols(uint32_t b[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4_trans(b, tile + (row0 + (m % 2) * 8 + lane % 8) * AttentionTile<W>::ld + col0 + (m / 2) * 8);
}

// A fragments of X^T (16 x 16) from a row-major tile X: A[m][k] = X[k][m], m = col0..+15,
// k = row0..+15.
template <int W>
__device__ __forceinline__ void attention_load_a_transposed(uint32_t a[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    ldmatrix_x4_trans(a, tile + (row0 + (m / 2) * 8 + lane % 8) * AttentionTile<W>::ld + col0 + (m % 2) * 8);
}

// acc (16 x 64: 8 tiles of 16 x 8) = rows (16 x HS, A fragments) @ X^T, X a 64 x HS tile.
template <int HS>
__device__ __forceinline__ void attention_rows_times_tile_t(float acc[8][4], const uint32_t rows[HS / 16][4],
                                                            const bf16* tile) {
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
    for (int n = 0; n < 8; n += 2)
        for (int kk = 0; kk < HS / 16; kk++) {
            uint32_t b[4];
            attention_load_b_rows<HS>(b, tile, n * 8, kk * 16);
            mma_bf16_16816(acc[n], rows[kk], b);
            mma_bf16_16816(acc[n + 1], rows[kk], b + 2);
        }
}

// acc (16 x HS) += p (16 x 64, four A fragments over the 64 rows of X) @ X, X a 64 x HS tile.
template <int HS>
__device__ __forceinline__ void attention_probs_times_tile(float acc[HS / 8][4], const uint32_t p[4][4], const bf16* tile) {
    for (int n = 0; n < HS / 8; n += 2)
        for (int kk = 0; kk < 4; kk++) {
            uint32_t b[4];
            attention_load_b_cols<HS>(b, tile, kk * 16, n * 8);
            mma_bf16_16816(acc[n], p[kk], b);
            mma_bf16_16816(acc[n + 1], p[kk], b + 2);
        }
}

// An accumulator of 16 x 64 (8 tiles of 16 x 8) as bf16 A fragments over its 64 columns.
__device__ __forceinline__ void attention_to_a_fragments(uint32_t a[4][4], const float x[8][4]) {
    for (int kk = 0; kk < 4; kk++) {
        a[kk][0] = pack_bf16x2(x[2 * kk][0], x[2 * kk][1]);
        a[kk][1] = pack_bf16x2(x[2 * kk][2], x[2 * kk][3]);
        a[kk][2] = pack_bf16x2(x[2 * kk + 1][0], x[2 * kk + 1][1]);
        a[kk][3] = pack_bf16x2(x[2 * kk + 1][2], x[2 * kk + 1][3]);
    }
}

template <int HS>
static size_t attention_forward_smem_bytes(void) { return 5 * AttentionTile<HS>::bytes; } // Q, 2 x (K, V)

/*
 * Forward. grid (ceil(T/64), B*NH), block 128; the longest rows (last query tiles) go first.
 * Warp w owns query rows q0 + 16w .. +15; a thread holds rows g and g + 8 of them (g = lane/4)
 * and, per 8-key column tile, keys 2t, 2t+1 (t = lane%4), so a row's running max m and sum l
 * are reduced over the 4 lanes of a group by two shuffles. Scores are in the log2 domain
 * (scaled by log2(e)/sqrt(HS)) so exp2f does the exponentials.
 */
template <int HS>
__global__ void __launch_bounds__(ATTENTION_THREADS) attention_forward_kernel(bf16* out, float* lse, const bf16* qkv,
                                                                            int T, int C, int NH) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int q_tile = gridDim.x - 1 - blockIdx.x, q0 = q_tile * ATTENTION_TILE;
    const size_t C3 = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * C3 + h * HS;
    const float scale_log2 = ATTENTION_LOG2E * rsqrtf((float)HS);

    bf16* q_s = (bf16*)attention_smem;
    bf16* kv_s = (bf16*)(attention_smem + AttentionTile<HS>::bytes); // [stage][K, V]
    const int tile_elems = AttentionTile<HS>::bytes / 2;

    attention_tile_async<HS>(q_s, q_base, C3, q0, T);
    attention_tile_async<HS>(kv_s, q_base + C, C3, 0, T);
    attention_tile_async<HS>(kv_s + tile_elems, q_base + 2 * C, C3, 0, T);
    cp_async_commit();

    uint32_t q_frag[HS / 16][4];
    float o[HS / 8][4];
    for (int n = 0; n < HS / 8; n++)
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}; // rows g, g + 8 (l: this lane's part)
    const int row_lo = q0 + warp * 16 + g;

    for (int j = 0; j <= q_tile; j++) {
        const int stage = j & 1;
        if (j < q_tile) { // next K, V tile into the other stage (its last readers passed the barrier below)
            bf16* next = kv_s + (stage ^ 1) * 2 * tile_elems;
            attention_tile_async<HS>(next, q_base + C, C3, (j + 1) * ATTENTION_TILE, T);
            attention_tile_async<HS>(next + tile_elems, q_base + 2 * C, C3, (j + 1) * ATTENTION_TILE, T);
            cp_async_commit();
            cp_async_wait<1>(); // tile j (and Q) landed; tile j+1 may still be in flight
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // every thread's copies of tile j are visible to all
        if (j == 0)
            for (int kk = 0; kk < HS / 16; kk++) attention_load_a<HS>(q_frag[kk], q_s, warp * 16, kk * 16);
        const bf16* k_s = kv_s + stage * 2 * tile_elems;
        const bf16* v_s = k_s + tile_elems;

        float s[8][4];
        attention_rows_times_tile_t<HS>(s, q_frag, k_s); // S = Q K^T
        const int k0 = j * ATTENTION_TILE;
        float tile_max[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                int key = k0 + n * 8 + 2 * t + (e & 1), row = row_lo + (e / 2) * 8;
                // the diagonal tile masks key > row (keys >= T are above every row < T)
                s[n][e] = (j == q_tile && key > row) ? -INFINITY : s[n][e] * scale_log2;
                tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
            }
        float alpha[2];
        for (int r = 0; r < 2; r++) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
            // tile 0 holds key 0 <= row, so the max is finite from the first tile on
            float m_new = fmaxf(m_run[r], tile_max[r]);
            alpha[r] = exp2f(m_run[r] - m_new); // 0 on the first tile (m_run = -inf)
            m_run[r] = m_new;
            l_run[r] *= alpha[r];
        }
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                s[n][e] = exp2f(s[n][e] - m_run[e / 2]);
                l_run[e / 2] += s[n][e];
            }
        for (int n = 0; n < HS / 8; n++)
            for (int e = 0; e < 4; e++) o[n][e] *= alpha[e / 2];
        uint32_t p[4][4];
        attention_to_a_fragments(p, s);
        attention_probs_times_tile<HS>(o, p, v_s); // O += P V
        __syncthreads(); // all warps are done with this stage before iteration j+1 refills it
    }

    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        int row = row_lo + r * 8;
        if (row >= T) continue;
        float inv_l = 1.0f / l_run[r];
        bf16* dst = out + ((size_t)b * T + row) * C + h * HS + 2 * t;
        for (int n = 0; n < HS / 8; n++) {
            uint32_t v = pack_bf16x2(o[n][2 * r] * inv_l, o[n][2 * r + 1] * inv_l);
            attention_store_pair(dst + n * 8, v);
        }
        if (t == 0) lse[((size_t)b * NH + h) * T + row] = (m_run[r] + log2f(l_run[r])) * ATTENTION_LN2;
    }
}

// Query rows padded to whole tiles: the backward's per-row statistics and dQ scratch use them.
__host__ __device__ static inline int attention_padded_T(int T) { return (T + ATTENTION_TILE - 1) / ATTENTION_TILE * ATTENTION_TILE; }

// fp32 scratch the backward needs, in floats: dQ accumulator (B,NH,Tp,HS) + lse in the log2
// domain and D (B,NH,Tp) each, Tp = T rounded up to 64.
static inline size_t attention_backward_scratch_floats(int B, int T, int C, int NH) {
    size_t rows = (size_t)B * NH * attention_padded_T(T);
    return rows * (C / NH) + 2 * rows;
}

/*
 * Backward, step 1. Per padded row (b, h, t < Tp): D = rowsum(dout * out) over the head's HS
 * channels and lse2 = lse * log2(e); rows t >= T get D = 0, lse2 = +inf, so their P is 0 and
 * the main kernel needs no query-row mask.
 */
template <int HS>
__global__ void attention_backward_rows_kernel(float* d_rows, float* lse2, const bf16* dout, const bf16* out,
                                               const float* lse, int B, int T, int C, int NH) {
    const int Tp = attention_padded_T(T);
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * Tp) return;
    int t = (int)(idx % Tp);
    size_t bh = idx / Tp;
    int b = (int)(bh / NH), h = (int)(bh % NH);
    float sum = 0.0f, l2 = INFINITY;
    if (t < T) {
        size_t bt = (size_t)b * T + t;
        const bf16* dp = dout + bt * C + h * HS;
        const bf16* op = out + bt * C + h * HS;
        for (int c = 0; c < HS; c += PACK_BF16) {
            PackBf16 x = load_pack(dp + c), y = load_pack(op + c);
            for (int k = 0; k < PACK_BF16; k++) sum += __bfloat162float(x.v[k]) * __bfloat162float(y.v[k]);
        }
        l2 = lse[bh * T + t] * ATTENTION_LOG2E;
    }
    d_rows[idx] = sum;
    lse2[idx] = l2;
}

// K, V, Q x 2 stages, dO x 2 stages, dS^T; then lse2 and D, 64 floats each, x 2 stages.
template <int HS>
static size_t attention_backward_smem_bytes(void) {
    return 6 * AttentionTile<HS>::bytes + AttentionTile<ATTENTION_TILE>::bytes + 4 * ATTENTION_TILE * 4;
}

/*
 * Backward, step 2. grid (B*NH), block 128. For key tile j = 0, 1, ...: warp w owns keys
 * k0 + 16w .. +15 and keeps their dK, dV accumulators in registers while the block walks query
 * tiles i = j .. last (Q, dO, lse2, D double-buffered by cp.async). The score tiles are
 * transposed (keys x queries, S^T = K Q^T) so that P^T and dS^T are A operands of dV and dK
 * straight from registers; dS^T goes through shared memory once for dQ_i = dS K_j, computed by
 * warp w for query rows 16w .. +15 of tile i and added into the fp32 scratch dq_accum (one
 * writer per element per pair, pairs ordered by __syncthreads: a fixed summation order).
 */
template <int HS>
__global__ void __launch_bounds__(ATTENTION_THREADS) attention_backward_kernel(bf16* dqkv, float* dq_accum,
                                                                             const bf16* dout, const bf16* qkv,
                                                                             const float* lse2, const float* d_rows,
                                                                             int T, int C, int NH) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int Tp = attention_padded_T(T), n_tiles = Tp / ATTENTION_TILE;
    const size_t C3 = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * C3 + h * HS;
    const bf16* do_base = dout + (size_t)b * T * C + h * HS;
    const float* lse2_base = lse2 + (size_t)blockIdx.x * Tp;
    const float* d_base = d_rows + (size_t)blockIdx.x * Tp;
    float* dq_base = dq_accum + (size_t)blockIdx.x * Tp * HS;
    const float scale = rsqrtf((float)HS), scale_log2 = ATTENTION_LOG2E * scale;

    const int tile_elems = AttentionTile<HS>::bytes / 2;
    bf16* k_s = (bf16*)attention_smem;
    bf16* v_s = k_s + tile_elems;
    bf16* q_s = v_s + tile_elems;         // [2 stages]
    bf16* do_s = q_s + 2 * tile_elems;    // [2 stages]
    bf16* ds_s = do_s + 2 * tile_elems;   // dS^T: keys x queries
    float* stats_s = (float*)(ds_s + AttentionTile<ATTENTION_TILE>::bytes / 2); // [2 stages][lse2 64, D 64]

    // Q, dO, lse2 and D of query tile i into stage s (64 floats = 16 chunks of 16 bytes each).
    auto load_query_tile = [&](int i, int s) {
        attention_tile_async<HS>(q_s + s * tile_elems, q_base, C3, i * ATTENTION_TILE, T);
        attention_tile_async<HS>(do_s + s * tile_elems, do_base, C, i * ATTENTION_TILE, T);
        if (threadIdx.x < 32) {
            int c = threadIdx.x % 16;
            const float* src = (threadIdx.x < 16 ? lse2_base : d_base) + i * ATTENTION_TILE + c * 4;
            cp_async_16(stats_s + s * 2 * ATTENTION_TILE + (threadIdx.x / 16) * ATTENTION_TILE + c * 4, src, true);
        }
    };

    for (int j = 0; j < n_tiles; j++) {
        const int k0 = j * ATTENTION_TILE;
        attention_tile_async<HS>(k_s, q_base + C, C3, k0, T);
        attention_tile_async<HS>(v_s, q_base + 2 * C, C3, k0, T);
        load_query_tile(j, 0);
        cp_async_commit();

        float dk[HS / 8][4], dv[HS / 8][4];
        for (int n = 0; n < HS / 8; n++)
            for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
        const int key_lo = k0 + warp * 16 + g; // this thread's keys: key_lo, key_lo + 8

        for (int i = j; i < n_tiles; i++) {
            const int stage = (i - j) & 1;
            if (i + 1 < n_tiles) {
                load_query_tile(i + 1, stage ^ 1);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads(); // tile i (and K_j, V_j) visible to every warp
            const bf16* qt = q_s + stage * tile_elems;
            const bf16* dot = do_s + stage * tile_elems;
            const float* lse2_s = stats_s + stage * 2 * ATTENTION_TILE;
            const float* d_s = lse2_s + ATTENTION_TILE;
            const int q0 = i * ATTENTION_TILE;

            uint32_t kv_frag[HS / 16][4];
            for (int kk = 0; kk < HS / 16; kk++) attention_load_a<HS>(kv_frag[kk], k_s, warp * 16, kk * 16);
            float p[8][4];
            attention_rows_times_tile_t<HS>(p, kv_frag, qt); // S^T = K Q^T
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++) {
                    int col = n * 8 + 2 * t + (e & 1), key = key_lo + (e / 2) * 8;
                    // P^T = exp(S^T - lse); 0 above the diagonal and for padded queries (lse2 = inf)
                    p[n][e] = (i == j && key > q0 + col) ? 0.0f : exp2f(p[n][e] * scale_log2 - lse2_s[col]);
                }
            uint32_t a[4][4];
            attention_to_a_fragments(a, p);
            attention_probs_times_tile<HS>(dv, a, dot); // dV += P^T dO

            for (int kk = 0; kk < HS / 16; kk++) attention_load_a<HS>(kv_frag[kk], v_s, warp * 16, kk * 16);
            float ds[8][4];
            attention_rows_times_tile_t<HS>(ds, kv_frag, dot); // dP^T = V dO^T
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++) ds[n][e] = p[n][e] * (ds[n][e] - d_s[n * 8 + 2 * t + (e & 1)]);
            attention_to_a_fragments(a, ds);
            attention_probs_times_tile<HS>(dk, a, qt); // dK += dS^T Q (scaled at the end)
            for (int kk = 0; kk < 4; kk++) { // dS^T rows (keys) of this warp, bf16, for dQ
                const int ld = AttentionTile<ATTENTION_TILE>::ld;
                bf16* row = ds_s + (warp * 16 + g) * ld + kk * 16 + 2 * t;
                attention_store_pair(row, a[kk][0]);
                attention_store_pair(row + 8 * ld, a[kk][1]);
                attention_store_pair(row + 8, a[kk][2]);
                attention_store_pair(row + 8 * ld + 8, a[kk][3]);
            }
            __syncthreads(); // dS^T complete

            // dQ_i rows 16w..16w+15 (+)= dS K_j: A = (dS^T)^T from shared memory, B = K_j.
            float dq[HS / 8][4];
            for (int n = 0; n < HS / 8; n++)
                for (int e = 0; e < 4; e++) dq[n][e] = 0.0f;
            for (int kk = 0; kk < 4; kk++) {
                uint32_t af[4];
                attention_load_a_transposed<ATTENTION_TILE>(af, ds_s, kk * 16, warp * 16);
                for (int n = 0; n < HS / 8; n += 2) {
                    uint32_t bf[4];
                    attention_load_b_cols<HS>(bf, k_s, kk * 16, n * 8);
                    mma_bf16_16816(dq[n], af, bf);
                    mma_bf16_16816(dq[n + 1], af, bf + 2);
                }
            }
            for (int r = 0; r < 2; r++) {
                int row = q0 + warp * 16 + g + r * 8;
                float* acc = dq_base + (size_t)row * HS + 2 * t;
                bf16* dst = dqkv + ((size_t)b * T + row) * C3 + h * HS + 2 * t;
                for (int n = 0; n < HS / 8; n++)
                    for (int e = 0; e < 2; e++) {
                        float v = dq[n][2 * r + e];
                        if (i == j) { // last contribution: key tiles 0..i are in
                            if (j > 0) v += __ldcg(acc + n * 8 + e);
                            if (row < T) dst[n * 8 + e] = __float2bfloat16(v * scale);
                        } else if (j == 0) {
                            __stcg(acc + n * 8 + e, v); // first contribution
                        } else {
                            atomicAdd(acc + n * 8 + e, v); // sole writer: a reduction, not a race
                        }
                    }
            }
            __syncthreads(); // dS^T and this stage are free for the next pair
        }

        for (int r = 0; r < 2; r++) {
            int key = key_lo + r * 8;
            if (key >= T) continue;
            bf16* dst = dqkv + ((size_t)b * T + key) * C3 + h * HS + 2 * t;
            for (int n = 0; n < HS / 8; n++) {
                uint32_t kv = pack_bf16x2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
                uint32_t vv = pack_bf16x2(dv[n][2 * r], dv[n][2 * r + 1]);
                attention_store_pair(dst + C + n * 8, kv);
                attention_store_pair(dst + 2 * C + n * 8, vv);
            }
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Launchers

template <int HS>
static void attention_forward_flash_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
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
static void attention_backward_flash_launch(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                                            const bf16* out, const float* lse, int B, int T, int C, int NH,
                                            cudaStream_t stream) {
    static int configured = 0;
    size_t smem = attention_backward_smem_bytes<HS>();
    if (!configured) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        configured = 1;
    }
    size_t rows = (size_t)B * NH * attention_padded_T(T);
    float* dq_accum = scratch;
    float* lse2 = scratch + rows * HS;
    float* d_rows = lse2 + rows;
    attention_backward_rows_kernel<HS><<<(unsigned)ceil_div_size(rows, 256), 256, 0, stream>>>(d_rows, lse2, dout, out,
                                                                                               lse, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    attention_backward_kernel<HS><<<B * NH, ATTENTION_THREADS, smem, stream>>>(dqkv, dq_accum, dout, qkv, lse2, d_rows,
                                                                             T, C, NH);
    CUDA_CHECK_LAUNCH();
}

static inline void attention_check_head_size(int C, int NH) {
    int HS = C / NH;
    if (C % NH != 0 || (HS != 16 && HS != 64)) {
        fprintf(stderr, "error: attention: head size C/NH = %d/%d unsupported; expected 16 or 64\n", C, NH);
        exit(1);
    }
}

// The own flash kernels. out (B,T,C) bf16, lse (B,NH,T) fp32 from qkv (B,T,3C) bf16.
static inline void attention_forward_flash_cuda(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                                cudaStream_t stream) {
    attention_check_head_size(C, NH);
    if (C / NH == 16) attention_forward_flash_launch<16>(out, lse, qkv, B, T, C, NH, stream);
    else attention_forward_flash_launch<64>(out, lse, qkv, B, T, C, NH, stream);
}

// dqkv (B,T,3C) bf16 written from dout (B,T,C); needs the forward's qkv, out and lse, and
// scratch: attention_backward_scratch_floats(B, T, C, NH) floats.
static inline void attention_backward_flash_cuda(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                                                 const bf16* out, const float* lse, int B, int T, int C, int NH,
                                                 cudaStream_t stream) {
    attention_check_head_size(C, NH);
    if (C / NH == 16) attention_backward_flash_launch<16>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, stream);
    else attention_backward_flash_launch<64>(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, stream);
}

#ifdef USE_CUDNN
#include "attention_cudnn.h" // kernels/attention_cudnn.cpp, linked in by cuda.mk
#define ATTENTION_IMPLEMENTATION "cudnn"
#else
#define ATTENTION_IMPLEMENTATION "flash"
#endif

// What the trainer calls: cuDNN's SDPA when built with USE_CUDNN=1 (for B > 1, T >= 64 and a graph
// cuDNN could build), else the own kernels.
static inline void attention_forward_cuda(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                          cudaStream_t stream) {
#ifdef USE_CUDNN
    attention_check_head_size(C, NH);
    if (attention_forward_cudnn(out, lse, qkv, B, T, C, NH, stream)) return;
#endif
    attention_forward_flash_cuda(out, lse, qkv, B, T, C, NH, stream); // also cuDNN's fallback
}

// Scratch attention_backward_cuda needs, in floats: the flash backward's, also with cuDNN (which
// keeps its own workspace) since any shape may fall back to the flash kernels.
static inline size_t attention_scratch_floats(int B, int T, int C, int NH) {
    return attention_backward_scratch_floats(B, T, C, NH);
}

static inline void attention_backward_cuda(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                                           const bf16* out, const float* lse, int B, int T, int C, int NH,
                                           cudaStream_t stream) {
#ifdef USE_CUDNN
    attention_check_head_size(C, NH);
    if (attention_backward_cudnn(dqkv, dout, qkv, out, lse, B, T, C, NH, stream)) return;
#endif
    attention_backward_flash_cuda(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, stream); // also cuDNN's fallback
}

#endif // KERNELS_ATTENTION_CUH
