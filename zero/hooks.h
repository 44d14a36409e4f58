/*
 * zero/hooks.h: the one place where the core calls an extension. Each extension (trace, offload
 * and NVMe, ZeRO++, tied rows, cluster robustness) lives in its own folder of zero/ and is reached
 * from the core only through the hooks declared here; its state lives in its own struct, one field
 * of ZeroEngine. A reader of the core may skip every folder below zero/ and read these lines as
 * "here an extension may step in".
 *
 * ZERO_EXT (1 by default; 0 in the lesson build, `make train_gpt2 ZERO_EXT=none`): with 0 the
 * extension folders are not compiled and each hook below is an empty inline function, so the core
 * builds and runs alone (stages 0-3, rings overlapped with backward, accumulation, checkpoints,
 * the GNS meter, the handshake).
 *
 * Needs: zero/engine.h (ZeroEngine, ZeroOp, ZeroWorkingUnit). Definitions: in each extension's
 * folder (named beside each declaration).
 */
#ifndef ZERO_HOOKS_H
#define ZERO_HOOKS_H
#ifndef ZERO_CUH
#error "include zero.cuh, not this file"
#endif

#ifndef ZERO_EXT
#define ZERO_EXT 1
#endif

// ---- trace (zero/trace/): a collective's begin and end on the per-rank timeline ----
// zero/comm.h, zero/comm_ring.h: a host collective's issue, its completion (first seen, any
// thread), the wait on it; each engine's zero_step_begin: a step starts. In zero/trace/trace.h.
#if ZERO_EXT
static void zero_trace_issue(const ZeroOp* op, long long elements);
static void zero_trace_done(const ZeroOp* op);
static void zero_trace_wait(const ZeroOp* op, double begin, double end);
static void zero_trace_step_begin(ZeroEngine* z, int step);
#else
static inline void zero_trace_issue(const ZeroOp* op, long long elements) { (void)op; (void)elements; }
static inline void zero_trace_done(const ZeroOp* op) { (void)op; }
static inline void zero_trace_wait(const ZeroOp* op, double begin, double end) { (void)op; (void)begin; (void)end; }
static inline void zero_trace_step_begin(ZeroEngine* z, int step) { (void)z; (void)step; }
#endif

// ---- cluster robustness (zero/cluster/): what process life registers to run on abort ----
// None: each registers its clean-up as it sets it up (zero/comm_mpi.h's zero_at_stop, zero_at_abort).

// ---- offload and NVMe (zero/offload/) ----

// ---- ZeRO++ (zero/zeropp/) ----
#if ZERO_GPU_BUILD && ZERO_EXT // zero/gpu/comm_gpu.cuh's abort: ZeRO++'s split communicators too
static void zero_pp_abort_comms(ZeroEngine* z);
#elif ZERO_GPU_BUILD
static inline void zero_pp_abort_comms(ZeroEngine* z) { (void)z; }
#endif

// ---- tied rows (zero/tied_rows/) ----

#endif // ZERO_HOOKS_H
