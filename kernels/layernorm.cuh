/*
 * layernorm.cuh: LayerNorm over the last dimension, GPU (bf16 storage, fp32 arithmetic).
 * CPU twin: cpu/layernorm.h. Source: Ba, Kiros, Hinton 2016, "Layer Normalization", eq. 4.
 * forward:  out (N,C) bf16 = (inp - mean) * rstd * weight + bias, eps = 1e-5 (GPT-2);
 *           inp (N,C) bf16, weight/bias (C) bf16; mean, rstd (N) fp32 saved for backward.
 *           N = B*T rows.
 * backward: accumulates into dinp (N,C), dweight (C), dbias (C), all bf16:
 *           dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight;
 *           dweight += sum_n dout * xhat;  dbias += sum_n dout.
 * The parameter gradients are column sums over N rows. They are computed without atomics:
 * blocks own (channel strip, row chunk) tiles and write fp32 partial sums to a scratch buffer
 * (layernorm_backward_scratch_floats), then one kernel adds the partials in a fixed order.
 * Requires C % 8 == 0.
 */
#ifndef KERNELS_LAYERNORM_CUH
#define KERNELS_LAYERNORM_CUH

#include "../common/cuda_utils.cuh"

#define LAYERNORM_EPS 1e-5f
#define LAYERNORM_ROW_CHUNKS 256 // row chunks of the parameter-gradient reduction (scratch rows)

// One warp per row. Two passes over the row (mean, then variance of the centred values) for
// accuracy; the second and third reads hit L1/L2.
__global__ void layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp,
                                         const bf16* weight, const bf16* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * PACK_BF16; c < C; c += 32 * PACK_BF16) {
        PackBf16 p = load_pack(x + c);
        for (int k = 0; k < PACK_BF16; k++) sum += __bfloat162float(p.v[k]);
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * PACK_BF16; c < C; c += 32 * PACK_BF16) {
        PackBf16 p = load_pack(x + c);
        for (int k = 0; k < PACK_BF16; k++) { float d = __bfloat162float(p.v[k]) - m; var += d * d; }
    }
    float s = rsqrtf(warp_reduce_sum(var) / C + LAYERNORM_EPS);
    bf16* o = out + (size_t)row * C;
    for (int c = lane * PACK_BF16; c < C; c += 32 * PACK_BF16) {
        PackBf16 p = load_pack(x + c), w = load_pack(weight + c), b = load_pack(bias + c), r;
        for (int k = 0; k < PACK_BF16; k++)
            r.v[k] = __float2bfloat16((__bfloat162float(p.v[k]) - m) * s * __bfloat162float(w.v[k]) +
                                      __bfloat162float(b.v[k]));
        store_pack(o + c, r);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// dinp: one warp per row.
__global__ void layernorm_backward_dinp_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* weight,
                                               const float* mean, const float* rstd, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const bf16* x = inp + (size_t)row * C;
    const bf16* d = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = lane * PACK_BF16; c < C; c += 32 * PACK_BF16) {
        PackBf16 xp = load_pack(x + c), dp = load_pack(d + c), wp = load_pack(weight + c);
        for (int k = 0; k < PACK_BF16; k++) {
            float g = __bfloat162float(dp.v[k]) * __bfloat162float(wp.v[k]);
            sum_g += g;
            sum_gx += g * (__bfloat162float(xp.v[k]) - m) * s;
        }
    }
    float mean_g = warp_reduce_sum(sum_g) / C, mean_gx = warp_reduce_sum(sum_gx) / C;
    bf16* di = dinp + (size_t)row * C;
    for (int c = lane * PACK_BF16; c < C; c += 32 * PACK_BF16) {
        PackBf16 xp = load_pack(x + c), dp = load_pack(d + c), wp = load_pack(weight + c), old = load_pack(di + c), r;
        for (int k = 0; k < PACK_BF16; k++) {
            float xhat = (__bfloat162float(xp.v[k]) - m) * s;
            float g = __bfloat162float(dp.v[k]) * __bfloat162float(wp.v[k]);
            r.v[k] = __float2bfloat16(__bfloat162float(old.v[k]) + s * (g - mean_g - xhat * mean_gx));
        }
        store_pack(di + c, r);
    }
}

// Partial column sums. Block (32, 8) owns channels [blockIdx.x*256, +256) and rows
// blockIdx.y, blockIdx.y + gridDim.y, ... ; partials (gridDim.y, 2, C) fp32: [..][0] = dweight
// part, [..][1] = dbias part.
__global__ void layernorm_backward_params_partial_kernel(float* partials, const bf16* dout, const bf16* inp,
                                                         const float* mean, const float* rstd, int N, int C) {
    __shared__ float shared_dw[8][32][PACK_BF16 + 1], shared_db[8][32][PACK_BF16 + 1];
    int c = (blockIdx.x * 32 + threadIdx.x) * PACK_BF16;
    float dw[PACK_BF16], db[PACK_BF16];
    for (int k = 0; k < PACK_BF16; k++) { dw[k] = 0.0f; db[k] = 0.0f; }
    if (c < C) {
        for (int row = blockIdx.y * 8 + threadIdx.y; row < N; row += gridDim.y * 8) {
            PackBf16 dp = load_pack(dout + (size_t)row * C + c), xp = load_pack(inp + (size_t)row * C + c);
            float m = mean[row], s = rstd[row];
            for (int k = 0; k < PACK_BF16; k++) {
                float dv = __bfloat162float(dp.v[k]);
                dw[k] += dv * (__bfloat162float(xp.v[k]) - m) * s;
                db[k] += dv;
            }
        }
    }
    for (int k = 0; k < PACK_BF16; k++) { shared_dw[threadIdx.y][threadIdx.x][k] = dw[k]; shared_db[threadIdx.y][threadIdx.x][k] = db[k]; }
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float* out = partials + (size_t)blockIdx.y * 2 * C;
        for (int k = 0; k < PACK_BF16; k++) {
            float sw = 0.0f, sb = 0.0f;
            for (int y = 0; y < 8; y++) { sw += shared_dw[y][threadIdx.x][k]; sb += shared_db[y][threadIdx.x][k]; }
            out[c + k] = sw;
            out[C + c + k] = sb;
        }
    }
}

// One thread per channel: add the row-chunk partials in order 0..num_chunks-1.
__global__ void layernorm_backward_params_final_kernel(bf16* dweight, bf16* dbias, const float* partials,
                                                       int num_chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = __bfloat162float(dweight[c]), sb = __bfloat162float(dbias[c]);
    for (int i = 0; i < num_chunks; i++) {
        sw += partials[(size_t)i * 2 * C + c];
        sb += partials[(size_t)i * 2 * C + C + c];
    }
    dweight[c] = __float2bfloat16(sw);
    dbias[c] = __float2bfloat16(sb);
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void layernorm_forward_cuda(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                                          const bf16* bias, int N, int C, cudaStream_t stream) {
    const int block = 256, rows_per_block = block / 32;
    layernorm_forward_kernel<<<ceil_div_int(N, rows_per_block), block, 0, stream>>>(out, mean, rstd, inp, weight,
                                                                                    bias, N, C);
    CUDA_CHECK_LAUNCH();
}

// fp32 scratch the backward needs (for any N), in floats.
static inline size_t layernorm_backward_scratch_floats(int C) { return (size_t)LAYERNORM_ROW_CHUNKS * 2 * C; }

static inline void layernorm_backward_cuda(bf16* dinp, bf16* dweight, bf16* dbias, float* scratch, const bf16* dout,
                                           const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                                           int N, int C, cudaStream_t stream) {
    const int block = 256, rows_per_block = block / 32;
    layernorm_backward_dinp_kernel<<<ceil_div_int(N, rows_per_block), block, 0, stream>>>(dinp, dout, inp, weight,
                                                                                          mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    int chunks = ceil_div_int(N, 8);
    if (chunks > LAYERNORM_ROW_CHUNKS) chunks = LAYERNORM_ROW_CHUNKS;
    dim3 grid(ceil_div_int(C, 32 * PACK_BF16), chunks);
    layernorm_backward_params_partial_kernel<<<grid, dim3(32, 8), 0, stream>>>(scratch, dout, inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    layernorm_backward_params_final_kernel<<<ceil_div_int(C, 256), 256, 0, stream>>>(dweight, dbias, scratch, chunks, C);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_LAYERNORM_CUH
