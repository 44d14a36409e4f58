/*
 * plan/plan_schedule.h: the engine's schedule, simulated as the engine runs it
 * (zero/engine_cpu.h, engine_gpu.cuh): one compute timeline and one communication link that
 * serves collectives one at a time in issue order (the GPU's comm stream; the CPU's queue of
 * rings). Per micro-step: forward unit by unit (stage 3: all-gather each unit, the next one
 * prefetched into one of the three working units; stages 1, 2: wait for the all-gather the last
 * optimizer step started): the encoder over wte's K vocab-chunk units, the layers, the final
 * LayerNorm, the tied LM head chunk by chunk (stage 3 gathers each chunk again); backward from
 * the LM head, chunk by chunk, each chunk's LM-head gradient reduce-scattered right after it
 * (stages 2, 3: zero_grads_unit_partly_ready), through the layers to the encoder, whose chunks
 * are reduced a second time (stages 2, 3) or once (stages 0, 1, on the last micro-step only: the
 * GPU build after the encoder; the CPU build right after the chunk's LM head, its encoder rows
 * all-gathered after the last chunk, zero/tied_rows/tied_rows_cpu.h);
 * each unit's collective issued as backward finishes it (stages 2, 3 into one of three gradient
 * working units, so backward waits for the oldest when none is free), then the optimizer: wait
 * for every collective, average, norm (one scalar all-reduce), AdamW on the owned slice unit by
 * unit in the order forward uses them (wte's chunks first), stages 1, 2 all-gathering each unit
 * right after its update, and the loss all-reduce. A chunk's encoder and LM-head work is the
 * whole encoder's and LM head's times its share of wte's rows. Exposed communication is the time compute
 * waits. Three steps are simulated and the third reported (the all-gathers of one step run into
 * the next one's forward). Part of the ZeRO engine's planner (the map is in zero.cuh; the
 * overview in plan/plan.h). With ZeRO++ (a PlanPP, plan/plan_zeropp.h) the stage-3 gathers and the
 * gradient reductions go its way: qwZ's and hpZ's gathers issued as the plain ones (wte's chunks
 * in backward for the LM head's recompute too), qgZ's two all-to-alls for every reduction (a wte
 * chunk's two included); the CPU build waits for each all-to-all at once (the compute side stands
 * still) and (de)quantizes on the compute side, the GPU build queues all of it on the comm stream.
 * With the network stack's CPU (net_cpu, plan/plan_comm.h) a collective moves at two rates: its
 * time alone (the compute side waiting) and its time beside the ranks' compute (the cores' share
 * left to it), and the compute beside it runs at 1 - f of its rate; so the link is simulated as
 * a queue whose head progresses at the rate of the moment, and a collective's completion is
 * known once the simulation gets there (a pending one is a handle, done < 0, until a wait or
 * the compute's advance completes it). Without net_cpu both rates are its one time, as before.
 * An op may carry a not_before (GPU -zo: a gather behind its unit's updated slice going up): the
 * link idles until then. Offload's host<->device copies and disk (plan/plan_offload.h) are their
 * own queues of known times; a copy behind a collective takes its time from plan_done.
 */
#ifndef ZERO_PLAN_SCHEDULE_H
#define ZERO_PLAN_SCHEDULE_H
#ifndef ZERO_CUH
#error "plan/plan_schedule.h is part of the ZeRO engine; include zero.cuh"
#endif

// dequantize_s: ZeRO++ qwZ, at first use; read_done, pending: stage 3 -zp nvme, the shard's read
// (the gather starts at the next engine call once it is back)
typedef struct { int unit; double done; long long age; double dequantize_s, read_done; int pending; } PlanSlot;

// Offload (plan/plan_offload.h, after this file): the disk, the host<->device link and the
// optimizer's pieces, simulated beside the engine's schedule through these hooks.
typedef struct PlanOffload PlanOffload;
typedef struct PlanSim PlanSim;
static void plan_off_backward(PlanSim* s);                            // backward's first unit ready on the last micro-step
static void plan_off_grads_final(PlanSim* s, int unit, double done);  // GPU -zo: the unit's final gradient slice goes down
static double plan_off_params_up(const PlanSim* s, int unit);         // GPU -zo: when the unit's updated slice is up
static int plan_off_gather(PlanSim* s, PlanSlot* w, int unit);        // stage 3 -zp: the shard read or copied first; 0: plain
static void plan_off_start_gathers(PlanSim* s, const PlanSlot* upto); // stage 3 -zp nvme: gathers whose reads are back
static void plan_off_sim_begin(PlanSim* s);                           // its state for three steps (nothing without offload)
static void plan_off_step_mark(PlanSim* s);                           // a step begins: its offload numbers count from here

// A collective on the link: its time alone and beside the ranks' compute, the fraction of the
// compute rate its CPU takes meanwhile, how far it got (0..1), when it began and completed, and
// the time before which it cannot begin (a stream waiting on an event: the link idles until then).
typedef struct {
    double alone_s, computing_s, cpu_fraction, progress, begin, done, not_before;
    int kind, unit, step, complete; long long elements; const char* what;
} PlanLinkOp;

struct PlanSim {
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
    const PlanOffload* off; // -zo/-zp (plan/plan_offload.h); NULL: plain
    struct PlanOffloadSim* os; // its disk, copy link and pieces
};

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

// Stage 3: gather `unit` into a free working unit (NULL if none is free).
static PlanSlot* plan_gather(PlanSim* s, int unit) {
    PlanSlot* w = plan_take(s, s->param_work, unit);
    if (w == NULL) return NULL;
    size_t n = plan_unit_numel(s, unit);
    double link_s, quantize_s;
    long long elements;
    const char* what;
    w->dequantize_s = 0.0;
    if (s->pp && plan_pp_gather(s->pp, unit, s->backward, &link_s, &elements, &quantize_s, &w->dequantize_s, &what)) { // ZeRO++
        plan_quantize(s, unit, quantize_s);
        w->done = plan_issue_what(s, s->backward ? ZERO_OP_GROUP_ALL_GATHER : ZERO_OP_ALL_GATHER, unit, link_s, elements, what);
        return w;
    }
    if (plan_off_gather(s, w, unit)) return w; // -zp: the shard from the host or NVMe first
    w->done = plan_issue_after(s, ZERO_OP_ALL_GATHER, unit, plan_ring_seconds(s->net, n, s->net->N - 1, 0),
                               zero_ring_all_gather_elements(n, s->net->N), NULL, plan_off_params_up(s, unit));
    return w;
}

static void plan_params(PlanSim* s, int unit) { // zero_params_unit
    if (s->stage == 3) {
        PlanSlot* w = plan_find(s->param_work, unit);
        if (w == NULL) w = plan_gather(s, unit);
        if (w != NULL && w->pending) plan_off_start_gathers(s, w);
        if (w != NULL) plan_wait(s, w->done, ZERO_OP_ALL_GATHER, unit);
        if (w != NULL) { plan_quantize(s, unit, w->dequantize_s); w->dequantize_s = 0.0; } // ZeRO++ qwZ: once, at first use
    } else if (s->stage == 1 || s->stage == 2) {
        plan_wait(s, s->param_done[unit], ZERO_OP_ALL_GATHER, unit);
        s->param_done[unit] = 0.0;
    }
}

static void plan_prefetch(PlanSim* s, int unit) { // zero_params_prefetch
    if (s->stage == 3 && plan_find(s->param_work, unit) == NULL) plan_gather(s, unit);
}

static void plan_params_done(PlanSim* s, int unit) { // zero_params_unit_done
    PlanSlot* w = s->stage == 3 ? plan_find(s->param_work, unit) : NULL;
    if (w != NULL) w->unit = -1;
    if (s->stage == 3) plan_off_start_gathers(s, NULL);
}

static void plan_grad_finish(PlanSim* s, PlanSlot* w) { // zero_grad_work_finish
    plan_wait(s, w->done, ZERO_OP_REDUCE_SCATTER, w->unit);
    if (s->shard_add_bytes_per_element > 0)
        plan_compute_counted(s, ZERO_TRACE_BACKWARD, w->unit, (double)s->layout->units[w->unit].shard_numel * s->shard_add_bytes_per_element / s->mem_bw);
    w->unit = -1;
}

static void plan_grads(PlanSim* s, int unit) { // zero_grads_unit (stages 2, 3: zero_grad_work_acquire)
    if (s->stage < 2) return;
    PlanSlot* w = plan_find(s->grad_work, unit);
    if (w != NULL) plan_grad_finish(s, w);
    if (plan_take(s, s->grad_work, unit) == NULL) {
        PlanSlot* oldest = NULL;
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) if (oldest == NULL || s->grad_work[i].age < oldest->age) oldest = &s->grad_work[i];
        plan_grad_finish(s, oldest);
        plan_take(s, s->grad_work, unit);
    }
    if (s->zero_work_per_element > 0) // the engine zeroes the working unit it hands out
        plan_compute_counted(s, ZERO_TRACE_BACKWARD, unit, (double)s->layout->units[unit].padded_numel * s->zero_work_per_element);
}

/*
 * Stages 2, 3: reduce-scatter `unit`'s gradient working unit (zero_grad_reduce): each unit once a
 * micro-step as backward finishes it, a wte chunk twice (zero_grads_unit_partly_ready: its
 * LM-head part right after the LM head's backward, its encoder rows at the end). ZeRO++ qgZ: two
 * all-to-alls; the CPU build waits for each at once (the compute side stands still), the GPU
 * build queues them on the comm stream behind backward, as the plain reduce-scatter.
 */
static void plan_grads_reduce(PlanSim* s, int unit) {
    size_t n = plan_unit_numel(s, unit);
    int N = s->net->N;
    PlanSlot* w = plan_find(s->grad_work, unit);
    if (N == 1) { plan_grad_finish(s, w); return; }
    if (s->pp && s->pp->shape.qg) {
        PlanPPReduce r = plan_pp_reduce(s->pp, unit);
        int int4 = s->pp->shape.qg_bits == 4; // the engine's labels (zero_pp_grad_reduce_scatter)
        const char* what[2] = {int4 ? "gradients (qgZ int4, within the group)" : "gradients (qgZ int8, within the group)",
                               int4 ? "gradients (qgZ int4, across groups)" : "gradients (qgZ int8, across groups)"};
        w->done = s->t;
        for (int phase = 0; phase < 2; phase++) {
            if (r.elements[phase] == 0) continue;
            plan_quantize(s, unit, r.quantize_s[phase]);
            w->done = plan_issue_what(s, ZERO_OP_ALL_TO_ALL, unit, r.link_s[phase], r.elements[phase], what[phase]);
            if (!s->pp->gpu_build) { plan_wait(s, w->done, ZERO_OP_ALL_TO_ALL, unit); plan_quantize(s, unit, r.dequantize_s[phase]); }
        }
        return;
    }
    w->done = plan_issue(s, ZERO_OP_REDUCE_SCATTER, unit, plan_ring_seconds(s->net, n, N - 1, N - 1), zero_ring_reduce_scatter_elements(n, N));
}

static void plan_grads_ready(PlanSim* s, int unit, int last_micro_step);

static void plan_grads_partly_ready(PlanSim* s, int unit, int last_micro_step) {
    if (s->stage >= 2) plan_grads_reduce(s, unit);
    else if (s->tied_block > 0 && last_micro_step) plan_grads_ready(s, unit, 1); // CPU stages 0, 1: the chunk's reduction now
}

static void plan_grads_ready(PlanSim* s, int unit, int last_micro_step) { // zero_grads_unit_ready
    size_t n = plan_unit_numel(s, unit);
    int N = s->net->N;
    if (last_micro_step) plan_off_backward(s); // -zo/-zp nvme: the optimizer's first reads
    if (s->stage == 0 && last_micro_step)
        s->grad_done[unit] = plan_issue(s, ZERO_OP_ALL_REDUCE, unit, plan_ring_seconds(s->net, n, 2 * (N - 1), N - 1),
                                        zero_ring_all_reduce_elements(n, N));
    else if (s->stage == 1 && last_micro_step)
        s->grad_done[unit] = plan_issue(s, ZERO_OP_REDUCE_SCATTER, unit, plan_ring_seconds(s->net, n, N - 1, N - 1),
                                        zero_ring_reduce_scatter_elements(n, N));
    else if (s->stage >= 2)
        plan_grads_reduce(s, unit);
    if (last_micro_step && s->stage >= 1) { // GPU -zo: the final slice goes down once reduced
        PlanSlot* w = s->stage >= 2 ? plan_find(s->grad_work, unit) : NULL;
        plan_off_grads_final(s, unit, s->stage == 1 ? s->grad_done[unit] : w != NULL ? w->done : s->t);
    }
}

typedef struct {
    double compute_s, comm_s, exposed_s, step_s;
    long long sent_elements; // per rank per step, summed over the simulated schedule's collectives
    double quantize_s;       // ZeRO++'s (de)quantize passes on the compute side (not in compute_s)
    double net_cpu_s;        // of the step's compute side (compute_s, the shard adds, zeroing, quantize), the time the network stack's CPU took
    // -zo/-zp (plan/plan_offload.h), the third step: the disk's and the host<->device link's busy
    // time, compute waiting for them (in exposed_s too), the checksums' compute time (in compute_s)
    double disk_s, copy_s, io_exposed_s, copy_exposed_s, checksum_s;
} PlanStep;
static void plan_off_sim_end(PlanSim* s, PlanStep* r); // the offload's numbers of the last step, its state freed

typedef struct {
    double fwd[256 + 2], bwd[256 + 2], head_fwd, head_bwd, optimizer_per_element;
    double zero_grads_per_element; // the gradients' memset before a step (cpu: measured; else 0)
    double scalar_s;
} PlanTimes;

// -zo/-zp (plan/plan_offload.h): the unit's AdamW on `owned` elements through the NVMe stream or on
// the host, its compute time into *busy; 0 (nothing done) when nothing is offloaded.
static int plan_off_update(PlanSim* s, const PlanTimes* tm, int unit, size_t owned, double* busy);

// Wte's vocab chunk k's share of the vocabulary rows (its part of the encoder's and LM head's work).
static double plan_wte_share(const ParamLayout* layout, int k) {
    return (double)layout->tensors[wte_piece_index(layout, k)].shape[0] / (double)layout->config.padded_vocab_size;
}

// One step of the simulated schedule (the engine's calls in the model's order: train_gpt2.c's
// gpt2_forward and gpt2_backward, the same in train_gpt2.cu).
static void plan_sim_step(PlanSim* s, const PlanTimes* tm, int A, double* compute_s) {
    const ParamLayout* layout = s->layout;
    int L = s->L, final_unit = L + 1, N = s->net->N, K = layout->num_wte_units;
    double busy0 = s->compute_busy;
#define PLAN_RUN(phase, unit, seconds) plan_compute_counted(s, phase, unit, seconds)
    for (int micro = 0; micro < A; micro++) {
        int last = micro == A - 1;
        s->backward = 0; // zero_pp_pass(z, 0)
        // forward: the encoder chunk by chunk, the layers, the final LayerNorm, the LM head chunk by chunk
        for (int k = 0; k < K; k++) {
            int u = wte_unit(layout, k);
            plan_params(s, u); plan_prefetch(s, k + 1 < K ? wte_unit(layout, k + 1) : 1);
            PLAN_RUN(ZERO_TRACE_FORWARD, u, tm->fwd[0] * plan_wte_share(layout, k));
            plan_params_done(s, u);
        }
        for (int l = 1; l <= L; l++) {
            plan_params(s, l); plan_prefetch(s, l + 1 <= L ? l + 1 : final_unit);
            PLAN_RUN(ZERO_TRACE_FORWARD, l, tm->fwd[l]);
            plan_params_done(s, l);
        }
        plan_params(s, final_unit); plan_prefetch(s, wte_unit(layout, 0));
        PLAN_RUN(ZERO_TRACE_FORWARD, final_unit, tm->fwd[final_unit]);
        plan_params_done(s, final_unit);
        for (int k = 0; k < K; k++) {
            int u = wte_unit(layout, k);
            plan_params(s, u);
            if (k + 1 == K) s->backward = 1; // zero_pp_pass(z, 1): this prefetch serves backward's LM head
            plan_prefetch(s, k + 1 < K ? wte_unit(layout, k + 1) : wte_unit(layout, 0)); // backward's first
            PLAN_RUN(ZERO_TRACE_FORWARD, zero_trace_lm_head(k), tm->head_fwd * plan_wte_share(layout, k));
            plan_params_done(s, u);
        }
        // backward: the LM head chunk by chunk, each chunk's LM-head gradient reduced right after it
        s->backward = 1;
        for (int k = 0; k < K; k++) {
            int u = wte_unit(layout, k);
            plan_params(s, u); plan_prefetch(s, k + 1 < K ? wte_unit(layout, k + 1) : final_unit); plan_grads(s, u);
            PLAN_RUN(ZERO_TRACE_BACKWARD, zero_trace_lm_head(k), tm->head_bwd * plan_wte_share(layout, k));
            plan_params_done(s, u);
            plan_grads_partly_ready(s, u, last);
        }
        plan_params(s, final_unit); plan_prefetch(s, L); plan_grads(s, final_unit);
        PLAN_RUN(ZERO_TRACE_BACKWARD, final_unit, tm->bwd[final_unit]);
        plan_params_done(s, final_unit);
        plan_grads_ready(s, final_unit, last);
        for (int l = L; l >= 1; l--) {
            plan_params(s, l);
            if (l > 1) plan_prefetch(s, l - 1);
            plan_grads(s, l);
            PLAN_RUN(ZERO_TRACE_BACKWARD, l, tm->bwd[l]);
            plan_params_done(s, l);
            plan_grads_ready(s, l, last);
        }
        for (int k = 0; k < K; k++) { // the encoder: each chunk's second part (stages 2, 3), or its only reduction
            int u = wte_unit(layout, k);
            plan_grads(s, u);
            PLAN_RUN(ZERO_TRACE_BACKWARD, u, tm->bwd[0] * plan_wte_share(layout, k));
            if (s->stage <= 1 && s->tied_block > 0 && last) { // reduced already: every rank's rows, one all-gather after the last chunk
                if (k + 1 == K)
                    s->tied_done = plan_issue(s, ZERO_OP_ALL_GATHER, -1, plan_ring_seconds(s->net, (size_t)(N * s->tied_block), N - 1, 0),
                                              s->tied_block * (N - 1));
            } else {
                plan_grads_ready(s, u, last);
            }
        }
    }
    // optimizer (zero_optimizer_step)
    for (int u = s->num_units - 1; s->stage <= 1 && u >= 0; u--) plan_wait(s, s->grad_done[u], s->stage == 0 ? ZERO_OP_ALL_REDUCE : ZERO_OP_REDUCE_SCATTER, u);
    if (s->tied_block > 0) { plan_wait(s, s->tied_done, ZERO_OP_ALL_GATHER, -1); s->tied_done = 0.0; }
    if (s->stage >= 2) {
        for (;;) {
            PlanSlot* oldest = NULL;
            for (int i = 0; i < ZERO_WORKING_UNITS; i++)
                if (s->grad_work[i].unit != -1 && (oldest == NULL || s->grad_work[i].age < oldest->age)) oldest = &s->grad_work[i];
            if (oldest == NULL) break;
            plan_grad_finish(s, oldest);
        }
    }
    if (s->stage == 3)
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) { if (s->param_work[i].unit != -1) plan_wait(s, s->param_work[i].done, ZERO_OP_ALL_GATHER, s->param_work[i].unit); s->param_work[i].unit = -1; }
    plan_wait(s, s->t + tm->scalar_s, ZERO_OP_SCALAR_ALL_REDUCE, -1); // grad norm
    for (int i = 0; i < s->num_units; i++) {
        int u = zero_unit_in_use_order(layout, i);
        const ParamUnit* pu = &s->layout->units[u];
        size_t owned = s->stage == 0 ? pu->padded_numel : pu->shard_numel;
        size_t grads = s->stage <= 1 ? pu->padded_numel : pu->shard_numel; // the gradient buffer the next step zeroes
        double update_s;
        if (plan_off_update(s, tm, u, owned, &update_s)) { // -zo/-zp: AdamW through the NVMe stream or on the host
            s->compute_busy += update_s;
            PLAN_RUN(ZERO_TRACE_OPTIMIZER, u, (double)grads * tm->zero_grads_per_element);
        } else {
            PLAN_RUN(ZERO_TRACE_OPTIMIZER, u, (double)owned * tm->optimizer_per_element + (double)grads * tm->zero_grads_per_element);
        }
        if (s->stage == 1 || s->stage == 2)
            s->param_done[u] = plan_issue_after(s, ZERO_OP_ALL_GATHER, u, plan_ring_seconds(s->net, pu->padded_numel, N - 1, 0),
                                                zero_ring_all_gather_elements(pu->padded_numel, N), NULL, plan_off_params_up(s, u));
    }
    plan_wait(s, s->t + tm->scalar_s, ZERO_OP_SCALAR_ALL_REDUCE, -1); // mean loss
#undef PLAN_RUN
    *compute_s = s->compute_busy - busy0;
}

/*
 * Simulate three steps of `stage` and report the third. Optionally records the predicted
 * timeline (trace, capacity events; *count set) as the trace's events, steps 1-3.
 */
static PlanStep plan_simulate(int stage, const ParamLayout* layout, const PlanNet* net, const PlanTimes* tm, int A,
                              double shard_add_bytes_per_element, double mem_bw, long long tied_block, const PlanPP* pp,
                              const PlanOffload* off, ZeroTraceEvent* trace, int capacity, int* count) {
    PlanSim s;
    memset(&s, 0, sizeof(s));
    s.stage = stage;
    s.layout = layout;
    s.num_units = layout->num_units;
    s.L = layout->config.num_layers;
    s.net = net;
    s.grad_done = (double*)zero_calloc((size_t)s.num_units, sizeof(double), "plan");
    s.param_done = (double*)zero_calloc((size_t)s.num_units, sizeof(double), "plan");
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) s.param_work[i].unit = s.grad_work[i].unit = -1;
    s.shard_add_bytes_per_element = stage >= 2 ? shard_add_bytes_per_element : 0.0;
    s.zero_work_per_element = stage >= 2 ? tm->zero_grads_per_element : 0.0;
    s.mem_bw = mem_bw;
    s.trace = trace;
    s.trace_capacity = capacity;
    s.pp = pp;
    s.off = off;
    plan_off_sim_begin(&s);
    s.tied_block = stage <= 1 && net->N > 1 ? tied_block : 0;
    PlanStep r = {0};
    for (int step = 1; step <= 3; step++) {
        s.step = step;
        double begin = s.t, exposed0 = s.exposed, busy0 = s.comm_busy, quantize0 = s.quantize_s, net_cpu0 = s.net_cpu_s, compute = 0.0;
        long long sent0 = s.sent;
        plan_off_step_mark(&s);
        plan_sim_trace(&s, ZERO_TRACE_EV_STEP, 0, -1, 0, begin, begin, 0); // placeholder, end set below
        int step_event = s.trace_count - 1;
        plan_sim_step(&s, tm, A, &compute);
        if (s.trace != NULL && step_event >= 0 && step_event < s.trace_count && s.trace[step_event].kind == ZERO_TRACE_EV_STEP)
            s.trace[step_event].end = s.t;
        r.step_s = s.t - begin;
        r.exposed_s = s.exposed - exposed0;
        r.comm_s = s.comm_busy - busy0;
        r.compute_s = compute;
        r.sent_elements = s.sent - sent0;
        r.quantize_s = s.quantize_s - quantize0;
        r.net_cpu_s = s.net_cpu_s - net_cpu0;
    }
    if (s.op_count > 0) plan_link_run(&s, INFINITY, 0, s.op_count - 1); // what is still on the link, for the timeline
    if (count) *count = s.trace_count;
    plan_off_sim_end(&s, &r);
    free(s.grad_done);
    free(s.param_done);
    free(s.ops);
    return r;
}

#endif // ZERO_PLAN_SCHEDULE_H
