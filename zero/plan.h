/*
 * zero/plan.h: the planner (--plan MACHINE): for a model, a batch and a world of N ranks on a
 * described machine, what each ZeRO stage stores and sends per rank, and how long its step
 * takes. Part of the ZeRO engine (the map is in zero.cuh); each trainer calls plan_print with
 * what only it knows (its element sizes, its activation bytes, its attention's products).
 *
 * Bytes: from the engine's own functions, at the layout the engine would build for N ranks
 * (param_layout_build pads each unit to N x ZERO_ALIGN): zero_buffer_numel per buffer,
 * zero_working_numel, the ring counts of zero/layout.h; the trainer's own activation sizes. So
 * the planner's bytes are the engine's (tests/t_66_plan_trace.sh checks them against runs).
 *
 * Time: an alpha-beta model of ring collectives (Thakur, Rabenseifner and Gropp 2005,
 * "Optimization of Collective Communication Operations in MPICH", sec. 2): over N ranks a ring
 * step moves one chunk of n/N elements per rank, costs alpha + chunk bytes / beta, and a
 * reduce-scatter or all-gather takes N-1 steps, an all-reduce 2(N-1) (NCCL's ring algorithm,
 * whose "bus bandwidth" is this beta: nccl-tests doc/PERFORMANCE.md). Ranks are placed node by
 * node, so with several nodes every step crosses nodes on the ring's node-boundary edges; each
 * node then pushes one rank's volume through its NICs: beta = min(intra-node per-rank bandwidth,
 * the node's inter-node bandwidth), alpha = the larger latency.
 * The engine's schedule, simulated as the engine runs it (zero/engine_cpu.h, engine_gpu.cuh):
 * one compute timeline and one communication link that serves collectives one at a time in
 * issue order (the GPU's comm stream; the CPU's queue of rings). Per micro-step: forward unit
 * by unit (stage 3: all-gather each unit, the next one prefetched into one of two layer working
 * units; stages 1, 2: wait for the all-gather the last optimizer step started), the tied LM
 * head, backward from the LM head to the embedding, each unit's collective issued as backward
 * finishes it (stages 0, 1 on the last micro-step only; stages 2, 3 a reduce-scatter into one of
 * two layer gradient working units, so backward waits for the one two units back), then the
 * optimizer: wait for every collective, average, norm (one scalar all-reduce), AdamW on the
 * owned slice unit by unit, stages 1, 2 all-gathering each unit right after its update, and the
 * loss all-reduce. Exposed communication is the time compute waits. Three steps are simulated
 * and the third reported (the all-gathers of one step run into the next one's forward).
 * Compute: per unit, GEMM and attention-product FLOPs at the machine's matmul rate plus the
 * element-wise ops' bytes at its memory bandwidth (the counts are in plan_unit_costs).
 * What the model leaves out: README "Seeing and planning a run".
 */
#ifndef ZERO_PLAN_H
#define ZERO_PLAN_H
#ifndef ZERO_CUH
#error "zero/plan.h is part of the ZeRO engine; include zero.cuh"
#endif

// ---- the machine ----

typedef struct {
    char name[160];
    double peak_flops;     // per device (MFU's denominator): bf16 dense tensor cores, or the measured sgemm rate
    double gemm_eff;       // fraction of peak_flops the GEMMs run at
    double mem_bw;         // bytes/s per device for element-wise ops and the optimizer
    double memory;         // bytes per device (CPU: the host's memory, shared by its ranks)
    double reserve;        // bytes per device the runtime takes besides the engine and activations
    int ranks_per_node;
    double intra_bw, intra_lat; // within a node: bytes/s per rank (a ring edge), seconds per ring step
    double inter_bw, inter_lat; // across nodes: bytes/s per node (all its NICs), seconds per ring step
    int cores, threads_per_rank; // CPU: ranks on one node share its cores; 0 on a GPU
    int reduce_on_cpu;     // ring reductions (adding a received chunk) run on the CPU at mem_bw
} PlanMachine;

/*
 * Presets (nominal datasheet values; the efficiencies are assumptions, each overridable):
 *   h100  node of 8 x H100 SXM 80 GB: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3; NVLink 4 450 GB/s
 *         per GPU per direction; 8 x 400 Gb/s InfiniBand NDR per node (400 GB/s); latencies
 *         1 us (NVLink) and 5 us (IB) per ring step (assumed)
 *   h200  the same node with H200 SXM 141 GB, 4.8 TB/s HBM3e
 *   cpu   this machine (filled in by the CPU trainer: measured sgemm rate and memory bandwidth,
 *         its cores, threads per rank from OMP_NUM_THREADS); ranks on one host talk through
 *         Open MPI's shared memory: 3 GB/s and 60 us per ring step are assumptions (a copy at
 *         memory speed, the progress thread's 50 us poll); dev/bench/plan_check.sh prints the
 *         bandwidth the trace shows the collectives achieving beside them (far lower when the
 *         ranks' cores are busy: the ring advances only when a progress thread gets a core)
 * GEMM efficiency on the GPUs: 0.7 of peak (assumed; gpu_check.sh measures it when a GPU is
 * at hand), element-wise kernels at 0.8 of the memory bandwidth (assumed).
 */
static int plan_machine_preset(const char* name, PlanMachine* m) {
    memset(m, 0, sizeof(*m));
    if (strcmp(name, "h100") == 0 || strcmp(name, "h200") == 0) {
        int h200 = name[3] == '2';
        snprintf(m->name, sizeof(m->name), "%s: nodes of 8 x %s SXM, NVLink 4 + 8 x 400 Gb/s InfiniBand", name, h200 ? "H200" : "H100");
        m->peak_flops = 989e12;
        m->gemm_eff = 0.7;
        m->mem_bw = (h200 ? 4.8e12 : 3.35e12) * 0.8;
        m->memory = h200 ? 141e9 : 80e9;
        m->reserve = 2.0 * 1073741824.0; // CUDA context, cuBLASLt workspace, NCCL buffers (assumed)
        m->ranks_per_node = 8;
        m->intra_bw = 450e9;
        m->intra_lat = 1e-6;
        m->inter_bw = 8 * 400e9 / 8;
        m->inter_lat = 5e-6;
        return 0;
    }
    if (strcmp(name, "cpu") == 0) {
        snprintf(m->name, sizeof(m->name), "cpu: this machine");
        m->gemm_eff = 1.0; // peak_flops is the measured sgemm rate itself
        m->ranks_per_node = 0; // all ranks on this host unless -rpn says otherwise
        m->intra_bw = 3.0e9;   // Open MPI shared memory, one rank's ring edge (assumed; see above)
        m->intra_lat = 60e-6;  // a ring step waits for the progress thread's poll (50 us, zero/progress_cpu.h)
        m->inter_bw = 1e9 / 8; // 1 Gbit/s Ethernet unless overridden
        m->inter_lat = 100e-6;
        m->reduce_on_cpu = 1;
        return 0;
    }
    return -1;
}

/*
 * MACHINE: a preset name, then optional key=value overrides, comma-separated, e.g.
 * "h100,gemm_eff=0.6" or "cpu,rpn=1,inter_gbit=0.1". Keys: peak_tflops, gemm_eff, mem_gbs (GB/s),
 * mem_gib (device memory), reserve_gib, rpn (ranks per node), intra_gbs (GB/s per rank),
 * intra_us, inter_gbit (Gbit/s per node), inter_us, inter_eff (payload fraction of the link
 * rate), cores, threads. Returns 0, or -1 after printing the error line.
 */
static int plan_machine_parse(const char* spec, PlanMachine* m, int* is_cpu) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", spec);
    char* save = NULL;
    char* tok = strtok_r(buf, ",", &save);
    if (tok == NULL || plan_machine_preset(tok, m) != 0) {
        fprintf(stderr, "error: --plan %s: unknown machine '%s'; expected h100, h200 or cpu, then key=value overrides\n", spec, tok ? tok : "");
        return -1;
    }
    *is_cpu = strcmp(tok, "cpu") == 0;
    double inter_eff = 1.0;
    int overridden = 0;
    while ((tok = strtok_r(NULL, ",", &save)) != NULL) {
        char* eq = strchr(tok, '=');
        char* end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0.0;
        if (eq == NULL || end == eq + 1 || *end != '\0' || !(v >= 0.0) || !isfinite(v)) {
            fprintf(stderr, "error: --plan %s: '%s' is not key=number; expected e.g. inter_gbit=100\n", spec, tok);
            return -1;
        }
        *eq = '\0';
        overridden = 1;
        if (strcmp(tok, "peak_tflops") == 0) m->peak_flops = v * 1e12;
        else if (strcmp(tok, "gemm_eff") == 0) m->gemm_eff = v;
        else if (strcmp(tok, "mem_gbs") == 0) m->mem_bw = v * 1e9;
        else if (strcmp(tok, "mem_gib") == 0) m->memory = v * 1073741824.0;
        else if (strcmp(tok, "reserve_gib") == 0) m->reserve = v * 1073741824.0;
        else if (strcmp(tok, "rpn") == 0) m->ranks_per_node = (int)v;
        else if (strcmp(tok, "intra_gbs") == 0) m->intra_bw = v * 1e9;
        else if (strcmp(tok, "intra_us") == 0) m->intra_lat = v * 1e-6;
        else if (strcmp(tok, "inter_gbit") == 0) m->inter_bw = v * 1e9 / 8;
        else if (strcmp(tok, "inter_us") == 0) m->inter_lat = v * 1e-6;
        else if (strcmp(tok, "inter_eff") == 0) inter_eff = v;
        else if (strcmp(tok, "cores") == 0) m->cores = (int)v;
        else if (strcmp(tok, "threads") == 0) m->threads_per_rank = (int)v;
        else {
            fprintf(stderr, "error: --plan %s: unknown key '%s'; expected peak_tflops, gemm_eff, mem_gbs, mem_gib, reserve_gib, "
                    "rpn, intra_gbs, intra_us, inter_gbit, inter_us, inter_eff, cores or threads\n", spec, tok);
            return -1;
        }
    }
    m->inter_bw *= inter_eff;
    if (overridden) snprintf(m->name + strlen(m->name), sizeof(m->name) - strlen(m->name), " (%s)", spec);
    return 0;
}

// ---- the model's work per unit ----

typedef struct {
    const GPT2Config* config;
    int B, T, grad_accum_steps, world_size;
    int element_bytes;           // parameters, gradients and activations (4 CPU, 2 GPU)
    int has_master;              // fp32 master weights beside the parameters (GPU)
    size_t activation_bytes;     // the trainer's own, for B x T (gpt2_activation_bytes)
    int ring_buffer;             // the engine's rings allocate their receive buffer (CPU: zero/comm_ring.h; NCCL's are its own)
    int attention_backward_products; // T x T products in attention backward (CPU 4; GPU 5: S recomputed)
    int attention_block;         // query/key block size: a causal block computes its diagonal tile whole
    int stores_attention_matrix; // CPU: the B x NH x T x T probabilities are written and read
    double optimizer_bytes_per_element; // AdamW + averaging + norm, per owned element
    double flops_per_token;      // the trainer's MFU numerator (6N + 6LCT, plan_flops_per_token)
} PlanModel;

typedef struct { double flops, bytes; } PlanCost;

// Training FLOPs per token, MFU's numerator (the GPU trainer's step lines and the plan), as llm.c
// counts it (gpt2_estimate_mfu): 6N for the weights (forward 2N, backward 4N) plus 6 L C T for
// attention's score and value products (Chowdhery et al. 2022, "PaLM", Appendix B's 12 L C T,
// halved for the causal mask), so the MFU figures compare with llm.c's.
static double plan_flops_per_token(size_t num_parameters, int L, int C, int T) {
    return 6.0 * (double)num_parameters + 6.0 * L * (double)C * T;
}

// Attention products' FLOPs for one layer and one product (Q K^T or P V): B x NH blocks of
// T/block query rows, each against the keys up to its block's end (causal), HS wide.
static double plan_attention_product_flops(const PlanModel* pm) {
    double B = pm->B, T = pm->T, C = pm->config->channels, blk = pm->attention_block > 0 ? pm->attention_block : 1;
    double blocks = ceil(T / blk), keys = 0.0;
    for (double b = 0; b < blocks; b++) keys += fmin(blk, T - b * blk) * fmin(T, (b + 1) * blk);
    return 2.0 * B * keys * C; // 2 flops per multiply-add; NH x HS = C
}

/*
 * One micro-step's work of each unit: fwd[u], bwd[u] for u = 0 (embedding: encoder), 1..L
 * (layers), L+1 (final LayerNorm); the LM head (tied wte) separately. GEMM FLOPs are 2 M K N
 * (backward 2x: input and weight gradients); layer GEMMs 24 BT C^2 forward. Element-wise bytes
 * (e = element_bytes): per layer forward 2 LayerNorms (read, write BT C), GELU (4 BT C in and
 * out), 2 residual adds (3 BT C), the attention output, and on the CPU the T x T probabilities
 * (written, read back); backward twice the forward's. LM head: the classifier reads and writes
 * the BT x Vp logits in forward and again in backward (CPU: softmax recomputed).
 */
static void plan_unit_costs(const PlanModel* pm, PlanCost* fwd, PlanCost* bwd, PlanCost* head_fwd, PlanCost* head_bwd) {
    const GPT2Config* c = pm->config;
    double BT = (double)pm->B * pm->T, C = c->channels, Vp = c->padded_vocab_size, e = pm->element_bytes;
    double att = plan_attention_product_flops(pm);
    double att_matrix = pm->stores_attention_matrix ? att / (2.0 * C) * c->num_heads * e : 0.0; // B NH (T x T causal) elements
    int L = c->num_layers;
    for (int u = 0; u <= L + 1; u++) { fwd[u].flops = fwd[u].bytes = bwd[u].flops = bwd[u].bytes = 0.0; }
    fwd[0].bytes = 3.0 * BT * C * e;          // encoder: gather wte rows, wpe, write
    bwd[0].bytes = 3.0 * BT * C * e;
    for (int l = 1; l <= L; l++) {
        fwd[l].flops = 24.0 * BT * C * C + 2.0 * att;
        fwd[l].bytes = BT * C * e * (2 * 2 + 8 + 2 * 3 + 2) + 2.0 * att_matrix;
        bwd[l].flops = 48.0 * BT * C * C + pm->attention_backward_products * att;
        bwd[l].bytes = 2.0 * fwd[l].bytes;
    }
    fwd[L + 1].bytes = 2.0 * BT * C * e;
    bwd[L + 1].bytes = 4.0 * BT * C * e;
    head_fwd->flops = 2.0 * BT * C * Vp;
    head_fwd->bytes = 2.0 * BT * Vp * e;
    head_bwd->flops = 4.0 * BT * C * Vp;
    head_bwd->bytes = 2.0 * BT * Vp * e;
}

// ---- collectives ----

typedef struct {
    int N, nodes;
    double alpha, beta;   // per ring step: latency, bytes/s
    double reduce_bw;     // CPU: the chunk addition's memory bandwidth (0: free)
    int element_bytes;
} PlanNet;

static PlanNet plan_net(const PlanMachine* m, int N, int element_bytes) {
    PlanNet net = {N, 1, m->intra_lat, m->intra_bw, m->reduce_on_cpu ? m->mem_bw : 0.0, element_bytes};
    int rpn = m->ranks_per_node > 0 ? m->ranks_per_node : N;
    net.nodes = (N + rpn - 1) / rpn;
    if (net.nodes > 1) {
        net.alpha = fmax(m->intra_lat, m->inter_lat);
        net.beta = fmin(rpn > 1 ? m->intra_bw : 1e300, m->inter_bw);
    }
    return net;
}

// Seconds for a ring collective of n elements (n divisible by N): `steps` ring steps of one
// chunk, `reduce_steps` of them adding the received chunk (read two, write one).
static double plan_ring_seconds(const PlanNet* net, size_t n, int steps, int reduce_steps) {
    if (net->N == 1) return 0.0;
    double chunk = (double)(n / (size_t)net->N) * net->element_bytes;
    double t = steps * (net->alpha + chunk / net->beta);
    if (net->reduce_bw > 0) t += reduce_steps * 3.0 * chunk / net->reduce_bw;
    return t;
}

// A scalar all-reduce: recursive doubling, ceil(log2 N) exchanges there and back (latency only).
static double plan_scalar_seconds(const PlanNet* net) {
    if (net->N == 1) return 0.0;
    return 2.0 * ceil(log2((double)net->N)) * net->alpha;
}

// ---- the schedule ----

typedef struct { int unit; double done; long long age; } PlanSlot;

typedef struct {
    int stage, num_units, L;
    const ParamLayout* layout;
    const PlanNet* net;
    double t, link_free, step_begin;
    double exposed, comm_busy;
    long long sent;
    double* grad_done;   // stages 0, 1: each unit's gradient collective completes
    double* param_done;  // stages 1, 2: each unit's all-gather completes
    PlanSlot param_work[ZERO_WORKING_UNITS], grad_work[ZERO_WORKING_UNITS];
    long long clock;
    double shard_add_bytes_per_element; // CPU stages 2, 3: adding the reduced slice into the shard
    double mem_bw;
    ZeroTraceEvent* trace; int trace_count, trace_capacity, step; // the predicted timeline (--plan with -tr)
} PlanSim;

static void plan_sim_trace(PlanSim* s, int kind, int phase, int unit, int op_kind, double begin, double end, long long elements) {
    if (s->trace == NULL || s->trace_count == s->trace_capacity || (kind != ZERO_TRACE_EV_STEP && end <= begin)) return;
    ZeroTraceEvent* e = &s->trace[s->trace_count++];
    memset(e, 0, sizeof(*e));
    e->kind = kind; e->phase = phase; e->unit = unit; e->op_kind = op_kind; e->step = s->step;
    e->begin = e->issued = begin; e->end = end; e->elements = elements; e->ev_begin = e->ev_end = -1;
}

// A collective of `seconds` issued now: the link serves it after the ones before it.
static double plan_issue(PlanSim* s, ZeroOpKind kind, int unit, double seconds, long long elements) {
    double start = fmax(s->t, s->link_free);
    s->link_free = start + seconds;
    s->comm_busy += seconds;
    s->sent += elements;
    plan_sim_trace(s, ZERO_TRACE_EV_COMM, 0, unit, kind, start, s->link_free, elements);
    return s->link_free;
}

static void plan_wait(PlanSim* s, double done, ZeroOpKind kind, int unit) {
    if (done > s->t) {
        plan_sim_trace(s, ZERO_TRACE_EV_WAIT, 0, unit, kind, s->t, done, 0);
        s->exposed += done - s->t;
        s->t = done;
    }
}

static double plan_cost_seconds(const PlanCost* c, double flops_rate, double mem_bw) { return c->flops / flops_rate + c->bytes / mem_bw; }

static void plan_compute(PlanSim* s, int phase, int unit, double seconds) {
    plan_sim_trace(s, ZERO_TRACE_EV_COMPUTE, phase, unit, 0, s->t, s->t + seconds, 0);
    s->t += seconds;
}

static PlanSlot* plan_find(PlanSlot* w, int unit) {
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) if (w[i].unit == unit) return &w[i];
    return NULL;
}

// zero_work_take's rule: the embedding unit has slot 0, every other unit the first free of 1, 2.
static PlanSlot* plan_take(PlanSim* s, PlanSlot* w, int unit) {
    int first = unit == UNIT_EMBEDDING ? 0 : 1, last = unit == UNIT_EMBEDDING ? 0 : ZERO_WORKING_UNITS - 1;
    for (int i = first; i <= last; i++) if (w[i].unit == -1) { w[i].unit = unit; w[i].age = ++s->clock; return &w[i]; }
    return NULL;
}

static size_t plan_unit_numel(const PlanSim* s, int unit) { return s->layout->units[unit].padded_numel; }

// Stage 3: gather `unit` into a free working unit (NULL if none is free).
static PlanSlot* plan_gather(PlanSim* s, int unit) {
    PlanSlot* w = plan_take(s, s->param_work, unit);
    if (w == NULL) return NULL;
    size_t n = plan_unit_numel(s, unit);
    w->done = plan_issue(s, ZERO_OP_ALL_GATHER, unit, plan_ring_seconds(s->net, n, s->net->N - 1, 0),
                         zero_ring_all_gather_elements(n, s->net->N));
    return w;
}

static void plan_params(PlanSim* s, int unit) { // zero_params_unit
    if (s->stage == 3) {
        PlanSlot* w = plan_find(s->param_work, unit);
        if (w == NULL) w = plan_gather(s, unit);
        if (w != NULL) plan_wait(s, w->done, ZERO_OP_ALL_GATHER, unit);
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
}

static void plan_grad_finish(PlanSim* s, PlanSlot* w) { // zero_grad_work_finish
    plan_wait(s, w->done, ZERO_OP_REDUCE_SCATTER, w->unit);
    if (s->shard_add_bytes_per_element > 0)
        plan_compute(s, ZERO_TRACE_BACKWARD, w->unit, (double)s->layout->units[w->unit].shard_numel * s->shard_add_bytes_per_element / s->mem_bw);
    w->unit = -1;
}

static void plan_grads(PlanSim* s, int unit) { // zero_grads_unit (stages 2, 3: zero_grad_work_acquire)
    if (s->stage < 2) return;
    PlanSlot* w = plan_find(s->grad_work, unit);
    if (w != NULL) plan_grad_finish(s, w);
    if (plan_take(s, s->grad_work, unit) != NULL) return;
    PlanSlot* oldest = NULL;
    int first = unit == UNIT_EMBEDDING ? 0 : 1, last = unit == UNIT_EMBEDDING ? 0 : ZERO_WORKING_UNITS - 1;
    for (int i = first; i <= last; i++) if (oldest == NULL || s->grad_work[i].age < oldest->age) oldest = &s->grad_work[i];
    plan_grad_finish(s, oldest);
    plan_take(s, s->grad_work, unit);
}

static void plan_grads_ready(PlanSim* s, int unit, int last_micro_step) { // zero_grads_unit_ready
    size_t n = plan_unit_numel(s, unit);
    int N = s->net->N;
    if (s->stage == 0 && last_micro_step)
        s->grad_done[unit] = plan_issue(s, ZERO_OP_ALL_REDUCE, unit, plan_ring_seconds(s->net, n, 2 * (N - 1), N - 1),
                                        zero_ring_all_reduce_elements(n, N));
    else if (s->stage == 1 && last_micro_step)
        s->grad_done[unit] = plan_issue(s, ZERO_OP_REDUCE_SCATTER, unit, plan_ring_seconds(s->net, n, N - 1, N - 1),
                                        zero_ring_reduce_scatter_elements(n, N));
    else if (s->stage >= 2) {
        PlanSlot* w = plan_find(s->grad_work, unit);
        if (N == 1) { plan_grad_finish(s, w); return; }
        w->done = plan_issue(s, ZERO_OP_REDUCE_SCATTER, unit, plan_ring_seconds(s->net, n, N - 1, N - 1),
                             zero_ring_reduce_scatter_elements(n, N));
    }
}

typedef struct {
    double compute_s, comm_s, exposed_s, step_s;
    long long sent_elements; // per rank per step, summed over the simulated schedule's collectives
} PlanStep;

typedef struct {
    double fwd[256 + 2], bwd[256 + 2], head_fwd, head_bwd, optimizer_per_element;
    double scalar_s;
} PlanTimes;

// One step of the simulated schedule (the engine's calls in the model's order).
static void plan_sim_step(PlanSim* s, const PlanTimes* tm, int A, double* compute_s) {
    int L = s->L, final_unit = L + 1, N = s->net->N;
    double busy = 0.0;
#define PLAN_RUN(phase, unit, seconds) do { plan_compute(s, phase, unit, seconds); busy += (seconds); } while (0)
    for (int micro = 0; micro < A; micro++) {
        int last = micro == A - 1;
        // forward
        plan_params(s, UNIT_EMBEDDING); plan_prefetch(s, 1);
        PLAN_RUN(ZERO_TRACE_FORWARD, UNIT_EMBEDDING, tm->fwd[0]);
        plan_params_done(s, UNIT_EMBEDDING);
        for (int l = 1; l <= L; l++) {
            plan_params(s, l); plan_prefetch(s, l + 1 <= L ? l + 1 : final_unit);
            PLAN_RUN(ZERO_TRACE_FORWARD, l, tm->fwd[l]);
            plan_params_done(s, l);
        }
        plan_params(s, final_unit); plan_prefetch(s, UNIT_EMBEDDING);
        PLAN_RUN(ZERO_TRACE_FORWARD, final_unit, tm->fwd[final_unit]);
        plan_params_done(s, final_unit);
        plan_params(s, UNIT_EMBEDDING);
        PLAN_RUN(ZERO_TRACE_FORWARD, ZERO_TRACE_LM_HEAD, tm->head_fwd); // wte kept for backward
        // backward
        plan_params(s, UNIT_EMBEDDING); plan_prefetch(s, final_unit); plan_grads(s, UNIT_EMBEDDING);
        PLAN_RUN(ZERO_TRACE_BACKWARD, ZERO_TRACE_LM_HEAD, tm->head_bwd);
        plan_params_done(s, UNIT_EMBEDDING);
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
        PLAN_RUN(ZERO_TRACE_BACKWARD, UNIT_EMBEDDING, tm->bwd[0]);
        plan_grads_ready(s, UNIT_EMBEDDING, last);
    }
    // optimizer (zero_optimizer_step)
    for (int u = s->num_units - 1; s->stage <= 1 && u >= 0; u--) plan_wait(s, s->grad_done[u], s->stage == 0 ? ZERO_OP_ALL_REDUCE : ZERO_OP_REDUCE_SCATTER, u);
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
    for (int u = 0; u < s->num_units; u++) {
        const ParamUnit* pu = &s->layout->units[u];
        size_t owned = s->stage == 0 ? pu->padded_numel : pu->shard_numel;
        PLAN_RUN(ZERO_TRACE_OPTIMIZER, u, (double)owned * tm->optimizer_per_element);
        if (s->stage == 1 || s->stage == 2)
            s->param_done[u] = plan_issue(s, ZERO_OP_ALL_GATHER, u, plan_ring_seconds(s->net, pu->padded_numel, N - 1, 0),
                                          zero_ring_all_gather_elements(pu->padded_numel, N));
    }
    plan_wait(s, s->t + tm->scalar_s, ZERO_OP_SCALAR_ALL_REDUCE, -1); // mean loss
#undef PLAN_RUN
    *compute_s = busy;
}

/*
 * Simulate three steps of `stage` and report the third. Optionally records the predicted
 * timeline (trace, capacity events; *count set) as the trace's events, steps 1-3.
 */
static PlanStep plan_simulate(int stage, const ParamLayout* layout, const PlanNet* net, const PlanTimes* tm, int A,
                              double shard_add_bytes_per_element, double mem_bw, ZeroTraceEvent* trace, int capacity, int* count) {
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
    s.mem_bw = mem_bw;
    s.trace = trace;
    s.trace_capacity = capacity;
    PlanStep r = {0};
    for (int step = 1; step <= 3; step++) {
        s.step = step;
        double begin = s.t, exposed0 = s.exposed, busy0 = s.comm_busy, compute = 0.0;
        long long sent0 = s.sent;
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
    }
    if (count) *count = s.trace_count;
    free(s.grad_done);
    free(s.param_done);
    return r;
}


// ---- the plan, every stage ----

// What one stage stores per rank (bytes) and does per step, for the printed table.
typedef struct {
    int stage;
    size_t params, grads, optimizer, working, ring, activations, total;
    size_t state_formula;          // DESIGN.md's row (zero_state_bytes_formula or _mixed)
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
    // Compute rates of one rank: a CPU's cores are shared by the ranks on its node.
    double share = 1.0;
    if (m->cores > 0 && m->threads_per_rank > 0 && (double)rpn * m->threads_per_rank > m->cores)
        share = (double)m->cores / ((double)rpn * m->threads_per_rank);
    double flops = m->peak_flops * m->gemm_eff * share, mem_bw = m->mem_bw * share;
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
    fprintf(out, "plan: %s | L %d | C %d | NH %d | Vp %d | parameters %zu, Ψ = %zu padded for N = %d\n", init, L, cfg->channels,
            cfg->num_heads, cfg->padded_vocab_size, layout.num_parameters, layout.padded_numel, N);
    fprintf(out, "plan: batch B %d x T %d x %d ranks x %d micro-steps = %lld tokens per step | %s\n", pm->B, pm->T, N, A, tokens,
            pm->has_master ? "bf16 params and micro-step grads, fp32 accumulated grads, master, m, v (GPU build)" : "fp32 params, grads, m, v (CPU build)");
    fprintf(out, "plan: machine %s\n", m->name);
    fprintf(out, "plan: per rank %s matmul (%.2f of %s peak%s), %.1f GB/s memory, %s per device | %d ranks on %d node%s (%d per node)\n",
            plan_rate(flops, buf[1], 32), m->gemm_eff * share, plan_rate(m->peak_flops, buf[2], 32), share < 1.0 ? ", cores shared" : "",
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
        p->params = zero_buffer_numel(&layout, stage, ZERO_BUF_PARAMS, pm->has_master) * (size_t)e;
        p->grads = zero_grads_bytes(&layout, stage, pm->has_master); // GPU: bf16 micro-step + fp32 accumulation
        p->optimizer = (zero_buffer_numel(&layout, stage, ZERO_BUF_MASTER, pm->has_master) +
                        zero_buffer_numel(&layout, stage, ZERO_BUF_ADAM_M, pm->has_master) +
                        zero_buffer_numel(&layout, stage, ZERO_BUF_ADAM_V, pm->has_master)) * sizeof(float);
        p->working = zero_working_numel(&layout, stage) * (size_t)e;
        p->ring = pm->ring_buffer ? zero_ring_buffer_numel(&layout, N) * (size_t)e : 0;
        p->activations = pm->activation_bytes;
        p->total = p->params + p->grads + p->optimizer + p->working + p->ring + p->activations;
        p->state_formula = pm->has_master ? zero_state_bytes_formula_mixed(stage, layout.padded_numel, N)
                                          : zero_state_bytes_formula(stage, layout.padded_numel, N);
        p->sent_formula = zero_elements_sent_formula(stage, layout.padded_numel, N, A);
        double shard_add = !pm->has_master ? 3.0 * e : 0.0; // CPU: shard += reduced slice
        ZeroTraceEvent* events = NULL;
        int capacity = 0, count = 0;
        if (trace_path) {
            capacity = 3 * A * (12 * layout.num_units + 16) + 64;
            events = (ZeroTraceEvent*)zero_calloc((size_t)capacity, sizeof(ZeroTraceEvent), "plan trace");
        }
        p->step = plan_simulate(stage, &layout, &net, &tm, A, shard_add, mem_bw, events, capacity, &count);
        p->tokens_per_s = tokens / p->step.step_s;
        p->mfu = p->tokens_per_s * pm->flops_per_token / (m->peak_flops * N);
        p->fits = (double)p->total <= budget;
        any_fits |= p->fits;
        double sent_bytes = (double)p->step.sent_elements * e;
        char across[32];
        if (net.nodes > 1) plan_gib(sent_bytes, across, sizeof(across)); else snprintf(across, sizeof(across), "-");
        fprintf(out, "%-5d | %-10s | %-10s | %-10s | %-10s | %-11s | %-10s | %-4s | %-12s | %-13s | %6.1f ms | %6.1f ms | %7.1f ms | %6.1f ms | %10.0f | %5.1f%%\n",
                stage, plan_gib(p->params, buf[0], 32), plan_gib(p->grads, buf[1], 32), plan_gib(p->optimizer, buf[2], 32),
                plan_gib(p->working, buf[3], 32), plan_gib(p->activations, buf[4], 32), plan_gib(p->total, buf[5], 32),
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
    if (st[0].ring > 0)
        fprintf(out, "plan: total includes the rings' receive buffer, %s per rank (one chunk of the largest unit, zero/comm_ring.h)\n",
                plan_gib((double)st[0].ring, buf[0], 32));
    for (int stage = 0; stage <= 3; stage++) {
        const PlanStage* p = &st[stage];
        fprintf(out, "plan_json {\"stage\":%d,\"world_size\":%d,\"ranks_per_node\":%d,\"nodes\":%d,\"grad_accum_steps\":%d,"
                "\"padded_parameters\":%zu,\"bytes_params\":%zu,\"bytes_grads\":%zu,\"bytes_optimizer\":%zu,\"bytes_working\":%zu,"
                "\"bytes_ring\":%zu,\"bytes_activations\":%zu,\"bytes_total\":%zu,\"bytes_state_formula\":%zu,\"fits\":%s,"
                "\"sent_elements\":%lld,\"sent_elements_formula\":%lld,\"element_bytes\":%d,\"bytes_across_per_node\":%.0f,"
                "\"compute_ms\":%.4f,\"comm_ms\":%.4f,\"exposed_ms\":%.4f,\"step_ms\":%.4f,\"tokens_per_s\":%.2f,\"mfu\":%.5f}\n",
                p->stage, N, rpn, net.nodes, A, layout.padded_numel, p->params, p->grads, p->optimizer, p->working, p->ring, p->activations,
                p->total, p->state_formula, p->fits ? "true" : "false", p->step.sent_elements, p->sent_formula, e,
                net.nodes > 1 ? (double)p->step.sent_elements * e : 0.0, 1e3 * p->step.compute_s, 1e3 * p->step.comm_s,
                1e3 * p->step.exposed_s, 1e3 * p->step.step_s, p->tokens_per_s, p->mfu);
    }
    param_layout_free(&layout);
    return any_fits ? 0 : 1;
}

#endif // ZERO_PLAN_H
