/*
 * zero/engine.h: the engine's state, shared by the CPU and GPU engines: one collective in flight
 * (ZeroOp), a working unit (ZeroWorkingUnit), the engine (ZeroEngine) with its buffers,
 * accounting and gradient noise scale fields, and two small host helpers.
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ENGINE_H
#define ZERO_ENGINE_H
#ifndef ZERO_CUH
#error "zero/engine.h is part of the ZeRO engine; include zero.cuh"
#endif

typedef enum {
    ZERO_OP_NONE, ZERO_OP_ALL_REDUCE, ZERO_OP_REDUCE_SCATTER, ZERO_OP_ALL_GATHER, ZERO_OP_GATHER,
    ZERO_OP_SCALAR_ALL_REDUCE, ZERO_OP_BARRIER,
    ZERO_OP_GROUP_ALL_GATHER, ZERO_OP_ALL_TO_ALL // ZeRO++ (zero/zeropp/zeropp.h): MPI's own, on a group's communicator
} ZeroOpKind;
static const char* const zero_op_names[] = {"none", "all_reduce", "reduce_scatter", "all_gather", "gather",
                                            "scalar all_reduce", "barrier", "all_gather (group)", "all_to_all"};

// A ring collective's progress (zero/comm_ring.h): which step it is at and its messages.
typedef struct ZeroRing {
    float* buf;               // N chunks of shard elements
    size_t shard;
    int steps, reduce_steps;  // all steps; the first reduce_steps of them reduce-scatter
    int step, posted;         // steps done; whether step's messages are in flight
    int recv_chunk, tag;
    int queued;               // in the engine's ring queue (not yet complete)
    MPI_Request requests[2];  // [0] send to the right neighbour, [1] receive from the left
    struct ZeroOp* next;      // the ring queued after this one
} ZeroRing;

// One collective in flight; kind NONE when there is nothing to wait for.
typedef struct ZeroOp {
    MPI_Request request;      // MPI's own collectives (scalars, barriers, gathers)
    ZeroRing ring;            // the unit collectives (all-reduce, reduce-scatter, all-gather) with ZERO_RING
    ZeroOpKind kind;
    int unit;          // the unit it moves, -1 for scalars and barriers
    const char* what;  // for the timeout diagnosis: which buffer
#if ZERO_GPU_BUILD
    // GPU build, collectives on the comm stream (zero/gpu/engine_gpu.cuh): `done` fires when it is complete;
    // issued (order) and step let a timed-out host wait name the oldest one still pending.
    cudaEvent_t done;
    long long issued;
    int step;
#endif
} ZeroOp;

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

// Ring collectives (zero/comm_ring.h): the queue (one ring in flight at a time) and its receive
// buffer, one chunk of the largest ring.
typedef struct {
    ZeroOp *head, *tail;
    float* scratch;
    size_t scratch_capacity;
    long long count;              // rings started so far: their tags
} ZeroRingQueue;

// The tied wte's rows (ZeroEngine.tied). Stages 2, 3 (zero_grads_unit_partly_ready): rows of a wte
// unit's gradient the LM head left and the encoder still adds to, set aside from the unit's first
// reduce-scatter until the encoder asks for the unit again. Per unit: how many rows and where
// they start in the arena (kept_ids: row inside the unit; kept_data: kept_row_len floats each).
typedef struct {
    int* kept_count;
    size_t* kept_first;
    int* kept_ids;         // CPU engine: the rows' indices inside the unit
    ZeroFloat* kept_data;
#if ZERO_GPU_BUILD
    const int** kept_tokens; // GPU engine: per unit, the device list of the rows' tokens (the model's encoder plan) ...
    int* kept_row0;          // ... and the unit's first wte row (row = token - row0)
#endif
    size_t kept_used, kept_capacity; // rows
    int kept_row_len, kept_pending;  // elements per row; units with rows set aside
#if ZERO_EXT
    ZeroTiedEarly early; // CPU stages 0, 1, N > 1: the rows reduced early (zero/tied_rows/tied_rows_state.h) ...
    ZeroOp early_op;     // ... and their all-gather; both used by zero/tied_rows/ only, the core through zero/hooks.h
#endif
} ZeroTiedRows;

// The gradient noise scale meter's inputs (ZeroEngine.gns).
typedef struct {
    // Gradient noise scale meter (common/gns.h; McCandlish et al. 2018, App. A). On the micro-steps
    // the trainer sets measure_local_grad_norm for (train/noise_scale.h, the table there),
    // zero_grads_unit_ready adds each unit's squared norm of THIS rank's own gradient, read before
    // the unit's collective starts.
    int measure_local_grad_norm;
    double local_grad_norm_sq;      // this rank, summed over units, this step (GPU: read back in zero_optimizer_step)
    double local_grad_norm_sq_mean; // its mean over ranks (zero_optimizer_step)
    double grad_norm_sq;            // the reduced global gradient's, before clipping (zero_optimizer_step)
} ZeroGNSNorms;

// Where -zo, -zp and -zd ask the state to live (train/train_setup.h fills it; zero_init_placed takes
// it): 0 = in RAM, else the offload extension's placement (zero/offload/offload_state.h's
// ZeroPlacement) and the NVMe directory. The lesson build (ZERO_EXT=0) accepts only 0.
typedef struct {
    int optimizer, params;
    const char* dir;
} ZeroOffloadArgs;

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
    ZeroTiedRows tied;   // the tied wte's rows set aside or reduced early (below)
#if ZERO_GPU_BUILD
    ZeroDevice gpu;                    // the GPU engine's state (zero/gpu/device_state.h)
#endif
#if ZERO_EXT
    ZeroOffload offload;               // -zo, -zp (zero/offload/offload.h)
#endif
    ZeroRingQueue ring;  // the ring collectives' queue (zero/comm_ring.h)
    // Accounting
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_working, bytes_ring; // the state's size, wherever it lives
    long long sent_elements_step, sent_elements_total; // ring count, bulk collectives only
    int scalar_all_reduces_step;
    double comm_wait_s_step, comm_wait_s_total;        // exposed: time spent waiting
    ZeroGNSNorms gns;    // the gradient noise scale meter's squared norms (below)
#if ZERO_EXT
    ZeroPP* pp;          // ZeRO++ (zero/zeropp/zeropp_state.h): qwZ, hpZ, qgZ; NULL when off
#endif
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
    else if (unit > UNIT_FINAL(&layout->config)) snprintf(buf, cap, "%d (wte vocab chunk %d)", unit, unit - UNIT_FINAL(&layout->config));
    else snprintf(buf, cap, "%d (layer %d)", unit, unit - 1);
    return buf;
}

#endif // ZERO_ENGINE_H
