/*
 * plan/plan_sim.h: the simulator the planner's schedule runs on (plan/plan_schedule.h drives it
 * in the engine's order; plan/plan_offload_sim.h adds the disk and the host<->device copies):
 * one compute timeline and one communication link that serves collectives one at a time in issue
 * order (the GPU's comm stream; the CPU's queue of rings); the working units' slots; a step's
 * numbers (PlanStep) and the per-unit times it is given (PlanTimes). Part of the planner (the
 * overview in plan/plan.h).
 * With the network stack's CPU (net_cpu, plan/plan_comm.h) a collective moves at two rates: its
 * time alone (the compute side waiting) and its time beside the ranks' compute (the cores' share
 * left to it), and the compute beside it runs at 1 - f of its rate; so the link is simulated as
 * a queue whose head progresses at the rate of the moment, and a collective's completion is
 * known once the simulation gets there (a pending one is a handle, done < 0, until a wait or
 * the compute's advance completes it). Without net_cpu both rates are its one time, as before.
 * An op may carry a not_before (GPU -zo: a gather behind its unit's updated slice going up): the
 * link idles until then.
 */
#ifndef ZERO_PLAN_SIM_H
#define ZERO_PLAN_SIM_H
#ifndef ZERO_CUH
#error "plan/plan_sim.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

// dequantize_s: ZeRO++ qwZ, at first use; read_done, pending: stage 3 -zp nvme, the shard's read
// (the gather starts at the next engine call once it is back)
typedef struct { int unit; double done; long long age; double dequantize_s, read_done; int pending; } PlanSlot;

// A collective on the link: its time alone and beside the ranks' compute, the fraction of the
// compute rate its CPU takes meanwhile, how far it got (0..1), when it began and completed, and
// the time before which it cannot begin (a stream waiting on an event: the link idles until then).
typedef struct {
    double alone_s, computing_s, cpu_fraction, progress, begin, done, not_before;
    int kind, unit, step, complete; long long elements; const char* what;
} PlanLinkOp;

typedef struct PlanSim {
    int stage, num_units, L;
    const ParamLayout* layout;
    const PlanNet* net;
    double t, step_begin;
    double exposed, comm_busy;
    double compute_busy; // seconds the compute side spent computing (the compute column; excludes ZeRO++'s quantize_s)
    long long sent;
    double* grad_done;   // stages 0, 1: each unit's gradient collective completes
    double* param_done;  // stages 1, 2: each unit's all-gather completes
    PlanSlot param_work[ZERO_WORKING_UNITS], grad_work[ZERO_WORKING_UNITS];
    long long clock;
    double shard_add_bytes_per_element; // CPU stages 2, 3: adding the reduced slice into the shard
    double zero_work_per_element;       // stages 2, 3: zeroing a gradient working unit as backward takes it (cpu: measured)
    double mem_bw;
    ZeroTraceEvent* trace; int trace_count, trace_capacity, step; // the predicted timeline (--plan with -tr)
    const PlanPP* pp;    // ZeRO++ (plan/plan_zeropp.h), NULL: plain
    int backward;        // the pass the gathers serve (zero_pp_pass)
    double quantize_s;   // ZeRO++'s (de)quantize time on the compute side
    long long tied_block; // CPU stages 0, 1: one rank's block of encoder wte rows (zero/tied_rows/tied_rows_cpu.h); 0: dense
    double tied_done;    // its all-gather completes
    PlanLinkOp* ops; int op_count, op_capacity, op_head; // the link's collectives in issue order; op_head: the first pending
    double link_t;       // the link's clock (kept at t after every call)
    double net_cpu_s;    // compute time the network stack's CPU took (the stretch), over the simulation
    const PlanOffload* off; // -zo/-zp (plan/plan_offload_state.h); NULL: plain
    PlanOffloadSim* os;     // its disk, copy link and pieces (plan/plan_offload_state.h)
} PlanSim;

// A simulated step's numbers (the third of three, plan_simulate) and the per-unit times it is given.
typedef struct {
    double compute_s, comm_s, exposed_s, step_s;
    long long sent_elements; // per rank per step, summed over the simulated schedule's collectives
    double quantize_s;       // ZeRO++'s (de)quantize passes on the compute side (not in compute_s)
    double net_cpu_s;        // of the step's compute side (compute_s, the shard adds, zeroing, quantize), the time the network stack's CPU took
    // -zo/-zp (plan/plan_offload.h), the third step: the disk's and the host<->device link's busy
    // time, compute waiting for them (in exposed_s too), the checksums' compute time (in compute_s)
    double disk_s, copy_s, io_exposed_s, copy_exposed_s, checksum_s;
} PlanStep;

typedef struct {
    double fwd[256 + 2], bwd[256 + 2], head_fwd, head_bwd, optimizer_per_element;
    double zero_grads_per_element; // the gradients' memset before a step (cpu: measured; else 0)
    double scalar_s;
} PlanTimes;

static void plan_sim_trace_what(PlanSim* s, int kind, int phase, int unit, int op_kind, double begin, double end, long long elements,
                                const char* what) {
    if (s->trace == NULL || s->trace_count == s->trace_capacity || (kind != ZERO_TRACE_EV_STEP && end <= begin)) return;
    ZeroTraceEvent* e = &s->trace[s->trace_count++];
    memset(e, 0, sizeof(*e));
    e->kind = kind; e->phase = phase; e->unit = unit; e->op_kind = op_kind; e->step = s->step;
    e->begin = e->issued = begin; e->end = end; e->elements = elements; e->ev_begin = e->ev_end = -1; e->what = what;
}
static void plan_sim_trace(PlanSim* s, int kind, int phase, int unit, int op_kind, double begin, double end, long long elements) {
    plan_sim_trace_what(s, kind, phase, unit, op_kind, begin, end, elements, NULL);
}

/*
 * Run the link from link_t to `until` (computing: the ranks compute meanwhile, so each
 * collective moves at its rate beside compute; else alone). Completes what gets done and records
 * its span. `until` = INFINITY with stop >= 0: run (alone) until op `stop` is complete. A head op
 * whose not_before is ahead holds the link idle until then (the ones behind it wait too).
 */
static void plan_link_run(PlanSim* s, double until, int computing, int stop) {
    while (s->op_head < s->op_count) {
        PlanLinkOp* op = &s->ops[s->op_head];
        if (op->not_before > s->link_t) {
            if (until < op->not_before) break;
            s->link_t = op->not_before;
            op->begin = op->not_before;
        }
        double total = computing ? op->computing_s : op->alone_s;
        double left = (1.0 - op->progress) * total;
        if (s->link_t + left <= until) { // (a collective of no time completes at once)
            s->link_t += left;
            op->done = s->link_t;
            op->complete = 1;
            s->comm_busy += op->done - op->begin;
            int step = s->step; // the timeline files a collective under the step that issued it, as the engine does
            s->step = op->step;
            plan_sim_trace_what(s, ZERO_TRACE_EV_COMM, 0, op->unit, op->kind, op->begin, op->done, op->elements, op->what);
            s->step = step;
            s->op_head++;
            if (s->op_head < s->op_count) s->ops[s->op_head].begin = s->link_t;
            if (stop >= 0 && s->op_head > stop) return;
        } else {
            if (until > s->link_t) op->progress += (until - s->link_t) / total;
            s->link_t = fmax(s->link_t, until);
            break;
        }
    }
    if (until > s->link_t && until < INFINITY) s->link_t = until; // idle link
}

// A pending collective's handle (its done time once complete: plan_done).
static double plan_handle(int i) { return -(double)(i + 1); }

// The completion time of `done` (a time, or a pending collective's handle: the link runs alone
// until it completes, the compute side waiting).
static double plan_done(PlanSim* s, double done) {
    if (done >= 0.0) return done;
    int i = (int)(-done) - 1;
    if (!s->ops[i].complete) plan_link_run(s, INFINITY, 0, i);
    return s->ops[i].done;
}

// A collective of `seconds` (its ring time alone) issued now, not to begin before not_before (a
// stream waiting on an event; 0: none): the link serves it after the ones before it. Returns its
// handle.
static double plan_issue_after(PlanSim* s, ZeroOpKind kind, int unit, double seconds, long long elements, const char* what,
                               double not_before) {
    s->sent += elements;
    double bytes = (double)elements * s->net->element_bytes;
    // Beside compute its bytes move at beta_compute instead of beta (plan/plan_comm.h).
    double computing_s = seconds + (s->net->beta_compute < s->net->beta ? bytes / s->net->beta_compute - bytes / s->net->beta : 0.0);
    if (s->op_count == s->op_capacity) {
        s->op_capacity = s->op_capacity ? 2 * s->op_capacity : 256;
        s->ops = (PlanLinkOp*)realloc(s->ops, (size_t)s->op_capacity * sizeof(PlanLinkOp));
        if (s->ops == NULL) { fprintf(stderr, "error: plan: out of memory for the link's collectives\n"); exit(1); }
    }
    PlanLinkOp* op = &s->ops[s->op_count];
    memset(op, 0, sizeof(*op));
    op->alone_s = seconds;
    op->computing_s = computing_s;
    op->cpu_fraction = plan_net_cpu_fraction(s->net, bytes, computing_s);
    op->kind = kind; op->unit = unit; op->elements = elements; op->what = what; op->step = s->step;
    op->not_before = not_before;
    op->begin = fmax(s->t, not_before); // the link is at t: if it is busy, begin is set when this one reaches the head
    s->op_count++;
    return plan_handle(s->op_count - 1);
}
static double plan_issue_what(PlanSim* s, ZeroOpKind kind, int unit, double seconds, long long elements, const char* what) {
    return plan_issue_after(s, kind, unit, seconds, elements, what, 0.0);
}
static double plan_issue(PlanSim* s, ZeroOpKind kind, int unit, double seconds, long long elements) {
    return plan_issue_what(s, kind, unit, seconds, elements, NULL);
}

static void plan_wait(PlanSim* s, double done, ZeroOpKind kind, int unit) {
    done = plan_done(s, done);
    if (done > s->t) {
        plan_link_run(s, done, 0, -1); // the link runs on alone while the compute side waits
        plan_sim_trace(s, ZERO_TRACE_EV_WAIT, 0, unit, kind, s->t, done, 0);
        s->exposed += done - s->t;
        s->t = done;
    }
}


/*
 * `seconds` of compute from now, the link running beside it: while a collective is on the link
 * the compute runs at 1 - its cpu_fraction of its rate (the stack's CPU, plan/plan_comm.h) and
 * the collective at its rate beside compute.
 */
static void plan_compute(PlanSim* s, int phase, int unit, double seconds) {
    double begin = s->t, work = seconds;
    while (work > 0.0) {
        if (s->op_head >= s->op_count) { s->t += work; s->link_t = s->t; break; } // the link is idle
        PlanLinkOp* op = &s->ops[s->op_head];
        if (op->not_before > s->t) { // the link idles until its head may begin: compute at its full rate meanwhile
            if (work >= op->not_before - s->t) { work -= op->not_before - s->t; s->t = op->not_before; }
            else { s->t += work; work = 0.0; }
            plan_link_run(s, s->t, 1, -1);
            continue;
        }
        double rate = 1.0 - op->cpu_fraction, left = (1.0 - op->progress) * op->computing_s;
        if (rate > 0.0 && work / rate <= left) { s->t += work / rate; work = 0.0; plan_link_run(s, s->t, 1, -1); }
        else { s->t += left; work -= left * rate; plan_link_run(s, s->t, 1, -1); }
    }
    plan_sim_trace(s, ZERO_TRACE_EV_COMPUTE, phase, unit, 0, begin, s->t, 0);
    s->net_cpu_s += s->t - begin - seconds;
}

// The compute column's work: plan_compute, its time (stretched by the stack's CPU) counted as compute.
static void plan_compute_counted(PlanSim* s, int phase, int unit, double seconds) {
    double t0 = s->t;
    plan_compute(s, phase, unit, seconds);
    s->compute_busy += s->t - t0;
}

// ZeRO++'s quantize and dequantize passes on the compute side (CPU build).
static void plan_quantize(PlanSim* s, int unit, double seconds) {
    if (seconds <= 0) return;
    double t0 = s->t;
    plan_compute(s, s->backward ? ZERO_TRACE_BACKWARD : ZERO_TRACE_FORWARD, unit, seconds);
    s->quantize_s += s->t - t0; // stretched like compute beside a collective, so step = compute + quantize + exposed
}

static PlanSlot* plan_find(PlanSlot* w, int unit) {
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) if (w[i].unit == unit) return &w[i];
    return NULL;
}

// zero_work_take's rule: the first free working unit (all are the largest unit's size, wte being chunked).
static PlanSlot* plan_take(PlanSim* s, PlanSlot* w, int unit) {
    for (int i = 0; i < ZERO_WORKING_UNITS; i++)
        if (w[i].unit == -1) { w[i].unit = unit; w[i].age = ++s->clock; w[i].pending = 0; return &w[i]; }
    return NULL;
}

static size_t plan_unit_numel(const PlanSim* s, int unit) { return s->layout->units[unit].padded_numel; }

#endif // ZERO_PLAN_SIM_H
