/*
 * zero/plan.h: the planner (--plan MACHINE): for a model, a batch and a world of N ranks on a
 * described machine, what each ZeRO stage stores and sends per rank, and how long its step
 * takes, printed as one table and one plan_json line per stage. Part of the ZeRO engine (the map
 * is in zero.cuh); each trainer calls plan_print (through common/plan_setup.h) with what only it
 * knows (its element sizes, its activation bytes, its attention's products). Its parts:
 *
 *   zero/plan_machine.h  the machine: presets (h100, h200, cpu) and key=value overrides
 *   zero/plan_memory.h   the model and batch; bytes per rank at each stage (the engine's functions)
 *   zero/plan_compute.h  the work per unit: FLOPs and element-wise bytes; MFU's numerator
 *   zero/plan_comm.h     ring collective times under the alpha-beta model
 *   zero/plan_schedule.h the engine's overlap schedule, simulated: exposed communication, step time
 *   zero/plan.h          this file: every stage's plan, the table
 *
 * So the planner's bytes and elements sent are the engine's (tests/t_66_plan_trace.sh checks
 * them against runs). What the model leaves out: README "Seeing and planning a run".
 */
#ifndef ZERO_PLAN_H
#define ZERO_PLAN_H
#ifndef ZERO_CUH
#error "zero/plan.h is part of the ZeRO engine; include zero.cuh"
#endif

// What one stage stores per rank (bytes) and does per step, for the printed table.
typedef struct {
    int stage;
    PlanBytes bytes;               // zero/plan_memory.h
    long long sent_formula;        // zero_elements_sent_formula
    PlanStep step;                 // the simulated third step
    double tokens_per_s, mfu;
    int fits;
} PlanStage;

// FLOP/s as TFLOP/s (a GPU) or GFLOP/s (a CPU).
static const char* plan_rate(double flops, char* buf, size_t cap) {
    if (flops >= 1e12) snprintf(buf, cap, "%.1f TFLOP/s", flops / 1e12);
    else snprintf(buf, cap, "%.2f GFLOP/s", flops / 1e9);
    return buf;
}

static const char* plan_gib(double bytes, char* buf, size_t cap) {
    if (bytes >= 1073741824.0) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

/*
 * Plan `pm` (its world_size ranks) on machine `m` for ZeRO stages 0-3 and print the table to
 * `out`, then one "plan_json {...}" line per stage (the numbers, for scripts and tests). With
 * trace_path (-tr FILE), also writes each stage's predicted timeline to
 * FILE.plan.stage<S>.json in the trace's format (scripts/plot_timeline.py draws it).
 * Returns 0, or 1 when no stage fits.
 */
static int plan_print(const PlanModel* pm, const PlanMachine* m_in, const char* init, const char* trace_path, FILE* out) {
    PlanMachine mm = *m_in;
    const PlanMachine* m = &mm;
    const GPT2Config* cfg = pm->config;
    int N = pm->world_size, A = pm->grad_accum_steps, L = cfg->num_layers, e = pm->element_bytes;
    int rpn = m->ranks_per_node > 0 ? m->ranks_per_node : N;
    if (rpn > N) rpn = N;
    ParamLayout layout;
    param_layout_build(&layout, cfg, N, ZERO_ALIGN);
    PlanNet net = plan_net(m, N, e);
    double flops, mem_bw, share = plan_rank_rates(m, rpn, &flops, &mem_bw);
    net.reduce_bw = m->reduce_on_cpu ? mem_bw : 0.0;
    PlanTimes tm;
    memset(&tm, 0, sizeof(tm));
    PlanCost fwd[256 + 2], bwd[256 + 2], head_fwd, head_bwd;
    if (L > 256) { fprintf(stderr, "error: --plan: %d layers; expected at most 256\n", L); param_layout_free(&layout); return 1; }
    plan_unit_costs(pm, fwd, bwd, &head_fwd, &head_bwd);
    for (int u = 0; u <= L + 1; u++) { tm.fwd[u] = plan_cost_seconds(&fwd[u], flops, mem_bw); tm.bwd[u] = plan_cost_seconds(&bwd[u], flops, mem_bw); }
    tm.head_fwd = plan_cost_seconds(&head_fwd, flops, mem_bw);
    tm.head_bwd = plan_cost_seconds(&head_bwd, flops, mem_bw);
    tm.optimizer_per_element = pm->optimizer_bytes_per_element / mem_bw;
    tm.scalar_s = plan_scalar_seconds(&net);
    double step_flops = 0.0;
    for (int u = 0; u <= L + 1; u++) step_flops += fwd[u].flops + bwd[u].flops;
    step_flops = (step_flops + head_fwd.flops + head_bwd.flops) * A;
    long long tokens = (long long)pm->B * pm->T * N * A;
    // Per rank the budget is the device's memory, or (CPU) the host's shared by its ranks.
    double budget = (m->cores > 0 ? m->memory / rpn : m->memory) - m->reserve;
    char buf[7][32];
    fprintf(out, "plan: %s | L %d | C %d | NH %d | Vp %d (wte in %d vocab-chunk units) | parameters %zu, Ψ = %zu padded for N = %d\n",
            init, L, cfg->channels, cfg->num_heads, cfg->padded_vocab_size, layout.num_wte_units, layout.num_parameters,
            layout.padded_numel, N);
    fprintf(out, "plan: batch B %d x T %d x %d ranks x %d micro-steps = %lld tokens per step | %s\n", pm->B, pm->T, N, A, tokens,
            pm->has_master ? "bf16 params and micro-step grads, fp32 accumulated grads, master, m, v (GPU build)" : "fp32 params, grads, m, v (CPU build)");
    fprintf(out, "plan: machine %s\n", m->name);
    char how[96] = "";
    if (m->rank_rates_ranks > 1)
        snprintf(how, sizeof(how), ", measured with %d ranks running at once on these cores", m->rank_rates_ranks);
    else if (share < 1.0)
        snprintf(how, sizeof(how), ", cores shared");
    fprintf(out, "plan: per rank %s matmul (%.2f of %s peak%s), %.1f GB/s memory, %s per device | %d ranks on %d node%s (%d per node)\n",
            plan_rate(flops, buf[1], 32), flops / m->peak_flops, plan_rate(m->peak_flops, buf[2], 32), how,
            mem_bw / 1e9, plan_gib(m->memory, buf[0], sizeof(buf[0])), N, net.nodes, net.nodes > 1 ? "s" : "", rpn);
    fprintf(out, "plan: ring step: alpha %.1f us, beta %.2f GB/s%s; GEMM and attention products per micro-step %.2f ms (%.3g GFLOP)\n", net.alpha * 1e6,
            net.beta / 1e9, net.nodes > 1 ? " (the node's inter-node bandwidth bounds it)" : " (within a node)",
            1e3 * (step_flops / A) / flops, step_flops / A / 1e9);
    fprintf(out, "%-5s | %-10s | %-10s | %-10s | %-10s | %-11s | %-10s | %-4s | %-12s | %-13s | %9s | %9s | %10s | %9s | %10s | %6s\n",
            "stage", "params", "grads", "optimizer", "working", "activations", "total", "fits", "sent/rank", "across/node",
            "compute", "comm", "exposed", "step", "tokens/s", "MFU");
    PlanStage st[4];
    int any_fits = 0;
    for (int stage = 0; stage <= 3; stage++) {
        PlanStage* p = &st[stage];
        memset(p, 0, sizeof(*p));
        p->stage = stage;
        p->bytes = plan_stage_bytes(pm, &layout, stage);
        const PlanBytes* b = &p->bytes;
        p->sent_formula = zero_elements_sent_formula(stage, layout.padded_numel, N, A, zero_embedding_numel(&layout));
        double shard_add = !pm->has_master ? 3.0 * e : 0.0; // CPU: shard += reduced slice
        ZeroTraceEvent* events = NULL;
        int capacity = 0, count = 0;
        if (trace_path) {
            // three steps: per micro-step a compute span, <= 3 collectives and waits per unit (5 for
            // a wte chunk); per step the optimizer's span, all-gather and wait per unit
            capacity = 3 * (A * (12 * layout.num_units + 4 * layout.num_wte_units + 16) + 3 * layout.num_units) + 64;
            events = (ZeroTraceEvent*)zero_calloc((size_t)capacity, sizeof(ZeroTraceEvent), "plan trace");
        }
        p->step = plan_simulate(stage, &layout, &net, &tm, A, shard_add, mem_bw, events, capacity, &count);
        p->tokens_per_s = tokens / p->step.step_s;
        p->mfu = p->tokens_per_s * pm->flops_per_token / (m->peak_flops * N);
        p->fits = (double)b->total <= budget;
        any_fits |= p->fits;
        double sent_bytes = (double)p->step.sent_elements * e;
        char across[32];
        if (net.nodes > 1) plan_gib(sent_bytes, across, sizeof(across)); else snprintf(across, sizeof(across), "-");
        fprintf(out, "%-5d | %-10s | %-10s | %-10s | %-10s | %-11s | %-10s | %-4s | %-12s | %-13s | %6.1f ms | %6.1f ms | %7.1f ms | %6.1f ms | %10.0f | %5.1f%%\n",
                stage, plan_gib(b->params, buf[0], 32), plan_gib(b->grads, buf[1], 32), plan_gib(b->optimizer, buf[2], 32),
                plan_gib(b->working, buf[3], 32), plan_gib(b->activations, buf[4], 32), plan_gib(b->total, buf[5], 32),
                p->fits ? "yes" : "NO", plan_gib(sent_bytes, buf[6], 32), across, 1e3 * p->step.compute_s, 1e3 * p->step.comm_s,
                1e3 * p->step.exposed_s, 1e3 * p->step.step_s, p->tokens_per_s, 100.0 * p->mfu);
        if (trace_path && events) {
            size_t n = strlen(trace_path);
            char path[4300];
            snprintf(path, sizeof(path), "%.*s.plan.stage%d.json", n > 5 ? (int)(n - 5) : (int)n, trace_path, stage);
            ZeroTraceInfo info = {0, N, 1, 3, A, 0, "plan", "plan", e};
            zero_trace_write(path, events, count, &layout, stage, &info);
        }
        free(events);
    }
    fprintf(out, "plan: sent/rank = elements sent per rank per step (the ring count) x %d bytes; across/node = bytes leaving each node per step "
            "(one rank's share: the ring crosses each node boundary once); fits = total <= %s per rank%s\n", e,
            plan_gib(budget, buf[0], 32), m->reserve > 0 ? " (device memory less the runtime's reserve)" : "");
    if (st[0].bytes.ring > 0)
        fprintf(out, "plan: total includes the rings' receive buffer, %s per rank (one chunk of the largest unit, zero/comm_ring.h)\n",
                plan_gib((double)st[0].bytes.ring, buf[0], 32));
    for (int stage = 0; stage <= 3; stage++) {
        const PlanStage* p = &st[stage];
        fprintf(out, "plan_json {\"stage\":%d,\"world_size\":%d,\"ranks_per_node\":%d,\"nodes\":%d,\"grad_accum_steps\":%d,"
                "\"padded_parameters\":%zu,\"bytes_params\":%zu,\"bytes_grads\":%zu,\"bytes_optimizer\":%zu,\"bytes_working\":%zu,"
                "\"bytes_ring\":%zu,\"bytes_activations\":%zu,\"bytes_total\":%zu,\"bytes_state_formula\":%zu,\"fits\":%s,"
                "\"sent_elements\":%lld,\"sent_elements_formula\":%lld,\"element_bytes\":%d,\"bytes_across_per_node\":%.0f,"
                "\"rank_flops\":%.6g,\"rank_mem_bw\":%.6g,\"rank_rates_ranks\":%d,"
                "\"compute_ms\":%.4f,\"comm_ms\":%.4f,\"exposed_ms\":%.4f,\"step_ms\":%.4f,\"tokens_per_s\":%.2f,\"mfu\":%.5f}\n",
                p->stage, N, rpn, net.nodes, A, layout.padded_numel, p->bytes.params, p->bytes.grads, p->bytes.optimizer,
                p->bytes.working, p->bytes.ring, p->bytes.activations, p->bytes.total, p->bytes.state_formula,
                p->fits ? "true" : "false", p->step.sent_elements, p->sent_formula, e,
                net.nodes > 1 ? (double)p->step.sent_elements * e : 0.0, flops, mem_bw, m->rank_rates_ranks, 1e3 * p->step.compute_s, 1e3 * p->step.comm_s,
                1e3 * p->step.exposed_s, 1e3 * p->step.step_s, p->tokens_per_s, p->mfu);
    }
    param_layout_free(&layout);
    return any_fits ? 0 : 1;
}

#endif // ZERO_PLAN_H
