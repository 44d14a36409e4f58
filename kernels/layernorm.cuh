/*
 * layernorm.cuh: LayerNorm over the last dimension, GPU (bf16 storage, fp32 arithmetic), with the
 * residual add that precedes it fused in. CPU twins: cpu/layernorm.h (and cpu/residual.h for the
 * add). Source: Ba, Kiros, Hinton 2016, "Layer Normalization", eq. 4.
 * forward:  residual (N,C) = bf16(a + b) when b != NULL (the residual stream: a the stream, b the
 *           branch output), x = residual, else x = a;
 *           out (N,C) bf16 = (x - mean) * rstd * weight + bias, eps = 1e-5 (GPT-2);
 *           weight/bias (C) bf16; mean, rstd (N) fp32 saved for backward. N = B*T rows.
 *           One warp per row, the row held in registers: a and b are read once, the residual and
 *           the output written once (the unfused pair read the residual back: 10 bytes per
 *           element instead of 8, and one launch more). The same numbers as the residual kernel
 *           followed by LayerNorm: x is the bf16-rounded sum either way.
 * backward: accumulates into dinp (N,C), dweight (C), dbias (C), all bf16:
 *           dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight;
 *           dweight += sum_n dout * xhat;  dbias += sum_n dout.
 *           One pass over the data: a warp per row computes dinp from the row in registers and
 *           adds dout * xhat and dout into its own per-warp column sums in shared memory; each
 *           block then writes one fp32 partial per column (scratch, layernorm_backward_scratch_floats)
 *           and a small kernel adds the blocks' partials in a fixed order: deterministic, no
 *           atomics. The former three kernels read x and dout twice.
 * Requires C % 8 == 0 and C <= LAYERNORM_MAX_C (the row in registers: GPT-2's largest, 1600, fits).
 */
#ifndef KERNELS_LAYERNORM_CUH
#define KERNELS_LAYERNORM_CUH

#include "../common/cuda_utils.cuh"

#define LAYERNORM_EPS 1e-5f
#define LAYERNORM_MAX_PACKS 8                                   // packs of 8 per lane: a row in registers
#define LAYERNORM_MAX_C (32 * PACK_BF16 * LAYERNORM_MAX_PACKS)  // 2048
#define LAYERNORM_BACKWARD_WARPS 4                              // rows in flight per backward block
#define LAYERNORM_BACKWARD_BLOCKS 1024                          // at most; each writes one partial per column

// One warp per row; lane l holds packs l, l + 32, ... of the row (channel c = pack * 8 + k):
// PACKS = ceil(C / 256) packs per lane, a compile-time count so the row stays in registers
// (the launchers dispatch on it: 3 at d12's C = 768).
template <int PACKS>
__global__ void layernorm_forward_kernel(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                                         const bf16* b, const bf16* weight, const bf16* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int packs = C / PACK_BF16;
    const bf16* ar = a + (size_t)row * C;
    PackBf16 x[PACKS];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PACKS; j++) {
        int p = j * 32 + lane;
        if (p < packs) {
            x[j] = load_pack(ar + p * PACK_BF16);
            if (b != NULL) { // the residual add, rounded to bf16 as the stream stores it
                PackBf16 y = load_pack(b + (size_t)row * C + p * PACK_BF16);
                for (int k = 0; k < PACK_BF16; k++) x[j].v[k] = __float2bfloat16(__bfloat162float(x[j].v[k]) + __bfloat162float(y.v[k]));
                store_pack(residual + (size_t)row * C + p * PACK_BF16, x[j]);
            }
            for (int k = 0; k < PACK_BF16; k++) sum += __bfloat162float(x[j].v[k]);
        }
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f; // second pass over the registers: the variance of the centred values (accuracy)
#pragma unroll
    for (int j = 0; j < PACKS; j++)
        if (j * 32 + lane < packs)
            for (int k = 0; k < PACK_BF16; k++) { float d = __bfloat162float(x[j].v[k]) - m; var += d * d; }
    float s = rsqrtf(warp_reduce_sum(var) / C + LAYERNORM_EPS);
    bf16* o = out + (size_t)row * C;
#pragma unroll
    for (int j = 0; j < PACKS; j++) {
        int p = j * 32 + lane;
        if (p < packs) {
            PackBf16 w = load_pack(weight + p * PACK_BF16), bb = load_pack(bias + p * PACK_BF16), r;
            for (int k = 0; k < PACK_BF16; k++)
                r.v[k] = __float2bfloat16((__bfloat162float(x[j].v[k]) - m) * s * __bfloat162float(w.v[k]) + __bfloat162float(bb.v[k]));
            store_pack(o + p * PACK_BF16, r);
        }
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

/*
 * dinp, and the column sums' block partials, in one pass. Block: LAYERNORM_BACKWARD_WARPS warps,
 * warp w of block i takes rows i*W + w, then + gridDim.x*W, ... Dynamic shared memory: per warp,
 * dweight and dbias column sums (2 * C floats), stored pack-interleaved (channel pack*8 + k at
 * k * packs + pack) so that a warp's 32 lanes touch 32 consecutive words. partials (gridDim.x, 2, C).
 */
template <int PACKS>
__global__ void layernorm_backward_kernel(bf16* dinp, float* partials, const bf16* dout, const bf16* inp,
                                          const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float layernorm_column_sums[]; // [warp][2][C]
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int packs = C / PACK_BF16;
    float* dw_sum = layernorm_column_sums + (size_t)warp * 2 * C;
    float* db_sum = dw_sum + C;
    for (int i = lane; i < 2 * C; i += 32) dw_sum[i] = 0.0f; // the warp's own sums: only it reads them here
    __syncwarp();
    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const bf16* x = inp + (size_t)row * C;
        const bf16* d = dout + (size_t)row * C;
        float m = mean[row], s = rstd[row];
        PackBf16 xp[PACKS], dp[PACKS];
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int j = 0; j < PACKS; j++) {
            int p = j * 32 + lane;
            if (p < packs) {
                xp[j] = load_pack(x + p * PACK_BF16);
                dp[j] = load_pack(d + p * PACK_BF16);
                PackBf16 wp = load_pack(weight + p * PACK_BF16);
                for (int k = 0; k < PACK_BF16; k++) {
                    float dv = __bfloat162float(dp[j].v[k]), xhat = (__bfloat162float(xp[j].v[k]) - m) * s;
                    float g = dv * __bfloat162float(wp.v[k]);
                    sum_g += g;
                    sum_gx += g * xhat;
                    dw_sum[k * packs + p] += dv * xhat;
                    db_sum[k * packs + p] += dv;
                }
            }
        }
        float mean_g = warp_reduce_sum(sum_g) / C, mean_gx = warp_reduce_sum(sum_gx) / C;
        bf16* di = dinp + (size_t)row * C;
#pragma unroll
        for (int j = 0; j < PACKS; j++) {
            int p = j * 32 + lane;
            if (p < packs) {
                PackBf16 wp = load_pack(weight + p * PACK_BF16), old = load_pack(di + p * PACK_BF16), r;
                for (int k = 0; k < PACK_BF16; k++) {
                    float xhat = (__bfloat162float(xp[j].v[k]) - m) * s;
                    float g = __bfloat162float(dp[j].v[k]) * __bfloat162float(wp.v[k]);
                    r.v[k] = __float2bfloat16(__bfloat162float(old.v[k]) + s * (g - mean_g - xhat * mean_gx));
                }
                store_pack(di + p * PACK_BF16, r);
            }
        }
    }
    __syncthreads(); // every warp's sums are complete
    float* out = partials + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int shared_index = (c % PACK_BF16) * packs + c / PACK_BF16;
        float sw = 0.0f, sb = 0.0f;
        for (int w = 0; w < warps; w++) { // fixed order: deterministic
            sw += layernorm_column_sums[(size_t)w * 2 * C + shared_index];
            sb += layernorm_column_sums[(size_t)w * 2 * C + C + shared_index];
        }
        out[c] = sw;
        out[C + c] = sb;
    }
}

// One thread per channel: add the blocks' partials in order 0..num_blocks-1.
__global__ void layernorm_backward_params_kernel(bf16* dweight, bf16* dbias, const float* partials, int num_blocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = __bfloat162float(dweight[c]), sb = __bfloat162float(dbias[c]);
    for (int i = 0; i < num_blocks; i++) {
        sw += partials[(size_t)i * 2 * C + c];
        sb += partials[(size_t)i * 2 * C + C + c];
    }
    dweight[c] = __float2bfloat16(sw);
    dbias[c] = __float2bfloat16(sb);
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void layernorm_check_width(int C) {
    if (C % PACK_BF16 != 0 || C > LAYERNORM_MAX_C) {
        fprintf(stderr, "error: layernorm: C = %d unsupported; expected a multiple of 8 up to %d\n", C, LAYERNORM_MAX_C);
        exit(1);
    }
}

template <int PACKS>
static void layernorm_forward_launch(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a, const bf16* b,
                                     const bf16* weight, const bf16* bias, int N, int C, cudaStream_t stream) {
    const int block = 256, rows_per_block = block / 32;
    layernorm_forward_kernel<PACKS><<<ceil_div_int(N, rows_per_block), block, 0, stream>>>(residual, out, mean, rstd, a, b,
                                                                                           weight, bias, N, C);
    CUDA_CHECK_LAUNCH();
}

// residual = a + b (b != NULL; residual unused when b == NULL), out = LayerNorm(residual or a).
static inline void residual_layernorm_forward_cuda(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                                                   const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                                   cudaStream_t stream) {
    layernorm_check_width(C);
    switch (ceil_div_int(C, 32 * PACK_BF16)) {
    case 1: layernorm_forward_launch<1>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    case 2: layernorm_forward_launch<2>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    case 3: layernorm_forward_launch<3>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    case 4: layernorm_forward_launch<4>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    case 5: layernorm_forward_launch<5>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    case 6: layernorm_forward_launch<6>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    case 7: layernorm_forward_launch<7>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    default: layernorm_forward_launch<8>(residual, out, mean, rstd, a, b, weight, bias, N, C, stream); break;
    }
}

static inline void layernorm_forward_cuda(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                                          const bf16* bias, int N, int C, cudaStream_t stream) {
    residual_layernorm_forward_cuda((bf16*)NULL, out, mean, rstd, inp, (const bf16*)NULL, weight, bias, N, C, stream);
}

// fp32 scratch the backward needs (for any N), in floats.
static inline size_t layernorm_backward_scratch_floats(int C) { return (size_t)LAYERNORM_BACKWARD_BLOCKS * 2 * C; }

template <int PACKS>
static void layernorm_backward_launch(bf16* dinp, float* scratch, const bf16* dout, const bf16* inp, const bf16* weight,
                                      const float* mean, const float* rstd, int N, int C, int blocks, cudaStream_t stream) {
    const int warps = LAYERNORM_BACKWARD_WARPS;
    size_t smem = (size_t)warps * 2 * C * sizeof(float);
    static size_t smem_allowed = 48 << 10; // the default limit; raised once when a wide C needs more
    if (smem > smem_allowed) {
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<PACKS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_allowed = smem;
    }
    layernorm_backward_kernel<PACKS><<<blocks, warps * 32, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
}

static inline void layernorm_backward_cuda(bf16* dinp, bf16* dweight, bf16* dbias, float* scratch, const bf16* dout,
                                           const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                                           int N, int C, cudaStream_t stream) {
    layernorm_check_width(C);
    int blocks = ceil_div_int(N, LAYERNORM_BACKWARD_WARPS);
    if (blocks > LAYERNORM_BACKWARD_BLOCKS) blocks = LAYERNORM_BACKWARD_BLOCKS;
    switch (ceil_div_int(C, 32 * PACK_BF16)) {
    case 1: layernorm_backward_launch<1>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    case 2: layernorm_backward_launch<2>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    case 3: layernorm_backward_launch<3>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    case 4: layernorm_backward_launch<4>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    case 5: layernorm_backward_launch<5>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    case 6: layernorm_backward_launch<6>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    case 7: layernorm_backward_launch<7>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    default: layernorm_backward_launch<8>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, blocks, stream); break;
    }
    layernorm_backward_params_kernel<<<ceil_div_int(C, 256), 256, 0, stream>>>(dweight, dbias, scratch, blocks, C);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_LAYERNORM_CUH
