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
// Placement (zero/offload/offload.h): where the optimizer state and the parameter shard live

typedef enum { ZERO_PLACE_NONE, ZERO_PLACE_CPU, ZERO_PLACE_NVME } ZeroPlacement;
static const char* const zero_placement_names[] = {"none", "cpu", "nvme"};

// What -zo, -zp and -zd ask for (common/args.h): ZeroPlacement values and the NVMe directory.
typedef struct {
    int optimizer, params;
    const char* dir;
} ZeroOffloadArgs;

// The regions of a unit's offloaded state, in file (and staging) order.
typedef enum { ZERO_REGION_PARAMS, ZERO_REGION_MASTER, ZERO_REGION_M, ZERO_REGION_V, ZERO_NUM_REGIONS } ZeroRegion;
static const char* const zero_region_names[ZERO_NUM_REGIONS] = {"parameters", "master weights", "Adam m", "Adam v"};

// Host memory for one piece of a unit's regions (zero/offload/offload.h), each region's part at a fixed
// stride, with their reads and writes.
typedef struct {
    int unit, piece;    // what it holds; unit -1 when free
    char* data;         // NVME_ALIGN-aligned
    NvmeRequest read[ZERO_NUM_REGIONS], write[ZERO_NUM_REGIONS];
} ZeroOffloadSlot;

#define ZERO_OFFLOAD_SLOTS 3 // optimizer: piece q+1 read, piece q updated, piece q-1 written back
#define ZERO_OFFLOAD_PIECE ((size_t)1 << 20) // elements of a region per piece: 4 MiB of fp32

typedef struct {
    int optimizer, params;            // ZeroPlacement; NONE = where the engine keeps it anyway
    int active;                       // any region on NVMe
    char dir[4096], path[4400];       // -zd and this rank's offload file in it
    int fd, direct;                   // the file; O_DIRECT granted
    NvmeIO io;
    int on_nvme[ZERO_NUM_REGIONS];    // which regions live in the file
    size_t* region_bytes;             // [unit * ZERO_NUM_REGIONS + region], rounded to NVME_ALIGN; 0: not in the file
    uint64_t* unit_offset;            // [unit]: the unit's first region in the file
    int* piece_first;                 // [unit]: its first piece's index (pieces numbered in unit order)
    uint64_t* checksum;               // [piece * ZERO_NUM_REGIONS + region]: of what this job last wrote there
    size_t file_bytes, slot_stride[ZERO_NUM_REGIONS], slot_bytes, bounce_bytes;
    size_t piece;                     // elements per piece (ZERO_OFFLOAD_PIECE)
    int num_pieces;
    ZeroOffloadSlot opt_slot[ZERO_OFFLOAD_SLOTS];
    char* bounce[2];                  // stage 3, -zp nvme: a unit's parameter shard read for its all-gather
    NvmeRequest bounce_read[2];
    int bounce_unit[2], bounce_next;
    int seq;                          // the optimizer's piece counter this step (use order)
    int prefetched;                   // the optimizer's first reads were issued this step
    long long read_at_step, written_at_step; // io.bytes_*_submitted at the step's start
    double io_wait_s_step, io_wait_s_total;  // exposed: time the engine waited for the disk
} ZeroOffload;

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
    int awaiting_read; // params, -zp nvme: the shard is being read from NVMe into this bounce buffer (0: none, else 1 + index)
#if ZERO_GPU_BUILD
    cudaEvent_t released; // params: the compute stream's last read of data (the next gather waits)
#endif
} ZeroWorkingUnit;

#if ZERO_GPU_BUILD
// One optimizer step's results on their way back to the host (zero/gpu/optimizer_gpu.cuh): the
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
    // Stages 2, 3, the tied wte (zero_grads_unit_partly_ready): rows of a wte unit's gradient
    // the LM head left and the encoder still adds to, set aside from the unit's first
    // reduce-scatter until the encoder asks for the unit again. Per unit: how many rows and where
    // they start in the arena (kept_ids: row inside the unit; kept_data: kept_row_len floats each).
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
    // Stages 0, 1, CPU, N > 1 (zero/tied_rows/tied_rows_cpu.h): the same arena holds, on the last
    // micro-step, the rows of every wte unit the encoder adds to while the unit is reduced;
    // kept_data then points at this rank's block of tied_gather ([R ids as floats][R x C values],
    // N blocks, one all-gather after the encoder). tied_early[unit]: 1 from the unit's early
    // reduction to its encoder part, 2 after it; tied_unit: the unit-sized buffer the encoder adds into.
    int* tied_early;
    float* tied_gather;
    float* tied_unit;
    size_t tied_block_numel, tied_rows; // R(C+1), R (zero_tied_rows_numel); 0: dense schedule
    size_t tied_row_ids;                // ids per unit (row id = unit * tied_row_ids + row)
    int tied_positions, tied_wpe_row;   // T: wpe's rows the encoder adds to, from unit 0's row tied_wpe_row
    ZeroOp tied_op;                     // the rows' all-gather
#if ZERO_GPU_BUILD
    // GPU build (zero/gpu/engine_gpu.cuh): params, grads, master, m, v live on the device. `grads`
    // (bf16) holds one micro-step's gradient (stages 0, 1; stages 2, 3 use working units);
    // grads_fp32 accumulates the micro-steps and is what the optimizer reads: the full buffer at
    // stages 0, 1 (reduced on the last micro-step), the rank's shard at stages 2, 3.
    float* grads_fp32;
    int* grad_folds;                   // per unit: reductions added into grads_fp32 this step (micro-steps;
                                       // stages 2, 3: twice per micro-step for a wte unit)
    int* grad_open;                    // stages 0, 1, per unit: asked for by backward, not yet ready (a
                                       // wte unit is asked for twice per micro-step: LM head, encoder)
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
    // ZeRO-Offload on the GPU (zero/offload/offload_gpu.cuh): the host's side of the state, by shard layout.
    float *host_master, *host_m, *host_v; // -zo cpu: this rank's optimizer shard, pinned
    float* host_grads;                 // -zo cpu|nvme: the reduced fp32 gradient shard, copied down as each unit's last addition ends
    float* host_grad_scale;            // -zo cpu|nvme: AdamW's gradient scale (pinned, 1 float), from the device
    bf16* host_params;                 // -zo cpu|nvme: the updated parameter shard on its way up; -zp cpu: where the shard lives
    cudaStream_t copy;                 // the offload's host<->device copies
    cudaEvent_t *grads_down, *params_up; // per unit: the gradient slice is on the host / the parameters are back up
    long long d2h_bytes_step, h2d_bytes_step; // this step's copies (bytes)
    double copy_wait_s_step;           // host time waiting for a gradient copy (exposed)
#endif
    ZeroOffload offload;               // -zo, -zp (zero/offload/offload.h)
    // Ring collectives (zero/comm_ring.h): the queue (one ring in flight at a time) and its
    // receive buffer, one chunk of the largest ring.
    ZeroOp *ring_head, *ring_tail;
    float* ring_scratch;
    size_t ring_scratch_capacity;
    long long ring_count;              // rings started so far: their tags
    // Accounting
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_working, bytes_ring; // the state's size, wherever it lives
    long long sent_elements_step, sent_elements_total; // ring count, bulk collectives only
    int scalar_all_reduces_step;
    double comm_wait_s_step, comm_wait_s_total;        // exposed: time spent waiting
    // Gradient noise scale meter (common/gns.h; McCandlish et al. 2018, App. A). On the micro-steps
    // the trainer sets measure_local_grad_norm for (train/noise_scale.h, the table there),
    // zero_grads_unit_ready adds each unit's squared norm of THIS rank's own gradient, read before
    // the unit's collective starts.
    int measure_local_grad_norm;
    double local_grad_norm_sq;      // this rank, summed over units, this step (GPU: read back in zero_optimizer_step)
    double local_grad_norm_sq_mean; // its mean over ranks (zero_optimizer_step)
    double grad_norm_sq;            // the reduced global gradient's, before clipping (zero_optimizer_step)
    struct ZeroPP* pp;              // ZeRO++ (zero/zeropp/zeropp.h): qwZ, hpZ, qgZ; NULL when off
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
