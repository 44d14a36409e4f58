/*
 * zero/trace/trace_hooks.h: the timeline's hooks, one call at each point of a step, each
 * returning at once when tracing is off: zero_trace_step_begin / zero_trace_step_end (the step
 * span), zero_trace_compute (a unit's forward or backward, the optimizer), zero_trace_issue /
 * zero_trace_done / zero_trace_wait (a host collective and the wait on it; zero_trace_done may run
 * on the progress thread, so the in-flight table is locked), and the GPU build's device twins
 * (events on the comm stream around each collective, on the compute stream around each wait).
 * The engine's calls are declared in zero/hooks.h.
 * Included by zero/trace/trace.h after trace_record.h (the state and zero_trace_add).
 */
#ifndef ZERO_TRACE_HOOKS_H
#define ZERO_TRACE_HOOKS_H
#ifndef ZERO_CUH
#error "zero/trace/trace_hooks.h is part of the ZeRO engine; include zero.cuh"
#endif

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

#endif // ZERO_TRACE_HOOKS_H
