/*
 * zero.cuh: the data-parallel engine, ZeRO stages 0-3 over one flat parameter buffer; the one
 * header the trainers include. Its parts live in zero/, one concern a file, included below in
 * this order (each needs only the ones above it):
 *
 *   zero/cluster/mpi_single.h   without Open MPI only (ZERO_NO_MPI): <mpi.h>'s calls for one process
 *   zero/layout.h       shard layout and the formulas of docs/design.md "Stages" (bytes per rank, elements sent)
 *   zero/offload/nvme_io.h      asynchronous file I/O for the NVMe placement (io_uring or worker threads)
 *   zero/offload/offload_state.h offload's state (placement, NVMe regions, staging slots): ZeroEngine.offload
 *   zero/zeropp/zeropp_state.h ZeRO++'s state (flags, groups, packets, secondary shard): ZeroEngine.pp
 *   zero/gpu/device_state.h GPU build: the GPU engine's state (streams, fp32 grads, master, NCCL): ZeroEngine.gpu
 *   zero/engine.h       the engine's state: ZeroOp, ZeroWorkingUnit, the ring queue, the tied rows,
 *                       the GNS norms, ZeroEngine (its own fields; each extension's state one field)
 *   zero/hooks.h        the one place the core calls an extension (trace, offload, ZeRO++, tied rows,
 *                       cluster); ZERO_EXT=0 (the lesson build) makes every hook empty
 *   zero/backend.h      the functions both engines (CPU, GPU) implement, declared once
 *   zero/comm_mpi.h     MPI_CHECK, the clock, how the ranks end (stop, abort) and the clean-ups then
 *   zero/cluster/launcher.h     what the launcher's environment says (tasks, rank, local rank, GPU): before MPI
 *   zero/cluster/cluster.h      this rank, its host, every rank's host; what it is waiting for now
 *   zero/cluster/startup_watchdog.h MPI_Init and NCCL's init bounded by -wt (a timer, before MPI)
 *   zero/comm_ring.h    the unit collectives as rings over MPI point-to-point (bytes = formula)
 *   zero/progress_cpu.h CPU build: a thread that keeps MPI collectives moving while the model computes
 *   zero/comm.h         a collective's begin, test and wait (-wt); the unit collectives, scalars, barriers
 *   zero/cluster/faults.h       each rank's line when the job ends under it; the lost-host check
 *   zero/cluster/handshake.h    start-up across hosts, bounded by -wt: fingerprint, agreement, broadcasts
 *   zero/cluster/run_lock.h     one output dir, one run: the lock
 *   zero/cluster/process.h      starting the ranks: MPI_Init, the launcher's word checked, the fault handlers
 *   zero/trace/trace.h        the per-rank timeline of chosen steps (-tr): Chrome trace-event JSON
 *   zero/work_units.h   owned slices and the working-unit policy both engines share
 *   zero/engine_cpu.h   the CPU engine (fp32): what train_gpt2.c calls
 *   zero/optimizer_cpu.h the CPU engine's optimizer step on the owned slices (norm, clipping, AdamW)
 *   zero/accounting.h   bytes allocated and elements sent, printed beside the formulas
 *   zero/offload/offload.h      ZeRO-Offload / ZeRO-Infinity: optimizer state and parameter shard on the
 *                       host or on NVMe (-zo, -zp, -zd), their file regions, staging, the NVMe stream
 *   zero/offload/offload_accounting.h offload's bytes per rank and per step (NVMe, host<->device), printed
 *                       beside the formulas
 *   zero/zeropp/zeropp.h       ZeRO++ (CPU build; flags and formulas for both): int8 forward all-gather
 *                       (qwZ), secondary shard for backward within a host (hpZ), int4 two-level
 *                       gradient all-to-all (qgZ)
 *   zero/tied_rows/tied_rows_cpu.h CPU stages 0, 1: wte's units reduced after the LM head, the encoder's rows all-gathered
 *   zero/gpu/comm_gpu.cuh   GPU build: ranks and devices, timed waits, collectives on the comm stream
 *   zero/offload/offload_gpu.cuh GPU build: -zo/-zp cpu|nvme, gradients down and AdamW on the host, parameters up
 *   zero/zeropp/zeropp_gpu.cuh GPU build: ZeRO++ qwZ, hpZ (secondary shard, group all-gather on a split
 *                       communicator), qgZ (grouped ncclSend/ncclRecv of int4/int8 codes)
 *   zero/gpu/engine_gpu.cuh the GPU engine (bf16 params and grads, fp32 master and Adam state)
 *   zero/gpu/optimizer_gpu.cuh the GPU optimizer step: fp32 gradient norm, clipping on the device,
 *                       one AdamW launch, results read back asynchronously (two steps in flight)
 *   zero/reshard/reshard.h resume at another world size: each rank reads the old state files its slice overlaps
 *   zero/checkpoint.h   checkpoint save and resume over either engine (the model's source: train/model_source.h)
 *
 * Not included: the planner (plan/plan.h, ./plan_gpt2), a model of this engine built on its
 * functions; the trainers' --plan runs its binary (train/plan_exec.h).
 *
 * Where a collective is issued: zero_grads_unit_ready (gradients: all-reduce or reduce-scatter,
 * as backward finishes each unit), zero_param_work_gather (stage 3 all-gather before use) and
 * zero_optimizer_step (stages 1-2 all-gather of updated parameters), in engine_cpu.h and
 * engine_gpu.cuh; the MPI calls themselves in comm.h.
 *
 * The engine owns the parameters, gradients and AdamW state and is the only place collectives
 * are issued. The model asks it for a unit's parameters before using them (zero_params_unit) and
 * hands each unit back when it is done (zero_params_unit_done); backward asks for a unit's
 * gradient buffer (zero_grads_unit) and says when that unit's gradients are final for this
 * micro-step (zero_grads_unit_ready), which is where the unit's collective starts.
 *
 * Stages (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", sec. 5; docs/design.md "Stages"), fixed at compile time by ZERO_STAGE:
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
 * Compiles as plain C (CPU build) and under nvcc; CUDA-only parts go inside #if ZERO_GPU_BUILD
 * (nvcc, or the CPU emulation of CUDA in dev/emu). The GPU build shares ZeroEngine, the layout,
 * the working-unit policy, accounting, the MPI communication section and the checkpoint code;
 * the engine functions the model calls (zero_params_unit ... zero_optimizer_step) come from
 * zero/gpu/engine_gpu.cuh with the same names and roles.
 */
#ifndef ZERO_CUH
#define ZERO_CUH
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
// Without Open MPI (make NO_USE_MPI=1, or no mpicc found): a one-process stand-in (world size 1).
#ifndef ZERO_NO_MPI
#define ZERO_NO_MPI 0
#endif
#if ZERO_NO_MPI
#include "zero/cluster/mpi_single.h"
#else
#include <mpi.h>
#endif
// The GPU build: nvcc, or g++ over the CPU emulation of CUDA (dev/emu/emu.h; tests only).
#if defined(__CUDACC__) || defined(CUDA_EMULATION)
#define ZERO_GPU_BUILD 1
#else
#define ZERO_GPU_BUILD 0
#endif
#include "common/gpt2_config.h"
#include "common/hash.h" // fnv1a64_words: the replica check
#include "cpu/adamw.h"
#include "cpu/global_norm.h"
#if ZERO_GPU_BUILD
#include "common/cuda_utils.cuh" // bf16, CUDA_CHECK, NCCL_CHECK
#include "kernels/adamw.cuh"       // AdamWPlan (the engine's multi-tensor optimizer plan)
#if ZERO_NO_MPI
#undef ZERO_COMM_MPI
#define ZERO_COMM_MPI 1 // one process: no collective ever runs, no NCCL is linked
#endif
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

// 1: the unit collectives of the MPI path (CPU engine, host-staged GPU backend) are the engine's
// own rings (zero/comm_ring.h); 0: MPI's non-blocking collectives, whatever algorithm the library
// picks (make ZERO_RING=0; kept to measure the difference, dev/bench/cluster_bench.sh).
#ifndef ZERO_RING
#define ZERO_RING 1
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

#include "zero/layout.h"
#include "zero/offload/nvme_io.h"
#include "zero/offload/offload_state.h"
#include "zero/zeropp/zeropp_state.h"
#if ZERO_GPU_BUILD
#include "zero/gpu/device_state.h"
#endif
#include "zero/engine.h"
#include "zero/hooks.h"
#include "zero/backend.h"
#include "zero/comm_mpi.h"
#include "zero/cluster/launcher.h"
#include "zero/cluster/cluster.h"
#include "zero/cluster/startup_watchdog.h"
#include "zero/comm_ring.h"
#include "zero/progress_cpu.h"
#include "zero/comm.h"
#include "zero/cluster/faults.h"
#include "zero/cluster/handshake.h"
#include "zero/cluster/run_lock.h"
#include "zero/cluster/process.h"
#include "zero/trace/trace.h"
#include "zero/work_units.h"
#include "zero/engine_cpu.h"
#include "zero/optimizer_cpu.h"
#include "zero/accounting.h"
#include "zero/offload/offload.h"
#include "zero/offload/offload_accounting.h"
#include "zero/zeropp/zeropp.h"
#include "zero/tied_rows/tied_rows_cpu.h"
#if ZERO_GPU_BUILD
#include "zero/gpu/comm_gpu.cuh"
#include "zero/offload/offload_gpu.cuh"
#include "zero/zeropp/zeropp_gpu.cuh"
#include "zero/gpu/engine_gpu.cuh"
#include "zero/gpu/optimizer_gpu.cuh"
#endif
#include "zero/reshard/reshard.h"
#include "zero/checkpoint.h"

#endif // ZERO_CUH
