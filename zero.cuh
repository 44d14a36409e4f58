/*
 * zero.cuh: the data-parallel engine, ZeRO stages 0-3 over one flat parameter buffer.
 *
 * It owns the parameters, gradients and AdamW state and is the only place collectives are
 * issued. The model asks it for a unit's parameters before using them (zero_params_unit) and
 * hands each unit back when it is done (zero_params_unit_done); backward asks for a unit's
 * gradient buffer (zero_grads_unit) and says when that unit's gradients are final for this
 * micro-step (zero_grads_unit_ready), which is where the unit's collective starts.
 *
 * Stages (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", sec. 5; DESIGN.md "Stages"), fixed at compile time by ZERO_STAGE:
 *   0  DDP: everything replicated; all-reduce each unit's gradients as backward finishes it.
 *   1  optimizer state sharded (P_os): reduce-scatter gradients, AdamW on the owned slice only,
 *      all-gather the updated parameters (waited on by the next forward, unit by unit).
 *   2  + gradients sharded (P_os+g): backward writes a unit into a working buffer, which is
 *      reduce-scattered at once and summed into the owned gradient shard; every micro-step.
 *   3  + parameters sharded (P_os+g+p): all-gather each unit into a working buffer before its
 *      forward and again before its backward (prefetching the next unit), free it after use.
 * Rank r owns the r-th contiguous slice of every unit (common/gpt2_config.h pads each unit to
 * a multiple of world_size * ZERO_ALIGN elements).
 *
 * Gradient averaging: each rank's backward produces the gradient of its own mean loss
 * (dloss_scale = 1/(B*T*grad_accum_steps)); the collectives sum over ranks and
 * zero_optimizer_step multiplies the reduced gradient by 1/world_size (step 2 there).
 *
 * Collectives (CPU build): non-blocking MPI (MPI_Iallreduce, MPI_Ireduce_scatter_block,
 * MPI_Iallgather, MPI_Igather), started when a unit is ready and waited on where the result is
 * needed. Every MPI call lives in the "communication" section below, behind zero_op_* and
 * zero_ranks_* functions, so the CUDA build can put NCCL behind the same names. A wait is an
 * MPI_Test loop with a clock: past -wt seconds it names the rank, collective, unit and step
 * and aborts every rank (MPI_Abort). With world_size 1 no MPI call is made at all, so a
 * program that never called MPI_Init (test_gpt2) can use the engine.
 *
 * Accounting: the bytes each rank allocates (params, grads, optimizer state, working units) and
 * the elements it sends per optimizer step. "Elements sent" counts what a ring algorithm sends
 * per rank, for n elements over N ranks (n divisible by N thanks to the padding):
 *   all-reduce 2n(N-1)/N (reduce-scatter then all-gather), reduce-scatter n(N-1)/N,
 *   all-gather n(N-1)/N (n = gathered size).
 * Per optimizer step with A micro-steps (Ψ = padded parameter count):
 *   stage 0, 1: 2Ψ(N-1)/N (reduction on the last micro-step only, then stage 1 all-gathers),
 *   stage 2: (A+1)Ψ(N-1)/N (reduce-scatter every micro-step, one all-gather),
 *   stage 3: 3AΨ(N-1)/N (two all-gathers and one reduce-scatter per micro-step),
 * i.e. DESIGN.md's 2Ψ(N-1)/N and 3Ψ(N-1)/N at A = 1. The two scalar all-reduces per step
 * (grad norm, carrying the GNS meter's local norm too; mean loss) and what MPI's own algorithms
 * actually move are not in that count.
 *
 * Compiles as plain C (CPU build) and under nvcc; CUDA-only parts go inside #if ZERO_GPU_BUILD
 * (nvcc, or the CPU emulation of CUDA in dev/emu).
 * GPU build: the same ZeroEngine, layout, working-unit policy, accounting, MPI communication
 * section and checkpoint code; the engine functions the model calls (zero_params_unit ...
 * zero_optimizer_step) are implemented in zero_gpu.cuh with the same names and roles, on a
 * compute and a comm stream (NCCL, or host-staged MPI with ZERO_COMM_MPI), bf16 params and
 * grads, fp32 master weights and m, v. The CPU-only engine functions below are fenced by
 * `#if !ZERO_GPU_BUILD`.
 */
#ifndef ZERO_CUH
#define ZERO_CUH
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
// The GPU build: nvcc, or g++ over the CPU emulation of CUDA (dev/emu/emu.h; tests only).
#if defined(__CUDACC__) || defined(CUDA_EMULATION)
#define ZERO_GPU_BUILD 1
#else
#define ZERO_GPU_BUILD 0
#endif
#include "common/gpt2_config.h"
#include "common/zero_checkpoint.h" // fnv1a64_words
#include "cpu/adamw.h"
#include "cpu/global_norm.h"
#if ZERO_GPU_BUILD
#include "common/cuda_utils.cuh" // bf16, CUDA_CHECK, NCCL_CHECK
#ifndef ZERO_COMM_MPI
#define ZERO_COMM_MPI 0 // 1: host-staged MPI collectives instead of NCCL (make ZERO_COMM=mpi)
#endif
#if !ZERO_COMM_MPI
#include <nccl.h>
#endif
#endif

#ifndef ZERO_STAGE
#define ZERO_STAGE 0
#endif
#if ZERO_STAGE < 0 || ZERO_STAGE > 3
#error "ZERO_STAGE must be 0, 1, 2 or 3"
#endif

// Per-rank slices are multiples of this many elements (256 bytes of fp32), so every shard
// starts aligned for SIMD on the CPU and for vectorized bf16 loads on the GPU.
#define ZERO_ALIGN 64

// The element type of the parameters and gradients the model computes with, and whether the
// engine keeps separate fp32 master weights: fp32 and none on the CPU (the parameters are their
// own master copy), bf16 and fp32 master weights on the GPU (mixed precision).
#if ZERO_GPU_BUILD
typedef bf16 ZeroFloat;
#define ZERO_HAS_MASTER 1
#else
typedef float ZeroFloat;
#define ZERO_HAS_MASTER 0
#endif

// ============================================================================================
// Shard layout: pure functions of (layout, stage, rank). The layout already holds the padded
// units; these say which buffers a stage shards and where a rank's slice of a unit lives in
// the buffer that rank stores.

typedef enum { ZERO_BUF_PARAMS, ZERO_BUF_GRADS, ZERO_BUF_MASTER, ZERO_BUF_ADAM_M, ZERO_BUF_ADAM_V, ZERO_NUM_BUFS } ZeroBuffer;
static const char* const zero_buffer_names[ZERO_NUM_BUFS] = {"params", "grads", "master", "adam_m", "adam_v"};

// Is `buffer` sharded at `stage`? Optimizer state (master weights, m, v) from stage 1,
// gradients from stage 2, parameters from stage 3 (ZeRO paper, sec. 5.1-5.3).
static inline int zero_buffer_sharded(int stage, ZeroBuffer buffer) {
    if (buffer == ZERO_BUF_PARAMS) return stage >= 3;
    if (buffer == ZERO_BUF_GRADS) return stage >= 2;
    return stage >= 1;
}

// Elements one rank stores of `buffer`: the padded flat buffer, or its shard (1/world_size).
// has_master = 0 in the fp32 CPU build, whose parameters are their own master copy.
static inline size_t zero_buffer_numel(const ParamLayout* layout, int stage, ZeroBuffer buffer, int has_master) {
    if (buffer == ZERO_BUF_MASTER && !has_master) return 0;
    return zero_buffer_sharded(stage, buffer) ? layout->shard_numel : layout->padded_numel;
}

// Element offset of rank's slice of `unit` in the buffer that rank stores. A full buffer keeps
// the unit at unit->offset with slice r at r*shard_numel inside it; a shard buffer is the
// concatenation of the rank's slices in unit order, and as every padded unit divides by
// world_size, the slices before `unit` add up to unit->offset / world_size.
static inline size_t zero_owned_offset(const ParamLayout* layout, int stage, ZeroBuffer buffer, int rank, int unit) {
    const ParamUnit* u = &layout->units[unit];
    if (zero_buffer_sharded(stage, buffer)) return u->offset / (size_t)layout->world_size;
    return u->offset + (size_t)rank * u->shard_numel;
}

// The part of tensor t inside [begin, end) (offsets inside t's unit): returns its length and
// sets *first to where it starts inside the unit. AdamW runs tensor by tensor on these pieces
// so that weight decay applies to exactly the 2-D tensors' elements, wherever a slice cuts.
static inline size_t zero_tensor_overlap(const ParamTensor* t, size_t begin, size_t end, size_t* first) {
    size_t lo = t->unit_offset > begin ? t->unit_offset : begin;
    size_t hi = t->unit_offset + t->numel < end ? t->unit_offset + t->numel : end;
    *first = lo;
    return hi > lo ? hi - lo : 0;
}

// Largest padded unit other than the embedding: the size of a layer working buffer.
static inline size_t zero_max_layer_unit_numel(const ParamLayout* layout) {
    size_t n = 0;
    for (int u = 1; u < layout->num_units; u++)
        if (layout->units[u].padded_numel > n) n = layout->units[u].padded_numel;
    return n;
}

// Working buffers a stage allocates, in elements: stage 2 keeps full-unit gradient buffers for
// backward (one for the embedding unit, which wte's LM-head and embedding parts both write, and
// two layer-sized ones so one unit's reduce-scatter overlaps the next unit's backward); stage 3
// has the same for gathered parameters too. Stages 0 and 1 work in their full buffers.
#define ZERO_WORKING_UNITS 3 // [0] embedding unit, [1] and [2] layer-sized (also the final unit)
static inline size_t zero_working_numel(const ParamLayout* layout, int stage) {
    size_t one_set = layout->units[UNIT_EMBEDDING].padded_numel + 2 * zero_max_layer_unit_numel(layout);
    if (stage == 2) return one_set;
    if (stage == 3) return 2 * one_set;
    return 0;
}

// DESIGN.md's memory rows for the fp32 CPU build (params + grads + Adam m, v; no master copy),
// in bytes per rank, with psi = padded parameter count (divisible by world_size).
static inline size_t zero_state_bytes_formula(int stage, size_t psi, int world_size) {
    size_t n = (size_t)world_size;
    switch (stage) {
    case 0: return 16 * psi;                  // 16Ψ
    case 1: return 8 * psi + 8 * psi / n;     // 8Ψ + 8Ψ/N
    case 2: return 4 * psi + 12 * psi / n;    // 4Ψ + 12Ψ/N
    default: return 16 * psi / n;             // 16Ψ/N
    }
}
static const char* const zero_state_bytes_formula_text[4] = {"16Ψ", "8Ψ+8Ψ/N", "4Ψ+12Ψ/N", "16Ψ/N"};

// DESIGN.md's memory rows for the GPU build: bf16 params (2Ψ) and grads (2Ψ), fp32 master
// weights and Adam m, v (12Ψ), in bytes per rank.
static inline size_t zero_state_bytes_formula_mixed(int stage, size_t psi, int world_size) {
    size_t n = (size_t)world_size;
    switch (stage) {
    case 0: return 2 * psi + 2 * psi + 12 * psi;      // 2Ψ+2Ψ+12Ψ
    case 1: return 2 * psi + 2 * psi + 12 * psi / n;  // 2Ψ+2Ψ+12Ψ/N
    case 2: return 2 * psi + (2 + 12) * psi / n;      // 2Ψ+(2+12)Ψ/N
    default: return (2 + 2 + 12) * psi / n;           // (2+2+12)Ψ/N
    }
}
static const char* const zero_state_bytes_formula_mixed_text[4] = {"2Ψ+2Ψ+12Ψ", "2Ψ+2Ψ+12Ψ/N", "2Ψ+(2+12)Ψ/N", "(2+2+12)Ψ/N"};

// Elements a ring algorithm sends per rank (header comment); n divisible by world_size.
static inline long long zero_ring_all_reduce_elements(size_t n, int world_size) { return 2LL * (long long)(n / (size_t)world_size) * (world_size - 1); }
static inline long long zero_ring_reduce_scatter_elements(size_t n, int world_size) { return (long long)(n / (size_t)world_size) * (world_size - 1); }
static inline long long zero_ring_all_gather_elements(size_t n, int world_size) { return (long long)(n / (size_t)world_size) * (world_size - 1); }

// Elements sent per rank per optimizer step with grad_accum_steps micro-steps (header comment).
static inline long long zero_elements_sent_formula(int stage, size_t psi, int world_size, int grad_accum_steps) {
    long long per_pass = (long long)(psi / (size_t)world_size) * (world_size - 1); // Ψ(N-1)/N
    switch (stage) {
    case 0: case 1: return 2 * per_pass;
    case 2: return (long long)(grad_accum_steps + 1) * per_pass;
    default: return 3LL * grad_accum_steps * per_pass;
    }
}
static const char* const zero_elements_sent_formula_text[4] = {"2Ψ(N-1)/N", "2Ψ(N-1)/N", "(A+1)Ψ(N-1)/N", "3AΨ(N-1)/N"};

// ============================================================================================
// Communication: every MPI call of the engine (and of the trainer) is in this section.

#define MPI_CHECK(call)                                                                              \
    do {                                                                                             \
        int mpi_status_ = (call);                                                                    \
        if (mpi_status_ != MPI_SUCCESS) {                                                            \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                     \
            int mpi_len_ = 0;                                                                        \
            MPI_Error_string(mpi_status_, mpi_msg_, &mpi_len_);                                      \
            fprintf(stderr, "error: MPI call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, mpi_msg_); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
        }                                                                                            \
    } while (0)

typedef enum {
    ZERO_OP_NONE, ZERO_OP_ALL_REDUCE, ZERO_OP_REDUCE_SCATTER, ZERO_OP_ALL_GATHER, ZERO_OP_GATHER,
    ZERO_OP_SCALAR_ALL_REDUCE, ZERO_OP_BARRIER
} ZeroOpKind;
static const char* const zero_op_names[] = {"none", "all_reduce", "reduce_scatter", "all_gather", "gather",
                                            "scalar all_reduce", "barrier"};

// One collective in flight; kind NONE when there is nothing to wait for.
typedef struct {
    MPI_Request request;
    ZeroOpKind kind;
    int unit;          // the unit it moves, -1 for scalars and barriers
    const char* what;  // for the timeout diagnosis: which buffer
#if ZERO_GPU_BUILD
    // GPU build, collectives on the comm stream (zero_gpu.cuh): `done` fires when it is complete;
    // issued (order) and step let a timed-out host wait name the oldest one still pending.
    cudaEvent_t done;
    long long issued;
    int step;
#endif
} ZeroOp;

static double zero_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#if !ZERO_GPU_BUILD // the GPU build's start-up also picks the device: zero_gpu.cuh
// Start the ranks: under mpirun each process learns its rank; run directly, MPI starts as a
// singleton (world size 1). OpenMP threads never call MPI, hence FUNNELED.
static void zero_ranks_start(int* argc, char*** argv, int* rank, int* world_size) {
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); // MPI_CHECK reports, then aborts
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world_size));
}

static void zero_ranks_stop(void) { MPI_Finalize(); }
#endif

// Every rank waits here until all arrive (start-up only, before the engine exists; no timeout).
static void zero_ranks_barrier(int world_size) {
    if (world_size > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

#if ZERO_GPU_BUILD
static void zero_abort_device_comm(void); // zero_gpu.cuh: ncclCommAbort first
#endif

// Stop every rank now (after the caller printed why). Returns only without MPI (never here).
static void zero_abort_all_ranks(int code) {
    fflush(stdout);
    fflush(stderr);
#if ZERO_GPU_BUILD
    zero_abort_device_comm();
#endif
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

// ============================================================================================
// The engine

typedef struct {
    float beta1, beta2, eps, weight_decay, grad_clip;
} AdamWConfig;

// A working buffer for one unit at a time (stage 2: gradients; stage 3: parameters and gradients).
typedef struct {
    ZeroFloat* data;
    size_t capacity; // elements
    int unit;        // the unit it holds, -1 when free
    long long age;   // when it was taken, to finish the oldest reduce-scatter first
    ZeroOp op;       // params: all-gather filling it; grads: reduce-scatter reading it
#if ZERO_GPU_BUILD
    cudaEvent_t released; // params: the compute stream's last read of data (the next gather waits)
#endif
} ZeroWorkingUnit;

typedef struct {
    const ParamLayout* layout;
    int rank, world_size;
    float timeout_s;  // -wt: longest wait on one collective before every rank aborts
    int step;         // the step being computed, from 1 as the step lines print it (diagnoses)
    // State, each full or the rank's shard as zero_buffer_sharded says for ZERO_STAGE.
    ZeroFloat* params; // fp32 on the CPU; bf16 on the GPU, as grads
    ZeroFloat* grads;
    float* m;         // AdamW first moment
    float* v;         // AdamW second moment
    // Collectives in flight on the full buffers, one per unit.
    ZeroOp* grad_ops;  // stages 0, 1: all-reduce / reduce-scatter of the unit's gradients
    ZeroOp* param_ops; // stages 1, 2: all-gather of the unit's updated parameters
    // Working units (stage 2: grad_work; stage 3: both).
    ZeroWorkingUnit param_work[ZERO_WORKING_UNITS];
    ZeroWorkingUnit grad_work[ZERO_WORKING_UNITS];
    long long work_clock;
#if ZERO_GPU_BUILD
    // GPU build (zero_gpu.cuh): params, grads, master, m, v live on the device.
    float* master;                     // fp32 master weights, stored (full or shard) like m and v
    cudaStream_t compute, comm;        // the model's kernels; the engine's bulk collectives
    cudaEvent_t compute_mark, comm_mark; // re-recorded whenever the other stream must wait for this one
    cudaEvent_t host_mark;             // re-recorded where the host waits (zero_device_wait)
    // Exposed communication: an event pair around every wait of the compute stream on the comm
    // stream (zero_compute_wait), read and summed at the optimizer step's host sync.
    cudaEvent_t *stall_begin, *stall_end;
    int stall_count, stall_capacity;
    float* norm_device;                // squared norm of the owned gradient slices, and its scratch
    float* norm_scratch;
    float* norm_host;                  // pinned host copy of norm_device
    float* host_float;                 // host staging of one unit: set-up, checkpoints, ZERO_COMM_MPI
    bf16* host_bf16;
    long long ops_issued;              // device collectives issued so far (ZeroOp.issued)
#if !ZERO_COMM_MPI
    ncclComm_t nccl;                   // NULL with one rank
#endif
#endif
    // Accounting
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_working;
    long long sent_elements_step, sent_elements_total; // ring count, bulk collectives only
    int scalar_all_reduces_step;
    double comm_wait_s_step, comm_wait_s_total;        // exposed: time spent waiting
    // Gradient noise scale meter (common/gns.h; McCandlish et al. 2018, App. A). On the micro-steps
    // the trainer sets measure_local_grad_norm for (common/noise_scale.h, the table there),
    // zero_grads_unit_ready adds each unit's squared norm of THIS rank's own gradient, read before
    // the unit's collective starts.
    int measure_local_grad_norm;
    double local_grad_norm_sq;      // this rank, summed over units, this step (GPU: read back in zero_optimizer_step)
    double local_grad_norm_sq_mean; // its mean over ranks (zero_optimizer_step)
    double grad_norm_sq;            // the reduced global gradient's, before clipping (zero_optimizer_step)
} ZeroEngine;

static void* zero_calloc(size_t n, size_t elem, const char* what) {
    if (n == 0) return NULL;
    void* p = calloc(n, elem);
    if (p == NULL) {
        fprintf(stderr, "error: out of host memory allocating %s (%zu bytes)\n", what, n * elem);
        exit(1);
    }
    return p;
}

static const char* zero_unit_name(const ParamLayout* layout, int unit, char* buf, size_t cap) {
    if (unit < 0) snprintf(buf, cap, "-");
    else if (unit == UNIT_EMBEDDING) snprintf(buf, cap, "%d (embedding)", unit);
    else if (unit == UNIT_FINAL(&layout->config)) snprintf(buf, cap, "%d (final layernorm)", unit);
    else snprintf(buf, cap, "%d (layer %d)", unit, unit - 1);
    return buf;
}

// ---- starting and waiting: the only functions that touch MPI requests ----

// The diagnosis line of a collective that waited past -wt (both builds): rank, collective,
// buffer, unit and step. The caller aborts every rank after it.
static void zero_report_timeout(const ZeroEngine* z, const ZeroOp* op, int step, double waited) {
    char unit[64];
    fprintf(stderr, "error: rank %d: %s of %s, unit %s, at step %d waited %.1f s, longer than -wt %g s; "
            "expected every rank to reach this collective (a rank died or is stuck); aborting all ranks\n",
            z->rank, zero_op_names[op->kind], op->what, zero_unit_name(z->layout, op->unit, unit, sizeof(unit)),
            step, waited, z->timeout_s);
}

// Wait for op as an MPI_Test loop with a clock. Past z->timeout_s: one diagnosis line naming
// rank, collective, unit and step, then MPI_Abort for every rank. The time spent here is the
// exposed (not overlapped) communication time.
static void zero_op_wait(ZeroEngine* z, ZeroOp* op) {
    if (op->kind == ZERO_OP_NONE) return;
    double start = zero_clock();
    long spins = 0;
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Test(&op->request, &done, MPI_STATUS_IGNORE));
        if (done) break;
        double waited = zero_clock() - start;
        if (waited > z->timeout_s) {
            zero_report_timeout(z, op, z->step, waited);
            zero_abort_all_ranks(1);
        }
        // Ranks may share cores (tests oversubscribe 2 cores): after a short spin, sleep a
        // little between tests so a rank that is still computing gets the core.
        if (++spins > 100) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    double waited = zero_clock() - start;
    z->comm_wait_s_step += waited;
    z->comm_wait_s_total += waited;
    op->kind = ZERO_OP_NONE;
}

// Let in-flight collectives advance. Open MPI's non-blocking collectives progress only inside
// MPI calls, so the engine tests its requests at every call the model makes.
static void zero_progress(ZeroEngine* z) {
    if (z->world_size == 1) return;
    int done;
    int n = z->layout->num_units;
    if (z->grad_ops) for (int u = 0; u < n; u++) if (z->grad_ops[u].kind != ZERO_OP_NONE) MPI_Test(&z->grad_ops[u].request, &done, MPI_STATUS_IGNORE);
    if (z->param_ops) for (int u = 0; u < n; u++) if (z->param_ops[u].kind != ZERO_OP_NONE) MPI_Test(&z->param_ops[u].request, &done, MPI_STATUS_IGNORE);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        if (z->param_work[i].op.kind != ZERO_OP_NONE) MPI_Test(&z->param_work[i].op.request, &done, MPI_STATUS_IGNORE);
        if (z->grad_work[i].op.kind != ZERO_OP_NONE) MPI_Test(&z->grad_work[i].op.request, &done, MPI_STATUS_IGNORE);
    }
}

static void zero_op_begin(ZeroEngine* z, ZeroOp* op, ZeroOpKind kind, int unit, const char* what, long long sent) {
    if (op->kind != ZERO_OP_NONE) {
        fprintf(stderr, "error: internal: a %s is started on a buffer whose %s is still in flight (unit %d)\n",
                zero_op_names[kind], zero_op_names[op->kind], unit);
        zero_abort_all_ranks(1);
    }
    op->kind = kind;
    op->unit = unit;
    op->what = what;
    z->sent_elements_step += sent;
    z->sent_elements_total += sent;
}

// All-reduce (sum) of a unit in place: n elements of buf, the same on every rank afterwards.
static void zero_op_all_reduce(ZeroEngine* z, ZeroOp* op, float* buf, size_t n, int unit, const char* what) {
    if (z->world_size == 1) return;
    zero_op_begin(z, op, ZERO_OP_ALL_REDUCE, unit, what, zero_ring_all_reduce_elements(n, z->world_size));
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &op->request));
}

// Reduce-scatter (sum) in place: buf holds n elements on every rank; afterwards its first
// n/world_size elements hold the sum over ranks of slice `rank` (MPI's MPI_IN_PLACE rule).
static void zero_op_reduce_scatter(ZeroEngine* z, ZeroOp* op, float* buf, size_t n, int unit, const char* what) {
    if (z->world_size == 1) return; // the single slice is already in place
    zero_op_begin(z, op, ZERO_OP_REDUCE_SCATTER, unit, what, zero_ring_reduce_scatter_elements(n, z->world_size));
    MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)(n / (size_t)z->world_size), MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD, &op->request));
}

// All-gather into buf (n elements): each rank contributes n/world_size elements from `mine`,
// which land at buf + r*n/world_size; mine == NULL means they are already there (in place).
static void zero_op_all_gather(ZeroEngine* z, ZeroOp* op, const float* mine, float* buf, size_t n, int unit, const char* what) {
    size_t shard = n / (size_t)z->world_size;
    if (z->world_size == 1) {
        if (mine != NULL) memcpy(buf, mine, shard * sizeof(float));
        return;
    }
    zero_op_begin(z, op, ZERO_OP_ALL_GATHER, unit, what, zero_ring_all_gather_elements(n, z->world_size));
    if (mine == NULL) {
        MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, MPI_COMM_WORLD, &op->request));
    } else {
        MPI_CHECK(MPI_Iallgather(mine, (int)shard, MPI_FLOAT, buf, (int)shard, MPI_FLOAT, MPI_COMM_WORLD, &op->request));
    }
}

// Gather to rank 0: n/world_size elements from `mine` of every rank into buf (n elements, rank
// 0 only; NULL elsewhere). Used for checkpoints, outside the per-step count.
static void zero_op_gather_to_rank0(ZeroEngine* z, ZeroOp* op, const float* mine, float* buf, size_t n, int unit, const char* what) {
    size_t shard = n / (size_t)z->world_size;
    if (z->world_size == 1) {
        memcpy(buf, mine, shard * sizeof(float));
        return;
    }
    zero_op_begin(z, op, ZERO_OP_GATHER, unit, what, 0);
    MPI_CHECK(MPI_Igather(mine, (int)shard, MPI_FLOAT, buf, (int)shard, MPI_FLOAT, 0, MPI_COMM_WORLD, &op->request));
}

// Sum of one double over all ranks (blocking, with the timed wait).
static double zero_all_reduce_sum(ZeroEngine* z, double x, const char* what) {
    if (z->world_size == 1) return x;
    double result = 0.0;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    z->scalar_all_reduces_step++;
    MPI_CHECK(MPI_Iallreduce(&x, &result, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    return result;
}

// Sum of n doubles element-wise over all ranks, in place (one collective for several scalars).
static void zero_all_reduce_sum_doubles(ZeroEngine* z, double* x, int n, const char* what) {
    if (z->world_size == 1) return;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    z->scalar_all_reduces_step++;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
}

// Mean of x over ranks: the logged losses (each rank's mean over equal-sized micro-batches).
static double zero_all_reduce_mean(ZeroEngine* z, double x, const char* what) {
    return zero_all_reduce_sum(z, x, what) / z->world_size;
}

// Do all ranks pass ok != 0? Returns the lowest failing rank, or -1 when all are ok. Used so
// that an error found by one rank (e.g. its checkpoint file) stops every rank, not just one.
static int zero_first_failing_rank(ZeroEngine* z, int ok) {
    if (z->world_size == 1) return ok ? -1 : 0;
    int mine = ok ? z->world_size : z->rank, lowest = z->world_size;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, "error agreement", 0);
    MPI_CHECK(MPI_Iallreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    return lowest == z->world_size ? -1 : lowest;
}

static void zero_barrier(ZeroEngine* z, const char* what) {
    if (z->world_size == 1) return;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_BARRIER, -1, what, 0);
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
}

// Do all ranks hold the same 64-bit value? (min == max over ranks)
static int zero_all_ranks_equal_u64(ZeroEngine* z, uint64_t value, const char* what) {
    if (z->world_size == 1) return 1;
    uint64_t lo = 0, hi = 0;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    MPI_CHECK(MPI_Iallreduce(&value, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    op.kind = ZERO_OP_NONE;
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    MPI_CHECK(MPI_Iallreduce(&value, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    return lo == hi;
}

// ---- set-up ----

#if !ZERO_GPU_BUILD // CPU engine set-up (the GPU's is in zero_gpu.cuh)
static void zero_init(ZeroEngine* z, const ParamLayout* layout, int rank, int world_size) {
    memset(z, 0, sizeof(*z));
    if (layout->world_size != world_size) {
        fprintf(stderr, "error: internal: layout padded for %d ranks used with %d\n", layout->world_size, world_size);
        exit(1);
    }
    z->layout = layout;
    z->rank = rank;
    z->world_size = world_size;
    z->timeout_s = 300.0f;
    int n = layout->num_units;
    size_t params_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_PARAMS, 0);
    size_t grads_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_GRADS, 0);
    size_t adam_n = zero_buffer_numel(layout, ZERO_STAGE, ZERO_BUF_ADAM_M, 0);
    z->params = (float*)zero_calloc(params_n, sizeof(float), "parameters");
    z->grads = (float*)zero_calloc(grads_n, sizeof(float), "gradients");
    z->m = (float*)zero_calloc(adam_n, sizeof(float), "Adam m");
    z->v = (float*)zero_calloc(adam_n, sizeof(float), "Adam v");
    z->bytes_params = params_n * sizeof(float);
    z->bytes_grads = grads_n * sizeof(float);
    z->bytes_optimizer = 2 * adam_n * sizeof(float);
    if (ZERO_STAGE <= 1) z->grad_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "gradient requests");
    if (ZERO_STAGE == 1 || ZERO_STAGE == 2) z->param_ops = (ZeroOp*)zero_calloc((size_t)n, sizeof(ZeroOp), "parameter requests");
    size_t layer_n = zero_max_layer_unit_numel(layout);
    size_t emb_n = layout->units[UNIT_EMBEDDING].padded_numel;
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        size_t cap = i == 0 ? emb_n : layer_n;
        z->param_work[i].unit = z->grad_work[i].unit = -1;
        if (ZERO_STAGE == 3) {
            z->param_work[i].data = (float*)zero_calloc(cap, sizeof(float), "parameter working unit");
            z->param_work[i].capacity = cap;
        }
        if (ZERO_STAGE >= 2) {
            z->grad_work[i].data = (float*)zero_calloc(cap, sizeof(float), "gradient working unit");
            z->grad_work[i].capacity = cap;
        }
    }
    z->bytes_working = zero_working_numel(layout, ZERO_STAGE) * sizeof(float);
}

// Wait for every collective still in flight: peers may be reading this rank's buffers (Open
// MPI's shared-memory transport copies straight out of them), so none may be freed before.
static void zero_wait_all(ZeroEngine* z) {
    int n = z->layout->num_units;
    if (z->grad_ops) for (int u = 0; u < n; u++) zero_op_wait(z, &z->grad_ops[u]);
    if (z->param_ops) for (int u = 0; u < n; u++) zero_op_wait(z, &z->param_ops[u]);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) { zero_op_wait(z, &z->param_work[i].op); zero_op_wait(z, &z->grad_work[i].op); }
}

static void zero_free(ZeroEngine* z) {
    zero_wait_all(z);
    free(z->params); free(z->grads); free(z->m); free(z->v);
    free(z->grad_ops); free(z->param_ops);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) { free(z->param_work[i].data); free(z->grad_work[i].data); }
}
#endif // CPU engine set-up

// Unit-relative [begin, end) of the elements this rank updates: its slice, or (stage 0, whose
// optimizer state is replicated) the whole unit.
static void zero_update_range(const ZeroEngine* z, int unit, size_t* begin, size_t* end) {
    const ParamUnit* u = &z->layout->units[unit];
    if (ZERO_STAGE == 0) { *begin = 0; *end = u->padded_numel; return; }
    *begin = (size_t)z->rank * u->shard_numel;
    *end = *begin + u->shard_numel;
}

// Pointers to this rank's slice of a unit in each stored buffer.
static float* zero_owned(const ZeroEngine* z, float* buffer, ZeroBuffer which, int unit) {
    return buffer + zero_owned_offset(z->layout, ZERO_STAGE, which, z->rank, unit);
}

// ---- working units (stages 2, 3) ----

static ZeroWorkingUnit* zero_work_find(ZeroWorkingUnit* work, int unit) {
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) if (work[i].unit == unit) return &work[i];
    return NULL;
}

// A free working unit for `unit` (the embedding unit has its own), or NULL if none is free.
static ZeroWorkingUnit* zero_work_take(ZeroEngine* z, ZeroWorkingUnit* work, int unit) {
    int first = unit == UNIT_EMBEDDING ? 0 : 1, last = unit == UNIT_EMBEDDING ? 0 : ZERO_WORKING_UNITS - 1;
    for (int i = first; i <= last; i++) {
        if (work[i].unit == -1) {
            work[i].unit = unit;
            work[i].age = ++z->work_clock;
            return &work[i];
        }
    }
    return NULL;
}

// Each backend finishes a gradient working unit its own way (wait, add the slice into the shard)
// and starts a parameter all-gather its own way (MPI, or NCCL on the comm stream).
static void zero_grad_work_finish(ZeroEngine* z, ZeroWorkingUnit* w);
static ZeroWorkingUnit* zero_param_work_gather(ZeroEngine* z, int unit);

// Stage 3: the working unit holding `unit`'s gathered parameters: the one already resident (a
// prefetch, or wte kept from the LM head for backward) or a gather started now.
static ZeroWorkingUnit* zero_param_work_get(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_find(z->param_work, unit);
    if (w == NULL) w = zero_param_work_gather(z, unit);
    if (w == NULL) {
        fprintf(stderr, "error: internal: no free working unit for unit %d (a unit was not handed back)\n", unit);
        zero_abort_all_ranks(1);
    }
    return w;
}

/*
 * Stages 2, 3: the working unit backward will accumulate `unit`'s gradients into. If the unit
 * is still being reduced from the previous micro-step (the embedding unit is the last one
 * backward finishes and the first it starts), that reduce-scatter is finished first; when no
 * working unit is free, the oldest one's is. The caller zeroes the returned buffer.
 */
static ZeroWorkingUnit* zero_grad_work_acquire(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
    if (w != NULL) zero_grad_work_finish(z, w);
    w = zero_work_take(z, z->grad_work, unit);
    if (w == NULL) {
        ZeroWorkingUnit* oldest = NULL;
        int first = unit == UNIT_EMBEDDING ? 0 : 1, last = unit == UNIT_EMBEDDING ? 0 : ZERO_WORKING_UNITS - 1;
        for (int i = first; i <= last; i++)
            if (oldest == NULL || z->grad_work[i].age < oldest->age) oldest = &z->grad_work[i];
        zero_grad_work_finish(z, oldest);
        w = zero_work_take(z, z->grad_work, unit);
    }
    return w;
}

/*
 * GNS small batch: this rank's gradient of `unit` as backward left it, before the unit's
 * collective sums it with the other ranks'. Stages 0, 1: the unit in the full buffer, i.e.
 * everything accumulated so far this step; stages 2, 3: its working unit, this micro-step alone.
 * padded_numel elements, or NULL when there is none.
 */
static const ZeroFloat* zero_gns_local_grads(ZeroEngine* z, int unit) {
    if (ZERO_STAGE < 2) return z->grads + z->layout->units[unit].offset;
    ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
    return w ? w->data : NULL;
}

#if !ZERO_GPU_BUILD // the CPU engine from here to zero_optimizer_step; the GPU's is in zero_gpu.cuh
// Stage 2/3: finish the reduce-scatter of a gradient working unit and add the rank's reduced
// slice (the first shard_numel elements, in place) into its gradient shard; free the unit.
// Accumulation over micro-steps happens here: shard += this micro-step's reduced slice.
static void zero_grad_work_finish(ZeroEngine* z, ZeroWorkingUnit* w) {
    zero_op_wait(z, &w->op);
    const ParamUnit* u = &z->layout->units[w->unit];
    float* shard = zero_owned(z, z->grads, ZERO_BUF_GRADS, w->unit);
    for (size_t i = 0; i < u->shard_numel; i++) shard[i] += w->data[i];
    w->unit = -1;
}

// Stage 3: start gathering `unit` into a free working unit; NULL if none is free.
static ZeroWorkingUnit* zero_param_work_gather(ZeroEngine* z, int unit) {
    ZeroWorkingUnit* w = zero_work_take(z, z->param_work, unit);
    if (w == NULL) return NULL;
    const ParamUnit* u = &z->layout->units[unit];
    // All-gather: shard_numel elements from each rank's parameter shard into the working unit
    // (padded_numel elements), so every rank holds the whole unit until zero_params_unit_done.
    zero_op_all_gather(z, &w->op, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit), w->data, u->padded_numel, unit,
                       "parameters");
    return w;
}

// ---- what the model calls ----

/*
 * The unit's full parameters (padded_numel elements, tensors at their unit offsets), valid
 * until zero_params_unit_done. Stages 1, 2: waits for the unit's all-gather from the last
 * optimizer step (the first place it is needed). Stage 3: uses the prefetched working unit or
 * gathers now; a unit still resident (the LM head's wte kept from forward for backward) is
 * returned as is.
 */
static float* zero_params_unit(ZeroEngine* z, int unit) {
    zero_progress(z);
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_param_work_get(z, unit);
        zero_op_wait(z, &w->op);
        return w->data;
    }
    if (z->param_ops) zero_op_wait(z, &z->param_ops[unit]);
    return z->params + z->layout->units[unit].offset;
}

// Start bringing in the unit the model needs next while it computes this one (stage 3 only).
static void zero_params_prefetch(ZeroEngine* z, int unit) {
    if (ZERO_STAGE != 3 || unit < 0 || zero_work_find(z->param_work, unit) != NULL) return;
    zero_param_work_gather(z, unit); // none free: it is gathered when asked for
}

// The model is done with the unit's parameters: stage 3 frees its working unit.
static void zero_params_unit_done(ZeroEngine* z, int unit) {
    if (ZERO_STAGE == 3) {
        ZeroWorkingUnit* w = zero_work_find(z->param_work, unit);
        if (w != NULL) { zero_op_wait(z, &w->op); w->unit = -1; }
    }
    zero_progress(z);
}

/*
 * The buffer backward accumulates the unit's gradients into (padded_numel elements); called
 * once per unit per backward. Stages 0, 1: the unit in the full gradient buffer (accumulating
 * over micro-steps). Stages 2, 3: a zeroed working unit; when none is free, the oldest unit's
 * reduce-scatter is finished first.
 */
static float* zero_grads_unit(ZeroEngine* z, int unit) {
    zero_progress(z);
    if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_grad_work_acquire(z, unit);
        memset(w->data, 0, z->layout->units[unit].padded_numel * sizeof(float));
        return w->data;
    }
    return z->grads + z->layout->units[unit].offset;
}

/*
 * Backward has finished this unit for this micro-step: its collective starts now, while
 * backward goes on with the units below it. last_micro_step says whether the gradients are
 * final for the optimizer step (stages 0, 1 reduce only then; stages 2, 3 reduce every
 * micro-step and accumulate into the shard, so no full gradient buffer outlives a unit).
 */
static void zero_grads_unit_ready(ZeroEngine* z, int unit, int last_micro_step) {
    const ParamUnit* u = &z->layout->units[unit];
    if (z->measure_local_grad_norm) { // GNS small batch, before the collective below
        const float* local = zero_gns_local_grads(z, unit);
        if (local) z->local_grad_norm_sq += norm_squared(local, u->padded_numel);
    }
    if (ZERO_STAGE == 0 && last_micro_step) {
        // All-reduce: padded_numel elements of this unit's gradients, in place in the full buffer.
        zero_op_all_reduce(z, &z->grad_ops[unit], z->grads + u->offset, u->padded_numel, unit, "gradients");
    } else if (ZERO_STAGE == 1 && last_micro_step) {
        // Reduce-scatter in place: the unit's padded_numel gradients in, this rank's reduced
        // shard_numel slice out at the unit's start (moved to its own slice in the optimizer step).
        zero_op_reduce_scatter(z, &z->grad_ops[unit], z->grads + u->offset, u->padded_numel, unit, "gradients");
    } else if (ZERO_STAGE >= 2) {
        ZeroWorkingUnit* w = zero_work_find(z->grad_work, unit);
        if (w == NULL) {
            fprintf(stderr, "error: internal: unit %d marked ready without a gradient working unit\n", unit);
            zero_abort_all_ranks(1);
        }
        // Reduce-scatter in place on the working unit: padded_numel elements in, this rank's
        // shard_numel reduced slice out at its start, added into the shard when finished.
        zero_op_reduce_scatter(z, &w->op, w->data, u->padded_numel, unit, "gradients");
        if (z->world_size == 1) zero_grad_work_finish(z, w); // nothing in flight: finish now
    }
    zero_progress(z);
}

// Zero the stored gradients (full buffer or shard) before a step's first micro-step.
static void zero_grads_zero(ZeroEngine* z) {
    memset(z->grads, 0, zero_buffer_numel(z->layout, ZERO_STAGE, ZERO_BUF_GRADS, 0) * sizeof(float));
}

// Start optimizer step `step` (from 1, as printed): per-step counters and gradients to zero.
static void zero_step_begin(ZeroEngine* z, int step) {
    z->step = step;
    z->sent_elements_step = 0;
    z->scalar_all_reduces_step = 0;
    z->comm_wait_s_step = 0.0;
    z->local_grad_norm_sq = 0.0;
    zero_grads_zero(z);
}

// Wait for every all-gather of parameters still in flight (stages 1, 2).
static void zero_params_wait_all(ZeroEngine* z) {
    if (z->param_ops) for (int u = 0; u < z->layout->num_units; u++) zero_op_wait(z, &z->param_ops[u]);
}

// Set one unit's parameters from a full copy of it (init or a loaded checkpoint): each rank
// keeps what its stage stores.
static void zero_set_unit_params(ZeroEngine* z, int unit, const float* unit_buf) {
    const ParamUnit* u = &z->layout->units[unit];
    zero_params_wait_all(z);
    if (ZERO_STAGE == 3) memcpy(zero_owned(z, z->params, ZERO_BUF_PARAMS, unit), unit_buf + (size_t)z->rank * u->shard_numel, u->shard_numel * sizeof(float));
    else memcpy(z->params + u->offset, unit_buf, u->padded_numel * sizeof(float));
}

// Gather the full parameters (padded_numel elements) into `full` on rank 0 for a checkpoint;
// every rank calls it, the others pass NULL.
static void zero_get_full_params(ZeroEngine* z, float* full) {
    zero_params_wait_all(z);
    if (ZERO_STAGE == 3) {
        for (int unit = 0; unit < z->layout->num_units; unit++) {
            const ParamUnit* u = &z->layout->units[unit];
            ZeroOp op = {.kind = ZERO_OP_NONE};
            zero_op_gather_to_rank0(z, &op, zero_owned(z, z->params, ZERO_BUF_PARAMS, unit),
                                    full ? full + u->offset : NULL, u->padded_numel, unit, "parameters (checkpoint)");
            zero_op_wait(z, &op);
        }
    } else if (full != NULL) {
        memcpy(full, z->params, z->layout->padded_numel * sizeof(float));
    }
}

// This rank's slice of Adam m and v, every unit in order (layout->shard_numel elements each):
// the per-rank checkpoint payload, the same at every stage (stage 0 writes slice r of its
// replicated state), so a checkpoint converts between stages by its header alone.
static void zero_get_optimizer_shard(ZeroEngine* z, float* m_out, float* v_out) {
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        size_t dst = u->offset / (size_t)z->world_size;
        memcpy(m_out + dst, zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit), u->shard_numel * sizeof(float));
        memcpy(v_out + dst, zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit), u->shard_numel * sizeof(float));
    }
}

// Inverse of zero_get_optimizer_shard. Stage 0 then all-gathers m and v unit by unit, as every
// rank keeps all of them.
static void zero_set_optimizer_shard(ZeroEngine* z, const float* m_in, const float* v_in) {
    for (int unit = 0; unit < z->layout->num_units; unit++) {
        const ParamUnit* u = &z->layout->units[unit];
        size_t src = u->offset / (size_t)z->world_size;
        memcpy(zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit), m_in + src, u->shard_numel * sizeof(float));
        memcpy(zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit), v_in + src, u->shard_numel * sizeof(float));
        if (ZERO_STAGE == 0) {
            ZeroOp op = {.kind = ZERO_OP_NONE};
            zero_op_all_gather(z, &op, NULL, z->m + u->offset, u->padded_numel, unit, "Adam m (resume)");
            zero_op_wait(z, &op);
            zero_op_all_gather(z, &op, NULL, z->v + u->offset, u->padded_numel, unit, "Adam v (resume)");
            zero_op_wait(z, &op);
        }
    }
}

// Stages 0-2 keep replicated parameters (stage 0 also replicated m, v): check the replicas are
// bit-identical across ranks. Returns 1 when they are (always at stage 3: nothing replicated).
static int zero_replicas_agree(ZeroEngine* z) {
    if (ZERO_STAGE == 3 || z->world_size == 1) return 1;
    zero_params_wait_all(z);
    uint64_t h = fnv1a64_words(z->params, z->layout->padded_numel, FNV1A64_INIT);
    if (ZERO_STAGE == 0) {
        h = fnv1a64_words(z->m, z->layout->padded_numel, h);
        h = fnv1a64_words(z->v, z->layout->padded_numel, h);
    }
    return zero_all_ranks_equal_u64(z, h, "replica check");
}

/*
 * Optimizer step t (from 1) with learning rate lr, on the slices this rank owns:
 *   1. finish the gradient collectives (the exposed part of their time is measured here)
 *   2. average: the reduced gradient is a sum over ranks; multiply by 1/world_size
 *   3. global gradient norm: squared norms of the owned slices, one scalar all-reduce
 *   4. clip coefficient, AdamW (weight decay on 2-D tensors only) on the owned slices
 *   5. stages 1, 2: all-gather each unit's updated parameters, waited on by the next forward
 * Returns the global norm before clipping.
 */
static float zero_optimizer_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t) {
    const ParamLayout* layout = z->layout;
    int N = z->world_size;
    // 1. Backward issued the reductions from the final unit down to the embedding: wait in that order.
    for (int unit = layout->num_units - 1; unit >= 0; unit--) {
        const ParamUnit* u = &layout->units[unit];
        if (ZERO_STAGE == 0) zero_op_wait(z, &z->grad_ops[unit]);
        if (ZERO_STAGE == 1) {
            zero_op_wait(z, &z->grad_ops[unit]);
            float* unit_grads = z->grads + u->offset;
            if (z->rank != 0) memmove(unit_grads + (size_t)z->rank * u->shard_numel, unit_grads, u->shard_numel * sizeof(float));
        }
    }
    if (ZERO_STAGE >= 2) {
        for (;;) { // oldest first: the order backward started them
            ZeroWorkingUnit* oldest = NULL;
            for (int i = 0; i < ZERO_WORKING_UNITS; i++)
                if (z->grad_work[i].unit != -1 && (oldest == NULL || z->grad_work[i].age < oldest->age)) oldest = &z->grad_work[i];
            if (oldest == NULL) break;
            zero_grad_work_finish(z, oldest);
        }
    }
    if (ZERO_STAGE == 3) { // gathered units are stale once the shard changes: free them
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
            zero_op_wait(z, &z->param_work[i].op);
            z->param_work[i].unit = -1;
        }
    }
    // 2. Average over ranks.
    if (N > 1) {
        float inv_world = 1.0f / (float)N;
        for (int unit = 0; unit < layout->num_units; unit++) {
            size_t begin, end;
            zero_update_range(z, unit, &begin, &end);
            float* g = ZERO_STAGE == 0 ? z->grads + layout->units[unit].offset : zero_owned(z, z->grads, ZERO_BUF_GRADS, unit);
            for (size_t i = 0; i < end - begin; i++) g[i] *= inv_world;
        }
    }
    // 3. Global norm from the owned slices (stage 0 too: each rank sums its slice, then one
    // scalar all-reduce), so every stage adds the same numbers in the same order.
    double norm_sq = 0.0;
    for (int unit = 0; unit < layout->num_units; unit++)
        norm_sq += norm_squared(zero_owned(z, z->grads, ZERO_BUF_GRADS, unit), layout->units[unit].shard_numel);
    // The same all-reduce carries the GNS meter's local squared norm (0 when not measured), so
    // the meter costs no extra collective: [owned slices' sum, this rank's local norm^2], summed.
    double sums[2] = {norm_sq, z->local_grad_norm_sq};
    zero_all_reduce_sum_doubles(z, sums, 2, "grad norm");
    norm_sq = sums[0];
    z->grad_norm_sq = norm_sq;
    z->local_grad_norm_sq_mean = sums[1] / N;
    float norm = (float)sqrt(norm_sq);
    // 4. Clip coefficient as torch.nn.utils.clip_grad_norm_ computes it: max_norm / (norm + 1e-6), capped at 1.
    float clip_coef = opt->grad_clip > 0.0f ? opt->grad_clip / (norm + 1e-6f) : 1.0f;
    float grad_scale = clip_coef < 1.0f ? clip_coef : 1.0f;
    for (int unit = 0; unit < layout->num_units; unit++) {
        const ParamUnit* u = &layout->units[unit];
        size_t begin, end;
        zero_update_range(z, unit, &begin, &end);
        // Each buffer's element `begin` of this unit, full or shard as the stage stores it.
        float* p = ZERO_STAGE == 3 ? zero_owned(z, z->params, ZERO_BUF_PARAMS, unit) : z->params + u->offset + begin;
        float* g = ZERO_STAGE >= 2 ? zero_owned(z, z->grads, ZERO_BUF_GRADS, unit) : z->grads + u->offset + begin;
        float* m = ZERO_STAGE >= 1 ? zero_owned(z, z->m, ZERO_BUF_ADAM_M, unit) : z->m + u->offset + begin;
        float* v = ZERO_STAGE >= 1 ? zero_owned(z, z->v, ZERO_BUF_ADAM_V, unit) : z->v + u->offset + begin;
        for (int i = 0; i < u->num_tensors; i++) {
            const ParamTensor* pt = &layout->tensors[u->first_tensor + i];
            size_t first;
            size_t len = zero_tensor_overlap(pt, begin, end, &first);
            if (len == 0) continue;
            size_t o = first - begin;
            float wd = pt->ndim == 2 ? opt->weight_decay : 0.0f;
            adamw_update(p + o, g + o, m + o, v + o, len, lr, opt->beta1, opt->beta2, opt->eps, wd, grad_scale, t);
        }
        // 5. All-gather in place: this rank's updated shard_numel slice out, the unit's
        // padded_numel parameters in; the next forward waits for it when it reaches this unit.
        if (ZERO_STAGE == 1 || ZERO_STAGE == 2)
            zero_op_all_gather(z, &z->param_ops[unit], NULL, z->params + u->offset, u->padded_numel, unit, "parameters");
        zero_progress(z);
    }
    return norm;
}

#endif // CPU engine

// Print what this rank allocates and sends beside DESIGN.md's formulas (rank 0 calls it): the
// fp32 rows on the CPU, the mixed-precision rows (bf16 + fp32 master and m, v) on the GPU.
static void zero_print_accounting(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ParamLayout* layout = z->layout;
    size_t psi = layout->padded_numel;
    int N = z->world_size;
    size_t state = z->bytes_params + z->bytes_grads + z->bytes_optimizer;
    size_t formula = ZERO_HAS_MASTER ? zero_state_bytes_formula_mixed(ZERO_STAGE, psi, N) : zero_state_bytes_formula(ZERO_STAGE, psi, N);
    const char* formula_text = ZERO_HAS_MASTER ? zero_state_bytes_formula_mixed_text[ZERO_STAGE] : zero_state_bytes_formula_text[ZERO_STAGE];
    long long sent = zero_elements_sent_formula(ZERO_STAGE, psi, N, grad_accum_steps);
    fprintf(out, "zero: stage %d | world size %d | Ψ = %zu padded parameters (%zu real; units padded to multiples of %d x %d)\n",
            ZERO_STAGE, N, psi, layout->num_parameters, N, layout->align);
    fprintf(out, "zero: bytes per rank: params %zu + grads %zu + optimizer %zu = %zu; formula %s = %zu (%s) | working units %zu\n",
            z->bytes_params, z->bytes_grads, z->bytes_optimizer, state, formula_text, formula,
            state == formula ? "equal" : "DIFFERENT", z->bytes_working);
    fprintf(out, "zero: elements sent per rank per step (ring count, A = %d micro-steps): formula %s = %lld (%.1f MiB %s); counted on each step line\n",
            grad_accum_steps, zero_elements_sent_formula_text[ZERO_STAGE], sent, sent * (double)sizeof(ZeroFloat) / 1048576.0,
            ZERO_HAS_MASTER ? "bf16" : "fp32");
}

#if ZERO_GPU_BUILD
#include "zero_gpu.cuh" // the GPU engine: the functions above the CPU engine's fence, on streams
#endif

// ============================================================================================
// Checkpoints (DESIGN.md "Checkpoints"; files in common/checkpoint.h, common/zero_checkpoint.h).
// Host code over the engine's interface, the same in both builds: a checkpoint written by either
// build resumes in either (the state files hold fp32 Adam slices; the model file the fp32
// parameters, which on the GPU are the master weights).

/*
 * Write the checkpoint of `step` into dir. Every rank writes its state file (its AdamW slices,
 * the step, the train data position, the seed, the gradient noise scale meter's EMAs); once all
 * are in place, rank 0 writes the model
 * file from the gathered parameters, which marks the checkpoint complete. Every rank calls it.
 */
static void zero_checkpoint_save(ZeroEngine* z, const char* dir, int step, long data_shard, long data_position,
                                 int seed, long long batch_tokens, const GNSMeter* gns) {
    const ParamLayout* layout = z->layout;
    size_t n = layout->shard_numel;
    float* m = (float*)zero_calloc(n, sizeof(float), "checkpoint Adam m slice");
    float* v = (float*)zero_calloc(n, sizeof(float), "checkpoint Adam v slice");
    zero_get_optimizer_shard(z, m, v);
    int64_t header[ZS_NUM_FIELDS] = {0};
    header[ZS_ZERO_STAGE] = ZERO_STAGE;
    header[ZS_WORLD_SIZE] = z->world_size;
    header[ZS_RANK] = z->rank;
    header[ZS_STEP] = step;
    zero_state_header_set_config(header, &layout->config);
    header[ZS_ALIGN] = layout->align;
    header[ZS_NUMEL] = (int64_t)n;
    header[ZS_DATA_SHARD] = data_shard;
    header[ZS_DATA_POSITION] = data_position;
    header[ZS_SEED] = seed;
    header[ZS_BATCH_TOKENS] = batch_tokens;
    zero_state_header_set_gns(header, gns);
    char path[4300];
    zero_state_rank_path(path, sizeof(path), dir, step, z->rank, z->world_size);
    zero_state_write(path, header, m, v);
    free(m);
    free(v);
    zero_barrier(z, "checkpoint state files");
    float* full = z->rank == 0 ? (float*)zero_calloc(layout->padded_numel, sizeof(float), "checkpoint parameters") : NULL;
    zero_get_full_params(z, full); // stages 1-3 (GPU), 3 (CPU): gathered unit by unit to rank 0
    if (z->rank == 0) {
        model_checkpoint_path(path, sizeof(path), dir, step);
        model_file_write(path, layout, full);
        printf("checkpoint: %s + %d state file%s\n", path, z->world_size, z->world_size > 1 ? "s" : "");
    }
    free(full);
    if (!zero_replicas_agree(z) && z->rank == 0)
        fprintf(stderr, "warning: step %d: the replicated parameters%s differ across ranks (ZeRO stage %d); expected bit-identical replicas\n",
                step, ZERO_STAGE == 0 ? " or optimizer state" : "", ZERO_STAGE);
}

/*
 * Resume: load this rank's state file of the checkpoint at `step` (same world size and stage as
 * this run) into the engine's AdamW slices, and return the train data position and the gradient
 * noise scale meter state it names (steps 0 when it has none). The
 * parameters came from the model file. An error on any rank stops every rank, with that rank's
 * error line; another batch size or seed than the checkpoint's is a warning (rank 0).
 */
static void zero_checkpoint_load_state(ZeroEngine* z, const char* dir, int step, int seed, long long batch_tokens,
                                       long* data_shard, long* data_position, GNSMeter* gns) {
    int N = z->world_size;
    const ParamLayout* layout = z->layout;
    char path[4300], err[9000] = "";
    int64_t header[ZERO_STATE_HEADER_INTS];
    float *m = NULL, *v = NULL;
    int ok = 0;
    zero_state_rank_path(path, sizeof(path), dir, step, z->rank, N);
    if (!file_exists(path)) {
        int sizes[16];
        int count = zero_state_world_sizes(dir, step, sizes, 16);
        char full[4300];
        zero_state_full_path(full, sizeof(full), dir, step);
        if (count > 0 && sizes[0] != N)
            snprintf(err, sizeof(err), "error: %s: missing: the checkpoint at step %d has state for world size %d; expected world size %d "
                     "(this run); convert first: build/zero_consolidate -o %s -x %d -from %d -to %d -z %d",
                     path, step, sizes[0], N, dir, step, sizes[0], N, ZERO_STAGE);
        else if (count == 0 && file_exists(full))
            snprintf(err, sizeof(err), "error: %s: missing: the checkpoint at step %d has only its full state; expected per-rank state "
                     "— convert first: build/zero_consolidate -o %s -x %d -from full -to %d -z %d", path, step, dir, step, N, ZERO_STAGE);
        else
            snprintf(err, sizeof(err), "error: %s: missing state file; expected one state file per rank beside model_%08d.bin", path, step);
    } else if (zero_state_read(path, header, &m, &v, err, sizeof(err)) == 0) {
        GPT2Config cfg = zero_state_header_config(header);
        if (header[ZS_WORLD_SIZE] != N || header[ZS_RANK] != z->rank || header[ZS_STEP] != step)
            snprintf(err, sizeof(err), "error: %s: holds rank %lld of %lld at step %lld; expected rank %d of %d at step %d",
                     path, (long long)header[ZS_RANK], (long long)header[ZS_WORLD_SIZE], (long long)header[ZS_STEP], z->rank, N, step);
        else if (!gpt2_config_equal(&cfg, &layout->config) || header[ZS_ALIGN] != layout->align ||
                 header[ZS_NUMEL] != (int64_t)layout->shard_numel)
            snprintf(err, sizeof(err), "error: %s: model config or slice size differs from model_%08d.bin; expected the state of the same checkpoint",
                     path, step);
        else if (header[ZS_ZERO_STAGE] != ZERO_STAGE)
            snprintf(err, sizeof(err), "error: %s: written at ZeRO stage %lld; expected stage %d (this binary) "
                     "— convert first: build/zero_consolidate -o %s -x %d -from %d -to %d -z %d",
                     path, (long long)header[ZS_ZERO_STAGE], ZERO_STAGE, dir, step, N, N, ZERO_STAGE);
        else
            ok = 1;
    }
    int bad = zero_first_failing_rank(z, ok);
    if (bad >= 0) {
        if (z->rank == bad) fprintf(stderr, "%s\n", err);
        free(m);
        free(v);
        zero_ranks_stop();
        exit(1);
    }
    zero_set_optimizer_shard(z, m, v);
    if (z->rank == 0 && (header[ZS_BATCH_TOKENS] != batch_tokens || header[ZS_SEED] != seed))
        printf("warning: resuming with a batch of %lld tokens and seed %d, but the checkpoint was written with %lld and %lld: "
               "training continues, not on the same trajectory\n", batch_tokens, seed,
               (long long)header[ZS_BATCH_TOKENS], (long long)header[ZS_SEED]);
    *data_shard = (long)header[ZS_DATA_SHARD];
    *data_position = (long)header[ZS_DATA_POSITION];
    *gns = zero_state_header_gns(header);
    free(m);
    free(v);
}

#endif // ZERO_CUH
