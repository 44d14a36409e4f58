/*
 * plan/plan_memory.h: what the planned model is (PlanModel: config, batch, world, the trainer's
 * element sizes) and what each ZeRO stage stores per rank, in bytes. Part of the planner (the overview in plan/plan.h).
 *
 * The bytes are the engine's own: its functions at the layout the engine would build for N ranks
 * (param_layout_build pads each unit to N x ZERO_ALIGN): zero_buffer_numel per buffer,
 * zero_grads_bytes, zero_working_numel, zero_kept_rows_bytes, zero_tied_rows_bytes, zero_ring_buffer_numel
 * (zero/layout.h), and the trainer's own activation sizes (the LM head's logits one vocab chunk
 * of B x T x R at a time). tests/t_66_plan_trace.sh checks them against runs.
 */
#ifndef ZERO_PLAN_MEMORY_H
#define ZERO_PLAN_MEMORY_H
#ifndef ZERO_CUH
#error "plan/plan_memory.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

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
    double flops_per_token;      // the trainer's MFU numerator (6N + 6LCT, gpt2_flops_per_token)
} PlanModel;

// What one stage stores per rank, in bytes, and docs/design.md "Memory per rank" for the engine's state.
typedef struct {
    size_t params, grads, optimizer, working, ring, activations, total;
    size_t state_formula; // zero_state_bytes_formula (fp32) or zero_state_bytes_formula_mixed (GPU)
} PlanBytes;

// Where the plan's rows go as JSON lines ("plan_json {...}", "plan_zeropp_json {...}",
// "plan_offload_json {...}": the numbers, for scripts and tests): -pj FILE, or stdout for -pj -;
// NULL (no -pj): the table only, for people.
static FILE* plan_json_out;

// Bytes as GiB or MiB, for the tables.
static const char* plan_gib(double bytes, char* buf, size_t cap) {
    if (bytes >= 1073741824.0) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

// Bytes per rank of `stage` at `layout` (built for pm->world_size ranks).
static PlanBytes plan_stage_bytes(const PlanModel* pm, const ParamLayout* layout, int stage) {
    PlanBytes b;
    size_t e = (size_t)pm->element_bytes;
    b.params = zero_buffer_numel(layout, stage, ZERO_BUF_PARAMS, pm->has_master) * e;
    b.grads = zero_grads_bytes(layout, stage, pm->has_master); // GPU: bf16 micro-step + fp32 accumulation
    b.optimizer = (zero_buffer_numel(layout, stage, ZERO_BUF_MASTER, pm->has_master) +
                   zero_buffer_numel(layout, stage, ZERO_BUF_ADAM_M, pm->has_master) +
                   zero_buffer_numel(layout, stage, ZERO_BUF_ADAM_V, pm->has_master)) * sizeof(float);
    b.working = zero_working_numel(layout, stage) * e + // and the wte gradient rows stages 2, 3 set aside (B x T of C)
                zero_kept_rows_bytes(stage, (size_t)pm->B * pm->T, pm->config->channels, pm->has_master) +
                // CPU stages 0, 1 with N > 1: the encoder's rows exchange (zero/tied_rows/tied_rows_cpu.h)
                zero_tied_rows_bytes(layout, stage, (size_t)pm->B * pm->T, (size_t)pm->T, pm->config->channels, pm->has_master);
    b.ring = pm->ring_buffer ? zero_ring_buffer_numel(layout, pm->world_size) * e : 0;
    b.activations = pm->activation_bytes;
    b.total = b.params + b.grads + b.optimizer + b.working + b.ring + b.activations;
    b.state_formula = pm->has_master ? zero_state_bytes_formula_mixed(stage, layout->padded_numel, pm->world_size)
                                     : zero_state_bytes_formula(stage, layout->padded_numel, pm->world_size);
    return b;
}

#endif // ZERO_PLAN_MEMORY_H
