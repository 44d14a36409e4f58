/*
 * test_emu_ptx.cu: tests of the emulation of mma.sync, ldmatrix and cp.async (dev/emu/emu_ptx.h,
 * the functions of kernels/ptx.cuh). Each claim in emu_ptx.h's header has a kernel here:
 *   positive: mma.sync m16n8k16 with fragments gathered by the PTX ISA's layout formulas (plain
 *             per-lane loads, independent of ldmatrix) equals a double-precision product;
 *             ldmatrix x4 and x4.trans hand every lane the elements the PTX ISA names;
 *             cp.async groups land in order: after wait_group 1 the older group is there and the
 *             newer one still poison, after wait_group 0 both; src-size 0 zero-fills.
 *   negative: reading a cp.async destination before its wait reads poison (NaN); a double-
 *             buffered tile loop that drops the __syncthreads before refilling a stage gives a
 *             wrong result (the warp that runs ahead overwrites what another still reads, even
 *             with warp collectives in between); a thread returning with copies not waited for,
 *             an mma after some lanes returned, lanes at different warp-level instructions, and
 *             ldmatrix from global memory each stop the program (exit 3) with the reason.
 * Prints PASS/FAIL lines; exits 1 on any failure. Build: make build/emu/test_emu_ptx (emu.mk).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/cuda_utils.cuh"
#include "../../kernels/ptx.cuh"

#define EMU_TEST_PREFIX "emu_ptx_"
#define EMU_TEST_SYNC_AFTER_CASE 1
#include "emu_test.h"

__host__ __device__ static float bits_to_float(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
__host__ __device__ static uint16_t bf16_bits(bf16 x) { uint16_t u; memcpy(&u, (const void*)&x, 2); return u; }

// ----------------------------------------------------------------------------------------------
// mma.sync: D (16 x 8) = A (16 x 16, row-major) B (16 x 8, row-major in memory) + C, one warp.
// Fragments are gathered with the PTX ISA's formulas, one element at a time.

__global__ void mma_kernel(float* d, const bf16* a, const bf16* b, const float* c) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t af[4], bf[2];
    for (int r = 0; r < 4; r++) { // a[r] = A[g + 8 (r % 2)][2t + 8 (r / 2) + {0, 1}]
        int row = g + (r % 2) * 8, col = 2 * t + (r / 2) * 8;
        af[r] = (uint32_t)bf16_bits(a[row * 16 + col]) | ((uint32_t)bf16_bits(a[row * 16 + col + 1]) << 16);
    }
    for (int r = 0; r < 2; r++) { // b[r] = B[2t + 8r + {0, 1}][g]
        int k = 2 * t + 8 * r;
        bf[r] = (uint32_t)bf16_bits(b[k * 8 + g]) | ((uint32_t)bf16_bits(b[(k + 1) * 8 + g]) << 16);
    }
    float acc[4];
    for (int i = 0; i < 4; i++) acc[i] = c[(g + (i / 2) * 8) * 8 + 2 * t + (i % 2)];
    mma_bf16_16816(acc, af, bf);
    for (int i = 0; i < 4; i++) d[(g + (i / 2) * 8) * 8 + 2 * t + (i % 2)] = acc[i];
}

static void test_mma(void) {
    bf16 a[256], b[128];
    float c[128], want[128], got[128];
    for (int i = 0; i < 256; i++) a[i] = __float2bfloat16((float)((i * 37) % 23 - 11) / 8.0f);
    for (int i = 0; i < 128; i++) b[i] = __float2bfloat16((float)((i * 53) % 19 - 9) / 4.0f);
    for (int i = 0; i < 128; i++) c[i] = (float)(i % 7) - 3.0f;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double s = c[r * 8 + n];
            for (int k = 0; k < 16; k++) s += (double)__bfloat162float(a[r * 16 + k]) * __bfloat162float(b[k * 8 + n]);
            want[r * 8 + n] = (float)s;
        }
    bf16 *da, *db;
    float *dc, *dd;
    CUDA_CHECK(cudaMalloc(&da, sizeof(a)));
    CUDA_CHECK(cudaMalloc(&db, sizeof(b)));
    CUDA_CHECK(cudaMalloc(&dc, sizeof(c)));
    CUDA_CHECK(cudaMalloc(&dd, sizeof(got)));
    CUDA_CHECK(cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dc, c, sizeof(c), cudaMemcpyHostToDevice));
    mma_kernel<<<1, 32>>>(dd, da, db, dc);
    CUDA_CHECK(cudaMemcpy(got, dd, sizeof(got), cudaMemcpyDeviceToHost));
    // inputs are multiples of 1/8 and 1/4 with small numerators: every sum is exact in fp32
    int ok = memcmp(got, want, sizeof(got)) == 0;
    check("mma_m16n8k16_matches_product", ok, "D differs from A B + C");
    cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dd);
}

// ----------------------------------------------------------------------------------------------
// ldmatrix: four 8 x 8 bf16 matrices in shared memory (element value = its index), each lane's
// four registers out as (matrix, element index) pairs.

__global__ void ldmatrix_kernel(uint32_t* out, int trans) {
    __shared__ __align__(16) bf16 tiles[4][8][8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) (&tiles[0][0][0])[i] = __float2bfloat16((float)i); // exact up to 256
    __syncwarp();
    uint32_t r[4];
    const bf16* row = &tiles[lane / 8][lane % 8][0]; // lanes 8m..8m+7: the rows of matrix m
    if (trans) ldmatrix_x4_trans(r, row);
    else ldmatrix_x4(r, row);
    for (int m = 0; m < 4; m++) out[lane * 4 + m] = r[m];
}

static void test_ldmatrix(int trans) {
    uint32_t *d, got[128];
    CUDA_CHECK(cudaMalloc(&d, sizeof(got)));
    ldmatrix_kernel<<<1, 32>>>(d, trans);
    CUDA_CHECK(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int lane = 0; lane < 32; lane++)
        for (int m = 0; m < 4; m++) {
            int g = lane / 4, t = lane % 4;
            // not transposed: row g, columns 2t, 2t+1; transposed: column g, rows 2t, 2t+1
            int lo = trans ? m * 64 + (2 * t) * 8 + g : m * 64 + g * 8 + 2 * t;
            int hi = trans ? lo + 8 : lo + 1;
            float l = bits_to_float((uint16_t)(got[lane * 4 + m] & 0xffff)), h = bits_to_float((uint16_t)(got[lane * 4 + m] >> 16));
            if (l != (float)lo || h != (float)hi) ok = 0;
        }
    check(trans ? "ldmatrix_x4_trans_layout" : "ldmatrix_x4_layout", ok, "a lane received other elements than the PTX ISA names");
    cudaFree(d);
}

// ----------------------------------------------------------------------------------------------
// cp.async groups: thread 0 copies 4 floats (group 0) and 4 more (group 1), reads its destination
// before any wait, after wait_group 1 and after wait_group 0; a zero-filled copy too.

__global__ void async_groups_kernel(float* out, const float* src) {
    __shared__ __align__(16) float dst[12];
    if (threadIdx.x != 0) return;
    cp_async_16(dst, src, true);
    cp_async_commit();
    cp_async_16(dst + 4, src + 4, true);
    cp_async_16(dst + 8, src, false); // src-size 0: zeros
    cp_async_commit();
    out[0] = dst[0];              // before any wait: poison
    cp_async_wait<1>();
    out[1] = dst[0];              // group 0 landed
    out[2] = dst[4];              // group 1 may still be in flight: poison here
    cp_async_wait<0>();
    out[3] = dst[4];
    out[4] = dst[8];
}

static void test_async_groups(void) {
    float src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[5];
    float *ds, *dout;
    CUDA_CHECK(cudaMalloc(&ds, sizeof(src)));
    CUDA_CHECK(cudaMalloc(&dout, sizeof(got)));
    CUDA_CHECK(cudaMemcpy(ds, src, sizeof(src), cudaMemcpyHostToDevice));
    async_groups_kernel<<<1, 32>>>(dout, ds);
    CUDA_CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    check("cp_async_destination_before_wait_is_poison", isnan(got[0]), "the destination held data before any wait");
    check("cp_async_wait_group_1_completes_the_older_group", got[1] == 1.0f, "group 0 had not landed after wait_group 1");
    check("cp_async_wait_group_1_leaves_the_newest_in_flight", isnan(got[2]), "group 1 had landed before its wait");
    check("cp_async_wait_group_0_completes_all", got[3] == 5.0f && got[4] == 0.0f, "group 1 (or its zero fill) missing after wait_group 0");
    cudaFree(ds); cudaFree(dout);
}

// ----------------------------------------------------------------------------------------------
// A double-buffered loop as the attention kernels run it: 4 warps; stage s of a 2-stage buffer
// (64 rows x 8 bf16, one 16-byte cp.async per row, by threads 0..63) is refilled for step i+1
// while step i reads the other; every warp reads the whole stage through ldmatrix (warp
// collectives between the reads) and writes its sum to out[4 i + warp]. with_sync = 0 drops
// the __syncthreads that keeps the refill for step i+2 from overwriting a stage that a slower
// warp still reads in step i.

__global__ void double_buffer_kernel(float* out, const bf16* src, int steps, int with_sync) {
    __shared__ __align__(16) bf16 stage[2][64][8];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (tid < 64) cp_async_16(&stage[0][tid][0], src + tid * 8, true);
    cp_async_commit();
    for (int i = 0; i < steps; i++) {
        if (i + 1 < steps) {
            if (tid < 64) cp_async_16(&stage[(i + 1) & 1][tid][0], src + ((i + 1) * 64 + tid) * 8, true);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // step i's stage has landed, for every thread
        float s = 0.0f;
        for (int m = 0; m < 2; m++) { // two ldmatrix x4: the stage's 64 rows
            uint32_t r[4];
            ldmatrix_x4(r, &stage[i & 1][m * 32 + lane][0]);
            for (int k = 0; k < 4; k++) s += bits_to_float((uint16_t)(r[k] & 0xffff)) + bits_to_float((uint16_t)(r[k] >> 16));
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) out[4 * i + warp] = s;
        if (with_sync) __syncthreads(); // everyone is done with stage i & 1 before it is refilled
    }
}

static int run_double_buffer(int with_sync) {
    const int steps = 6;
    bf16 src[steps * 64 * 8];
    for (int i = 0; i < steps * 512; i++) src[i] = __float2bfloat16((float)((i * 7) % 5)); // small integers: exact sums
    float want[4 * steps], got[4 * steps];
    for (int s = 0; s < steps; s++) {
        float sum = 0.0f;
        for (int i = 0; i < 512; i++) sum += __bfloat162float(src[s * 512 + i]);
        for (int w = 0; w < 4; w++) want[4 * s + w] = sum; // every warp reads the whole stage
    }
    bf16* ds;
    float* dout;
    CUDA_CHECK(cudaMalloc(&ds, sizeof(src)));
    CUDA_CHECK(cudaMalloc(&dout, sizeof(got)));
    CUDA_CHECK(cudaMemcpy(ds, src, sizeof(src), cudaMemcpyHostToDevice));
    double_buffer_kernel<<<1, 128>>>(dout, ds, steps, with_sync);
    CUDA_CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    cudaFree(ds); cudaFree(dout);
    return memcmp(got, want, sizeof(got)) == 0;
}

// ----------------------------------------------------------------------------------------------
// Cases that stop the program

__global__ void pending_copy_kernel(const float* src) {
    __shared__ __align__(16) float dst[4];
    cp_async_16(dst, src, true);
    cp_async_commit(); // never waited for
}
static void case_pending_copy(void) {
    float* d;
    cudaMalloc(&d, 64);
    pending_copy_kernel<<<1, 1>>>(d);
}

__global__ void mma_after_return_kernel(void) {
    if (threadIdx.x >= 16) return;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0, 0, 0, 0};
    mma_bf16_16816(d, a, b);
}
static void case_mma_after_return(void) { mma_after_return_kernel<<<1, 32>>>(); }

__global__ void mixed_instructions_kernel(void) {
    __shared__ __align__(16) bf16 tile[32][8];
    uint32_t r[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0, 0, 0, 0};
    if (threadIdx.x < 16) mma_bf16_16816(d, r, b);
    else ldmatrix_x4(r, &tile[threadIdx.x][0]);
}
static void case_mixed_instructions(void) { mixed_instructions_kernel<<<1, 32>>>(); }

__global__ void ldmatrix_global_kernel(const bf16* p) {
    uint32_t r[4];
    ldmatrix_x4(r, p + threadIdx.x * 8);
}
static void case_ldmatrix_global(void) {
    bf16* d;
    cudaMalloc(&d, 32 * 8 * sizeof(bf16));
    ldmatrix_global_kernel<<<1, 32>>>(d);
}

int main(void) {
    test_mma();
    test_ldmatrix(0);
    test_ldmatrix(1);
    test_async_groups();
    check("double_buffer_with_syncthreads", run_double_buffer(1), "wrong sums with the barrier");
    check("double_buffer_missing_syncthreads_shows", !run_double_buffer(0),
          "refilling a stage without the barrier still gave the right sums");
    expect_stop("cp_async_not_waited_stops", case_pending_copy, "never waited for");
    expect_stop("mma_after_lanes_returned_stops", case_mma_after_return, "lanes of the warp that returned");
    expect_stop("lanes_at_different_instructions_stop", case_mixed_instructions, "different warp-level instructions");
    expect_stop("ldmatrix_from_global_memory_stops", case_ldmatrix_global, "not in shared memory");
    printf("%d failed\n", emu_test_failures);
    return emu_test_failures == 0 ? 0 : 1;
}
