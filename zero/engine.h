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
    ZERO_OP_SCALAR_ALL_REDUCE, ZERO_OP_BARRIER
} ZeroOpKind;
static const char* const zero_op_names[] = {"none", "all_reduce", "reduce_scatter", "all_gather", "gather",
                                            "scalar all_reduce", "barrier"};

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
    // GPU build, collectives on the comm stream (zero/engine_gpu.cuh): `done` fires when it is complete;
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

#if ZERO_GPU_BUILD
// One optimizer step's results on their way back to the host (zero/optimizer_gpu.cuh): the
// engine keeps three (step t in slot t mod 3), so the trainer can read step t's while step t+1
// runs, and step t-1's end event is still there to time the gap between them.
#define ZERO_STEP_SLOTS 3
typedef struct {
    cudaEvent_t begin, done;    // compute stream: the step's start; after its AdamW and the norm copy
    float* norm_host;           // pinned, 2 floats: squared norm of the summed gradient (owned slices,
                                // all ranks), and the GNS meter's local squared norm summed over ranks
    long long sent_elements;    // host counters of the step, kept when it was enqueued
    double host_comm_wait_s;
    int stall_count;            // event pairs used in this slot's third of stall_begin/stall_end
    int step;                   // the step it holds (from 1)
    int pending;                // enqueued, not yet read by zero_step_result
} ZeroStepSlot;
#endif

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
    // GPU build (zero/engine_gpu.cuh): params, grads, master, m, v live on the device. `grads`
    // (bf16) holds one micro-step's gradient (stages 0, 1; stages 2, 3 use working units);
    // grads_fp32 accumulates the micro-steps and is what the optimizer reads: the full buffer at
    // stages 0, 1 (reduced on the last micro-step), the rank's shard at stages 2, 3.
    float* grads_fp32;
    int* grad_folds;                   // per unit: micro-steps added into grads_fp32 this step
    cudaEvent_t* grad_fold_done;       // stages 0, 1, per unit: its last addition (comm stream)
    float* master;                     // fp32 master weights, stored (full or shard) like m and v
    cudaStream_t compute, comm;        // the model's kernels; the engine's bulk collectives
    cudaEvent_t compute_mark, comm_mark; // re-recorded whenever the other stream must wait for this one
    cudaEvent_t host_mark;             // re-recorded where the host waits (zero_device_wait)
    // Exposed communication: an event pair around every wait of the compute stream on the comm
    // stream (zero_compute_wait), read and summed when the step's results are read. One third
    // of stall_capacity pairs per step slot; stall_base is the current step's.
    cudaEvent_t *stall_begin, *stall_end;
    int stall_count, stall_capacity, stall_base;
    float* norm_device;                // [0] squared norm of the owned gradient slices, [1] the GNS
    float* norm_scratch;               // meter's local squared norm; scratch of the norm kernels
    float* grad_scale_device;          // AdamW's gradient scale (clipping and 1/world_size), 1 float
    AdamWPlan adamw_plan;              // kernels/adamw.cuh: every owned tensor slice, one launch
    int* adamw_unit_chunks;            // host, num_units + 1: each unit's first chunk in the plan
    ZeroStepSlot step_slots[ZERO_STEP_SLOTS];
    float* host_float;                 // host staging of one unit: set-up, checkpoints, ZERO_COMM_MPI
    bf16* host_bf16;
    long long ops_issued;              // device collectives issued so far (ZeroOp.issued)
#if !ZERO_COMM_MPI
    ncclComm_t nccl;                   // NULL with one rank
#endif
#endif
    // Ring collectives (zero/comm_ring.h): the queue (one ring in flight at a time) and its
    // receive buffer, one chunk of the largest ring.
    ZeroOp *ring_head, *ring_tail;
    float* ring_scratch;
    size_t ring_scratch_capacity;
    long long ring_count;              // rings started so far: their tags
    // Accounting
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_working, bytes_ring;
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

#endif // ZERO_ENGINE_H
