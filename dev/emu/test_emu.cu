/*
 * test_emu.cu: tests of the CPU emulation itself (dev/emu/emu.h). A green test_kernels run
 * under the emulation means something only if the emulation catches the bugs it claims to, so
 * each claim in emu.h's header has a kernel here that breaks it on purpose:
 *   positive: block reduction, shuffles and WMMA give the exact expected values; >48 KiB of
 *             dynamic shared memory works after cudaFuncSetAttribute.
 *             A full-mask shuffle after some lanes returned runs; values from those lanes are
 *             poison.
 *   negative: a missing __syncthreads (dynamic or static shared memory, every block of every
 *             launch) or __syncwarp yields a wrong result; an out-of-bounds write (a page away,
 *             or just past the end or before the start of a buffer, or past dynamic shared
 *             memory), a __syncthreads reached by part of the block, threads meeting at
 *             different __syncthreads, a misaligned WMMA pointer each stop the program (exit 3)
 *             with the reason on stderr; a launch asking too much shared memory and a cudaMemcpy past a
 *             buffer's end return errors.
 * Streams (emu_runtime.h, nccl_emu.h, one MPI rank): a collective's output is there after an
 * event wait, and not there (poison) for a kernel that skipped the wait, even where the old
 * contents equal the result; a kernel queued behind a collective on its stream runs only when
 * waited for; overwriting a collective's input while it is in flight stops the program.
 * ncclCommSplit, grouped ncclSend/ncclRecv (to itself) and an all-gather on the split
 * communicator: the same rules, and overwriting a send's buffer in flight stops too. With
 * EMU_LAZY=1 (kernels queued until something waits), a collective whose stream did not wait for
 * the kernel producing its input reads stale input; with the wait it reads the kernel's values.
 * Negative cases that stop the program run in a forked child; the parent checks the exit code
 * and a phrase of the message. Prints PASS/FAIL lines; exits 1 on any failure.
 * Build and run: make emu_check (emu.mk).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>
#include <nccl.h>

#include "../../common/cuda_utils.cuh"

#define EMU_TEST_PREFIX "emu_"
#include "emu_test.h"

// ----------------------------------------------------------------------------------------------
// Positive cases

__global__ void block_sum_kernel(float* out, const float* in) {
    __shared__ float scratch[32];
    float s = block_reduce_sum(in[blockIdx.x * blockDim.x + threadIdx.x], scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

static void test_block_reduce(void) {
    const int blocks = 3, threads = 256;
    float host[blocks * threads], sums[blocks];
    for (int i = 0; i < blocks * threads; i++) host[i] = (float)(i % 7); // integers: exact in any order
    float *in, *out;
    CUDA_CHECK(cudaMalloc(&in, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(sums)));
    CUDA_CHECK(cudaMemcpy(in, host, sizeof(host), cudaMemcpyHostToDevice));
    block_sum_kernel<<<blocks, threads>>>(out, in);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(sums, out, sizeof(sums), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int b = 0; b < blocks; b++) {
        float want = 0.0f;
        for (int i = 0; i < threads; i++) want += host[b * threads + i];
        ok &= sums[b] == want;
    }
    check("block_reduce_sum", ok, "sums differ");
    CUDA_CHECK(cudaFree(in));
    CUDA_CHECK(cudaFree(out));
}

__global__ void shuffle_kernel(int* out) {
    int lane = threadIdx.x % 32;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
}

static void test_shuffle(void) {
    int* out;
    int host[64];
    CUDA_CHECK(cudaMalloc(&out, sizeof(host)));
    shuffle_kernel<<<1, 64>>>(out);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 64; i++) ok &= host[i] == ((i % 32) ^ 5) * 10;
    check("shuffle_xor", ok, "wrong lane values");
    CUDA_CHECK(cudaFree(out));
}

namespace wmma = nvcuda::wmma;

// D = A B (16x16x16), A row-major, B col-major; with_sync = 0 drops the __syncwarp between the
// store and the lanes' reads of the whole tile.
__global__ void wmma_kernel(float* d, const bf16* a, const bf16* b, int with_sync) {
    __shared__ __align__(32) float tile[16 * 16];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = threadIdx.x; i < 256; i += 32) tile[i] = -1.0f;
    __syncwarp();
    wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
    if (with_sync) __syncwarp();
    // every lane copies the row it would need in a real kernel: rows lane/2, all 16 columns
    int row = threadIdx.x / 2;
    for (int j = 0; j < 16; j++) d[row * 16 + j] = tile[row * 16 + j];
}

static int run_wmma(int with_sync) {
    bf16 a[256], b[256];
    float want[256], got[256];
    for (int i = 0; i < 256; i++) {
        a[i] = __float2bfloat16((float)(i % 5) - 2.0f);
        b[i] = __float2bfloat16((float)(i % 3) - 1.0f);
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++) s += __bfloat162float(a[i * 16 + k]) * __bfloat162float(b[j * 16 + k]);
            want[i * 16 + j] = s;
        }
    bf16 *da, *db;
    float* dd;
    CUDA_CHECK(cudaMalloc(&da, sizeof(a)));
    CUDA_CHECK(cudaMalloc(&db, sizeof(b)));
    CUDA_CHECK(cudaMalloc(&dd, sizeof(got)));
    CUDA_CHECK(cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice));
    wmma_kernel<<<1, 32>>>(dd, da, db, with_sync);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(got, dd, sizeof(got), cudaMemcpyDeviceToHost));
    int same = memcmp(got, want, sizeof(got)) == 0;
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dd));
    return same;
}

extern __shared__ __align__(128) unsigned char dynamic_smem_test[];

// Thread i writes its slot, then reads its neighbour's; with_sync = 0 drops the barrier between.
__global__ void neighbour_kernel(int* out, int with_sync) {
    int* slots = (int*)dynamic_smem_test;
    int n = blockDim.x, i = threadIdx.x;
    slots[i] = i;
    slots[n + 25000 - 1] = 0; // touches the far end of the 100 KB request (after the n slots)
    if (with_sync) __syncthreads();
    out[i] = slots[(i + 1) % n];
}

static int run_neighbour(int with_sync, size_t smem) {
    const int n = 128;
    int* out;
    int host[n];
    CUDA_CHECK(cudaMalloc(&out, sizeof(host)));
    neighbour_kernel<<<1, n, smem>>>(out, with_sync);
    cudaError_t launch = cudaGetLastError();
    if (launch != cudaSuccess) { CUDA_CHECK(cudaFree(out)); return -1; }
    CUDA_CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= host[i] == (i + 1) % n;
    CUDA_CHECK(cudaFree(out));
    return ok;
}

// ----------------------------------------------------------------------------------------------
// Negative cases that stop the program

__global__ void write_past_end_kernel(float* buf, int n) { buf[n + threadIdx.x] = 1.0f; }

static void case_out_of_bounds(void) {
    float* buf;
    CUDA_CHECK(cudaMalloc(&buf, 1024 * sizeof(float)));
    write_past_end_kernel<<<1, 32>>>(buf, 1024);
}

// Lanes 16-31 return; lanes 0-15 shuffle with a full mask (legal: exited lanes are skipped).
// From a live partner (xor 1) the value arrives; from an exited one (xor 16) it is undefined,
// which the emulation makes poison (-1 as int).
__global__ void shuffle_after_return_kernel(int* out) {
    int lane = threadIdx.x % 32;
    if (lane >= 16) return;
    int from_live = __shfl_xor_sync(0xffffffffu, lane, 1);
    int from_exited = __shfl_xor_sync(0xffffffffu, lane, 16);
    out[lane] = from_live;
    out[16 + lane] = from_exited;
}

static void test_shuffle_after_return(void) {
    int* out;
    int host[32];
    CUDA_CHECK(cudaMalloc(&out, sizeof(host)));
    shuffle_after_return_kernel<<<1, 32>>>(out);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 16; i++) ok &= host[i] == (i ^ 1) && host[16 + i] == -1;
    check("shuffle_with_exited_lanes_runs_and_poisons_their_values", ok, "wrong values");
    CUDA_CHECK(cudaFree(out));
}

// Every block stages a table in static shared memory and reads another thread's entry,
// with or without the barrier in between.
__global__ void static_table_kernel(float* out, const float* table, int with_sync) {
    __shared__ float t[64];
    t[threadIdx.x] = table[threadIdx.x];
    if (with_sync) __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = t[63 - threadIdx.x];
}

// Blocks of the second of two launches whose output is wrong (all 4 should be, without the barrier).
static int static_table_wrong_blocks(int with_sync) {
    float table[64], got[4 * 64];
    for (int i = 0; i < 64; i++) table[i] = (float)i;
    float *dtable, *out;
    CUDA_CHECK(cudaMalloc(&dtable, sizeof(table)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(got)));
    CUDA_CHECK(cudaMemcpy(dtable, table, sizeof(table), cudaMemcpyHostToDevice));
    for (int launch = 0; launch < 2; launch++) static_table_kernel<<<4, 64>>>(out, dtable, with_sync);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int b = 0; b < 4; b++) {
        int bad = 0;
        for (int i = 0; i < 64; i++) bad |= got[b * 64 + i] != (float)(63 - i);
        wrong += bad;
    }
    CUDA_CHECK(cudaFree(dtable));
    CUDA_CHECK(cudaFree(out));
    return wrong;
}

__global__ void write_at_kernel(float* buf, int index) { buf[index] = 1.0f; }

// 100 floats (400 bytes): index 100 is the first byte past the end, inside the 256-byte rounding
// that the guard page does not cover; index -1 is before the start, inside the page slack.
static void case_write_just_past_end(void) {
    float* buf;
    CUDA_CHECK(cudaMalloc(&buf, 100 * sizeof(float)));
    write_at_kernel<<<1, 1>>>(buf, 100);
}

static void case_write_just_before_start(void) {
    float* buf;
    CUDA_CHECK(cudaMalloc(&buf, 100 * sizeof(float)));
    write_at_kernel<<<1, 1>>>(buf, -1);
}

__global__ void partial_syncthreads_kernel(float* out) {
    if (threadIdx.x >= 64) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static void case_partial_syncthreads(void) {
    float* out;
    CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(float)));
    partial_syncthreads_kernel<<<1, 128>>>(out);
}

__global__ void split_syncthreads_kernel(float* out) {
    if (threadIdx.x < 64) __syncthreads();
    else __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static void case_split_syncthreads(void) {
    float* out;
    CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(float)));
    split_syncthreads_kernel<<<1, 128>>>(out);
}

__global__ void smem_past_end_kernel(int n) {
    int* slots = (int*)dynamic_smem_test;
    slots[n + threadIdx.x] = 1; // n ints were asked for
}

static void case_smem_past_end(void) { smem_past_end_kernel<<<1, 4, 100 * sizeof(int)>>>(100); }

__global__ void wmma_misaligned_kernel(const bf16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + 8, 16); // 16 bytes past a 256-byte boundary
}

static void case_wmma_misaligned(void) {
    bf16* a;
    CUDA_CHECK(cudaMalloc(&a, 512 * sizeof(bf16)));
    wmma_misaligned_kernel<<<1, 32>>>(a);
}

// ----------------------------------------------------------------------------------------------
// Stream order around a collective

// A communicator of this one MPI rank (the NCCL model's collectives then copy or sum one input).
static ncclComm_t one_rank_nccl(void) {
    ncclUniqueId id;
    ncclComm_t nccl;
    NCCL_CHECK(ncclGetUniqueId(&id));
    NCCL_CHECK(ncclCommInitRank(&nccl, 1, id, 0));
    return nccl;
}

static cudaStream_t new_stream(void) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

__global__ void copy_kernel(bf16* out, const bf16* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

// All-gather (one rank: a copy) of `send` into `recv` on `comm`, then copy_kernel(out, recv) on
// `compute`, waiting for the collective's event or not. Returns whether out holds the values.
static int run_collective_then_read(ncclComm_t nccl, int wait) {
    const int n = 64;
    bf16 host[n], got[n];
    for (int i = 0; i < n; i++) host[i] = __float2bfloat16((float)i);
    bf16 *send, *recv, *out;
    CUDA_CHECK(cudaMalloc(&send, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&recv, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(host)));
    CUDA_CHECK(cudaMemcpy(send, host, sizeof(host), cudaMemcpyHostToDevice));
    // recv already holds the values the collective will write: a reader that skips the wait
    // must still not see them (the output is poisoned until the collective completes)
    CUDA_CHECK(cudaMemcpy(recv, host, sizeof(host), cudaMemcpyHostToDevice));
    cudaStream_t comm = new_stream(), compute = new_stream();
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    NCCL_CHECK(ncclAllGather(send, recv, n, ncclBfloat16, nccl, comm));
    CUDA_CHECK(cudaEventRecord(done, comm));
    if (wait) CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
    copy_kernel<<<1, n, 0, compute>>>(out, recv, n);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(compute));
    CUDA_CHECK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaStreamSynchronize(comm));
    int ok = memcmp(got, host, sizeof(host)) == 0;
    CUDA_CHECK(cudaFree(send));
    CUDA_CHECK(cudaFree(recv));
    CUDA_CHECK(cudaFree(out));
    return ok;
}

// A kernel launched on `comm` behind an in-flight collective runs only once that completes: the
// host reads its output after a cudaStreamSynchronize of the wrong stream (stale) and of the
// right one (fresh).
static void test_kernel_behind_collective(ncclComm_t nccl) {
    const int n = 32;
    bf16 host[n], got[n];
    for (int i = 0; i < n; i++) host[i] = __float2bfloat16((float)(i + 1));
    bf16 *send, *recv, *out;
    CUDA_CHECK(cudaMalloc(&send, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&recv, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(host)));
    CUDA_CHECK(cudaMemcpy(send, host, sizeof(host), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(out, 0, sizeof(host)));
    cudaStream_t comm = new_stream(), other = new_stream();
    NCCL_CHECK(ncclAllGather(send, recv, n, ncclBfloat16, nccl, comm));
    copy_kernel<<<1, n, 0, comm>>>(out, recv, n);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(other));
    CUDA_CHECK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
    int stale = memcmp(got, host, sizeof(host)) != 0;
    CUDA_CHECK(cudaStreamSynchronize(comm));
    CUDA_CHECK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
    int fresh = memcmp(got, host, sizeof(host)) == 0;
    check("kernel_behind_collective_waits", stale && fresh, stale ? "wrong values after syncing its stream" : "ran before the collective completed");
    CUDA_CHECK(cudaFree(send));
    CUDA_CHECK(cudaFree(recv));
    CUDA_CHECK(cudaFree(out));
}

// An asynchronous device-to-host copy lands at the stream's synchronization, not before.
static void test_async_copy_to_host(void) {
    int host[16], device_values[16];
    for (int i = 0; i < 16; i++) { host[i] = -7; device_values[i] = i; }
    int* d;
    CUDA_CHECK(cudaMalloc(&d, sizeof(host)));
    cudaStream_t stream = new_stream();
    CUDA_CHECK(cudaMemcpy(d, device_values, sizeof(host), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpyAsync(host, d, sizeof(host), cudaMemcpyDeviceToHost, stream));
    int before = host[3] == -7;
    CUDA_CHECK(cudaStreamSynchronize(stream));
    int after = host[3] == 3;
    check("async_copy_to_host_lands_at_sync", before && after, before ? "not there after the sync" : "there before the sync");
    CUDA_CHECK(cudaFree(d));
}

// The producer overwrites a collective's input while it is in flight (no wait on its event).
static void case_collective_input_overwritten(void) {
    const int n = 64;
    bf16 host[n];
    for (int i = 0; i < n; i++) host[i] = __float2bfloat16((float)i);
    bf16 *send, *recv, *other;
    CUDA_CHECK(cudaMalloc(&send, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&recv, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&other, sizeof(host)));
    CUDA_CHECK(cudaMemcpy(send, host, sizeof(host), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(other, host, sizeof(host), cudaMemcpyHostToDevice));
    ncclComm_t nccl = one_rank_nccl();
    cudaStream_t comm = new_stream(), compute = new_stream();
    NCCL_CHECK(ncclAllGather(send, recv, n, ncclBfloat16, nccl, comm));
    copy_kernel<<<1, n, 0, compute>>>(send, recv, n); // writes the input (with poison) meanwhile
    CUDA_CHECK(cudaStreamSynchronize(comm));
}

__global__ void copy_bytes_kernel(uint8_t* out, const uint8_t* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

/*
 * ncclCommSplit and grouped ncclSend/ncclRecv (ZeRO++'s all-to-alls): a split of the one-rank
 * communicator has one rank, NCCL_SPLIT_NOCOLOR gives none; n bytes sent to itself on the split
 * arrive for a kernel that waited for the receive's event and not (poison, though the buffer
 * held the same bytes before) for one that did not; an all-gather runs on the split too.
 */
static void test_split_send_recv(ncclComm_t nccl) {
    const int n = 100;
    uint8_t host[n], got[n];
    for (int i = 0; i < n; i++) host[i] = (uint8_t)(i * 7 + 1);
    ncclComm_t split = NULL, none = nccl; // none: must come back NULL
    NCCL_CHECK(ncclCommSplit(nccl, 3, 0, &split, NULL));
    NCCL_CHECK(ncclCommSplit(nccl, NCCL_SPLIT_NOCOLOR, 0, &none, NULL));
    int count = 0, rank = -1;
    NCCL_CHECK(ncclCommCount(split, &count));
    NCCL_CHECK(ncclCommUserRank(split, &rank));
    check("comm_split_one_rank", count == 1 && rank == 0 && none == NULL, "wrong size or rank, or NOCOLOR gave a communicator");
    uint8_t *send, *recv, *out;
    CUDA_CHECK(cudaMalloc(&send, n));
    CUDA_CHECK(cudaMalloc(&recv, n));
    CUDA_CHECK(cudaMalloc(&out, n));
    CUDA_CHECK(cudaMemcpy(send, host, n, cudaMemcpyHostToDevice));
    int ok[2] = {0, 0};
    for (int wait = 0; wait < 2; wait++) {
        CUDA_CHECK(cudaMemcpy(recv, host, n, cudaMemcpyHostToDevice)); // the old contents equal the message
        cudaStream_t comm = new_stream(), compute = new_stream();
        cudaEvent_t done;
        CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(send, n, ncclUint8, 0, split, comm));
        NCCL_CHECK(ncclRecv(recv, n, ncclUint8, 0, split, comm));
        NCCL_CHECK(ncclGroupEnd());
        CUDA_CHECK(cudaEventRecord(done, comm));
        if (wait) CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
        copy_bytes_kernel<<<1, n, 0, compute>>>(out, recv, n);
        CUDA_CHECK_LAUNCH();
        CUDA_CHECK(cudaStreamSynchronize(compute));
        CUDA_CHECK(cudaMemcpy(got, out, n, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaStreamSynchronize(comm));
        ok[wait] = memcmp(got, host, n) == 0;
    }
    check("send_recv_output_after_event_wait", ok[1], "wrong bytes after waiting for the receive");
    check("send_recv_missing_wait_shows", !ok[0], "a kernel that skipped the wait saw the received bytes");
    bf16 values[8], gathered[8];
    for (int i = 0; i < 8; i++) values[i] = __float2bfloat16((float)i);
    bf16 *a, *b;
    CUDA_CHECK(cudaMalloc(&a, sizeof(values)));
    CUDA_CHECK(cudaMalloc(&b, sizeof(values)));
    CUDA_CHECK(cudaMemcpy(a, values, sizeof(values), cudaMemcpyHostToDevice));
    cudaStream_t s = new_stream();
    NCCL_CHECK(ncclAllGather(a, b, 8, ncclBfloat16, split, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(gathered, b, sizeof(values), cudaMemcpyDeviceToHost));
    check("all_gather_on_split_comm", memcmp(gathered, values, sizeof(values)) == 0, "wrong values");
    NCCL_CHECK(ncclCommDestroy(split));
    CUDA_CHECK(cudaFree(send)); CUDA_CHECK(cudaFree(recv)); CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(a)); CUDA_CHECK(cudaFree(b));
}

// A kernel overwrites a send's buffer while the send is in flight (no wait on its event).
static void case_send_input_overwritten(void) {
    const int n = 64;
    uint8_t *send, *recv, *other;
    CUDA_CHECK(cudaMalloc(&send, n));
    CUDA_CHECK(cudaMalloc(&recv, n));
    CUDA_CHECK(cudaMalloc(&other, n));
    CUDA_CHECK(cudaMemset(send, 1, n));
    CUDA_CHECK(cudaMemset(other, 2, n));
    ncclComm_t nccl = one_rank_nccl();
    cudaStream_t comm = new_stream(), compute = new_stream();
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(send, n, ncclUint8, 0, nccl, comm));
    NCCL_CHECK(ncclRecv(recv, n, ncclUint8, 0, nccl, comm));
    NCCL_CHECK(ncclGroupEnd());
    copy_bytes_kernel<<<1, n, 0, compute>>>(send, other, n);
    CUDA_CHECK(cudaStreamSynchronize(comm));
}

// EMU_LAZY=1: a kernel on `compute` writes a collective's input, and the comm stream does not
// wait for it (with_wait 0) or does (1). Exit status 5: the collective read stale input (the
// missing wait showed), 0: it read the kernel's values.
static int case_lazy_producer(int with_wait) {
    const int n = 64;
    bf16 host[n], got[n];
    for (int i = 0; i < n; i++) host[i] = __float2bfloat16((float)(i + 1));
    bf16 *values, *send, *recv;
    CUDA_CHECK(cudaMalloc(&values, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&send, sizeof(host)));
    CUDA_CHECK(cudaMalloc(&recv, sizeof(host)));
    CUDA_CHECK(cudaMemcpy(values, host, sizeof(host), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(send, 0, sizeof(host)));
    ncclComm_t nccl = one_rank_nccl();
    cudaStream_t comm = new_stream(), compute = new_stream();
    cudaEvent_t produced;
    CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    copy_kernel<<<1, n, 0, compute>>>(send, values, n);
    CUDA_CHECK(cudaEventRecord(produced, compute));
    if (with_wait) CUDA_CHECK(cudaStreamWaitEvent(comm, produced, 0));
    NCCL_CHECK(ncclAllGather(send, recv, n, ncclBfloat16, nccl, comm));
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(got, recv, sizeof(got), cudaMemcpyDeviceToHost));
    return memcmp(got, host, sizeof(host)) == 0 ? 0 : 5;
}

// Cases that must stop the program and need MPI (fork after MPI_Init is not safe): this binary
// runs them in a fresh process, `test_emu --case NAME`.
static int run_case(const char* name) {
    if (strcmp(name, "collective_input_overwritten") == 0) case_collective_input_overwritten();
    else if (strcmp(name, "send_input_overwritten") == 0) case_send_input_overwritten();
    else if (strcmp(name, "lazy_producer_with_wait") == 0) return case_lazy_producer(1);
    else if (strcmp(name, "lazy_producer_without_wait") == 0) return case_lazy_producer(0);
    else { fprintf(stderr, "unknown case %s\n", name); return 2; }
    return 0;
}

// Runs `test_emu --case NAME` with EMU_LAZY=1 in a child; its exit status.
static int run_lazy_case(const char* name) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("EMU_LAZY", "1", 1);
        execl("/proc/self/exe", "test_emu", "--case", name, (char*)NULL);
        _exit(4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void case_exec_collective_input_overwritten(void) {
    execl("/proc/self/exe", "test_emu", "--case", "collective_input_overwritten", (char*)NULL);
    _exit(4);
}

static void case_exec_send_input_overwritten(void) {
    execl("/proc/self/exe", "test_emu", "--case", "send_input_overwritten", (char*)NULL);
    _exit(4);
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        MPI_Init(&argc, &argv);
        int rc = run_case(argv[2]);
        MPI_Finalize();
        return rc;
    }
    // The default (eager) mode here; EMU_LAZY's cases run in children that set it.
    unsetenv("EMU_LAZY");
    // Cases in children first, before this process starts MPI.
    check("lazy_collective_after_producer_wait_reads_its_output", run_lazy_case("lazy_producer_with_wait") == 0,
          "the collective did not see the producer's values although the comm stream waited");
    check("lazy_collective_without_producer_wait_reads_stale_input", run_lazy_case("lazy_producer_without_wait") == 5,
          "a collective issued without waiting for its producer kernel saw the kernel's values");
    expect_stop("collective_input_overwritten_stops", case_exec_collective_input_overwritten,
                "its input was written while the collective was in flight");
    expect_stop("send_input_overwritten_stops", case_exec_send_input_overwritten,
                "ncclSend: its input was written while the collective was in flight");
    MPI_Init(&argc, &argv); // one rank: the NCCL model's collectives run over MPI
    test_block_reduce();
    test_shuffle();
    check("wmma_product", run_wmma(1), "16x16x16 product differs from the reference");
    check("wmma_missing_syncwarp_shows", !run_wmma(0), "reading a stored tile without __syncwarp gave the right answer");

    const size_t big = 100 * 1024;
    check("smem_over_48k_needs_attribute", run_neighbour(1, big) == -1, "a 100 KB launch without the attribute ran");
    CUDA_CHECK(cudaFuncSetAttribute(neighbour_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big));
    check("smem_over_48k_with_attribute", run_neighbour(1, big) == 1, "wrong result with __syncthreads");
    check("missing_syncthreads_shows", run_neighbour(0, big) == 0, "reading a neighbour's slot without a barrier gave the right answer");

    float* small;
    float host[8] = {0};
    CUDA_CHECK(cudaMalloc(&small, 4 * sizeof(float)));
    check("memcpy_past_end_refused", cudaMemcpy(small, host, sizeof(host), cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
          "cudaMemcpy of 32 bytes into a 16-byte buffer succeeded");
    CUDA_CHECK(cudaFree(small));

    expect_stop("out_of_bounds_write_stops", case_out_of_bounds, "past the end of a 4096-byte cudaMalloc buffer");
    test_shuffle_after_return();
    check("static_shared_with_syncthreads", static_table_wrong_blocks(1) == 0, "wrong values with the barrier");
    check("static_shared_missing_syncthreads_shows_in_every_block", static_table_wrong_blocks(0) == 4,
          "some blocks of the second launch read the table without the barrier and got it right");
    expect_stop("write_just_past_end_stops", case_write_just_past_end, "wrote 0 bytes past the end of a 400-byte cudaMalloc buffer");
    expect_stop("write_just_before_start_stops", case_write_just_before_start, "wrote 4 bytes before the start of a 400-byte cudaMalloc buffer");
    // either thread may be the first to see it: the one arriving late or the one returning early
    expect_stop("partial_syncthreads_stops", case_partial_syncthreads, "thread of the block returned");
    expect_stop("split_syncthreads_stops", case_split_syncthreads, "different __syncthreads calls");
    expect_stop("dynamic_smem_write_past_end_stops", case_smem_past_end, "of dynamic shared memory; the launch asked for 400 bytes");
    expect_stop("wmma_misaligned_stops", case_wmma_misaligned, "not 256-bit aligned");

    ncclComm_t nccl = one_rank_nccl();
    check("collective_output_after_event_wait", run_collective_then_read(nccl, 1), "wrong values after waiting");
    check("collective_missing_wait_shows", !run_collective_then_read(nccl, 0), "a kernel that skipped the wait saw the output");
    test_kernel_behind_collective(nccl);
    test_split_send_recv(nccl);
    test_async_copy_to_host();
    NCCL_CHECK(ncclCommDestroy(nccl));

    printf("%d failed\n", emu_test_failures);
    MPI_Finalize();
    return emu_test_failures == 0 ? 0 : 1;
}
