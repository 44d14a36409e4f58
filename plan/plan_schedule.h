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
 * the next one's forward). Part of the planner (the overview in plan/plan.h). With ZeRO++ (a PlanPP, plan/plan_zeropp.h) the stage-3 gathers and the
 * gradient reductions go its way: qwZ's and hpZ's gathers issued as the plain ones (wte's chunks
 * in backward for the LM head's recompute too), qgZ's two all-to-alls for every reduction (a wte
 * chunk's two included); the CPU build waits for each all-to-all at once (the compute side stands
 * still) and (de)quantizes on the compute side, the GPU build queues all of it on the comm stream.
 * The simulator itself (the link, the compute timeline) is plan/plan_sim.h; offload's
 * host<->device copies and disk are plan/plan_offload_sim.h's hooks, called here where the engine
 * calls zero/offload/offload.h.
 */
#ifndef ZERO_PLAN_SCHEDULE_H
#define ZERO_PLAN_SCHEDULE_H
#ifndef ZERO_CUH
#error "plan/plan_schedule.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

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

// Wte's vocab chunk k's share of the vocabulary rows (its part of the encoder's and LM head's work).
static double plan_wte_share(const ParamLayout* layout, int k) {
    return (double)layout->tensors[wte_piece_index(layout, k)].shape[0] / (double)layout->config.padded_vocab_size;
}

// One step of the simulated schedule (the engine's calls in the model's order: model/gpt2_cpu.h's
// gpt2_forward and gpt2_backward, the same in model/gpt2_gpu.cuh).
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
