/*
 * zero/trace/trace_record.h: what the timeline (-tr) records and how it starts. The event record
 * (ZeroTraceEvent: a step, compute, wait or collective span; times in seconds from the trace's
 * start, or GPU event indices read at the end), the host collectives in flight (CPU build), the
 * one ZeroTrace state (the events, the GPU build's event pool and anchor), zero_trace_add and
 * zero_trace_record, and the start: zero_trace_check_steps (-ts against the run) and
 * zero_trace_open (the file name checked for writing on every rank, the barrier that makes time
 * 0 common). ZERO_TRACE=0 compiles every hook to nothing.
 * Included by zero/trace/trace.h (the overview), first; the hooks (trace_hooks.h) and the writer
 * (trace_write.h) come after it.
 */
#ifndef ZERO_TRACE_RECORD_H
#define ZERO_TRACE_RECORD_H
#ifndef ZERO_CUH
#error "zero/trace/trace_record.h is part of the ZeRO engine; include zero.cuh"
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

#endif // ZERO_TRACE_RECORD_H
