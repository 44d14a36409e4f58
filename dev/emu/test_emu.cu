/*
 * test_emu.cu: tests of the CPU emulation itself (dev/emu/emu.h). A green test_kernels run
 * under the emulation means something only if the emulation catches the bugs it claims to, so
 * each claim in emu.h's header has a kernel here that breaks it on purpose:
 *   positive: block reduction, shuffles and WMMA give the exact expected values; >48 KiB of
 *             dynamic shared memory works after cudaFuncSetAttribute.
 *   negative: a missing __syncthreads or __syncwarp yields a wrong result; an out-of-bounds
 *             write (global or dynamic shared memory), a shuffle after some lanes returned, a __syncthreads reached by part of the
 *             block, a misaligned WMMA pointer each stop the program (exit 3) with the reason
 *             on stderr; a launch asking too much shared memory and a cudaMemcpy past a
 *             buffer's end return errors.
 * Streams (emu_runtime.h, nccl_emu.h, one MPI rank): a collective's output is there after an
 * event wait, and not there (poison) for a kernel that skipped the wait; a kernel queued behind
 * a collective on its stream runs only when waited for.
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

static int failures = 0;

static void check(const char* name, int ok, const char* detail) {
    if (ok) printf("PASS emu_%s\n", name);
    else { printf("FAIL emu_%s: %s\n", name, detail); failures++; }
}

// Runs fn in a child with stderr captured; passes if the child exits with 3 and its stderr
// contains `phrase`.
static void expect_stop(const char* name, void (*fn)(void), const char* phrase) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0); // not stopped: the emulation missed it
    }
    close(fds[1]);
    char text[4096];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof(text) - 1 && (got = read(fds[0], text + len, sizeof(text) - 1 - len)) > 0) len += (size_t)got;
    text[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 3 && strstr(text, phrase) != NULL;
    char detail[4200];
    snprintf(detail, sizeof(detail), "expected exit 3 and \"%s\"; got status %d, stderr: %s", phrase, status, text);
    check(name, ok, detail);
}

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

__global__ void shuffle_after_return_kernel(float* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

static void case_shuffle_after_return(void) {
    float* out;
    CUDA_CHECK(cudaMalloc(&out, 32 * sizeof(float)));
    shuffle_after_return_kernel<<<1, 32>>>(out);
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
    cudaStream_t comm, compute;
    cudaEvent_t done;
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
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
    cudaStream_t comm, other;
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
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

int main(int argc, char** argv) {
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
    expect_stop("shuffle_after_return_stops", case_shuffle_after_return, "of the warp returned");
    expect_stop("partial_syncthreads_stops", case_partial_syncthreads, "after some threads of the block returned");
    expect_stop("split_syncthreads_stops", case_split_syncthreads, "different __syncthreads calls");
    expect_stop("dynamic_smem_write_past_end_stops", case_smem_past_end, "of dynamic shared memory; the launch asked for 400 bytes");
    expect_stop("wmma_misaligned_stops", case_wmma_misaligned, "not 256-bit aligned");

    ncclUniqueId id;
    ncclComm_t nccl;
    NCCL_CHECK(ncclGetUniqueId(&id));
    NCCL_CHECK(ncclCommInitRank(&nccl, 1, id, 0));
    check("collective_output_after_event_wait", run_collective_then_read(nccl, 1), "wrong values after waiting");
    check("collective_missing_wait_shows", !run_collective_then_read(nccl, 0), "a kernel that skipped the wait saw the output");
    test_kernel_behind_collective(nccl);
    NCCL_CHECK(ncclCommDestroy(nccl));

    printf("%d failed\n", failures);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
