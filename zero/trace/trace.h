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
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ZERO_TRACE
#define ZERO_TRACE 1 // 0: every hook compiles to nothing
#endif

typedef enum { ZERO_TRACE_FORWARD, ZERO_TRACE_BACKWARD, ZERO_TRACE_OPTIMIZER } ZeroTracePhase;
static const char* const zero_trace_phase_names[] = {"forward", "backward", "optimizer"};
// The unit argument for the tied LM head over wte's vocab chunk k (that chunk unit's second use):
// ZERO_TRACE_LM_HEAD - k, so chunk 0's is ZERO_TRACE_LM_HEAD and every LM-head span is <= it.
#define ZERO_TRACE_LM_HEAD (-2)
static inline int zero_trace_lm_head(int k) { return ZERO_TRACE_LM_HEAD - k; }

typedef enum { ZERO_TRACE_EV_STEP, ZERO_TRACE_EV_COMPUTE, ZERO_TRACE_EV_WAIT, ZERO_TRACE_EV_COMM } ZeroTraceEventKind;

typedef struct {
    int kind;          // ZeroTraceEventKind
    int phase, unit;   // compute: ZeroTracePhase and unit (zero_trace_lm_head(k): the LM head on chunk k)
    int op_kind;       // wait, comm: ZeroOpKind (wait: ZERO_OP_NONE when it waits for every collective)
    int step, micro_step;
    long long elements; // comm: ring count sent by this rank (ZeRO++: its own count, zero/zeropp/zeropp.h)
    const char* what;   // wait, comm: the engine's label of the buffer (ZeroOp.what; names ZeRO++'s code format)
    double begin, end, issued; // seconds from the trace's start (GPU: filled from events at the end)
    int ev_begin, ev_end;      // GPU: event pool indices (-1: none)
    int host;                  // GPU: begin and end are host clock times (a host wait or collective)
} ZeroTraceEvent;

// A host collective between its issue and its wait (CPU build): the trace's own record of it.
typedef struct {
    const void* op;
    int op_kind, unit, step;
    long long elements;
    const char* what;
    double issued, done; // done < 0: not seen complete yet
} ZeroTraceInFlight;

typedef struct {
    int on;                   // -tr given
    int recording;            // inside a traced step
    int first_step, last_step;
    int rank, world_size;
    char path[4200];
    char host[64];
    double t0;                // host clock at the start (after the barrier)
    ZeroTraceEvent* events;
    int count, capacity;
    int open_step, open_compute; // indices of the spans still open, -1 when none
    int step, micro_step;
    ZeroTraceInFlight* in_flight;
    int in_flight_count, in_flight_capacity;
    pthread_mutex_t lock;     // the in-flight table: zero_trace_done may run on the progress thread
    int dropped;              // events not recorded (GPU: event pool full)
#if ZERO_GPU_BUILD
    cudaEvent_t* pool;
    int pool_used, pool_capacity;
    cudaEvent_t anchor;       // recorded on an idle device at the start, at host time anchor_s
    double anchor_s;
    int wait_op_kind, wait_unit; // the op the next compute-stream wait is for (zero_trace_device_wait_label)
#endif
} ZeroTrace;

static ZeroTrace zero_trace = {.open_step = -1, .open_compute = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static double zero_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9 - zero_trace.t0;
}

static ZeroTraceEvent* zero_trace_add(int kind) {
    ZeroTrace* t = &zero_trace;
    if (t->count == t->capacity) {
        int cap = t->capacity ? 2 * t->capacity : 1024;
        ZeroTraceEvent* grown = (ZeroTraceEvent*)realloc(t->events, (size_t)cap * sizeof(ZeroTraceEvent));
        if (grown == NULL) { t->dropped++; return NULL; }
        t->events = grown;
        t->capacity = cap;
    }
    ZeroTraceEvent* e = &t->events[t->count++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    e->op_kind = ZERO_OP_NONE;
    e->step = t->step;
    e->micro_step = t->micro_step;
    e->ev_begin = e->ev_end = -1;
    return e;
}

#if ZERO_GPU_BUILD
// An event from the pool recorded on `stream` now; -1 when the pool is used up (counted).
static int zero_trace_record(cudaStream_t stream) {
    ZeroTrace* t = &zero_trace;
    if (t->pool_used == t->pool_capacity) { t->dropped++; return -1; }
    int k = t->pool_used++;
    CUDA_CHECK(cudaEventRecord(t->pool[k], stream));
    return k;
}
#endif

/*
 * -ts against the run: steps start_step+1..max_steps run (from 1, as printed); a range with none
 * of them would leave a file without a step. Every rank calls it (the same numbers everywhere):
 * one error line, every rank exits 1.
 */
static void zero_trace_check_steps(const char* path, const char* steps, int first_step, int last_step, int start_step, int max_steps) {
    if (!ZERO_TRACE || path == NULL) return;
    char err[512] = "";
    int ok = first_step <= max_steps && last_step > start_step;
    if (!ok)
        snprintf(err, sizeof(err), "error: -ts %s: the run's steps are %d-%d; expected a range that holds one of them", steps,
                 start_step + 1, max_steps);
    zero_startup_agree(ok, err, "checking the traced steps");
}

/*
 * Start tracing steps first..last (from 1, as printed) to `path` (must end in ".json"; each rank
 * writes path with ".json" -> ".rank<R>.json"). Every rank calls it, after zero_init and before
 * the first step: a barrier makes time 0 the same moment on every rank. GPU build: the event pool
 * (a few events per unit and micro-step per traced step) and an anchor event on the idle device.
 */
static void zero_trace_open(ZeroEngine* z, const char* path, int first_step, int last_step, int grad_accum_steps) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || path == NULL) return;
    size_t n = strlen(path);
    if (n < 6 || strcmp(path + n - 5, ".json") != 0) {
        fprintf(stderr, "error: -tr %s: not a .json file name; expected a path ending in .json (rank R writes .rankR.json)\n", path);
        exit(1);
    }
    snprintf(t->path, sizeof(t->path), "%.*s.rank%d.json", (int)(n - 5), path, z->rank);
    // The file is written after the last step: find out now, not after the run, that it cannot be
    // (its temporary name is created and removed again; zero_trace_write writes it for real).
    char probe[sizeof(t->path) + 16], err[sizeof(probe) + 1024] = ""; // err: probe, path cut to 512, host, errno text
    snprintf(probe, sizeof(probe), "%.*s.tmp", (int)sizeof(t->path), t->path);
    FILE* pf = fopen(probe, "w");
    int writable = pf != NULL;
    struct stat st;
    if (!writable)
        snprintf(err, sizeof(err), "error: -tr %.512s (rank %d on %.64s): cannot create %s (%.200s); expected a writable path", path,
                 z->rank, zero_cluster.host, probe, strerror(errno));
    else { fclose(pf); remove(probe); }
    if (writable && stat(t->path, &st) == 0 && S_ISDIR(st.st_mode)) { // the rename onto it would fail after the run
        writable = 0;
        snprintf(err, sizeof(err), "error: -tr %.512s (rank %d on %.64s): %s is a directory; expected a writable path", path, z->rank,
                 zero_cluster.host, t->path);
    }
    zero_startup_agree(writable, err, "opening the trace files"); // the lowest failing rank's line, every rank exits 1
    t->on = 1;
    t->first_step = first_step;
    t->last_step = last_step;
    t->rank = z->rank;
    t->world_size = z->world_size;
    if (gethostname(t->host, sizeof(t->host)) != 0) snprintf(t->host, sizeof(t->host), "?");
    t->host[sizeof(t->host) - 1] = '\0';
    t->in_flight_capacity = 4 * z->layout->num_units + 16;
    t->in_flight = (ZeroTraceInFlight*)zero_calloc((size_t)t->in_flight_capacity, sizeof(ZeroTraceInFlight), "trace");
#if ZERO_GPU_BUILD
    // Per micro-step: about 2(L+1+2K) compute marks (K: wte's chunks, in the encoder and the LM
    // head), 2 events per collective and per wait (<= 3 each per unit, 5 for a wte chunk: three
    // gathers, two reduce-scatters); +1 step for the previous step's all-gathers still in flight.
    long long per_micro = 16LL * z->layout->num_units + 8LL * z->layout->num_wte_units + 32;
    long long want = per_micro * grad_accum_steps * (last_step - first_step + 2);
    t->pool_capacity = (int)(want < 65536 ? want : 65536);
    t->pool = (cudaEvent_t*)zero_calloc((size_t)t->pool_capacity, sizeof(cudaEvent_t), "trace events");
    for (int k = 0; k < t->pool_capacity; k++) CUDA_CHECK(cudaEventCreate(&t->pool[k]));
    CUDA_CHECK(cudaEventCreate(&t->anchor));
#else
    (void)grad_accum_steps;
#endif
    zero_barrier(z, "trace start");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t->t0 = ts.tv_sec + ts.tv_nsec * 1e-9;
#if ZERO_GPU_BUILD
    CUDA_CHECK(cudaDeviceSynchronize()); // idle: the anchor fires as it is recorded
    t->anchor_s = zero_trace_now();
    CUDA_CHECK(cudaEventRecord(t->anchor, z->gpu.compute));
#endif
}

// ---- hooks (each returns at once when tracing is off) ----

static int zero_trace_records_comm(void) {
    // Collectives are recorded from one step before the first traced one: the all-gathers that
    // step's optimizer leaves in flight run into the first traced step's forward.
    ZeroTrace* t = &zero_trace;
    return t->on && t->step >= t->first_step - 1 && t->step <= t->last_step;
}

// Close the compute span still open at time `now` (GPU: at event `ev`).
static void zero_trace_close_compute(double now, int ev) {
    ZeroTrace* t = &zero_trace;
    if (t->open_compute < 0) return;
    t->events[t->open_compute].end = now;
    t->events[t->open_compute].ev_end = ev;
    t->open_compute = -1;
}

// The engine starts step `step` (from 1): zero_step_begin calls it.
static void zero_trace_step_begin(ZeroEngine* z, int step) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->on) return;
    t->step = step;
    t->micro_step = -1;
    t->recording = step >= t->first_step && step <= t->last_step;
    if (!t->recording) return;
    ZeroTraceEvent* e = zero_trace_add(ZERO_TRACE_EV_STEP);
    if (e == NULL) return;
    e->begin = zero_trace_now();
#if ZERO_GPU_BUILD
    e->ev_begin = zero_trace_record(z->gpu.compute);
#else
    (void)z;
#endif
    t->open_step = (int)(e - t->events);
}

// Ends the open compute span now (GPU: at an event recorded on the compute stream, read after
// the step); returns the event index (-1 on the CPU) and the host time in *now.
static int zero_trace_close_compute_now(ZeroEngine* z, double* now) {
    *now = zero_trace_now();
    int ev = -1;
#if ZERO_GPU_BUILD
    ev = zero_trace_record(z->gpu.compute);
#else
    (void)z;
#endif
    zero_trace_close_compute(*now, ev);
    return ev;
}

/*
 * The model starts `phase` of `unit` (forward and backward of each unit, zero_trace_lm_head(k)
 * for the tied LM head on wte's chunk k; the engine's optimizer): the span before it ends here.
 * The forward of the embedding unit (wte's first chunk, with wpe) starts a micro-step.
 */
static void zero_trace_compute(ZeroEngine* z, ZeroTracePhase phase, int unit) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->recording) return;
    if (phase == ZERO_TRACE_FORWARD && unit == UNIT_EMBEDDING) t->micro_step++;
    double now;
    int ev = zero_trace_close_compute_now(z, &now);
    ZeroTraceEvent* e = zero_trace_add(ZERO_TRACE_EV_COMPUTE);
    if (e == NULL) return;
    e->phase = phase;
    e->unit = unit;
    e->begin = now;
    e->ev_begin = ev;
    t->open_compute = (int)(e - t->events);
}

// The trainer has finished the step (optimizer, loss): the step span and its last phase end.
static void zero_trace_step_end(ZeroEngine* z) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->recording) return;
    double now;
    int ev = zero_trace_close_compute_now(z, &now);
    if (t->open_step >= 0) {
        t->events[t->open_step].end = now;
        t->events[t->open_step].ev_end = ev;
    }
    t->open_step = -1;
    t->recording = 0;
}

// Host collectives the communication track shows: every one in the CPU build; in the GPU build
// the scalar all-reduces (norm, loss), as the device ones are traced on the comm stream below
// (the host-staged backend's inner MPI calls are parts of those).
static int zero_trace_host_op(int kind) { return !ZERO_GPU_BUILD || kind == ZERO_OP_SCALAR_ALL_REDUCE; }

// zero_op_begin: `op` (kind, unit set) starts now, sending `elements` (ring count).
static void zero_trace_issue(const ZeroOp* op, long long elements) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !zero_trace_records_comm() || !zero_trace_host_op(op->kind)) return;
    pthread_mutex_lock(&t->lock);
    if (t->in_flight_count < t->in_flight_capacity) {
        ZeroTraceInFlight* f = &t->in_flight[t->in_flight_count++];
        f->op = op;
        f->op_kind = op->kind;
        f->unit = op->unit;
        f->step = t->step;
        f->elements = elements;
        f->what = op->what;
        f->issued = zero_trace_now();
        f->done = -1.0;
    } else {
        t->dropped++;
    }
    pthread_mutex_unlock(&t->lock);
}

// The engine sees `op` complete (first time counts; any thread).
static void zero_trace_done(const ZeroOp* op) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->on || t->in_flight_count == 0) return;
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < t->in_flight_count; i++)
        if (t->in_flight[i].op == op && t->in_flight[i].done < 0) t->in_flight[i].done = zero_trace_now();
    pthread_mutex_unlock(&t->lock);
}

// zero_op_wait waited for `op` from `begin` to `end` (host clock, zero_clock): a wait span on the
// compute track (in a traced step; GPU build too: the host's waits count in the step's comm
// wait beside the device stalls), and the collective's span on the communication track.
static void zero_trace_wait(const ZeroOp* op, double begin, double end) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->on) return;
    begin -= t->t0;
    end -= t->t0;
    if (t->recording) {
        ZeroTraceEvent* e = zero_trace_add(ZERO_TRACE_EV_WAIT);
        if (e != NULL) {
            e->op_kind = op->kind;
            e->unit = op->unit;
            e->what = op->what;
            e->begin = begin;
            e->end = end;
            e->host = 1;
        }
    }
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < t->in_flight_count; i++) {
        ZeroTraceInFlight* f = &t->in_flight[i];
        if (f->op != op) continue;
        double done = f->done >= 0 && f->done < end ? f->done : end;
        ZeroTraceEvent* e = done >= 0 ? zero_trace_add(ZERO_TRACE_EV_COMM) : NULL;
        if (e != NULL) {
            e->op_kind = f->op_kind;
            e->unit = f->unit;
            e->step = f->step;
            e->micro_step = -1;
            e->elements = f->elements;
            e->what = f->what;
            e->issued = e->begin = f->issued;
            e->end = done;
            e->host = 1;
        }
        *f = t->in_flight[--t->in_flight_count];
        break;
    }
    pthread_mutex_unlock(&t->lock);
}

#if ZERO_GPU_BUILD
// GPU build, zero_device_collective: events on the comm stream right before the collective
// (it fires when the comm stream reaches it: inputs ready, the collectives before it done) and
// right after it. Returns the first event's index for zero_trace_device_collective_end.
static int zero_trace_device_collective_begin(ZeroEngine* z) {
    if (!ZERO_TRACE || !zero_trace_records_comm()) return -1;
    return zero_trace_record(z->gpu.comm);
}

static void zero_trace_device_collective_end(ZeroEngine* z, int begin_ev, ZeroOpKind kind, int unit, long long elements,
                                             const char* what) {
    if (!ZERO_TRACE || begin_ev < 0) return;
    ZeroTraceEvent* e = zero_trace_add(ZERO_TRACE_EV_COMM);
    if (e == NULL) return;
    e->op_kind = kind;
    e->unit = unit;
    e->micro_step = -1;
    e->elements = elements;
    e->what = what;
    e->issued = zero_trace_now(); // host enqueue time, for reference
    e->ev_begin = begin_ev;
    e->ev_end = zero_trace_record(z->gpu.comm);
}

// zero_compute_wait_op, zero_device_all_reduce_floats: the next compute-stream wait is for a
// collective of this kind and unit (its label in the trace).
static void zero_trace_device_wait_label(int op_kind, int unit) {
    zero_trace.wait_op_kind = op_kind;
    zero_trace.wait_unit = unit;
}

// zero_compute_wait: events on the compute stream before and after its wait on the comm stream;
// the interval between them is the time compute stood still (the exposed communication).
static int zero_trace_device_wait_begin(ZeroEngine* z) {
    if (!ZERO_TRACE || !zero_trace.recording) return -1;
    return zero_trace_record(z->gpu.compute);
}

static void zero_trace_device_wait_end(ZeroEngine* z, int begin_ev) {
    ZeroTrace* t = &zero_trace;
    int kind = t->wait_op_kind, unit = t->wait_unit;
    t->wait_op_kind = ZERO_OP_NONE; // a wait without a label waits for every collective queued
    t->wait_unit = -1;
    if (!ZERO_TRACE || begin_ev < 0) return;
    ZeroTraceEvent* e = zero_trace_add(ZERO_TRACE_EV_WAIT);
    if (e == NULL) return;
    e->op_kind = kind;
    e->unit = unit;
    e->ev_begin = begin_ev;
    e->ev_end = zero_trace_record(z->gpu.compute);
}
#endif

// ---- writing ----

static void zero_trace_unit_label(const ParamLayout* layout, int unit, char* buf, size_t cap) {
    int final_unit = UNIT_FINAL(&layout->config);
    if (unit <= ZERO_TRACE_LM_HEAD && layout->num_wte_units == 1) snprintf(buf, cap, "lm head");
    else if (unit <= ZERO_TRACE_LM_HEAD) snprintf(buf, cap, "lm head %d", ZERO_TRACE_LM_HEAD - unit);
    else if (unit < 0) snprintf(buf, cap, "-");
    else if (unit == UNIT_EMBEDDING) snprintf(buf, cap, "embedding");
    else if (unit == final_unit) snprintf(buf, cap, "final");
    else if (unit > final_unit) snprintf(buf, cap, "wte %d", unit - final_unit); // wte's vocab chunk k = unit - L - 1
    else snprintf(buf, cap, "layer %d", unit - 1);
}

/*
 * A collective's kind as the trace names it: the engine's kind, and for ZeRO++'s quantized ones
 * the code format their label names (zero/zeropp/zeropp.h: "all_gather int8" for qwZ's gather,
 * "all_to_all int4" or "all_to_all int8" for qgZ's); hpZ's is "all_gather (group)", fp32 or bf16.
 */
static const char* zero_trace_kind(int op_kind, const char* what, char* buf, size_t cap) {
    const char* format = what == NULL ? NULL : strstr(what, "int8") ? "int8" : strstr(what, "int4") ? "int4" : NULL;
    if (format) snprintf(buf, cap, "%s %s", zero_op_names[op_kind], format);
    else snprintf(buf, cap, "%s", zero_op_names[op_kind]);
    return buf;
}

static int zero_trace_by_begin(const void* a, const void* b) {
    const ZeroTraceEvent* x = (const ZeroTraceEvent*)a;
    const ZeroTraceEvent* y = (const ZeroTraceEvent*)b;
    if (x->kind != y->kind) return x->kind - y->kind;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

// What a trace file says about the run that wrote it (its otherData).
typedef struct {
    int rank, world_size, first_step, last_step, micro_steps, dropped;
    const char* host;
    const char* build;   // "cpu", "gpu", or "plan" (the planner's predicted timeline)
    int element_bytes;
} ZeroTraceInfo;

/*
 * Write `events` as one Chrome trace-event file at `path` (a temporary name, then renamed).
 * Sorts them; the communication track shows one collective at a time: each from its issue, or
 * from the completion of the one before it, to its completion (the engine's collectives queue).
 * Collectives that completed before the first step span are left out. Returns 0, or -1 after
 * one error line: printed, or with err (cap bytes) put there for the caller to print.
 */
static int zero_trace_write_to(const char* path, ZeroTraceEvent* events, int count, const ParamLayout* layout, int zero_stage,
                               const ZeroTraceInfo* info, char* err, size_t cap) {
    qsort(events, (size_t)count, sizeof(ZeroTraceEvent), zero_trace_by_begin);
    double link_free = -1e30, first_step_begin = 1e30;
    for (int i = 0; i < count; i++) {
        ZeroTraceEvent* e = &events[i];
        if (e->kind == ZERO_TRACE_EV_STEP && e->begin < first_step_begin) first_step_begin = e->begin;
        if (e->kind != ZERO_TRACE_EV_COMM) continue;
        if (e->begin < link_free) e->begin = link_free < e->end ? link_free : e->end;
        if (e->end > link_free) link_free = e->end;
    }
    char tmp[4416]; // path (at most 4300, plan_print; gcc bounds it at 4407 once inlined) + ".tmp"
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "w");
    char line[4700];
    if (f == NULL) {
        snprintf(line, sizeof(line), "error: -tr %s: cannot write the trace (%s); expected a writable path", path, strerror(errno));
        if (err) snprintf(err, cap, "%s", line); else fprintf(stderr, "%s\n", line);
        return -1;
    }
    int r = info->rank;
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (%s)\"}},\n", r, r, info->host);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n", r, r);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n", r);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}", r);
    for (int i = 0; i < count; i++) {
        const ZeroTraceEvent* e = &events[i];
        if (e->kind < 0 || e->end < e->begin) continue;
        if (e->kind == ZERO_TRACE_EV_COMM && e->end < first_step_begin) continue;
        char name[160], unit[32], kind[48];
        zero_trace_unit_label(layout, e->unit, unit, sizeof(unit));
        double ts = e->begin * 1e6, dur = (e->end - e->begin) * 1e6;
        fprintf(f, ",\n");
        if (e->kind == ZERO_TRACE_EV_STEP) {
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"step %d\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d}}", e->step, r, ts, dur, e->step);
        } else if (e->kind == ZERO_TRACE_EV_COMPUTE) {
            if (e->phase == ZERO_TRACE_OPTIMIZER) snprintf(name, sizeof(name), "optimizer");
            else snprintf(name, sizeof(name), "%s %s", zero_trace_phase_names[e->phase], unit);
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro_step\":%d,\"unit\":%d}}", zero_trace_phase_names[e->phase], name, r, ts, dur,
                    e->step, e->micro_step, e->unit);
        } else if (e->kind == ZERO_TRACE_EV_WAIT) {
            const char* what = e->op_kind == ZERO_OP_NONE ? "collectives" : zero_trace_kind(e->op_kind, e->what, kind, sizeof(kind));
            snprintf(name, sizeof(name), "wait %s %s", what, e->unit >= 0 ? unit : "");
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"wait\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro_step\":%d,\"unit\":%d,\"kind\":\"%s\"}}", name, r, ts, dur, e->step,
                    e->micro_step, e->unit, what);
        } else {
            zero_trace_kind(e->op_kind, e->what, kind, sizeof(kind));
            snprintf(name, sizeof(name), "%s %s", kind, e->unit >= 0 ? unit : "");
            fprintf(f, "{\"ph\":\"X\",\"cat\":\"comm\",\"name\":\"%s\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"unit\":%d,\"kind\":\"%s\",\"what\":\"%s\",\"elements\":%lld,\"bytes\":%lld,"
                    "\"issued_us\":%.3f,\"queued_us\":%.3f}}", name, r, ts, dur, e->step, e->unit, kind, e->what ? e->what : "",
                    e->elements, e->elements * (long long)info->element_bytes, e->issued * 1e6, (e->begin - e->issued) * 1e6);
        }
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"world_size\":%d,\"zero_stage\":%d,\"host\":\"%s\","
            "\"build\":\"%s\",\"element_bytes\":%d,\"first_step\":%d,\"last_step\":%d,\"micro_steps\":%d,\"dropped\":%d}}\n",
            r, info->world_size, zero_stage, info->host, info->build, info->element_bytes, info->first_step, info->last_step,
            info->micro_steps, info->dropped);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        snprintf(line, sizeof(line), "error: -tr %s: writing the trace failed (%s); expected space on its disk", path, strerror(errno));
        if (err) snprintf(err, cap, "%s", line); else fprintf(stderr, "%s\n", line);
        remove(tmp);
        return -1;
    }
    return 0;
}

static int zero_trace_write(const char* path, ZeroTraceEvent* events, int count, const ParamLayout* layout, int zero_stage,
                            const ZeroTraceInfo* info) {
    return zero_trace_write_to(path, events, count, layout, zero_stage, info, NULL, 0);
}

/*
 * Write this rank's file (every rank calls it after the last step; GPU: the device is
 * synchronized first, outside every step, and each event's time read against the anchor).
 * A failure (a full disk) leaves no file: one error line, the lowest failing rank's, and every
 * rank exits 1; the run's log and checkpoints are written already.
 */
static void zero_trace_close(ZeroEngine* z, int grad_accum_steps) {
    ZeroTrace* t = &zero_trace;
    if (!ZERO_TRACE || !t->on) return;
    t->on = t->recording = 0;
#if ZERO_GPU_BUILD
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < t->count; i++) {
        ZeroTraceEvent* e = &t->events[i];
        float ms = 0.0f;
        if (e->host) continue; // host clock times already
        if (e->ev_begin >= 0) { CUDA_CHECK(cudaEventElapsedTime(&ms, t->anchor, t->pool[e->ev_begin])); e->begin = t->anchor_s + ms / 1e3; }
        if (e->ev_end >= 0) { CUDA_CHECK(cudaEventElapsedTime(&ms, t->anchor, t->pool[e->ev_end])); e->end = t->anchor_s + ms / 1e3; }
        if (e->ev_begin < 0 || e->ev_end < 0) e->kind = -1; // incomplete (pool used up): left out
    }
#endif
    ZeroTraceInfo info = {t->rank, t->world_size, t->first_step, t->last_step, grad_accum_steps, t->dropped, t->host,
                          ZERO_GPU_BUILD ? "gpu" : "cpu", (int)sizeof(ZeroFloat)};
    char err[sizeof(t->path) + 512] = "";
    int written = zero_trace_write_to(t->path, t->events, t->count, z->layout, ZERO_STAGE, &info, err, sizeof(err)) == 0;
    if (t->dropped > 0)
        fprintf(stderr, "warning: -tr: rank %d left %d events out of %s (event pool or memory used up)\n", t->rank, t->dropped, t->path);
    free(t->events);
    free(t->in_flight);
    t->events = NULL;
    t->count = t->capacity = 0;
#if ZERO_GPU_BUILD
    for (int k = 0; k < t->pool_capacity; k++) CUDA_CHECK(cudaEventDestroy(t->pool[k]));
    CUDA_CHECK(cudaEventDestroy(t->anchor));
    free(t->pool);
#endif
    zero_startup_agree(written, err, "writing the trace files");
}

#endif // ZERO_TRACE_H
