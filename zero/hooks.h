/*
 * zero/hooks.h: the one place where the core calls an extension. Each extension (trace, offload
 * and NVMe, ZeRO++, tied rows) lives in its own folder of zero/ and is reached from the core only
 * through the hooks declared here; its state lives in its own struct, one field of ZeroEngine (tied
 * rows: of ZeroEngine.tied). Cluster robustness (zero/cluster/) has none: each part registers its
 * clean-up (comm_mpi.h's zero_at_abort). A reader of the core may skip every folder below zero/ and
 * read these lines as "here an extension may step in".
 *
 * ZERO_EXT (zero.cuh; 1 by default, 0 in the lesson build `make train_gpt2|train_gpt2cu ZERO_EXT=none`):
 * with 0 the extension folders are not compiled, each hook below is an empty function and
 * zero/no_extensions.h (GPU: also zero/gpu/no_extensions_gpu.cuh) stands in for what trainers and models call,
 * so the core builds and runs alone (stages 0-3, overlapped collectives, accumulation, checkpoints, GNS, the handshake).
 *
 * Needs: zero/engine.h (ZeroEngine, ZeroOp, ZeroWorkingUnit, AdamWConfig), zero/layout.h (ZeroBuffer).
 * Definitions: in each extension's folder (named beside each declaration; GPU: the .cuh files).
 */
#ifndef ZERO_HOOKS_H
#define ZERO_HOOKS_H
#ifndef ZERO_CUH
#error "include zero.cuh, not this file"
#endif

// Each hook below is `signature ZERO_HOOK(body)`: with the extensions a declaration (defined in the
// extension's folder); in the lesson build the hook's own definition, `body` (doing nothing).
#if ZERO_EXT
#define ZERO_HOOK(...) ;
#else
#define ZERO_HOOK(...) { __VA_ARGS__ }
#endif

// ---- trace (zero/trace/): a collective's begin and end on the per-rank timeline ----
// zero/comm.h, zero/comm_ring.h: a host collective's issue, its completion (first seen, any
// thread), the wait on it; each engine's zero_step_begin: a step starts. In zero/trace/trace.h.
static void zero_trace_issue(const ZeroOp* op, long long elements) ZERO_HOOK(return;)
static void zero_trace_done(const ZeroOp* op) ZERO_HOOK(return;)
static void zero_trace_wait(const ZeroOp* op, double begin, double end) ZERO_HOOK(return;)
static void zero_trace_step_begin(ZeroEngine* z, int step) ZERO_HOOK(return;)

// ---- offload and NVMe (zero/offload/offload.h; the accounting line: offload_accounting.h, GPU offload_gpu.cuh) ----
// Where a buffer lives (RAM or the -zo/-zp nvme file; GPU: device, host or file); a unit's slice to
// and from there (set-up, checkpoints); a stage-3 shard read back before its all-gather; the
// optimizer's walk over a unit's owned slice in pieces (one when nothing is on NVMe: [0, shard_numel)).
static void zero_hook_offload_free(ZeroEngine* z) ZERO_HOOK(return;)
static void zero_hook_offload_unit_io(ZeroEngine* z, int unit, ZeroBuffer which, void* data, int write) ZERO_HOOK(return;)
static int zero_hook_offload_optimizer_io(ZeroEngine* z, int unit, float* m, float* v, int write) ZERO_HOOK(return 0;) // 1: m, v moved
static void zero_hook_offload_step_begin(ZeroEngine* z) ZERO_HOOK(return;)                       // the step's I/O counters
static void zero_hook_offload_print_accounting(const ZeroEngine* z, int grad_accum_steps, FILE* out) ZERO_HOOK(return;)
#if !ZERO_GPU_BUILD
static void zero_hook_offload_setup(ZeroEngine* z, const ZeroOffloadArgs* args) ZERO_HOOK(return;) // placement, file, staging: before the state is allocated (every rank)
static int zero_hook_offload_on_nvme(const ZeroEngine* z, ZeroBuffer which) ZERO_HOOK(return 0;)  // 1: `which` lives in the file, not in RAM
static void zero_hook_offload_prefetch(ZeroEngine* z) ZERO_HOOK(return;)                         // last micro-step: the optimizer's first reads
static int zero_hook_offload_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) ZERO_HOOK(return 0;) // 1: reading the shard
static void zero_hook_offload_start_gathers(ZeroEngine* z, ZeroWorkingUnit* upto) ZERO_HOOK(return;) // gather the shards read, up to `upto`
static int zero_hook_offload_piece(const ZeroEngine* z, int unit, int k, size_t* lo, size_t* hi) // piece k's [lo, hi); 0: no piece k
    ZERO_HOOK(if (k > 0) return 0; *lo = 0; *hi = z->layout->units[unit].shard_numel; return 1;)
static void zero_hook_offload_piece_begin(ZeroEngine* z, int unit, int k, float** p, float** m, float** v) ZERO_HOOK(return;) // staged copies
static void zero_hook_offload_piece_end(ZeroEngine* z, int unit, int k) ZERO_HOOK(return;)       // written back
#else
static void zero_hook_offload_place(ZeroEngine* z, const ZeroOffloadArgs* args) ZERO_HOOK(return;) // placement: before the state is allocated
static void zero_hook_offload_open(ZeroEngine* z) ZERO_HOOK(return;)                  // pinned host state, copy stream, NVMe file (every rank)
static int zero_hook_offload_off_device(const ZeroEngine* z, ZeroBuffer which) ZERO_HOOK(return 0;) // 1: `which` rests on the host or NVMe
static int zero_hook_offload_device_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) ZERO_HOOK(return 0;) // 1: -zp's slice came up: gather in place
static void zero_hook_offload_grads_down(ZeroEngine* z, int unit, const float* slice, cudaEvent_t reduced) ZERO_HOOK(return;) // -zo: to the host
static void zero_hook_offload_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t, uint32_t seed) ZERO_HOOK(return;) // AdamW on the host
#endif

// ---- ZeRO++ (zero/zeropp/zeropp.h; GPU zeropp_gpu.cuh) ----
// A stage-3 gather as int8 packets (qwZ) or from the secondary shard (hpZ), a stages 2-3 gradient
// reduction as the two-level int4/int8 all-to-all (qgZ); 0: the core's plain collective runs.
static int zero_hook_pp_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) ZERO_HOOK(return 0;) // 1: started the ZeRO++ way
static void zero_hook_pp_gather_done(ZeroEngine* z, ZeroWorkingUnit* w) ZERO_HOOK(return;)  // dequantize (qwZ), keep the slice (hpZ)
static void zero_hook_pp_free(ZeroEngine* z) ZERO_HOOK(return;)
#if !ZERO_GPU_BUILD
static int zero_hook_pp_grad_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit) ZERO_HOOK(return 0;) // 1: reduced (done on return)
static void zero_hook_pp_step_begin(ZeroEngine* z) ZERO_HOOK(return;)
#else
static int zero_hook_pp_device_grad_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit, float* target, int first) ZERO_HOOK(return 0;) // 1: queued into target
static void zero_hook_pp_abort_comms(ZeroEngine* z) ZERO_HOOK(return;) // zero/gpu/comm_gpu.cuh's abort: the group communicators too
#endif

// ---- tied rows (zero/tied_rows/tied_rows_cpu.h, state tied_rows_state.h): CPU stages 0, 1 with N > 1 ----
// A wte unit's reduction starts after the LM head, its encoder rows set aside and all-gathered
// after the encoder; without (no room reserved) the dense schedule: the full buffer holds both
// uses until zero_grads_unit_ready.
#if !ZERO_GPU_BUILD
static void zero_hook_tied_reserve(ZeroEngine* z, size_t max_rows, int positions, int row_len) ZERO_HOOK(return;)
static void zero_hook_tied_set_aside(ZeroEngine* z, int unit, const int* rows, int count, int row_len) ZERO_HOOK(return;) // reduce early
static float* zero_hook_tied_grads(ZeroEngine* z, int unit) ZERO_HOOK(return NULL;) // an early unit's encoder buffer, else NULL
static int zero_hook_tied_ready(ZeroEngine* z, int unit) ZERO_HOOK(return 0;)       // 1: an early unit's encoder rows taken
static void zero_hook_tied_add_rows(ZeroEngine* z) ZERO_HOOK(return;)               // optimizer step: every rank's rows added
static void zero_hook_tied_free(ZeroEngine* z) ZERO_HOOK(return;)
#endif
static size_t zero_hook_tied_block_numel(const ZeroEngine* z) ZERO_HOOK(return 0;) // a rank's block of rows (elements); 0: dense schedule
static void zero_hook_tied_op(ZeroEngine* z, int wait) ZERO_HOOK(return;) // the rows' all-gather: waited for (1) or tested (0)

#endif // ZERO_HOOKS_H
