/*
 * encoder.cuh: token + position embedding, GPU (bf16 storage, fp32 arithmetic).
 * CPU twin: cpu/encoder.h.
 * forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]   out (B,T,C), wte (Vp,C), wpe (maxT,C), bf16;
 *           inp (B,T) int32 on the device.
 * backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]   (accumulates, bf16).
 * The backward is deterministic (no atomics): positions are grouped by token on the host
 * (a counting sort, encoder_backward_plan), then one block per distinct token sums its rows in
 * fp32 in a fixed order and does one read-modify-write of that token's dwte row.
 * Requires C % 8 == 0 (128-bit packs).
 */
#ifndef KERNELS_ENCODER_CUH
#define KERNELS_ENCODER_CUH

#include "../common/cuda_utils.cuh"

// One thread per 8 channels of one (b,t).
__global__ void encoder_forward_kernel(bf16* out, const int* inp, const bf16* wte, const bf16* wpe,
                                       int B, int T, int C) {
    size_t packs_per_row = (size_t)C / PACK_BF16;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * packs_per_row) return;
    size_t bt = idx / packs_per_row;
    int c = (int)(idx % packs_per_row) * PACK_BF16;
    int t = (int)(bt % T);
    PackBf16 token = load_pack(wte + (size_t)inp[bt] * C + c);
    PackBf16 position = load_pack(wpe + (size_t)t * C + c);
    PackBf16 result;
    for (int k = 0; k < PACK_BF16; k++)
        result.v[k] = __float2bfloat16(__bfloat162float(token.v[k]) + __bfloat162float(position.v[k]));
    store_pack(out + bt * C + c, result);
}

// Over wte's vocab chunks (the trainer, common/gpt2_config.h): out[b,t,:] = wte_chunk[inp - row0,:]
// + wpe[t,:] for the tokens in [row0, row0 + rows) only, the same single rounding as above; wpe
// (T,C) is a copy the caller keeps while the chunks come and go.
__global__ void encoder_forward_chunk_kernel(bf16* out, const int* inp, const bf16* wte_chunk, const bf16* wpe,
                                             int row0, int rows, int B, int T, int C) {
    size_t packs_per_row = (size_t)C / PACK_BF16;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * packs_per_row) return;
    size_t bt = idx / packs_per_row;
    int row = inp[bt] - row0;
    if (row < 0 || row >= rows) return;
    int c = (int)(idx % packs_per_row) * PACK_BF16;
    int t = (int)(bt % T);
    PackBf16 token = load_pack(wte_chunk + (size_t)row * C + c);
    PackBf16 position = load_pack(wpe + (size_t)t * C + c);
    PackBf16 result;
    for (int k = 0; k < PACK_BF16; k++)
        result.v[k] = __float2bfloat16(__bfloat162float(token.v[k]) + __bfloat162float(position.v[k]));
    store_pack(out + bt * C + c, result);
}

// dwpe: thread per (t, 8 channels); sums over b in fp32 in order b = 0..B-1.
__global__ void encoder_backward_wpe_kernel(bf16* dwpe, const bf16* dout, int B, int T, int C) {
    size_t packs_per_row = (size_t)C / PACK_BF16;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * packs_per_row) return;
    int t = (int)(idx / packs_per_row);
    int c = (int)(idx % packs_per_row) * PACK_BF16;
    float sum[PACK_BF16];
    PackBf16 old = load_pack(dwpe + (size_t)t * C + c);
    for (int k = 0; k < PACK_BF16; k++) sum[k] = __bfloat162float(old.v[k]);
    for (int b = 0; b < B; b++) {
        PackBf16 d = load_pack(dout + ((size_t)b * T + t) * C + c);
        for (int k = 0; k < PACK_BF16; k++) sum[k] += __bfloat162float(d.v[k]);
    }
    PackBf16 result;
    for (int k = 0; k < PACK_BF16; k++) result.v[k] = __float2bfloat16(sum[k]);
    store_pack(dwpe + (size_t)t * C + c, result);
}

// dwte: block (32, ENCODER_ROW_SPLIT) per (distinct token, strip of 256 channels). threadIdx.x
// picks 8 channels, threadIdx.y strides over the token's positions; the ENCODER_ROW_SPLIT
// partial sums are combined in shared memory in a fixed order, then one RMW of dwte.
// bucket_starts (num_buckets+1), bucket_tokens (num_buckets), bucket_positions (B*T): see plan.
#define ENCODER_ROW_SPLIT 8
__global__ void encoder_backward_wte_kernel(bf16* dwte, const bf16* dout, const int* bucket_starts,
                                            const int* bucket_tokens, const int* bucket_positions, int row0, int C) {
    __shared__ float partial[ENCODER_ROW_SPLIT][32][PACK_BF16 + 1]; // +1: fewer bank conflicts
    int bucket = blockIdx.x;
    int c = (blockIdx.y * 32 + threadIdx.x) * PACK_BF16;
    bool active = c < C;
    float sum[PACK_BF16];
    for (int k = 0; k < PACK_BF16; k++) sum[k] = 0.0f;
    if (active) {
        for (int i = bucket_starts[bucket] + threadIdx.y; i < bucket_starts[bucket + 1]; i += ENCODER_ROW_SPLIT) {
            PackBf16 d = load_pack(dout + (size_t)bucket_positions[i] * C + c);
            for (int k = 0; k < PACK_BF16; k++) sum[k] += __bfloat162float(d.v[k]);
        }
    }
    for (int k = 0; k < PACK_BF16; k++) partial[threadIdx.y][threadIdx.x][k] = sum[k];
    __syncthreads();
    if (threadIdx.y == 0 && active) {
        bf16* row = dwte + (size_t)(bucket_tokens[bucket] - row0) * C + c; // row0: the first row dwte holds
        PackBf16 old = load_pack(row);
        PackBf16 result;
        for (int k = 0; k < PACK_BF16; k++) {
            float s = __bfloat162float(old.v[k]);
            for (int y = 0; y < ENCODER_ROW_SPLIT; y++) s += partial[y][threadIdx.x][k];
            result.v[k] = __float2bfloat16(s);
        }
        store_pack(row, result);
    }
}

// ----------------------------------------------------------------------------------------------
// Launchers

static inline void encoder_forward_cuda(bf16* out, const int* inp, const bf16* wte, const bf16* wpe,
                                        int B, int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)B * T * (C / PACK_BF16);
    const int block = 256;
    encoder_forward_kernel<<<(unsigned)ceil_div_size(threads, block), block, 0, stream>>>(out, inp, wte, wpe, B, T, C);
    CUDA_CHECK_LAUNCH();
}

static inline void encoder_forward_chunk_cuda(bf16* out, const int* inp, const bf16* wte_chunk, const bf16* wpe, int row0,
                                              int rows, int B, int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)B * T * (C / PACK_BF16);
    const int block = 256;
    encoder_forward_chunk_kernel<<<(unsigned)ceil_div_size(threads, block), block, 0, stream>>>(out, inp, wte_chunk, wpe, row0,
                                                                                                 rows, B, T, C);
    CUDA_CHECK_LAUNCH();
}

/*
 * Host-side grouping of positions by token for the deterministic dwte backward.
 * inp (B*T) host tokens in [0, Vp). Fills, in host arrays the caller owns:
 *   bucket_tokens (num_buckets): the distinct tokens, ascending;
 *   bucket_starts (num_buckets + 1): where each token's positions begin in bucket_positions;
 *   bucket_positions (B*T): the bt indices, grouped by token, ascending within a token.
 * counts (Vp ints) is scratch. Returns num_buckets. O(B*T + Vp), a counting sort.
 */
static inline int encoder_backward_plan(int* bucket_tokens, int* bucket_starts, int* bucket_positions,
                                        int* counts, const int* inp, int BT, int Vp) {
    memset(counts, 0, (size_t)Vp * sizeof(int));
    for (int i = 0; i < BT; i++) counts[inp[i]]++;
    int num_buckets = 0, running = 0;
    for (int token = 0; token < Vp; token++) {
        if (counts[token] == 0) continue;
        bucket_tokens[num_buckets] = token;
        bucket_starts[num_buckets] = running;
        num_buckets++;
        int n = counts[token];
        counts[token] = running; // from here on: next free slot for this token
        running += n;
    }
    bucket_starts[num_buckets] = running;
    for (int i = 0; i < BT; i++) bucket_positions[counts[inp[i]]++] = i;
    return num_buckets;
}

// Device arrays as filled by encoder_backward_plan (copied up by the caller).
static inline void encoder_backward_cuda(bf16* dwte, bf16* dwpe, const bf16* dout, const int* bucket_starts,
                                         const int* bucket_tokens, const int* bucket_positions, int num_buckets,
                                         int B, int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)T * (C / PACK_BF16);
    encoder_backward_wpe_kernel<<<(unsigned)ceil_div_size(threads, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
    if (num_buckets == 0) return;
    dim3 grid(num_buckets, ceil_div_int(C / PACK_BF16, 32));
    dim3 block(32, ENCODER_ROW_SPLIT);
    encoder_backward_wte_kernel<<<grid, block, 0, stream>>>(dwte, dout, bucket_starts, bucket_tokens,
                                                            bucket_positions, 0, C);
    CUDA_CHECK_LAUNCH();
}

// dwpe alone (the unit that holds wpe), and dwte for one vocab chunk: the buckets [first, first +
// count) of the plan, whose tokens lie in [row0, row0 + rows), into dwte_chunk (rows, C).
static inline void encoder_backward_wpe_cuda(bf16* dwpe, const bf16* dout, int B, int T, int C, cudaStream_t stream) {
    size_t threads = (size_t)T * (C / PACK_BF16);
    encoder_backward_wpe_kernel<<<(unsigned)ceil_div_size(threads, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}
static inline void encoder_backward_chunk_cuda(bf16* dwte_chunk, const bf16* dout, const int* bucket_starts, const int* bucket_tokens,
                                               const int* bucket_positions, int first, int count, int row0, int C, cudaStream_t stream) {
    if (count == 0) return;
    dim3 grid(count, ceil_div_int(C / PACK_BF16, 32));
    dim3 block(32, ENCODER_ROW_SPLIT);
    encoder_backward_wte_kernel<<<grid, block, 0, stream>>>(dwte_chunk, dout, bucket_starts + first, bucket_tokens + first,
                                                            bucket_positions, row0, C);
    CUDA_CHECK_LAUNCH();
}

#endif // KERNELS_ENCODER_CUH
