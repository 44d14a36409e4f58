/*
 * plan/plan.h: the planner: for a model, a batch and a world of N ranks on a described machine,
 * what each ZeRO stage stores and sends per rank, and how long its step takes, printed as one
 * table for people; with -pj the same numbers as JSON lines (plan_json, one per stage) for
 * scripts and tests; the ZeRO++ rows when asked (-pz 1, or -qw/-hp/-qg: that row), the offload
 * rows when asked (-zo, -zp, -zd). docs/planning.md is the user's page.
 *
 * Its own binary, ./plan_gpt2 (plan/plan_gpt2.c), and the trainers' --plan a thin call into it
 * (train/plan_exec.h: the trainer execs plan_gpt2 with the same arguments). Why: the planner is a
 * model of the engine, not part of it: a trainer should not carry its set-up, its rate
 * measurements and two builds' sizes; and one binary can plan either build's layout, which a
 * planner compiled into each trainer could not (the CPU trainer planned its own fp32 layout even
 * for --plan h100, so GPT-2 124M on 8 H100s "did not fit"). The machine picks the layout: h100
 * and h200 the GPU build's (bf16 parameters and micro-step gradients, fp32 accumulated gradients,
 * master weights and Adam state), cpu the CPU build's (fp32); gpu_build=0|1 overrides. --plan
 * stays in the trainers because scripts and users call `./train_gpt2 --plan ...`.
 *
 * Its parts, included below in this order (each needs only the ones above it and zero.cuh, whose
 * functions give the bytes, the elements sent and the layouts: the planner models the engine,
 * the engine knows nothing of it):
 *   plan/plan_machine.h  the machine: presets (h100, h200, cpu) and key=value overrides
 *   plan/plan_memory.h   the model and batch; bytes per rank at each stage (the engine's functions)
 *   plan/plan_compute.h  the work per unit: FLOPs and element-wise bytes (MFU's numerator:
 *                        common/flops.h, shared with the GPU trainer)
 *   plan/plan_comm.h     ring collective times under the alpha-beta model; the network stack's CPU
 *   plan/plan_zeropp.h   ZeRO++ on stage 3 (qwZ, hpZ, qgZ): zero/zeropp/zeropp.h's formulas, its collectives' times
 *   plan/plan_offload_state.h offload's simulated state: one configuration's bytes and rates, the disk and copies
 *   plan/plan_sim.h      the simulator: one compute timeline, one link serving collectives in issue order
 *   plan/plan_offload_sim.h offload beside the schedule: the NVMe stream, the host<->device copies
 *   plan/plan_schedule.h the engine's overlap schedule, simulated: exposed communication, step time
 *   plan/plan_offload.h  offload's rows (-zo, -zp): zero/offload/offload.h's bytes, each simulated
 *   plan/plan.h          this file: every stage's plan, the table, the ZeRO++ rows
 * and beside them:
 *   plan/plan_setup.h    the flags into a PlanModel and a PlanMachine; -pj's file
 *   plan/measure.h, plan/measure_ops.h  the cpu machine's rates, measured when the plan runs
 *   plan/plan_gpt2.c     the binary: each build's element sizes and activation bytes
 *
 * So the planner's bytes and elements sent are the engine's (tests/t_66_plan_trace.sh checks
 * them against runs of both builds; tests/t_04_plan.sh the 124M plan against the hand formula).
 * What the model leaves out: docs/planning.md.
 */
#ifndef ZERO_PLAN_H
#define ZERO_PLAN_H
#ifndef ZERO_CUH
#error "plan/plan.h models the engine: include zero.cuh first"
#endif
#include <ctype.h>
#include "common/flops.h"
#include "plan/plan_machine.h"
#include "plan/plan_memory.h"
#include "plan/plan_compute.h"
#include "plan/plan_comm.h"
#include "plan/plan_zeropp.h"
#include "plan/plan_offload_state.h"
#include "plan/plan_sim.h"
#include "plan/plan_offload_sim.h"
#include "plan/plan_schedule.h"
#include "plan/plan_offload.h"

// What one stage stores per rank (bytes) and does per step, for the printed table.
typedef struct {
    int stage;
    PlanBytes bytes;               // plan/plan_memory.h
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

// The trace file of a predicted timeline: FILE.json -> FILE.plan.<what>.json.
static void plan_trace_path(const char* trace_path, const char* what, char* path, size_t cap) {
    size_t n = strlen(trace_path);
    snprintf(path, cap, "%.*s.plan.%s.json", n > 5 ? (int)(n - 5) : (int)n, trace_path, what);
}

// -tr: the first predicted timeline that could not be written (a full disk) is the plan's one
// error line and its exit status 1; the files after it are not tried (plan_trace_save).
static int plan_trace_failed;

static void plan_trace_save(const char* path, ZeroTraceEvent* events, int count, const ParamLayout* layout, int stage,
                            const ZeroTraceInfo* info) {
    if (!plan_trace_failed && zero_trace_write(path, events, count, layout, stage, info) != 0) plan_trace_failed = 1;
}

/*
 * The ZeRO++ rows (plan/plan_zeropp.h) beside plain stage 3 (`plain`): the flags' row when
 * given, else qwZ, hpZ over a node's ranks, qgZ int4 and all three; each a table row and a
 * "plan_zeropp_json {...}" line, and with trace_path its predicted timeline. Returns 0, or -1
 * after one error line (flags that do not fit the world).
 */
static int plan_print_zeropp(const PlanModel* pm, const PlanMachine* m, const ParamLayout* layout, const PlanNet* net, const PlanTimes* tm,
                             int rpn, double mem_bw, double budget, const PlanStage* plain, const PlanPPFlags* f, const char* trace_path,
                             FILE* out) {
    int N = pm->world_size, A = pm->grad_accum_steps, e = pm->element_bytes, node_groups = rpn > 1 && N % rpn == 0;
    long long tokens = (long long)pm->B * pm->T * N * A;
    double shard_add = !pm->has_master ? 3.0 * e : 0.0;
    double quant_bw = m->quant_bw;
    const char* quant_how = "stated (quant_gbs)";
#if !ZERO_GPU_BUILD // plan_gpt2 is built for the CPU; its GPU-layout rows take the memory rate below
    if (quant_bw <= 0 && m->reduce_on_cpu && !pm->has_master) { // the CPU build's (de)quantize, timed here
        // Measured alone; ranks sharing the cores get the share their memory rate shows.
        quant_bw = plan_pp_measure_quant_bw(f->block) * (m->mem_bw > 0 && mem_bw < m->mem_bw ? mem_bw / m->mem_bw : 1.0);
        quant_how = "measured here (cpu/quantize.h, int8 round trip, 1M elements, one thread; scaled by the rank's memory share)";
    }
#endif
    if (quant_bw <= 0) { quant_bw = mem_bw; quant_how = "assumed: the element-wise memory rate"; }
    PlanPPFlags rows[5];
    int n = 0;
    rows[n++] = (PlanPPFlags){1, 0, 0, f->qg_bits, 1, f->block, f->grad_block}; // plain stage 3, through the same formulas
    if (f->given) rows[n++] = *f;
    else {
        rows[n++] = (PlanPPFlags){1, 1, 0, 4, 1, f->block, f->grad_block};
        if (node_groups) rows[n++] = (PlanPPFlags){1, 0, 0, 4, 0, f->block, f->grad_block};
        rows[n++] = (PlanPPFlags){1, 0, 1, 4, 1, f->block, f->grad_block};
        rows[n++] = (PlanPPFlags){1, 1, 1, 4, node_groups ? 0 : 1, f->block, f->grad_block};
    }
    char buf[8][32];
    fprintf(out, "plan: ZeRO++ on stage 3 (zero/zeropp/zeropp.h's formulas for this world, ranks placed node by node; blocks: weights %d, "
            "gradients %d elements; (de)quantize at %.1f GB/s, %s)\n", f->block, f->grad_block, quant_bw / 1e9, quant_how);
    fprintf(out, "%-22s | %-11s | %-10s | %-4s | %-10s | %-12s | %-11s | %9s | %9s | %9s | %9s | %9s | %10s | %6s\n", "zero++ (stage 3)",
            "extra mem", "total", "fits", "sent/rank", "across/rank0", "across/node", "compute", "quantize", "comm", "exposed", "step",
            "tokens/s", "MFU");
    for (int i = 0; i < n; i++) {
        PlanPP p;
        if (plan_pp_init(&p, &rows[i], layout, net, m, rpn, e, pm->has_master, quant_bw) != 0) return -1;
        if (i == 0) snprintf(p.label, sizeof(p.label), "plain");
        size_t secondary, buffers;
        plan_pp_memory(&p, &secondary, &buffers);
        size_t total = plain->bytes.total + secondary + buffers;
        ZeroTraceEvent* events = NULL;
        int capacity = 0, count = 0;
        if (trace_path) {
            capacity = 3 * A * (24 * layout->num_units + 16) + 64;
            events = (ZeroTraceEvent*)zero_calloc((size_t)capacity, sizeof(ZeroTraceEvent), "plan trace");
        }
        PlanStep st = plan_simulate(3, layout, net, tm, A, shard_add, mem_bw, 0, &p, NULL, events, capacity, &count);
        ZeroPPFormula fo = plan_pp_formula(&p, A, -1); // bytes
        long long formula = (fo.forward + fo.backward + fo.gradients) / e, within0, across0; // elements of e bytes
        plan_pp_split(&p, A, 0, &within0, &across0);
        double node_across = net->nodes > 1 ? plan_pp_node_across(&p, A) : 0.0;
        double tps = tokens / st.step_s, mfu = tps * pm->flops_per_token / (m->peak_flops * N);
        int fits = (double)total <= budget;
        char across_node[32];
        if (net->nodes > 1) plan_gib(node_across, across_node, sizeof(across_node)); else snprintf(across_node, sizeof(across_node), "-");
        fprintf(out, "%-22s | %-11s | %-10s | %-4s | %-10s | %-12s | %-11s | %6.1f ms | %6.1f ms | %6.1f ms | %6.1f ms | %6.1f ms | %10.0f | %5.1f%%\n",
                p.label, plan_gib((double)(secondary + buffers), buf[0], 32), plan_gib((double)total, buf[1], 32), fits ? "yes" : "NO",
                plan_gib((double)st.sent_elements * e, buf[2], 32), plan_gib((double)across0, buf[3], 32), across_node,
                1e3 * st.compute_s, 1e3 * st.quantize_s, 1e3 * st.comm_s, 1e3 * st.exposed_s, 1e3 * st.step_s, tps, 100.0 * mfu);
        if (plan_json_out) fprintf(plan_json_out, "plan_zeropp_json {\"label\":\"%s\",\"qw\":%d,\"hp\":%d,\"qg\":%d,\"qg_bits\":%d,\"block\":%d,\"grad_block\":%d,\"group_size\":%d,"
                "\"num_groups\":%d,\"world_size\":%d,\"ranks_per_node\":%d,\"nodes\":%d,\"grad_accum_steps\":%d,\"element_bytes\":%d,"
                "\"bytes_secondary\":%zu,\"bytes_buffers\":%zu,\"bytes_total\":%zu,\"fits\":%s,\"sent_elements\":%lld,"
                "\"formula_bytes\":%lld,\"formula_forward_bytes\":%lld,\"formula_backward_bytes\":%lld,\"formula_gradient_bytes\":%lld,"
                "\"rank0_within_bytes\":%lld,\"rank0_across_bytes\":%lld,\"node_across_bytes\":%.0f,\"quant_gbs\":%.3f,"
                "\"compute_ms\":%.4f,\"quantize_ms\":%.4f,\"comm_ms\":%.4f,\"exposed_ms\":%.4f,\"step_ms\":%.4f,\"tokens_per_s\":%.2f,"
                "\"mfu\":%.5f}\n", p.label, p.shape.qw, p.shape.hp, p.shape.qg, p.shape.qg_bits, p.shape.block, p.shape.grad_block,
                p.shape.group_size, p.num_groups, N, rpn, net->nodes, A, e, secondary, buffers, total, fits ? "true" : "false", st.sent_elements,
                formula * e, fo.forward, fo.backward, fo.gradients, within0, across0, node_across, quant_bw / 1e9,
                1e3 * st.compute_s, 1e3 * st.quantize_s, 1e3 * st.comm_s, 1e3 * st.exposed_s, 1e3 * st.step_s, tps, mfu);
        if (st.sent_elements != formula)
            fprintf(out, "plan: warning: %s: the simulated schedule sends %lld elements, zero/zeropp/zeropp.h's formula %lld\n", p.label,
                    st.sent_elements, formula);
        if (trace_path && events) {
            char name[64], path[4300];
            snprintf(name, sizeof(name), "zeropp_%s", p.label);
            for (char* c = name; *c; c++) if (!isalnum((unsigned char)*c) && *c != '_') *c = '_';
            plan_trace_path(trace_path, name, path, sizeof(path));
            ZeroTraceInfo info = {0, N, 1, 3, A, 0, "plan", "plan", e};
            plan_trace_save(path, events, count, layout, 3, &info);
        }
        free(events);
    }
    fprintf(out, "plan: zero++: extra mem = hpZ's secondary shard + qwZ's packet and qgZ's staging buffers per rank; sent/rank = "
            "bytes per rank per step (the simulated schedule's, = the formula); across/rank0 = rank 0's bytes to other nodes; "
            "across/node = what each node's ranks send to other nodes; quantize = the compute side's (de)quantize time%s\n",
            pm->has_master ? " (this build's runs on the comm stream, in comm)" : "");
    return 0;
}

/*
 * Plan `pm` (its world_size ranks) on machine `m` for ZeRO stages 0-3 and print the table to
 * `out`, and with -pj one "plan_json {...}" line per stage to plan_json_out (the numbers, for scripts and tests). With
 * trace_path (-tr FILE), also writes each stage's predicted timeline to
 * FILE.plan.stage<S>.json in the trace's format (scripts/plot_timeline.py draws it). Then, with
 * pp (given when asked, more than one rank), the ZeRO++ rows beside stage 3 (plan_print_zeropp), and with
 * offload flags given, their rows beside the stages that take them (plan/plan_offload.h).
 * Returns 0, or 1 when no stage fits or the ZeRO++ flags do not fit the world.
 */
static int plan_print(const PlanModel* pm, const PlanMachine* m_in, const char* init, const char* trace_path, const PlanPPFlags* pp,
                      const PlanOffloadFlags* offload, FILE* out) {
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
    plan_unit_costs(pm, m, fwd, bwd, &head_fwd, &head_bwd);
    double mem_scale, ops_scale = plan_ops_scale(m, flops, mem_bw, &mem_scale);
    for (int u = 0; u <= L + 1; u++) {
        tm.fwd[u] = plan_cost_seconds(&fwd[u], flops, mem_bw, ops_scale);
        tm.bwd[u] = plan_cost_seconds(&bwd[u], flops, mem_bw, ops_scale);
    }
    tm.head_fwd = plan_cost_seconds(&head_fwd, flops, mem_bw, ops_scale);
    tm.head_bwd = plan_cost_seconds(&head_bwd, flops, mem_bw, ops_scale);
    tm.optimizer_per_element = m->ops_measured ? m->op_optimizer_s * mem_scale : pm->optimizer_bytes_per_element / mem_bw;
    tm.zero_grads_per_element = m->ops_measured ? m->op_zero_grads_s * mem_scale : 0.0;
    tm.scalar_s = plan_scalar_seconds(&net);
    double step_flops = 0.0;
    for (int u = 0; u <= L + 1; u++) step_flops += fwd[u].flops + bwd[u].flops;
    step_flops = (step_flops + head_fwd.flops + head_bwd.flops) * A;
    long long tokens = (long long)pm->B * pm->T * N * A;
    // Per rank the budget is the device's memory, or (CPU) the host's shared by its ranks.
    double budget = (m->cores > 0 ? m->memory / rpn : m->memory) - m->reserve;
    char buf[7][32];
    if (!(budget > 0.0)) { // every row would say NO against a budget of 0 or less
        fprintf(stderr, "error: --plan: the reserve, %s, leaves none of the %s of memory per rank; expected reserve_gib below it\n",
                plan_gib(m->reserve, buf[0], 32), plan_gib(m->cores > 0 ? m->memory / rpn : m->memory, buf[1], 32));
        param_layout_free(&layout);
        return 1;
    }
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
    fprintf(out, "plan: per rank %s matmul (%.2f of %s peak%s), %.1f GB/s memory, %s per device | %d rank%s on %d node%s (%d per node)\n",
            plan_rate(flops, buf[1], 32), flops / m->peak_flops, plan_rate(m->peak_flops, buf[2], 32), how,
            mem_bw / 1e9, plan_gib(m->memory, buf[0], sizeof(buf[0])), N, N > 1 ? "s" : "", net.nodes, net.nodes > 1 ? "s" : "", rpn);
    fprintf(out, "plan: ring step: alpha %.1f us, beta %.2f GB/s%s; GEMM and attention products per micro-step %.2f ms (%.3g GFLOP)\n", net.alpha * 1e6,
            net.beta / 1e9, net.beta < net.beta_link ? " (the node's cores bound it: the network stack's CPU)" :
            net.nodes > 1 ? " (the node's inter-node bandwidth bounds it)" : " (within a node)",
            1e3 * (step_flops / A) / flops, step_flops / A / 1e9);
    if (net.net_cpu > 0.0)
        fprintf(out, "plan: network stack's CPU %.3f ns per byte sent (sender + receiver%s): a node's %d ranks on %d cores (%.0f busy with "
                "their threads); a collective takes %.2f cores per GB/s it moves per rank, out of the compute beside it; the link's "
                "%.3f GB/s: %.3f alone, %.3f beside the ranks' compute (the cores' share; plan/plan_comm.h)\n", net.net_cpu * 1e9,
                m->net_cpu >= 0.0 ? ", net_cpu_ns" : ", the cpu preset's TCP default", net.rpn, net.cores, net.busy_cores,
                net.rpn * net.net_cpu * 1e9, net.beta_link / 1e9, net.beta / 1e9, net.beta_compute / 1e9);
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
        // CPU stages 0, 1: the encoder's wte rows, one block per rank (zero/tied_rows/tied_rows_cpu.h)
        size_t tied = zero_tied_rows_numel(stage, N, (size_t)pm->B * pm->T, (size_t)pm->T, cfg->channels, pm->has_master);
        p->sent_formula = zero_elements_sent_formula(stage, layout.padded_numel, N, A, zero_embedding_numel(&layout), tied);
        double shard_add = !pm->has_master ? 3.0 * e : 0.0; // CPU: shard += reduced slice
        ZeroTraceEvent* events = NULL;
        int capacity = 0, count = 0;
        if (trace_path) {
            // three steps: per micro-step a compute span, <= 3 collectives and waits per unit (5 for
            // a wte chunk); per step the optimizer's span, all-gather and wait per unit
            capacity = 3 * (A * (12 * layout.num_units + 4 * layout.num_wte_units + 16) + 3 * layout.num_units) + 64;
            events = (ZeroTraceEvent*)zero_calloc((size_t)capacity, sizeof(ZeroTraceEvent), "plan trace");
        }
        p->step = plan_simulate(stage, &layout, &net, &tm, A, shard_add, mem_bw, tied, NULL, NULL, events, capacity, &count);
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
            char path[4300], what[16];
            snprintf(what, sizeof(what), "stage%d", stage);
            plan_trace_path(trace_path, what, path, sizeof(path));
            ZeroTraceInfo info = {0, N, 1, 3, A, 0, "plan", "plan", e};
            plan_trace_save(path, events, count, &layout, stage, &info);
        }
        free(events);
    }
    fprintf(out, "plan: sent/rank = elements sent per rank per step (the ring count) x %d bytes; across/node = bytes leaving each node per step "
            "(one rank's share: the ring crosses each node boundary once); fits = total <= %s per rank%s\n", e,
            plan_gib(budget, buf[0], 32), m->reserve > 0 ? " (device memory less the runtime's reserve)" : "");
    if (!any_fits) { // the exit status says so too (1): its one error line
        size_t least = st[0].bytes.total;
        for (int stage = 1; stage <= 3; stage++) if (st[stage].bytes.total < least) least = st[stage].bytes.total;
        fprintf(stderr, "error: --plan: no stage fits: the smallest total, %s, is above %s per rank; expected more memory per rank "
                "(mem_gib=, or more ranks) or a smaller micro-batch (-b)\n", plan_gib((double)least, buf[1], 32), plan_gib(budget, buf[0], 32));
    }
    if (st[0].bytes.ring > 0)
        fprintf(out, "plan: total includes the rings' receive buffer, %s per rank (one chunk of the largest unit, zero/comm_ring.h)\n",
                plan_gib((double)st[0].bytes.ring, buf[0], 32));
    for (int stage = 0; stage <= 3; stage++) {
        const PlanStage* p = &st[stage];
        if (plan_json_out) fprintf(plan_json_out, "plan_json {\"stage\":%d,\"world_size\":%d,\"ranks_per_node\":%d,\"nodes\":%d,\"grad_accum_steps\":%d,"
                "\"padded_parameters\":%zu,\"bytes_params\":%zu,\"bytes_grads\":%zu,\"bytes_optimizer\":%zu,\"bytes_working\":%zu,"
                "\"bytes_ring\":%zu,\"bytes_activations\":%zu,\"bytes_total\":%zu,\"bytes_state_formula\":%zu,\"fits\":%s,"
                "\"sent_elements\":%lld,\"sent_elements_formula\":%lld,\"element_bytes\":%d,\"bytes_across_per_node\":%.0f,"
                "\"rank_flops\":%.6g,\"rank_mem_bw\":%.6g,\"rank_rates_ranks\":%d,"
                "\"ops_measured\":%d,\"op_layer_fwd_s\":%.6g,\"op_layer_bwd_s\":%.6g,\"op_head_fwd_s\":%.6g,\"op_head_bwd_s\":%.6g,"
                "\"op_optimizer_s\":%.6g,\"op_zero_grads_s\":%.6g,\"ops_scale\":%.6g,\"ops_mem_scale\":%.6g,"
                "\"net_cpu_ns\":%.6g,\"net_rpn\":%d,\"net_cores\":%d,\"net_busy_cores\":%.6g,\"beta\":%.6g,\"beta_link\":%.6g,\"beta_compute\":%.6g,"
                "\"alpha_us\":%.6g,\"net_cpu_ms\":%.4f,"
                "\"compute_ms\":%.4f,\"comm_ms\":%.4f,\"exposed_ms\":%.4f,\"step_ms\":%.4f,\"tokens_per_s\":%.2f,\"mfu\":%.5f}\n",
                p->stage, N, rpn, net.nodes, A, layout.padded_numel, p->bytes.params, p->bytes.grads, p->bytes.optimizer,
                p->bytes.working, p->bytes.ring, p->bytes.activations, p->bytes.total, p->bytes.state_formula,
                p->fits ? "true" : "false", p->step.sent_elements, p->sent_formula, e,
                net.nodes > 1 ? (double)p->step.sent_elements * e : 0.0, flops, mem_bw, m->rank_rates_ranks,
                m->ops_measured, m->op_layer_fwd_s, m->op_layer_bwd_s, m->op_head_fwd_s, m->op_head_bwd_s, m->op_optimizer_s,
                m->op_zero_grads_s, ops_scale, mem_scale, net.net_cpu * 1e9, net.rpn, net.cores, net.busy_cores, net.beta,
                net.beta_link, net.beta_compute, net.alpha * 1e6, 1e3 * p->step.net_cpu_s, 1e3 * p->step.compute_s, 1e3 * p->step.comm_s,
                1e3 * p->step.exposed_s, 1e3 * p->step.step_s, p->tokens_per_s, p->mfu);
    }
    int pp_bad = pp != NULL && N > 1 && plan_print_zeropp(pm, m, &layout, &net, &tm, rpn, mem_bw, budget, &st[3], pp, trace_path, out) != 0;
    if (offload != NULL && offload->given) {
        double plain_step_s[4];
        for (int stage = 0; stage <= 3; stage++) plain_step_s[stage] = st[stage].step.step_s;
        plan_print_offload(pm, m, &layout, &net, &tm, rpn, mem_bw, budget, plain_step_s, offload, out);
    }
    param_layout_free(&layout);
    return any_fits && !pp_bad && !plan_trace_failed ? 0 : 1;
}

#endif // ZERO_PLAN_H
