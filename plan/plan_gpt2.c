/*
 * plan/plan_gpt2.c: the planner's binary, ./plan_gpt2 (make plan_gpt2). For a model (-e), a batch
 * (-b -t -d) and a world (-np, -rpn) on a machine (--plan h100|h200|cpu[,key=value...]) it prints
 * what each ZeRO stage stores per rank and how long its step takes (plan/plan.h); no rank is
 * started, no GPU touched. The trainers' --plan runs this binary (train/plan_exec.h).
 *
 * It plans either build's layout, whichever binary was asked: the machine says which
 * (PlanMachine.gpu_build: h100 and h200 the GPU build's, cpu the CPU build's; gpu_build=0|1
 * overrides). The CPU build's sizes come from train_gpt2.c itself (included here, as test_gpt2.c
 * does, for model/gpt2_cpu.h's activation buffers and its ops, which the cpu machine times); the GPU build's
 * from plan_fill_gpu_build below, which restates model/gpt2_gpu_buffers.cuh's device buffers (that file needs
 * nvcc). tests/t_66_plan_trace.sh checks both against runs (the GPU one in the emulation).
 */
#define TESTING
#include "train_gpt2.c"
#include "plan/plan.h"        // the planner: after zero.cuh, whose functions it models
#include "plan/plan_setup.h"  // its flags
#include "plan/measure.h"     // the cpu machine's measured rates
#include "plan/measure_ops.h" // its non-GEMM ops measured at the model's shapes

/*
 * The CPU build's layout (model/gpt2_cpu.h): what the fp32 CPU build stores and does, beside the plan's model and
 * machine. Activations: the model's buffers (gpt2_activation_sizes). Attention: the B x NH x
 * T x T probabilities are stored; backward runs 4 T x T products; both in 64-row query blocks.
 * Optimizer per owned element: AdamW reads p, g, m, v and writes p, m, v (28 bytes), the
 * 1/world_size average reads and writes g (8), the norm reads it (4). The cpu machine: this
 * CPU's sgemm rate at the model's shapes and memory bandwidth, measured now on the trainer's
 * threads (plan/measure.h), its cores and memory; and when several ranks share these cores (a
 * node's ranks, times hosts_here simulated nodes), the rates one rank gets while they all run,
 * measured with that many processes at once: the rates the plan's compute uses.
 */
static void plan_fill_cpu_build(PlanModel* pm, const ParamLayout* layout, PlanMachine* m, int is_cpu) {
    const GPT2Config* c = pm->config;
    size_t sizes[GPT2_ACTIVATION_BUFFERS], floats = 0;
    int n = gpt2_activation_sizes(layout, pm->B, pm->T, sizes);
    for (int i = 0; i < n; i++) floats += sizes[i];
    pm->element_bytes = sizeof(float);
    pm->has_master = 0;
    pm->activation_bytes = floats * sizeof(float);
    pm->ring_buffer = ZERO_RING; // its collectives are the engine's rings (zero/comm_ring.h)
    pm->attention_backward_products = 4;
    pm->attention_block = 64;
    pm->stores_attention_matrix = 1;
    pm->optimizer_bytes_per_element = 28.0 + (pm->world_size > 1 ? 8.0 : 0.0) + 4.0;
    pm->flops_per_token = gpt2_flops_per_token(layout->num_parameters, c->num_layers, c->channels, pm->T);
    if (!is_cpu) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int N = pm->world_size, rows = pm->B * pm->T < 1024 ? pm->B * pm->T : 1024;
    int hosts = m->hosts_here > 0 ? m->hosts_here : 1;
    int rpn = m->ranks_per_node > 0 && m->ranks_per_node < N ? m->ranks_per_node : N;
    if (hosts > (N + rpn - 1) / rpn) hosts = (N + rpn - 1) / rpn;
    if (m->threads_per_rank == 0) m->threads_per_rank = omp_get_max_threads();
    int threads = m->threads_per_rank, sharing = rpn * hosts < N ? rpn * hosts : N;
    int R = 0; // the LM head's GEMMs: one vocab chunk's rows at a time, the largest chunk's
    for (int k = 0; k < layout->num_wte_units; k++) {
        int rows_k = (int)layout->tensors[wte_piece_index(layout, k)].shape[0];
        if (rows_k > R) R = rows_k;
    }
    // First the ranks at once (forked: before this process runs an OpenMP region), then one alone.
    MeasureRankRates shared;
    int measure = sharing > 1 && m->peak_flops == 0.0 && m->mem_bw == 0.0;
    if (measure && sharing > MEASURE_MAX_RANKS) { // fewer measured would give each rank too large a share of the cores
        fprintf(stderr, "error: --plan cpu: %d ranks would share this machine's %ld cores; expected at most %d (rpn=K: nodes of K ranks, "
                "hosts_here=H of them here)\n", sharing, cores, MEASURE_MAX_RANKS);
        exit(1);
    }
    int measured_shared = measure && measure_rank_rates(sharing, threads, rows, c->channels, c->padded_vocab_size, R, c->num_layers,
                                                        ZERO_PROGRESS_POLL_US, &shared) == 0;
    if (measure && !measured_shared) exit(1); // its error line is printed; rates measured alone would be too fast
    if (measured_shared) {
        m->rank_flops = shared.flops_min; // the slowest rank's: the step waits for it
        m->rank_mem_bw = shared.bw_min;
        m->rank_rates_ranks = sharing;
        // A ring step moves when a progress thread gets its turn (zero/progress_cpu.h): at least one turn.
        m->intra_lat = fmax(m->intra_lat, shared.poll_s);
        m->inter_lat = fmax(m->inter_lat, shared.poll_s);
    }
    omp_set_num_threads(threads); // one rank alone on its threads
    double measured_flops = measure_sgemm_flops(rows, c->channels, c->padded_vocab_size, R, c->num_layers);
    double measured_bw = measure_memory_bandwidth();
    MeasureOps ops; // the rest of the step's work, timed alone on these threads (plan/measure_ops.h)
    int ops_measured = m->peak_flops == 0.0 && m->mem_bw == 0.0 &&
                       measure_ops(pm->B, pm->T, c->channels, c->num_heads, c->padded_vocab_size, R, N, &ops) == 0;
    if (ops_measured) {
        m->ops_measured = 1;
        m->op_layer_fwd_s = ops.layer_fwd_s;
        m->op_layer_bwd_s = ops.layer_bwd_s;
        m->op_head_fwd_s = ops.head_fwd_s;
        m->op_head_bwd_s = ops.head_bwd_s;
        m->op_optimizer_s = ops.optimizer_s;
        m->op_zero_grads_s = ops.zero_grads_s;
    }
    if (m->peak_flops == 0.0) m->peak_flops = measured_flops;
    if (m->mem_bw == 0.0) m->mem_bw = measured_bw;
    if (m->memory == 0.0) m->memory = (double)pages * (double)page / hosts;
    if (m->cores == 0) m->cores = (int)(cores / hosts > 0 ? cores / hosts : 1);
    char tail[640];
    snprintf(tail, sizeof(tail), " | measured: sgemm %.1f GFLOP/s at the model's shapes, memory %.1f GB/s, %d threads; %d cores",
             measured_flops / 1e9, measured_bw / 1e9, threads, m->cores);
    if (measured_shared)
        snprintf(tail + strlen(tail), sizeof(tail) - strlen(tail), "; one rank of %d at once on %ld cores: the slowest %.1f GFLOP/s, "
                 "%.1f GB/s (mean %.1f, %.1f), a progress thread's %d us poll takes %.0f us", sharing, cores, shared.flops_min / 1e9,
                 shared.bw_min / 1e9, shared.flops_mean / 1e9, shared.bw_mean / 1e9, ZERO_PROGRESS_POLL_US, shared.poll_s * 1e6);
    if (ops_measured)
        snprintf(tail + strlen(tail), sizeof(tail) - strlen(tail), "; measured alone, a layer's non-GEMM ops %.2f ms forward, %.2f ms "
                 "backward, the classifier %.1f + %.1f ms, the optimizer %.2f ns and the zeroing %.2f ns per element",
                 1e3 * ops.layer_fwd_s, 1e3 * ops.layer_bwd_s, 1e3 * ops.head_fwd_s, 1e3 * ops.head_bwd_s, 1e9 * ops.optimizer_s,
                 1e9 * ops.zero_grads_s);
    snprintf(m->name + strlen(m->name), sizeof(m->name) - strlen(m->name), "%s", tail);
}

/*
 * The GPU build's layout (model/gpt2_gpu_buffers.cuh, zero/gpu/engine_gpu.cuh): bf16 parameters, activations
 * and micro-step gradients, fp32 accumulated gradients, master weights and Adam state (the
 * engine's own functions count those: plan/plan_memory.h, has_master). Activations: the device
 * buffers model/gpt2_gpu_buffers.cuh's gpt2_activation_sizes lists, in its order, each rounded up to 256
 * bytes as it carves them, then its micro-batch slots and loss slots. The kernels' scratch is
 * restated from kernels/: layernorm backward's LAYERNORM_BACKWARD_BLOCKS (1024) x 2 x C floats or
 * matmul dbias's MATMUL_DBIAS_ROW_CHUNKS (128) x 4C, whichever is larger, and attention
 * backward's B x NH x Tp x (HS + 2) floats, Tp = T rounded up to ATTENTION_TILE (64) (without
 * cuDNN). tests/t_66_plan_trace.sh compares these bytes with the emulated GPU build's run.
 * Attention: flash-style, no T x T matrix, 64-row tiles, 5 products in backward (S recomputed).
 * Optimizer per owned element: the norm reads the fp32 gradient (4 bytes), AdamW reads gradient,
 * master, m, v and writes master, m, v and the bf16 parameter (30).
 */
#define PLAN_GPU_LAYERNORM_BACKWARD_BLOCKS 1024 // kernels/layernorm.cuh
#define PLAN_GPU_MATMUL_DBIAS_ROW_CHUNKS 128    // kernels/matmul.cuh
#define PLAN_GPU_ATTENTION_TILE 64              // kernels/attention.cuh
#define PLAN_GPU_BATCH_SLOTS 2                  // model/gpt2_gpu_buffers.cuh: BATCH_SLOTS, each 5 x BT + 1 ints
#define PLAN_GPU_LOSS_SLOTS (3 + 1) // model/gpt2_gpu_buffers.cuh: LOSS_EVAL_SLOT + 1 floats, LOSS_EVAL_SLOT = ZERO_STEP_SLOTS (3, zero/engine.h)
static size_t plan_gpu_activation_bytes(const ParamLayout* layout, int B, int T) {
    const GPT2Config* c = &layout->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, h = 2 /* bf16 */, f = sizeof(float), R = wte_chunk_rows_max(layout);
    size_t reduce_floats = (size_t)PLAN_GPU_LAYERNORM_BACKWARD_BLOCKS * 2 * C, matmul_floats = (size_t)PLAN_GPU_MATMUL_DBIAS_ROW_CHUNKS * 4 * C;
    if (matmul_floats > reduce_floats) reduce_floats = matmul_floats;
    size_t Tp = ((size_t)T + PLAN_GPU_ATTENTION_TILE - 1) / PLAN_GPU_ATTENTION_TILE * PLAN_GPU_ATTENTION_TILE;
    size_t attention_floats = (size_t)B * NH * Tp * (C / NH) + 2 * (size_t)B * NH * Tp;
    size_t b[] = {
        BT * C * h, L * BT * C * h, L * BT * f, L * BT * f, L * BT * 3 * C * h, L * BT * C * h, L * B * NH * T * f,
        L * BT * C * h, L * BT * C * h, L * BT * C * h, L * BT * f, L * BT * f, L * BT * 4 * C * h, L * BT * 4 * C * h,
        L * BT * C * h, L * BT * C * h, BT * C * h, BT * f, BT * f, BT * R * h, BT * f, BT * f, BT * f, BT * f,
        (size_t)T * C * h, (size_t)B * Vp * h,
        BT * C * h, BT * C * h, BT * C * h, BT * 3 * C * h, BT * 4 * C * h, reduce_floats * f,
        attention_floats * f,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++) total += (b[i] + 255) / 256 * 256;
    return total + PLAN_GPU_BATCH_SLOTS * (5 * BT + 1) * sizeof(int) + PLAN_GPU_LOSS_SLOTS * sizeof(float);
}

static void plan_fill_gpu_build(PlanModel* pm, const ParamLayout* layout, PlanMachine* m, int is_cpu) {
    const GPT2Config* c = pm->config;
    pm->element_bytes = 2; // bf16
    pm->has_master = 1;
    pm->activation_bytes = plan_gpu_activation_bytes(layout, pm->B, pm->T);
    pm->ring_buffer = 0; // NCCL's buffers are its own (the machine's reserve)
    pm->attention_backward_products = 5;
    pm->attention_block = 64;
    pm->stores_attention_matrix = 0;
    pm->optimizer_bytes_per_element = 34.0;
    pm->flops_per_token = gpt2_flops_per_token(layout->num_parameters, c->num_layers, c->channels, pm->T);
    if (is_cpu && m->peak_flops == 0.0) { // the GPU build planned on the cpu machine: only its bytes mean something
        m->peak_flops = 1e11;
        m->mem_bw = 1e10;
        m->memory = 64e9;
    }
}

// The machine's build (plan/plan_machine.h, gpu_build) picks the layout.
static void plan_fill_build(PlanModel* pm, const ParamLayout* layout, PlanMachine* m, int is_cpu) {
    if (m->gpu_build) plan_fill_gpu_build(pm, layout, m, is_cpu);
    else plan_fill_cpu_build(pm, layout, m, is_cpu);
}

int main(int argc, char** argv) {
    TrainRun run; // the trainers' flags and checks (train/train_setup.h); --plan starts no rank
    train_run_start(&run, &argc, &argv);
    if (run.args.plan_machine == NULL) {
        fprintf(stderr, "error: plan_gpt2: no --plan MACHINE; expected --plan h100, h200 or cpu[,key=value...] (e.g. --plan h100 -e d12 -b 64 -t 1024 -np 8)\n");
        return 1;
    }
    return plan_run(&run.args, plan_fill_build);
}
