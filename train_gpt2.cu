/*
 * train_gpt2.cu: the GPU trainer for GPT-2 (CUDA, cuBLASLt, NCCL, Open MPI).
 *
 * Same model, command line, model files and log as the CPU trainer (train_gpt2.c): the host
 * code is shared through common/ (args, checkpoint, dataloader, tokenizer, schedule, logger,
 * init). What differs is where the numbers live: bf16 parameters, gradients and activations on
 * the GPU, fp32 accumulation inside every kernel, and fp32 master weights plus AdamW m, v.
 * Kernels are in kernels/ (one op family per file); their CPU twins in cpu/ are the reference.
 *
 * Ranks: without mpirun, one process on one GPU. With `mpirun -np N ./train_gpt2cu ...`, rank 0
 * creates the NCCL unique id and broadcasts it over MPI, each rank takes the GPU of its local
 * rank, and NCCL carries all gradient and parameter traffic on a dedicated stream.
 *
 * ZeRO (compile-time ZERO_STAGE, DESIGN.md "Stages"): the GPU side of the engine is the
 * ZeroGPU section below. It follows zero.cuh's interface (params_unit / params_unit_done /
 * grads_unit / grads_unit_ready / optimizer_step over the unit-ordered flat buffer of
 * common/gpt2_config.h) and issues one collective per unit on the comm stream as soon as an
 * event says backward has finished that unit. zero.cuh is included for its shared constants
 * (ZERO_ALIGN, AdamWConfig); its CPU engine functions are not used here.
 *
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * test_gpt2.cu includes this file with TESTING defined to reuse everything but main().
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include "common/args.h"
#include "common/checkpoint.h"
#include "common/dataloader.h"
#include "common/gpt2_config.h"
#include "common/init.h"
#include "common/logger.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/tokenizer.h"
#include "zero.cuh"

#include "common/cuda_utils.cuh"
#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"

#ifndef MPI_CHECK // zero.cuh may already define it (same contract: call, file, line, MPI's string)
#define MPI_CHECK(call)                                                                            \
    do {                                                                                           \
        int mpi_check_rc_ = (call);                                                                \
        if (mpi_check_rc_ != MPI_SUCCESS) {                                                        \
            char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                             \
            int mpi_check_len_ = 0;                                                                \
            MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);                      \
            fprintf(stderr, "error: MPI call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                    mpi_check_msg_);                                                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#endif

// Peak dense bf16 tensor-core throughput used for MFU (H100/H200 SXM, NVIDIA datasheet).
#define PEAK_BF16_FLOPS 989e12

static void* device_alloc(size_t bytes, size_t* counter, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 16);
    if (err != cudaSuccess) {
        fprintf(stderr, "error: out of GPU memory allocating %s (%.1f MiB): %s; expected a smaller -b/-t or model\n",
                what, bytes / 1048576.0, cudaGetErrorString(err));
        exit(1);
    }
    if (counter) *counter += bytes;
    return p;
}

static void* host_alloc(size_t bytes, const char* what) {
    void* p = calloc(bytes > 0 ? bytes : 1, 1);
    if (p == NULL) {
        fprintf(stderr, "error: out of host memory allocating %s (%zu bytes)\n", what, bytes);
        exit(1);
    }
    return p;
}

// ----------------------------------------------------------------------------------------------
// Ranks: MPI only when launched by mpirun/srun; NCCL only with more than one rank.

typedef struct {
    int rank, world_size, local_rank;
    int use_mpi;
    ncclComm_t nccl;
} Ranks;

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL || getenv("PMI_SIZE") != NULL;
}

static void ranks_start(Ranks* r, int* argc, char*** argv) {
    r->rank = 0;
    r->world_size = 1;
    r->local_rank = 0;
    r->use_mpi = launched_by_mpi();
    r->nccl = NULL;
    if (r->use_mpi) {
        MPI_CHECK(MPI_Init(argc, argv));
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r->rank));
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &r->world_size));
        MPI_Comm node;
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r->rank, MPI_INFO_NULL, &node));
        MPI_CHECK(MPI_Comm_rank(node, &r->local_rank));
        MPI_CHECK(MPI_Comm_free(&node));
    }
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        fprintf(stderr, "error: no CUDA device visible; expected a GPU (sm_80 or newer) for train_gpt2cu\n");
        exit(1);
    }
    if (r->world_size > 1 && r->local_rank >= device_count) {
        fprintf(stderr, "error: rank %d: local rank %d but only %d GPUs on this node; expected at most one rank per GPU "
                "(NCCL cannot share a GPU between ranks)\n", r->rank, r->local_rank, device_count);
        exit(1);
    }
    CUDA_CHECK(cudaSetDevice(r->local_rank % device_count));
    if (r->world_size > 1) {
        // Rank 0 makes the NCCL id; MPI carries it to everyone (NCCL docs, "Creating a communicator").
        ncclUniqueId id;
        if (r->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
        NCCL_CHECK(ncclCommInitRank(&r->nccl, r->world_size, id, r->rank));
    }
}

static void ranks_stop(Ranks* r) {
    if (r->nccl != NULL) NCCL_CHECK(ncclCommDestroy(r->nccl));
    if (r->use_mpi) MPI_CHECK(MPI_Finalize());
}

// ----------------------------------------------------------------------------------------------
// ZeroGPU: the GPU side of the ZeRO engine.
//
// Storage by stage (Ψ = layout->padded_numel, N = world_size, S = Ψ/N; bf16 unless noted):
//   stage 0: params Ψ, grads Ψ, master/m/v fp32 Ψ each           (every rank updates everything)
//   stage 1: params Ψ, grads Ψ, master/m/v fp32 S each           (each rank updates its slices)
//   stage 2: params Ψ, grads S + working unit buffers, fp32 S x3
//   stage 3: params S + working unit buffers, grads S + working, fp32 S x3
// A rank's slice of unit u is [u.offset + rank*u.shard_numel, +u.shard_numel) of the flat
// buffer; in a shard buffer it sits at u.offset / N (units are padded to multiples of N*align,
// so shard buffers are the concatenation of every unit's slice, in unit order).
// Working buffers (stages 2-3): the embedding unit (used at both ends of forward and backward)
// has its own; layer and final units rotate through two, so one can be filled by a collective
// while the other is computed on.

#define ZERO_SLOTS 2

typedef struct {
    bf16* buffer;
    int unit;      // unit held (-1: none)
    int in_use;    // handed to compute and not yet released
    cudaEvent_t ready; // comm stream: the all-gather into it finished
    cudaEvent_t free;  // compute stream: the last reader/writer finished
} ZeroSlot;

typedef struct {
    const ParamLayout* layout;
    int rank, world_size, stage;
    ncclComm_t nccl; // NULL with one rank: collectives degenerate to copies
    cudaStream_t compute, comm;
    bf16* params;
    bf16* grads;
    float *master, *m, *v;
    ZeroSlot param_slots[ZERO_SLOTS], param_embedding; // stage 3
    ZeroSlot grad_slots[ZERO_SLOTS], grad_embedding;   // stages 2-3
    int next_grad_slot;                                // stages 2-3: slots alternate, so a unit's reduce-scatter
                                                       // has the next unit's whole backward to finish
    bf16* grad_shard_scratch;                          // stages 2-3: reduce-scatter output, one unit's slice
    cudaEvent_t compute_done;
    cudaEvent_t wait_begin, wait_end; // timed: how long compute waits for comm before the optimizer
    cudaEvent_t* unit_grads_done;                      // per unit, compute stream
    cudaEvent_t comm_done;
    float* norm_device;
    float* norm_scratch;
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_working;
    double elements_sent; // this step, this rank (ring-algorithm counts, DESIGN.md table)
    float comm_wait_ms;   // this step: compute stream waiting for comm before the optimizer
} ZeroGPU;

static size_t zero_gpu_shard_offset(const ZeroGPU* z, int unit) { return z->layout->units[unit].offset / (size_t)z->world_size; }

static void zero_gpu_slot_init(ZeroSlot* slot, size_t numel, size_t* counter, const char* what) {
    slot->buffer = (bf16*)device_alloc(numel * sizeof(bf16), counter, what);
    slot->unit = -1;
    slot->in_use = 0;
    CUDA_CHECK(cudaEventCreateWithFlags(&slot->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot->free, cudaEventDisableTiming));
}

static void zero_gpu_slot_free(ZeroSlot* slot) {
    CUDA_CHECK(cudaFree(slot->buffer));
    CUDA_CHECK(cudaEventDestroy(slot->ready));
    CUDA_CHECK(cudaEventDestroy(slot->free));
}

static void zero_gpu_init(ZeroGPU* z, const ParamLayout* layout, int rank, int world_size, ncclComm_t nccl) {
    memset(z, 0, sizeof(*z));
    z->layout = layout;
    z->rank = rank;
    z->world_size = world_size;
    z->stage = ZERO_STAGE;
    z->nccl = nccl;
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->comm, cudaStreamNonBlocking));
    size_t full = layout->padded_numel, shard = layout->shard_numel;
    size_t params_numel = z->stage == 3 ? shard : full;
    size_t grads_numel = z->stage >= 2 ? shard : full;
    size_t optimizer_numel = z->stage >= 1 ? shard : full;
    z->params = (bf16*)device_alloc(params_numel * sizeof(bf16), &z->bytes_params, "parameters");
    z->grads = (bf16*)device_alloc(grads_numel * sizeof(bf16), &z->bytes_grads, "gradients");
    z->master = (float*)device_alloc(optimizer_numel * sizeof(float), &z->bytes_optimizer, "master weights");
    z->m = (float*)device_alloc(optimizer_numel * sizeof(float), &z->bytes_optimizer, "Adam m");
    z->v = (float*)device_alloc(optimizer_numel * sizeof(float), &z->bytes_optimizer, "Adam v");
    CUDA_CHECK(cudaMemset(z->m, 0, optimizer_numel * sizeof(float)));
    CUDA_CHECK(cudaMemset(z->v, 0, optimizer_numel * sizeof(float)));
    size_t largest_other = 0, largest_shard = 0;
    for (int u = 0; u < layout->num_units; u++) {
        if (u != UNIT_EMBEDDING && layout->units[u].padded_numel > largest_other) largest_other = layout->units[u].padded_numel;
        if (layout->units[u].shard_numel > largest_shard) largest_shard = layout->units[u].shard_numel;
    }
    size_t embedding_numel = layout->units[UNIT_EMBEDDING].padded_numel;
    if (z->stage == 3) {
        for (int i = 0; i < ZERO_SLOTS; i++) zero_gpu_slot_init(&z->param_slots[i], largest_other, &z->bytes_working, "parameter working unit");
        zero_gpu_slot_init(&z->param_embedding, embedding_numel, &z->bytes_working, "embedding working unit");
    }
    if (z->stage >= 2) {
        for (int i = 0; i < ZERO_SLOTS; i++) zero_gpu_slot_init(&z->grad_slots[i], largest_other, &z->bytes_working, "gradient working unit");
        zero_gpu_slot_init(&z->grad_embedding, embedding_numel, &z->bytes_working, "embedding gradient working unit");
        z->grad_shard_scratch = (bf16*)device_alloc(largest_shard * sizeof(bf16), &z->bytes_working, "reduce-scatter scratch");
    }
    z->unit_grads_done = (cudaEvent_t*)host_alloc((size_t)layout->num_units * sizeof(cudaEvent_t), "events");
    for (int u = 0; u < layout->num_units; u++) CUDA_CHECK(cudaEventCreateWithFlags(&z->unit_grads_done[u], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&z->comm_done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&z->compute_done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&z->wait_begin));
    CUDA_CHECK(cudaEventCreate(&z->wait_end));
    z->norm_device = (float*)device_alloc(sizeof(float), NULL, "norm");
    z->norm_scratch = (float*)device_alloc(GLOBAL_NORM_BLOCKS * sizeof(float), NULL, "norm scratch");
}

static void zero_gpu_free(ZeroGPU* z) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(z->params)); CUDA_CHECK(cudaFree(z->grads));
    CUDA_CHECK(cudaFree(z->master)); CUDA_CHECK(cudaFree(z->m)); CUDA_CHECK(cudaFree(z->v));
    if (z->stage == 3) {
        for (int i = 0; i < ZERO_SLOTS; i++) zero_gpu_slot_free(&z->param_slots[i]);
        zero_gpu_slot_free(&z->param_embedding);
    }
    if (z->stage >= 2) {
        for (int i = 0; i < ZERO_SLOTS; i++) zero_gpu_slot_free(&z->grad_slots[i]);
        zero_gpu_slot_free(&z->grad_embedding);
        CUDA_CHECK(cudaFree(z->grad_shard_scratch));
    }
    for (int u = 0; u < z->layout->num_units; u++) CUDA_CHECK(cudaEventDestroy(z->unit_grads_done[u]));
    free(z->unit_grads_done);
    CUDA_CHECK(cudaEventDestroy(z->comm_done));
    CUDA_CHECK(cudaEventDestroy(z->compute_done));
    CUDA_CHECK(cudaEventDestroy(z->wait_begin));
    CUDA_CHECK(cudaEventDestroy(z->wait_end));
    CUDA_CHECK(cudaFree(z->norm_device));
    CUDA_CHECK(cudaFree(z->norm_scratch));
    CUDA_CHECK(cudaStreamDestroy(z->compute));
    CUDA_CHECK(cudaStreamDestroy(z->comm));
}

// --- The three collectives, on the comm stream. With one rank they reduce to copies, so the
// single-GPU build runs the same buffer choreography as a multi-GPU one.

// all-gather: each rank sends its shard_numel-element slice (at full_unit + rank*shard_numel, or
// from `shard` if that is elsewhere) and receives everyone's into full_unit (N*shard_numel).
// Sends (N-1)*shard_numel elements per rank (ring).
static void zero_gpu_all_gather(ZeroGPU* z, bf16* full_unit, const bf16* shard, size_t shard_numel) {
    bf16* own = full_unit + (size_t)z->rank * shard_numel;
    if (z->nccl != NULL) {
        NCCL_CHECK(ncclAllGather(shard, full_unit, shard_numel, ncclBfloat16, z->nccl, z->comm));
        z->elements_sent += (double)(z->world_size - 1) * shard_numel;
    } else if (own != shard) {
        CUDA_CHECK(cudaMemcpyAsync(own, shard, shard_numel * sizeof(bf16), cudaMemcpyDeviceToDevice, z->comm));
    }
}

// reduce-scatter (average over ranks): reads full_unit (N*shard_numel) on every rank, writes this
// rank's averaged slice to shard (may be full_unit + rank*shard_numel: NCCL's in-place form).
// Sends (N-1)*shard_numel elements per rank (ring).
static void zero_gpu_reduce_scatter(ZeroGPU* z, bf16* shard, const bf16* full_unit, size_t shard_numel) {
    const bf16* own = full_unit + (size_t)z->rank * shard_numel;
    if (z->nccl != NULL) {
        NCCL_CHECK(ncclReduceScatter(full_unit, shard, shard_numel, ncclBfloat16, ncclAvg, z->nccl, z->comm));
        z->elements_sent += (double)(z->world_size - 1) * shard_numel;
    } else if (own != shard) {
        CUDA_CHECK(cudaMemcpyAsync(shard, own, shard_numel * sizeof(bf16), cudaMemcpyDeviceToDevice, z->comm));
    }
}

// all-reduce (average over ranks) of n elements in place. Sends 2(N-1)/N * n elements per rank.
static void zero_gpu_all_reduce(ZeroGPU* z, bf16* buffer, size_t n) {
    if (z->nccl == NULL) return;
    NCCL_CHECK(ncclAllReduce(buffer, buffer, n, ncclBfloat16, ncclAvg, z->nccl, z->comm));
    z->elements_sent += 2.0 * (double)(z->world_size - 1) / z->world_size * n;
}

// --- Parameters

// Stage 3: start gathering `unit` into a working slot on the comm stream (after the slot's last
// reader is done); returns the slot, or NULL if every slot is busy (no prefetch then).
static ZeroSlot* zero_gpu_gather_unit(ZeroGPU* z, int unit) {
    ZeroSlot* slot = NULL;
    if (unit == UNIT_EMBEDDING) slot = &z->param_embedding;
    else // an empty slot if there is one, else any slot no kernel is using
        for (int i = 0; i < ZERO_SLOTS; i++)
            if (!z->param_slots[i].in_use && (slot == NULL || z->param_slots[i].unit == -1)) slot = &z->param_slots[i];
    if (slot == NULL || slot->in_use) return NULL;
    const ParamUnit* u = &z->layout->units[unit];
    CUDA_CHECK(cudaStreamWaitEvent(z->comm, slot->free, 0));
    zero_gpu_all_gather(z, slot->buffer, z->params + zero_gpu_shard_offset(z, unit), u->shard_numel);
    CUDA_CHECK(cudaEventRecord(slot->ready, z->comm));
    slot->unit = unit;
    return slot;
}

static ZeroSlot* zero_gpu_find_param_slot(ZeroGPU* z, int unit) {
    if (unit == UNIT_EMBEDDING) return z->param_embedding.unit == unit ? &z->param_embedding : NULL;
    for (int i = 0; i < ZERO_SLOTS; i++) if (z->param_slots[i].unit == unit) return &z->param_slots[i];
    return NULL;
}

/*
 * The unit's full parameters (padded_numel bf16), ready for kernels on the compute stream, valid
 * until zero_gpu_params_unit_done. Stage 3 gathers it if it is not resident and starts the
 * all-gather of prefetch_unit (-1: none) so it overlaps this unit's compute.
 */
static bf16* zero_gpu_params_unit(ZeroGPU* z, int unit, int prefetch_unit) {
    if (z->stage < 3) return z->params + z->layout->units[unit].offset;
    ZeroSlot* slot = zero_gpu_find_param_slot(z, unit);
    if (slot == NULL) slot = zero_gpu_gather_unit(z, unit);
    if (slot == NULL) { fprintf(stderr, "error: internal: ZeRO-3 has no free working slot for unit %d\n", unit); exit(1); }
    slot->in_use = 1;
    CUDA_CHECK(cudaStreamWaitEvent(z->compute, slot->ready, 0));
    if (prefetch_unit >= 0 && zero_gpu_find_param_slot(z, prefetch_unit) == NULL) zero_gpu_gather_unit(z, prefetch_unit);
    return slot->buffer;
}

static void zero_gpu_params_unit_done(ZeroGPU* z, int unit) {
    if (z->stage < 3) return;
    ZeroSlot* slot = zero_gpu_find_param_slot(z, unit);
    if (slot == NULL) return;
    slot->in_use = 0; // data stays valid until the slot is reused (a later use may skip the gather)
    CUDA_CHECK(cudaEventRecord(slot->free, z->compute));
}

// --- Gradients

static ZeroSlot* zero_gpu_find_grad_slot(ZeroGPU* z, int unit) {
    if (unit == UNIT_EMBEDDING) return z->grad_embedding.unit == unit ? &z->grad_embedding : NULL;
    for (int i = 0; i < ZERO_SLOTS; i++) if (z->grad_slots[i].unit == unit) return &z->grad_slots[i];
    return NULL;
}

/*
 * The unit's full gradient buffer (padded_numel bf16) that backward accumulates into this
 * micro-step. Stages 0-1: the unit's part of the full gradient buffer. Stages 2-3: a zeroed
 * working buffer, taken once its previous unit's reduce-scatter has finished.
 */
static bf16* zero_gpu_grads_unit(ZeroGPU* z, int unit) {
    if (z->stage < 2) return z->grads + z->layout->units[unit].offset;
    ZeroSlot* slot = zero_gpu_find_grad_slot(z, unit);
    if (slot != NULL) return slot->buffer;
    if (unit == UNIT_EMBEDDING) slot = &z->grad_embedding;
    else {
        slot = &z->grad_slots[z->next_grad_slot];
        if (slot->unit != -1) slot = NULL; // still held by a unit whose backward is not finished
        else z->next_grad_slot = (z->next_grad_slot + 1) % ZERO_SLOTS;
    }
    if (slot == NULL) { fprintf(stderr, "error: internal: ZeRO-%d has no free gradient slot for unit %d\n", z->stage, unit); exit(1); }
    CUDA_CHECK(cudaStreamWaitEvent(z->compute, slot->free, 0)); // its last reduce-scatter has read it
    CUDA_CHECK(cudaMemsetAsync(slot->buffer, 0, z->layout->units[unit].padded_numel * sizeof(bf16), z->compute));
    slot->unit = unit;
    return slot->buffer;
}

/*
 * Backward has finished `unit` for this micro-step. Its collective starts now on the comm
 * stream, behind an event, so it overlaps the backward of the units below it:
 *   stage 0: all-reduce the unit's gradients (last micro-step only; earlier ones accumulate locally)
 *   stage 1: reduce-scatter them in place (last micro-step only)
 *   stage 2-3: reduce-scatter the working buffer every micro-step, add the slice into the
 *              gradient shard, release the working buffer.
 */
static void zero_gpu_grads_unit_ready(ZeroGPU* z, int unit, int last_micro_step) {
    const ParamUnit* u = &z->layout->units[unit];
    if (z->stage < 2 && !last_micro_step) return;
    CUDA_CHECK(cudaEventRecord(z->unit_grads_done[unit], z->compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->comm, z->unit_grads_done[unit], 0));
    if (z->stage == 0) {
        zero_gpu_all_reduce(z, z->grads + u->offset, u->padded_numel);
    } else if (z->stage == 1) {
        bf16* full_unit = z->grads + u->offset;
        zero_gpu_reduce_scatter(z, full_unit + (size_t)z->rank * u->shard_numel, full_unit, u->shard_numel);
    } else {
        ZeroSlot* slot = zero_gpu_find_grad_slot(z, unit);
        bf16* shard = z->grads + zero_gpu_shard_offset(z, unit);
        const bf16* reduced = slot->buffer; // one rank: the "scattered" slice is the whole unit
        if (z->nccl != NULL) {
            zero_gpu_reduce_scatter(z, z->grad_shard_scratch, slot->buffer, u->shard_numel);
            reduced = z->grad_shard_scratch;
        }
        residual_forward_cuda(shard, shard, reduced, u->shard_numel, z->comm); // shard += this micro-step's slice
        CUDA_CHECK(cudaEventRecord(slot->free, z->comm));
        slot->unit = -1;
    }
}

// Zero the gradients a step accumulates into (full buffer, or the shard in stages 2-3).
static void zero_gpu_grads_zero(ZeroGPU* z) {
    size_t n = z->stage >= 2 ? z->layout->shard_numel : z->layout->padded_numel;
    CUDA_CHECK(cudaMemsetAsync(z->grads, 0, n * sizeof(bf16), z->compute));
    z->elements_sent = 0.0;
}

// --- Owned ranges: the part of unit u this rank's optimizer updates, and where it lives.

typedef struct {
    size_t begin, end;   // unit-local element range
    size_t state_base;   // index of `begin` in master/m/v
    size_t grad_base;    // index of `begin` in grads
    size_t param_base;   // index of `begin` in params
} OwnedRange;

static OwnedRange zero_gpu_owned(const ZeroGPU* z, int unit) {
    const ParamUnit* u = &z->layout->units[unit];
    OwnedRange r;
    if (z->stage == 0) { r.begin = 0; r.end = u->padded_numel; }
    else { r.begin = (size_t)z->rank * u->shard_numel; r.end = r.begin + u->shard_numel; }
    size_t full = u->offset + r.begin, shard = zero_gpu_shard_offset(z, unit);
    r.state_base = z->stage == 0 ? full : shard;
    r.grad_base = z->stage >= 2 ? shard : full;
    r.param_base = z->stage == 3 ? shard : full;
    return r;
}

// Set every parameter from a full fp32 flat buffer on the host (init or model file): master
// gets the exact fp32 values of this rank's part, params their bf16 rounding.
static void zero_gpu_set_full_params(ZeroGPU* z, const float* full) {
    const ParamLayout* layout = z->layout;
    size_t params_numel = z->stage == 3 ? layout->shard_numel : layout->padded_numel;
    bf16* staging = (bf16*)host_alloc(params_numel * sizeof(bf16), "parameter staging");
    for (int u = 0; u < layout->num_units; u++) {
        const ParamUnit* unit = &layout->units[u];
        OwnedRange r = zero_gpu_owned(z, u);
        CUDA_CHECK(cudaMemcpy(z->master + r.state_base, full + unit->offset + r.begin, (r.end - r.begin) * sizeof(float),
                              cudaMemcpyHostToDevice));
        size_t begin = z->stage == 3 ? r.begin : 0, end = z->stage == 3 ? r.end : unit->padded_numel;
        size_t base = z->stage == 3 ? r.param_base : unit->offset;
        for (size_t i = begin; i < end; i++) staging[base + i - begin] = __float2bfloat16(full[unit->offset + i]);
    }
    CUDA_CHECK(cudaMemcpy(z->params, staging, params_numel * sizeof(bf16), cudaMemcpyHostToDevice));
    free(staging);
    for (int i = 0; z->stage == 3 && i < ZERO_SLOTS; i++) z->param_slots[i].unit = -1;
    if (z->stage == 3) z->param_embedding.unit = -1;
}

// Gather the full fp32 master weights into `full` (host, padded_numel) on every rank, for a
// checkpoint. Collective: every rank calls it.
static void zero_gpu_get_full_params(ZeroGPU* z, float* full) {
    const ParamLayout* layout = z->layout;
    CUDA_CHECK(cudaDeviceSynchronize());
    if (z->stage == 0) {
        CUDA_CHECK(cudaMemcpy(full, z->master, layout->padded_numel * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    size_t largest = 0;
    for (int u = 0; u < layout->num_units; u++) if (layout->units[u].padded_numel > largest) largest = layout->units[u].padded_numel;
    float* unit_buffer = (float*)device_alloc(largest * sizeof(float), NULL, "checkpoint gather");
    for (int u = 0; u < layout->num_units; u++) {
        const ParamUnit* unit = &layout->units[u];
        const float* shard = z->master + zero_gpu_shard_offset(z, u);
        if (z->nccl != NULL)
            NCCL_CHECK(ncclAllGather(shard, unit_buffer, unit->shard_numel, ncclFloat32, z->nccl, z->comm));
        else
            CUDA_CHECK(cudaMemcpyAsync(unit_buffer, shard, unit->shard_numel * sizeof(float), cudaMemcpyDeviceToDevice, z->comm));
        CUDA_CHECK(cudaStreamSynchronize(z->comm));
        CUDA_CHECK(cudaMemcpy(full + unit->offset, unit_buffer, unit->padded_numel * sizeof(float), cudaMemcpyDeviceToHost));
    }
    CUDA_CHECK(cudaFree(unit_buffer));
}

/*
 * Optimizer step t (from 1) with learning rate lr, after the last micro-step's backward:
 * wait for the gradient collectives, global norm from this rank's owned (already reduced)
 * gradient slices (one scalar all-reduce when they are shards), clip coefficient as
 * torch.nn.utils.clip_grad_norm_, AdamW on the owned slices (weight decay on 2-D tensors only),
 * then stages 1-2 all-gather the updated parameters unit by unit. Returns the norm before
 * clipping (a host sync: the norm is logged every step anyway).
 */
static float zero_gpu_optimizer_step(ZeroGPU* z, const AdamWConfig* opt, float lr, int t) {
    const ParamLayout* layout = z->layout;
    // Exposed communication: the time the compute stream stands still here, waiting for the
    // last gradient collectives (the rest overlapped backward). Read after the norm's sync.
    CUDA_CHECK(cudaEventRecord(z->comm_done, z->comm));
    CUDA_CHECK(cudaEventRecord(z->wait_begin, z->compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->compute, z->comm_done, 0));
    CUDA_CHECK(cudaEventRecord(z->wait_end, z->compute));
    for (int u = 0; u < layout->num_units; u++) {
        OwnedRange r = zero_gpu_owned(z, u);
        norm_squared_cuda(z->norm_device, z->norm_scratch, z->grads + r.grad_base, r.end - r.begin, u > 0, z->compute);
    }
    if (z->stage >= 1 && z->nccl != NULL) // sum of the ranks' squared norms: one float per rank
        NCCL_CHECK(ncclAllReduce(z->norm_device, z->norm_device, 1, ncclFloat32, ncclSum, z->nccl, z->compute));
    float norm_sq;
    CUDA_CHECK(cudaMemcpyAsync(&norm_sq, z->norm_device, sizeof(float), cudaMemcpyDeviceToHost, z->compute));
    CUDA_CHECK(cudaStreamSynchronize(z->compute));
    float norm = sqrtf(norm_sq);
    float wait_ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&wait_ms, z->wait_begin, z->wait_end));
    z->comm_wait_ms = wait_ms;
    float clip_coef = opt->grad_clip > 0.0f ? opt->grad_clip / (norm + 1e-6f) : 1.0f;
    float grad_scale = clip_coef < 1.0f ? clip_coef : 1.0f;
    uint32_t seed = (uint32_t)splitmix64((uint64_t)t);

    for (int u = 0; u < layout->num_units; u++) {
        const ParamUnit* unit = &layout->units[u];
        OwnedRange r = zero_gpu_owned(z, u);
        for (int i = 0; i < unit->num_tensors; i++) {
            const ParamTensor* pt = &layout->tensors[unit->first_tensor + i];
            size_t begin = pt->unit_offset > r.begin ? pt->unit_offset : r.begin;
            size_t end = pt->unit_offset + pt->numel < r.end ? pt->unit_offset + pt->numel : r.end;
            if (begin >= end) continue;
            size_t k = begin - r.begin;
            float wd = pt->ndim == 2 ? opt->weight_decay : 0.0f;
            adamw_update_cuda(z->params + r.param_base + k, z->master + r.state_base + k, z->grads + r.grad_base + k,
                              z->m + r.state_base + k, z->v + r.state_base + k, end - begin, lr, opt->beta1, opt->beta2,
                              opt->eps, wd, grad_scale, t, seed, unit->offset + begin, z->compute);
        }
    }
    if (z->stage == 1 || z->stage == 2) {
        // Every rank updated its slices; all-gather them back into the full bf16 parameters
        // before the next forward (unit by unit: (N-1) * shard_numel elements each).
        CUDA_CHECK(cudaEventRecord(z->compute_done, z->compute));
        CUDA_CHECK(cudaStreamWaitEvent(z->comm, z->compute_done, 0));
        for (int u = 0; u < layout->num_units; u++) {
            const ParamUnit* unit = &layout->units[u];
            bf16* full_unit = z->params + unit->offset;
            zero_gpu_all_gather(z, full_unit, full_unit + (size_t)z->rank * unit->shard_numel, unit->shard_numel);
        }
        CUDA_CHECK(cudaEventRecord(z->comm_done, z->comm));
        CUDA_CHECK(cudaStreamWaitEvent(z->compute, z->comm_done, 0));
    }
    if (z->stage == 3) { // the shards changed: every working copy is stale
        for (int i = 0; i < ZERO_SLOTS; i++) z->param_slots[i].unit = -1;
        z->param_embedding.unit = -1;
    }
    // The next collectives (stage 3's gathers of the updated shards, the next step's gradient
    // reductions) must start after this step's AdamW kernels.
    CUDA_CHECK(cudaEventRecord(z->compute_done, z->compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->comm, z->compute_done, 0));
    return norm;
}

// ----------------------------------------------------------------------------------------------
// The model

// Pointers to one layer's tensors inside a bf16 unit (full buffer or a gathered working copy).
typedef struct {
    bf16 *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    bf16 *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensorsGPU;

static LayerTensorsGPU layer_tensors_gpu(const ParamLayout* layout, int layer, bf16* unit_base) {
    const ParamTensor* t = &layout->tensors[param_tensor_index(layout, P_LN1W, layer)];
    LayerTensorsGPU lt;
    bf16** slots[NUM_LAYER_KINDS] = {&lt.ln1w, &lt.ln1b, &lt.qkvw, &lt.qkvb, &lt.attprojw, &lt.attprojb,
                                     &lt.ln2w, &lt.ln2b, &lt.fcw, &lt.fcb, &lt.fcprojw, &lt.fcprojb};
    for (int k = 0; k < NUM_LAYER_KINDS; k++) *slots[k] = unit_base + t[k].unit_offset;
    return lt;
}

// Activations forward keeps for backward (bf16 unless noted), sized for (B, T).
typedef struct {
    bf16* encoded;    // (B,T,C)
    bf16* ln1;        // (L,B,T,C)
    float* ln1_mean;  // (L,B,T) fp32
    float* ln1_rstd;  // (L,B,T) fp32
    bf16* qkv;        // (L,B,T,3C)
    bf16* atty;       // (L,B,T,C)
    float* att_lse;   // (L,B,NH,T) fp32: attention logsumexp per query row (no T x T matrix)
    bf16* attproj;    // (L,B,T,C)
    bf16* residual2;  // (L,B,T,C)
    bf16* ln2;        // (L,B,T,C)
    float* ln2_mean;  // (L,B,T) fp32
    float* ln2_rstd;  // (L,B,T) fp32
    bf16* fch;        // (L,B,T,4C)
    bf16* fch_gelu;   // (L,B,T,4C)
    bf16* fcproj;     // (L,B,T,C)
    bf16* residual3;  // (L,B,T,C)
    bf16* lnf;        // (B,T,C)
    float* lnf_mean;  // (B,T) fp32
    float* lnf_rstd;  // (B,T) fp32
    bf16* logits;     // (B,T,Vp); holds dlogits after a training forward
    float* losses;    // (B,T) fp32
} ActivationsGPU;

// Backward scratch, reused layer by layer.
typedef struct {
    bf16* dresidual;      // (B,T,C) gradient of the residual stream at the current depth
    bf16* dln;            // (B,T,C)
    bf16* datty;          // (B,T,C)
    bf16* dqkv;           // (B,T,3C)
    bf16* dfch;           // (B,T,4C), also the GELU input gradient (in place)
    float* reduce;        // fp32 partial sums of the dbias/dweight column reductions
    float* attention_rows;// (B,NH,T) fp32: rowsum(dout * out) for attention backward
} BackwardScratchGPU;

typedef struct {
    GPT2Config config;
    ParamLayout layout;
    ZeroGPU zero;
    int B, T; // activation capacity
    ActivationsGPU acts;
    BackwardScratchGPU scratch;
    void* act_memory;
    size_t act_bytes;
    int* inputs_device;  // (B,T)
    int* targets_device; // (B,T)
    // encoder backward plan (host counting sort, then copied up): see kernels/encoder.cuh
    int *bucket_tokens, *bucket_starts, *bucket_positions, *bucket_counts; // host
    int* bucket_device;  // tokens (B*T) | starts (B*T+1) | positions (B*T)
    int num_buckets;
    float* loss_sum_device; // accumulated mean loss (fp32), read by gpt2_take_loss
    float* logits_host;     // Vp floats, for sampling
    bf16* logits_staging;   // Vp bf16, host
} GPT2;

static void* carve(char** cursor, size_t bytes) {
    void* p = *cursor;
    *cursor += (bytes + 255) / 256 * 256; // 256-byte aligned: cuBLASLt's preferred alignment
    return p;
}

static void gpt2_alloc_activations(GPT2* model, int B, int T) {
    const GPT2Config* c = &model->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, h = sizeof(bf16), f = sizeof(float);
    size_t reduce_floats = layernorm_backward_scratch_floats((int)C);
    size_t matmul_floats = matmul_backward_scratch_floats(4 * (int)C);
    if (matmul_floats > reduce_floats) reduce_floats = matmul_floats;
    // (bytes, destination) in carve order
    struct { size_t bytes; void** slot; } plan[] = {
        {BT * C * h, (void**)&model->acts.encoded}, {L * BT * C * h, (void**)&model->acts.ln1},
        {L * BT * f, (void**)&model->acts.ln1_mean}, {L * BT * f, (void**)&model->acts.ln1_rstd},
        {L * BT * 3 * C * h, (void**)&model->acts.qkv}, {L * BT * C * h, (void**)&model->acts.atty},
        {L * B * NH * T * f, (void**)&model->acts.att_lse}, {L * BT * C * h, (void**)&model->acts.attproj},
        {L * BT * C * h, (void**)&model->acts.residual2}, {L * BT * C * h, (void**)&model->acts.ln2},
        {L * BT * f, (void**)&model->acts.ln2_mean}, {L * BT * f, (void**)&model->acts.ln2_rstd},
        {L * BT * 4 * C * h, (void**)&model->acts.fch}, {L * BT * 4 * C * h, (void**)&model->acts.fch_gelu},
        {L * BT * C * h, (void**)&model->acts.fcproj}, {L * BT * C * h, (void**)&model->acts.residual3},
        {BT * C * h, (void**)&model->acts.lnf}, {BT * f, (void**)&model->acts.lnf_mean},
        {BT * f, (void**)&model->acts.lnf_rstd}, {BT * Vp * h, (void**)&model->acts.logits},
        {BT * f, (void**)&model->acts.losses},
        {BT * C * h, (void**)&model->scratch.dresidual}, {BT * C * h, (void**)&model->scratch.dln},
        {BT * C * h, (void**)&model->scratch.datty}, {BT * 3 * C * h, (void**)&model->scratch.dqkv},
        {BT * 4 * C * h, (void**)&model->scratch.dfch}, {reduce_floats * f, (void**)&model->scratch.reduce},
        {B * NH * T * f, (void**)&model->scratch.attention_rows},
    };
    size_t n = sizeof(plan) / sizeof(plan[0]), total = 0;
    for (size_t i = 0; i < n; i++) total += (plan[i].bytes + 255) / 256 * 256;
    model->act_bytes = 0;
    model->act_memory = device_alloc(total, &model->act_bytes, "activations");
    char* cursor = (char*)model->act_memory;
    for (size_t i = 0; i < n; i++) *plan[i].slot = carve(&cursor, plan[i].bytes);

    model->inputs_device = (int*)device_alloc(BT * sizeof(int), &model->act_bytes, "inputs");
    model->targets_device = (int*)device_alloc(BT * sizeof(int), &model->act_bytes, "targets");
    model->bucket_device = (int*)device_alloc((3 * BT + 1) * sizeof(int), &model->act_bytes, "encoder plan");
    model->loss_sum_device = (float*)device_alloc(sizeof(float), &model->act_bytes, "loss");
    CUDA_CHECK(cudaMemset(model->loss_sum_device, 0, sizeof(float)));
    model->bucket_tokens = (int*)host_alloc(BT * sizeof(int), "encoder plan");
    model->bucket_starts = (int*)host_alloc((BT + 1) * sizeof(int), "encoder plan");
    model->bucket_positions = (int*)host_alloc(BT * sizeof(int), "encoder plan");
    model->bucket_counts = (int*)host_alloc(Vp * sizeof(int), "encoder plan");
    model->logits_host = (float*)host_alloc(Vp * sizeof(float), "logits");
    model->logits_staging = (bf16*)host_alloc(Vp * sizeof(bf16), "logits");
    model->num_buckets = 0;
    model->B = B;
    model->T = T;
}

/*
 * Build the model for `init` (an llm.c model file or a depth descriptor dN) with B x T
 * activations on this rank's GPU. Parameters are initialized (or read) on the host, fp32, exactly
 * as the CPU build does, then handed to the engine (fp32 master, bf16 params).
 */
static void gpt2_build(GPT2* model, const char* init, int B, int T, uint64_t seed, const Ranks* ranks) {
    int from_file = gpt2_config_from_descriptor(init, &model->config) != 0;
    if (from_file) {
        if (init[0] == 'd' && init[1] >= '0' && init[1] <= '9' && strchr(init, '.') == NULL && strchr(init, '/') == NULL) {
            fprintf(stderr, "error: -e %s: unknown depth descriptor; expected d1, d2, d3, d4, d6, d12, d24, d36, d48 or a model file\n", init);
            exit(1);
        }
        int version;
        model_file_read_header(init, &model->config, &version);
    }
    if (T > model->config.max_seq_len) {
        fprintf(stderr, "error: -t %d: longer than the model's max sequence length; expected T <= %d\n", T, model->config.max_seq_len);
        exit(1);
    }
    const GPT2Config* c = &model->config;
    if (c->channels % 64 != 0 || c->padded_vocab_size % 8 != 0) {
        fprintf(stderr, "error: %s: C=%d, Vp=%d unsupported by the GPU kernels; expected C a multiple of 64 and Vp of 8\n",
                init, c->channels, c->padded_vocab_size);
        exit(1);
    }
    attention_check_head_size(c->channels, c->num_heads);
    param_layout_build(&model->layout, &model->config, ranks->world_size, ZERO_ALIGN);
    zero_gpu_init(&model->zero, &model->layout, ranks->rank, ranks->world_size, ranks->nccl);
    float* full = (float*)host_alloc(model->layout.padded_numel * sizeof(float), "initial parameters");
    if (from_file) model_file_read_params(init, &model->layout, full, -1);
    else
        for (int u = 0; u < model->layout.num_units; u++)
            gpt2_init_unit(&model->layout, u, full + model->layout.units[u].offset, seed);
    zero_gpu_set_full_params(&model->zero, full);
    free(full);
    gpt2_alloc_activations(model, B, T);
    // The set-up's memsets ran on the legacy stream, which the engine's non-blocking streams do
    // not order against: finish them before the first kernel.
    CUDA_CHECK(cudaDeviceSynchronize());
}

static void gpt2_free(GPT2* model) {
    zero_gpu_free(&model->zero);
    param_layout_free(&model->layout);
    CUDA_CHECK(cudaFree(model->act_memory));
    CUDA_CHECK(cudaFree(model->inputs_device));
    CUDA_CHECK(cudaFree(model->targets_device));
    CUDA_CHECK(cudaFree(model->bucket_device));
    CUDA_CHECK(cudaFree(model->loss_sum_device));
    free(model->bucket_tokens); free(model->bucket_starts); free(model->bucket_positions); free(model->bucket_counts);
    free(model->logits_host); free(model->logits_staging);
}

// ----------------------------------------------------------------------------------------------
// Forward and backward

/*
 * Forward over host inputs (B,T). With targets: losses, their mean added to the device loss
 * accumulator times loss_weight (read it with gpt2_take_loss), and if dloss_scale != 0 the
 * logits are replaced by dloss/dlogits in the same pass (the fused classifier), ready for
 * gpt2_backward. With targets == NULL (sampling): only the logits of each row's last position,
 * into logits row b. Asynchronous on the compute stream.
 */
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T, float dloss_scale,
                         float loss_weight) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    ActivationsGPU* a = &model->acts;
    ZeroGPU* z = &model->zero;
    cudaStream_t stream = z->compute;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;

    CUDA_CHECK(cudaMemcpyAsync(model->inputs_device, inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (targets != NULL)
        CUDA_CHECK(cudaMemcpyAsync(model->targets_device, targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (targets != NULL && dloss_scale != 0.0f) { // the encoder backward's token grouping, on the host now
        model->num_buckets = encoder_backward_plan(model->bucket_tokens, model->bucket_starts, model->bucket_positions,
                                                   model->bucket_counts, inputs, BT, Vp);
        int* d = model->bucket_device;
        CUDA_CHECK(cudaMemcpyAsync(d, model->bucket_tokens, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(d + BT, model->bucket_starts, (size_t)(BT + 1) * sizeof(int), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(d + 2 * BT + 1, model->bucket_positions, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    }

    bf16* emb = zero_gpu_params_unit(z, UNIT_EMBEDDING, UNIT_LAYER(0));
    encoder_forward_cuda(a->encoded, model->inputs_device, emb, emb + wpe_offset, B, T, C, stream);
    zero_gpu_params_unit_done(z, UNIT_EMBEDDING);

    for (int l = 0; l < L; l++) {
        int next = l + 1 < L ? UNIT_LAYER(l + 1) : UNIT_FINAL(c);
        LayerTensorsGPU p = layer_tensors_gpu(layout, l, zero_gpu_params_unit(z, UNIT_LAYER(l), next));
        size_t o = (size_t)l * BT;
        bf16* resid_in = l == 0 ? a->encoded : a->residual3 + (o - BT) * C;
        layernorm_forward_cuda(a->ln1 + o * C, a->ln1_mean + o, a->ln1_rstd + o, resid_in, p.ln1w, p.ln1b, BT, C, stream);
        matmul_forward_cuda(a->qkv + o * 3 * C, a->ln1 + o * C, p.qkvw, p.qkvb, BT, C, 3 * C, stream);
        attention_forward_cuda(a->atty + o * C, a->att_lse + o * NH, a->qkv + o * 3 * C, B, T, C, NH, stream);
        matmul_forward_cuda(a->attproj + o * C, a->atty + o * C, p.attprojw, p.attprojb, BT, C, C, stream);
        residual_forward_cuda(a->residual2 + o * C, resid_in, a->attproj + o * C, (size_t)BT * C, stream);
        layernorm_forward_cuda(a->ln2 + o * C, a->ln2_mean + o, a->ln2_rstd + o, a->residual2 + o * C, p.ln2w, p.ln2b, BT, C, stream);
        matmul_forward_cuda(a->fch + o * 4 * C, a->ln2 + o * C, p.fcw, p.fcb, BT, C, 4 * C, stream);
        gelu_forward_cuda(a->fch_gelu + o * 4 * C, a->fch + o * 4 * C, (size_t)BT * 4 * C, stream);
        matmul_forward_cuda(a->fcproj + o * C, a->fch_gelu + o * 4 * C, p.fcprojw, p.fcprojb, BT, 4 * C, C, stream);
        residual_forward_cuda(a->residual3 + o * C, a->residual2 + o * C, a->fcproj + o * C, (size_t)BT * C, stream);
        zero_gpu_params_unit_done(z, UNIT_LAYER(l));
    }

    bf16* final_unit = zero_gpu_params_unit(z, UNIT_FINAL(c), UNIT_EMBEDDING);
    bf16* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_forward_cuda(a->lnf, a->lnf_mean, a->lnf_rstd, last_residual, final_unit, final_unit + C, BT, C, stream);
    zero_gpu_params_unit_done(z, UNIT_FINAL(c));

    // LM head, tied to wte: the embedding unit is needed a second time.
    bf16* wte = zero_gpu_params_unit(z, UNIT_EMBEDDING, -1);
    if (targets != NULL) {
        matmul_forward_cuda(a->logits, a->lnf, wte, NULL, BT, C, Vp, stream);
        fused_classifier_cuda(a->logits, a->losses, model->targets_device, BT, V, Vp, dloss_scale, stream);
        losses_sum_cuda(model->loss_sum_device, a->losses, BT, loss_weight / BT, stream);
    } else {
        for (int b = 0; b < B; b++)
            matmul_forward_cuda(a->logits + (size_t)b * Vp, a->lnf + ((size_t)b * T + T - 1) * C, wte, NULL, 1, C, Vp, stream);
    }
    zero_gpu_params_unit_done(z, UNIT_EMBEDDING);
}

// The loss accumulated since the last call (mean over what was added), then reset. Host sync.
static float gpt2_take_loss(GPT2* model) {
    float loss;
    CUDA_CHECK(cudaMemcpyAsync(&loss, model->loss_sum_device, sizeof(float), cudaMemcpyDeviceToHost, model->zero.compute));
    CUDA_CHECK(cudaMemsetAsync(model->loss_sum_device, 0, sizeof(float), model->zero.compute));
    CUDA_CHECK(cudaStreamSynchronize(model->zero.compute));
    return loss;
}

/*
 * Backward of the last forward, which must have had targets and a nonzero dloss_scale (its
 * logits now hold dlogits), accumulating into the engine's gradients. Each unit is handed to
 * the engine as soon as its gradients are complete for this micro-step, in reverse order
 * (final, layers L-1..0, embedding): that call is where the unit's collective starts.
 */
static void gpt2_backward(GPT2* model, int B, int T, int last_micro_step) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    int BT = B * T;
    ActivationsGPU* a = &model->acts;
    BackwardScratchGPU* s = &model->scratch;
    ZeroGPU* z = &model->zero;
    cudaStream_t stream = z->compute;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;

    bf16* wte = zero_gpu_params_unit(z, UNIT_EMBEDDING, UNIT_FINAL(c));
    bf16* demb = zero_gpu_grads_unit(z, UNIT_EMBEDDING);
    // LM head: dlnf = dlogits @ wte (written), dwte += dlogits^T @ lnf
    matmul_backward_cuda(s->dln, demb, NULL, s->reduce, a->logits, a->lnf, wte, BT, C, Vp, 0, stream);
    zero_gpu_params_unit_done(z, UNIT_EMBEDDING);

    bf16* final_unit = zero_gpu_params_unit(z, UNIT_FINAL(c), UNIT_LAYER(L - 1));
    bf16* dfinal = zero_gpu_grads_unit(z, UNIT_FINAL(c));
    bf16* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    CUDA_CHECK(cudaMemsetAsync(s->dresidual, 0, (size_t)BT * C * sizeof(bf16), stream));
    layernorm_backward_cuda(s->dresidual, dfinal, dfinal + C, s->reduce, s->dln, last_residual, final_unit, a->lnf_mean,
                            a->lnf_rstd, BT, C, stream);
    zero_gpu_params_unit_done(z, UNIT_FINAL(c));
    zero_gpu_grads_unit_ready(z, UNIT_FINAL(c), last_micro_step);

    for (int l = L - 1; l >= 0; l--) {
        int prefetch = l > 0 ? UNIT_LAYER(l - 1) : -1;
        LayerTensorsGPU p = layer_tensors_gpu(layout, l, zero_gpu_params_unit(z, UNIT_LAYER(l), prefetch));
        LayerTensorsGPU g = layer_tensors_gpu(layout, l, zero_gpu_grads_unit(z, UNIT_LAYER(l)));
        size_t o = (size_t)l * BT;
        bf16* resid_in = l == 0 ? a->encoded : a->residual3 + (o - BT) * C;
        // s->dresidual holds dL/d residual3[l]; the residual add passes it to both branches.
        matmul_backward_cuda(s->dfch, g.fcprojw, g.fcprojb, s->reduce, s->dresidual, a->fch_gelu + o * 4 * C, p.fcprojw,
                             BT, 4 * C, C, 0, stream);
        gelu_backward_cuda(s->dfch, a->fch + o * 4 * C, s->dfch, (size_t)BT * 4 * C, stream);
        matmul_backward_cuda(s->dln, g.fcw, g.fcb, s->reduce, s->dfch, a->ln2 + o * C, p.fcw, BT, C, 4 * C, 0, stream);
        layernorm_backward_cuda(s->dresidual, g.ln2w, g.ln2b, s->reduce, s->dln, a->residual2 + o * C, p.ln2w,
                                a->ln2_mean + o, a->ln2_rstd + o, BT, C, stream);
        // s->dresidual now holds dL/d residual2[l].
        matmul_backward_cuda(s->datty, g.attprojw, g.attprojb, s->reduce, s->dresidual, a->atty + o * C, p.attprojw,
                             BT, C, C, 0, stream);
        attention_backward_cuda(s->dqkv, s->attention_rows, s->datty, a->qkv + o * 3 * C, a->atty + o * C,
                                a->att_lse + o * NH, B, T, C, NH, stream);
        matmul_backward_cuda(s->dln, g.qkvw, g.qkvb, s->reduce, s->dqkv, a->ln1 + o * C, p.qkvw, BT, C, 3 * C, 0, stream);
        layernorm_backward_cuda(s->dresidual, g.ln1w, g.ln1b, s->reduce, s->dln, resid_in, p.ln1w, a->ln1_mean + o,
                                a->ln1_rstd + o, BT, C, stream);
        // s->dresidual now holds dL/d resid_in, the input of layer l.
        zero_gpu_params_unit_done(z, UNIT_LAYER(l));
        zero_gpu_grads_unit_ready(z, UNIT_LAYER(l), last_micro_step);
    }

    int* d = model->bucket_device;
    encoder_backward_cuda(demb, demb + wpe_offset, s->dresidual, d + BT, d, d + 2 * BT + 1, model->num_buckets, B, T, C, stream);
    zero_gpu_grads_unit_ready(z, UNIT_EMBEDDING, last_micro_step);
}

// ----------------------------------------------------------------------------------------------
// Sampling

// Index drawn from softmax(logits[0..V)) with a uniform coin in [0, 1) (temperature 1).
static int sample_token(const float* logits, int V, float coin) {
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) maxval = logits[i] > maxval ? logits[i] : maxval;
    double total = 0.0;
    for (int i = 0; i < V; i++) total += exp((double)logits[i] - maxval);
    double threshold = coin * total, running = 0.0;
    for (int i = 0; i < V; i++) {
        running += exp((double)logits[i] - maxval);
        if (threshold < running) return i;
    }
    return V - 1;
}

// Generate gen_tokens tokens after <|endoftext|> (every rank runs it: ZeRO-3 gathers need all
// ranks); rank 0 prints the text.
static void gpt2_sample(GPT2* model, Tokenizer* tokenizer, int gen_tokens, uint64_t seed, int print) {
    int T = gen_tokens + 1 < model->T ? gen_tokens + 1 : model->T;
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int* tokens = (int*)host_alloc((size_t)T * sizeof(int), "sample tokens");
    tokens[0] = 50256 < V ? 50256 : 0; // <|endoftext|> starts a document
    Rng rng;
    rng_seed(&rng, seed);
    for (int t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, t, 0.0f, 0.0f);
        CUDA_CHECK(cudaMemcpyAsync(model->logits_staging, model->acts.logits, (size_t)Vp * sizeof(bf16),
                                   cudaMemcpyDeviceToHost, model->zero.compute));
        CUDA_CHECK(cudaStreamSynchronize(model->zero.compute));
        for (int i = 0; i < Vp; i++) model->logits_host[i] = __bfloat162float(model->logits_staging[i]);
        tokens[t] = sample_token(model->logits_host, V, rng_uniform(&rng));
    }
    if (print) {
        char* text = (char*)host_alloc((size_t)T * 64 + 1, "sample text");
        if (tokenizer->init_ok) {
            tokenizer_decode_utf8(tokenizer, tokens + 1, T - 1, text, (size_t)T * 64 + 1);
            printf("sample:\n---\n%s\n---\n", text);
        } else {
            printf("sample (token ids, no tokenizer file):");
            for (int t = 1; t < T; t++) printf(" %d", tokens[t]);
            printf("\n");
        }
        free(text);
    }
    free(tokens);
}

// ----------------------------------------------------------------------------------------------
// Training loop helpers

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Training FLOPs per token: 6N for the weights (forward 2N, backward 4N) plus attention's
// score and value products, 12 L C T (Chowdhery et al. 2022, "PaLM", Appendix B; counted
// without the causal halving, as there).
static double flops_per_token(const GPT2* model, int T) {
    const GPT2Config* c = &model->config;
    return 6.0 * (double)model->layout.num_parameters + 12.0 * c->num_layers * (double)c->channels * T;
}

static float gpt2_val_loss(GPT2* model, DataLoader* val_loader, int val_steps) {
    dataloader_reset(val_loader);
    gpt2_take_loss(model); // start from zero
    for (int i = 0; i < val_steps; i++) {
        dataloader_next_batch(val_loader);
        gpt2_forward(model, val_loader->inputs, val_loader->targets, model->B, model->T, 0.0f, 1.0f / val_steps);
    }
    return gpt2_take_loss(model);
}

static void format_eta(char* buf, size_t cap, double seconds) {
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%dh%02dm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%dm%02ds", s / 60, s % 60);
    else snprintf(buf, cap, "%ds", s);
}

// The data scripts write gpt2_tokenizer.bin beside the shards: look in the train pattern's dir.
static const char* tokenizer_path_beside(const char* train_pattern) {
    static char path[4096];
    const char* slash = strrchr(train_pattern, '/');
    int dir_len = slash ? (int)(slash - train_pattern) : 1;
    snprintf(path, sizeof(path), "%.*s/gpt2_tokenizer.bin", dir_len, slash ? train_pattern : ".");
    return path;
}

// GPU memory in use on this device now (everything: context, cuBLASLt, NCCL, our buffers).
static double gpu_used_mib(void) {
    size_t free_bytes, total_bytes;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return (double)(total_bytes - free_bytes) / 1048576.0;
}

// Rank 0 prints what each rank holds and sends, beside DESIGN.md's formulas.
static void print_memory_and_traffic(const GPT2* model, int world_size) {
    const ZeroGPU* z = &model->zero;
    double psi = (double)model->layout.padded_numel, n = world_size, mib = 1048576.0;
    const char* formula[4] = {"2Ψ + 2Ψ + 12Ψ", "2Ψ + 2Ψ + 12Ψ/N", "2Ψ + (2+12)Ψ/N + working", "(2+2+12)Ψ/N + working"};
    double predicted[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
    printf("memory (ZeRO-%d, %s): params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, working units %.1f MiB; "
           "formula %.1f MiB + working | activations %.1f MiB\n",
           z->stage, formula[z->stage], z->bytes_params / mib, z->bytes_grads / mib, z->bytes_optimizer / mib,
           z->bytes_working / mib, predicted[z->stage] / mib, model->act_bytes / mib);
}

#ifndef TESTING
int main(int argc, char** argv) {
    TrainArgs args;
    train_args_parse(&args, argc, argv);
    train_args_validate(&args);
    if (args.zero_stage != -1 && args.zero_stage != ZERO_STAGE) {
        fprintf(stderr, "error: -z %d: this binary was compiled for ZeRO stage %d; expected -z %d or a rebuild with make ZERO_STAGE=%d\n",
                args.zero_stage, ZERO_STAGE, ZERO_STAGE, args.zero_stage);
        return 1;
    }
    Ranks ranks;
    ranks_start(&ranks, &argc, &argv);
    int rank = ranks.rank, world_size = ranks.world_size;
    int B = args.B, T = args.T;

    // Batch: each micro-step every rank processes B*T tokens; accumulate up to -d tokens.
    int tokens_per_micro_step = B * T * world_size;
    int total_batch_tokens = args.total_batch_tokens == -1 ? tokens_per_micro_step : args.total_batch_tokens;
    if (total_batch_tokens % tokens_per_micro_step != 0) {
        fprintf(stderr, "error: -d %d: not a multiple of B*T*ranks = %d*%d*%d = %d; expected a multiple of %d\n",
                total_batch_tokens, B, T, world_size, tokens_per_micro_step, tokens_per_micro_step);
        return 1;
    }
    int grad_accum_steps = total_batch_tokens / tokens_per_micro_step;

    if (args.output_dir && rank == 0) output_dir_prepare(args.output_dir);
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_pattern, B, T, rank, world_size);
    int do_val = args.val_every > 0;
    if (do_val) dataloader_init(&val_loader, args.val_pattern, B, T, rank, world_size);

    matmul_init();
    GPT2 model;
    gpt2_build(&model, args.init, B, T, (uint64_t)args.seed, &ranks);
    const GPT2Config* cfg = &model.config;
    int max_steps = args.max_steps;
    if (max_steps == -1) max_steps = (int)(train_loader.num_tokens_total / (size_t)total_batch_tokens);
    if (max_steps < 1 && args.max_steps == -1) max_steps = 1;

    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, tokenizer_path_beside(args.train_pattern));

    Logger logger;
    logger_init(&logger, rank == 0 ? args.output_dir : NULL, 0);

    LRSchedule schedule = {LR_COSINE, args.learning_rate, args.warmup_steps, max_steps, args.final_lr_fraction};
    if (lr_kind_from_name(args.lr_schedule, &schedule.kind) != 0) {
        fprintf(stderr, "error: -k %s: unknown schedule; expected cosine, linear or constant\n", args.lr_schedule);
        return 1;
    }
    AdamWConfig opt = {0.9f, 0.95f, 1e-8f, args.weight_decay, args.grad_clip};
    double model_flops_per_token = flops_per_token(&model, T);

    if (rank == 0) {
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        printf("GPT-2 GPU trainer | ZeRO stage %d | world size %d | device %s (sm_%d%d)\n", ZERO_STAGE, world_size,
               prop.name, prop.major, prop.minor);
        printf("model: %s | L %d | C %d | NH %d | V %d (Vp %d) | maxT %d | parameters %zu\n", args.init,
               cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size,
               cfg->max_seq_len, model.layout.num_parameters);
        printf("batch: B %d x T %d x %d ranks x %d accumulation steps = %d tokens | steps %d | lr %g (%s, warmup %d, final x%g)\n",
               B, T, world_size, grad_accum_steps, total_batch_tokens, max_steps, args.learning_rate,
               args.lr_schedule, args.warmup_steps, args.final_lr_fraction);
        print_memory_and_traffic(&model, world_size);
        printf("train: %zu tokens | val: %s\n", train_loader.num_tokens_total, do_val ? args.val_pattern : "off");
        logger_record(&logger, "config", "\"init\":\"%s\",\"L\":%d,\"C\":%d,\"NH\":%d,\"V\":%d,\"parameters\":%zu,"
                      "\"B\":%d,\"T\":%d,\"world_size\":%d,\"zero_stage\":%d,\"batch_tokens\":%d,\"max_steps\":%d,\"lr\":%g",
                      args.init, cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size,
                      model.layout.num_parameters, B, T, world_size, ZERO_STAGE, total_batch_tokens, max_steps, args.learning_rate);
    }

    double train_seconds = 0.0, peak_used_mib = 0.0, elements_sent = 0.0;
    long long tokens_seen = 0;
    int timed_steps = 0;
    float last_val_loss = NAN;
    for (int step = 0; step <= max_steps; step++) {
        int last_step = step == max_steps;
        if (do_val && (step % args.val_every == 0 || last_step)) {
            last_val_loss = gpt2_val_loss(&model, &val_loader, args.val_max_steps);
            if (world_size > 1) {
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &last_val_loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
                last_val_loss /= world_size;
            }
            if (rank == 0) printf("step %5d/%d | val loss %.6f\n", step, max_steps, last_val_loss);
            logger_record(&logger, "val", "\"step\":%d,\"loss\":%.6f,\"tokens\":%lld", step, last_val_loss, tokens_seen);
        }
        if (args.sample_every > 0 && (step % args.sample_every == 0 || last_step) && (step > 0 || last_step)) {
            gpt2_sample(&model, &tokenizer, args.gen_tokens, (uint64_t)args.seed + (uint64_t)step, rank == 0);
        }
        if (args.output_dir && args.checkpoint_every > 0 && step > 0 && (step % args.checkpoint_every == 0 || last_step)) {
            float* full = (float*)host_alloc(model.layout.padded_numel * sizeof(float), "checkpoint buffer");
            zero_gpu_get_full_params(&model.zero, full);
            if (rank == 0) {
                char path[4200];
                snprintf(path, sizeof(path), "%s/model_%08d.bin", args.output_dir, step);
                model_file_write(path, &model.layout, full);
                printf("checkpoint: %s\n", path);
            }
            free(full);
        }
        if (last_step) break;

        double t0 = wall_seconds();
        zero_gpu_grads_zero(&model.zero);
        for (int micro_step = 0; micro_step < grad_accum_steps; micro_step++) {
            if (!args.overfit_single_batch || (step == 0 && micro_step == 0)) dataloader_next_batch(&train_loader);
            gpt2_forward(&model, train_loader.inputs, train_loader.targets, B, T,
                         1.0f / ((float)B * T * grad_accum_steps), 1.0f / grad_accum_steps);
            gpt2_backward(&model, B, T, micro_step == grad_accum_steps - 1);
        }
        float lr = lr_at_step(&schedule, step);
        float grad_norm = zero_gpu_optimizer_step(&model.zero, &opt, lr, step + 1);
        elements_sent = model.zero.elements_sent;
        float train_loss = gpt2_take_loss(&model); // syncs the compute stream: the step is done
        if (world_size > 1) { // report the mean over ranks, as one process with the global batch would
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &train_loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
            train_loss /= world_size;
        }
        double seconds = wall_seconds() - t0;
        double used = gpu_used_mib();
        if (used > peak_used_mib) peak_used_mib = used;
        tokens_seen += total_batch_tokens;
        if (step > 0) { train_seconds += seconds; timed_steps++; } // step 0 includes warm-up costs
        double tokens_per_s = total_batch_tokens / seconds;
        double mfu = tokens_per_s * model_flops_per_token / (PEAK_BF16_FLOPS * world_size);
        double mean_step = timed_steps > 0 ? train_seconds / timed_steps : seconds;
        char eta[32];
        format_eta(eta, sizeof(eta), mean_step * (max_steps - step - 1));
        if (rank == 0) {
            printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | comm wait %.1f ms | sent %lld | %.0f tok/s | "
                   "MFU %.1f%% | eta %s\n", step + 1, max_steps, train_loss, lr, grad_norm, seconds * 1000.0,
                   model.zero.comm_wait_ms, (long long)elements_sent, tokens_per_s, 100.0 * mfu, eta);
            fflush(stdout);
        }
        logger_record(&logger, "train", "\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"ms\":%.3f,"
                      "\"tokens_per_s\":%.1f,\"tokens\":%lld,\"batch_tokens\":%d,\"comm_wait_ms\":%.3f,"
                      "\"sent_elements\":%lld,\"mfu\":%.4f",
                      step + 1, train_loss, lr, grad_norm, seconds * 1000.0, tokens_per_s, tokens_seen,
                      total_batch_tokens, model.zero.comm_wait_ms, (long long)elements_sent, mfu);
    }
    if (rank == 0) {
        double n = world_size, psi = (double)model.layout.padded_numel;
        double formula = ZERO_STAGE == 3 ? 3.0 * psi * (n - 1) / n : 2.0 * psi * (n - 1) / n;
        printf("traffic: sent %.1f MiB per rank in the last step (bf16); formula %s = %.1f MiB (+ re-gathers)\n",
               2.0 * elements_sent / 1048576.0, ZERO_STAGE == 3 ? "3Ψ(N-1)/N" : "2Ψ(N-1)/N", 2.0 * formula / 1048576.0);
        if (timed_steps > 0) {
            double tokens_per_s = (double)total_batch_tokens * timed_steps / train_seconds;
            printf("done: mean step %.1f ms, %.0f tok/s, MFU %.1f%% over %d steps, peak GPU memory %.1f MiB%s",
                   1000.0 * train_seconds / timed_steps, tokens_per_s,
                   100.0 * tokens_per_s * model_flops_per_token / (PEAK_BF16_FLOPS * world_size), timed_steps,
                   peak_used_mib, do_val ? "" : "\n");
            if (do_val) printf(", final val loss %.6f\n", last_val_loss);
        }
    }

    logger_close(&logger);
    tokenizer_free(&tokenizer);
    dataloader_free(&train_loader);
    if (do_val) dataloader_free(&val_loader);
    gpt2_free(&model);
    matmul_destroy();
    ranks_stop(&ranks);
    return 0;
}
#endif
