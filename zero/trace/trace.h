/*
 * zero/trace/trace.h: a per-rank timeline of chosen training steps (-tr FILE, -ts FIRST-LAST), written
 * as Chrome trace-event JSON (the Trace Event Format's complete "X" and metadata "M" events;
 * opens in Perfetto and chrome://tracing; scripts/plot_timeline.py draws one step of all ranks).
 * Part of the ZeRO engine (the map is in zero.cuh).
 *
 * Each rank writes its own file (FILE with ".json" replaced by ".rank<R>.json"), pid = rank:
 *   tid 0 "compute"        a span per step; inside it one span per unit and phase (forward and
 *                          backward of each of wte's K vocab-chunk units in the encoder, the first
 *                          holding wpe too, each layer, the final LayerNorm, and the tied LM head
 *                          chunk by chunk; the optimizer); inside those, every wait the compute
 *                          side spends on a collective (cat "wait": the exposed communication)
 *   tid 1 "communication"  each collective from its start to its completion: kind, unit,
 *                          elements and bytes (the ring count of zero/layout.h), issue time;
 *                          ZeRO++'s collectives too (zero/zeropp/zeropp.h), their kind naming the
 *                          code format ("all_gather int8" qwZ, "all_gather (group)" hpZ,
 *                          "all_to_all int4"/"int8" qgZ), "what" the engine's label of the
 *                          buffer, elements as the engine counts them (packet words)
 * Times in microseconds from a barrier at the trace's start, so ranks line up (to its skew).
 *
 * CPU build: the host clock at each hook. A collective is issued in zero_op_begin and complete
 * when the engine first sees it done (zero_trace_done: the ring queue finishing its last step,
 * zero/comm_ring.h, on whichever thread advanced it; an MPI_Test that succeeds for the scalars;
 * or the end of the wait); its span on the communication track starts at its issue or when the collective
 * before it completed, whichever is later (the link serves one at a time, as the engine's
 * collectives queue on it), with the issue time and the queued time in its args.
 * GPU build: CUDA events recorded on the compute stream at each compute hook and around each
 * compute-stream wait, and on the comm stream before and after each collective; they are read
 * when the file is written, after the run, so no step ever synchronizes for the trace. The
 * host's own waits (zero_op_wait: the loss all-reduce, the host-staged backend) and the host's
 * scalar all-reduces themselves are host clock times, on the same axis (the anchor event); with
 * NCCL the norms' all-reduce runs on the comm stream and is traced there. A step's span runs
 * from zero_step_begin to the optimizer's enqueue (the pipelined step reads its results one
 * step later), so it holds the waits the step's comm wait counts.
 *
 * Hooks, one call at each point: zero_trace_compute (the model, at each unit and phase),
 * zero_trace_step_begin (zero_step_begin), zero_trace_step_end (the trainer, after the step),
 * zero_trace_issue / zero_trace_done / zero_trace_wait (zero/comm.h, zero/comm_ring.h), and the
 * device twins in zero/gpu/comm_gpu.cuh; the engine's calls are declared in zero/hooks.h. Off (no
 * -tr), each hook tests one flag and returns; built with -DZERO_TRACE=0 they are empty
 * (dev/bench/trace_overhead.sh compares the three). Comes after communication and the handshake
 * (zero.cuh), whose barrier and agreement it uses to start and end.
 */
#ifndef ZERO_TRACE_H
#define ZERO_TRACE_H
#ifndef ZERO_CUH
#error "zero/trace/trace.h is part of the ZeRO engine; include zero.cuh"
#endif

// The parts (each needs the ones above it):
#include "zero/trace/trace_record.h" // the event record, the state, zero_trace_open
#include "zero/trace/trace_hooks.h"  // the hooks the engine, the model and the trainer call
#include "zero/trace/trace_write.h"  // the Chrome trace JSON writer, zero_trace_close

#endif // ZERO_TRACE_H
