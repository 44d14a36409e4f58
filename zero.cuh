/*
 * zero.cuh: the data-parallel engine, ZeRO stages 0-3 over one flat parameter buffer; the one
 * header the trainers include, and the map of zero/.
 *
 * The core (the lesson: the files at the top of zero/), included below in this order, each
 * needing only those above:
 *   zero/layout.h        units, shards and the formulas of docs/design.md "Stages" (bytes, elements sent)
 *   zero/engine.h        the state: ZeroOp (a collective in flight), ZeroWorkingUnit, ZeroEngine
 *   zero/hooks.h         the one place the core calls an extension (every hook empty when ZERO_EXT=0)
 *   zero/backend.h       the functions both engines (CPU, GPU) implement, declared once
 *   zero/comm_mpi.h      MPI_CHECK, the clock, how the ranks stop or abort and the clean-ups then
 *   zero/comm_ring.h     the unit collectives as rings over MPI point-to-point (bytes = formula)
 *   zero/progress_cpu.h  CPU: a thread that moves the rings on while the model computes
 *   zero/comm.h          a collective's begin, test and wait (-wt); scalars, barriers
 *   zero/work_units.h    owned slices and the working-unit policy both engines share
 *   zero/engine_cpu.h    the CPU engine (fp32): what model/gpt2_cpu.h calls, where the collectives start
 *   zero/optimizer_cpu.h the optimizer step on the owned slices (norm, clipping, AdamW)
 *   zero/accounting.h    bytes allocated and elements sent, printed beside the formulas
 *   zero/no_extensions.h the lesson build only: what trainers and models call of the extensions, doing nothing
 *   zero/checkpoint.h    checkpoint save and resume over either engine
 *
 * Extensions, one folder each; a reader of the core may skip them all (zero/hooks.h names where
 * each steps in). Those marked * are left out of the lesson build (make ZERO_EXT=none, CPU and GPU):
 *   zero/cluster/    process life across hosts: the launcher's word, MPI_Init bounded by -wt, the
 *                    start-up handshake, each rank's line when a host is lost, the run lock;
 *                    mpi_single.h stands in for Open MPI in a build without it (one process)
 *   zero/reshard/    resume at another world size (checkpoint.h calls it)
 *   zero/offload/ *  ZeRO-Offload / ZeRO-Infinity (-zo, -zp, -zd): state on the host or NVMe, the
 *                    file I/O (nvme_io.h), its accounting; offload_gpu.cuh for the GPU build
 *   zero/zeropp/  *  ZeRO++ (-qw, -qg, -hp): int8 weight gathers, secondary shard, int4 gradients
 *   zero/tied_rows/ * CPU stages 0, 1 with N > 1: wte's rows reduced right after the LM head
 *   zero/trace/   *  the per-rank timeline of chosen steps (-tr), Chrome trace-event JSON
 *   zero/gpu/        the GPU build's engine: device state, NCCL collectives on the comm stream, the
 *                    engine (bf16, fp32 master), state in/out, optimizer; the lesson's no_extensions_gpu.cuh
 * Not included: the planner (plan/plan.h, ./plan_gpt2), a model of this engine built on its
 * functions; the trainers' --plan runs its binary (train/plan_exec.h).
 *
 * Where a collective is issued: zero_grads_unit_ready (gradients: all-reduce or reduce-scatter,
 * as backward finishes each unit) and zero_param_work_gather (stage 3 all-gather before use) in
 * engine_cpu.h / gpu/engine_gpu.cuh; zero_optimizer_step (stages 1-2 all-gather of the updated
 * parameters) in optimizer_cpu.h / gpu/optimizer_gpu.cuh; the MPI calls in comm.h, comm_ring.h.
 *
 * The engine owns the parameters, gradients and AdamW state and is the only place collectives
 * are issued. The model (model/gpt2_cpu.h; GPU model/gpt2_gpu.cuh) asks it for a unit's parameters
 * before using them (zero_params_unit) and hands each unit back when done (zero_params_unit_done);
 * backward asks for a unit's gradient buffer (zero_grads_unit) and says when its gradients are
 * final for this micro-step (zero_grads_unit_ready), which is where the unit's collective starts.
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
 * Plain C (CPU build) and nvcc; CUDA-only parts inside #if ZERO_GPU_BUILD (nvcc, or dev/emu's CPU
 * emulation of CUDA). The GPU build shares the core but for engine_cpu.h and optimizer_cpu.h, whose
 * functions zero/gpu/'s engine_gpu.cuh, state_io_gpu.cuh, optimizer_gpu.cuh define, same names and roles.
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
#ifndef ZERO_EXT
#define ZERO_EXT 1 // 0: the lesson build (make train_gpt2|train_gpt2cu ZERO_EXT=none): the core alone, zero/no_extensions.h
#endif
#if ZERO_STAGE < 0 || ZERO_STAGE > 3
#error "ZERO_STAGE must be 0, 1, 2 or 3"
#endif

// 1: the MPI path's unit collectives (CPU engine, host-staged GPU backend) are the engine's own rings
// (zero/comm_ring.h); 0: MPI's non-blocking ones (make ZERO_RING=0; to compare: dev/bench/cluster_bench.sh).
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
#if ZERO_EXT
#include "zero/offload/nvme_io.h"
#include "zero/offload/offload_state.h"
#include "zero/zeropp/zeropp_state.h"
#include "zero/tied_rows/tied_rows_state.h"
#endif
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
#if ZERO_EXT
#include "zero/trace/trace.h"
#endif
#include "zero/work_units.h"
#include "zero/engine_cpu.h"
#include "zero/optimizer_cpu.h"
#include "zero/accounting.h"
#if ZERO_EXT
#include "zero/offload/offload.h"
#include "zero/offload/offload_accounting.h"
#include "zero/zeropp/zeropp.h"
#include "zero/tied_rows/tied_rows_cpu.h"
#else
#include "zero/no_extensions.h"
#include "zero/gpu/no_extensions_gpu.cuh" // its GPU part (nothing in the CPU build)
#endif
#if ZERO_GPU_BUILD
#include "zero/gpu/comm_gpu.cuh"
#if ZERO_EXT
#include "zero/offload/offload_gpu.cuh"
#include "zero/zeropp/zeropp_gpu.cuh"
#endif
#include "zero/gpu/engine_gpu.cuh"
#include "zero/gpu/state_io_gpu.cuh"
#include "zero/gpu/optimizer_gpu.cuh"
#endif
#include "zero/reshard/reshard.h"
#include "zero/checkpoint.h"

#endif // ZERO_CUH
