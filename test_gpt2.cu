/*
 * test_gpt2.cu: the GPU model (bf16) against the PyTorch reference state (dev/reference/, made by
 * dev/make_reference.py in float64): logits, loss, every parameter gradient, and 10 AdamW steps
 * (loss and grad norm before each update, final parameters). One PASS/FAIL line per check, the
 * measured error beside its tolerance. Runs as one rank, at the compiled ZeRO stage (with one
 * rank every stage stores its shards in the full layout, so results read back the same way).
 *
 * Tolerances. These are derived, not yet measured (no GPU has run this file); tighten them to
 * ~3x the measured values after the first GPU run, as test_gpt2.c did for fp32.
 * bf16 keeps 8 significant bits: each rounding moves a value by up to 2^-9 of itself. The
 * reference model (L=2, C=64, T=32, Vp=1024) passes through ~25 bf16 roundings of weights and
 * activations between the embedding and the logits; as independent errors they add like a
 * random walk, sqrt(25) * 2^-9 ~ 1% of each activation's scale, and up to a few % for the worst
 * element. So every check is stated relative to the tensor's scale (its max |value| or L2
 * norm), with a bound around 5% where 1% is expected, while the bugs these tests exist for (a
 * transposed weight, a missing term, a wrong sign or scale) give errors of 100%.
 */
#define TESTING
#include "train_gpt2.cu"
#include "common/reference_state.h"
#include "common/test_report.h"

// Measured 1.6e-9 to 2.5e-9 in the emulation (plain, device math, contracted): its cuBLASLt model
// adds a GEMM into C in double. On a GPU cuBLASLt's fp32 epilogue adds one rounding per micro-step:
// 7 * 2^-24 = 4.2e-7 relative in the worst case; 1e-6 (was 1e-5, chosen before measuring).
#define ACCUMULATION_TOLERANCE 1e-6


// Max |a - b|, max |b|, and the L2 norms of (a - b) and b over n elements.
typedef struct { double max_err, max_ref, l2_err, l2_ref; } ErrorStats;
static ErrorStats compare(const float* a, const float* b, size_t n) {
    ErrorStats s = {0.0, 0.0, 0.0, 0.0};
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= s.max_err)) s.max_err = e; // also catches NaN
        if (fabs(b[i]) > s.max_ref) s.max_ref = fabs(b[i]);
        s.l2_err += e * e;
        s.l2_ref += (double)b[i] * b[i];
    }
    s.l2_err = sqrt(s.l2_err);
    s.l2_ref = sqrt(s.l2_ref);
    return s;
}

// The gradient the optimizer reads after backward, the fp32 accumulation (one rank: every stage
// keeps it in the full layout): psi floats into host.
static void read_optimizer_gradient(GPT2* model, float* host, size_t psi) {
    zero_device_synchronize(&model->zero, "gradients"); // the comm stream too: the additions run there
    CUDA_CHECK(cudaMemcpy(host, model->zero.gpu.grads_fp32, psi * sizeof(float), cudaMemcpyDeviceToHost));
}

/*
 * Gradient accumulation over A = 8 micro-steps, each on its own micro-batch (the reference tokens
 * shifted by 37k mod V, so the eight gradients differ), against the exact sum of the same eight
 * gradients: each micro-batch's gradient taken alone (A = 1, loss scale 1/(B*T)) and added in
 * double on the host, times 1/8. The loss scale 1/(8*B*T) is a power of two times 1/(B*T), so
 * every kernel produces exactly 1/8 of the single-step values: the difference is the error of
 * the accumulation alone (what the optimizer reads vs the fp64 sum), per tensor, relative L2.
 */
static void check_gradient_accumulation(GPT2* model, const ReferenceState* ref, float* host) {
    const int A = 8, B = ref->B, T = ref->T, BT = B * T;
    const ParamLayout* layout = &model->layout;
    size_t psi = layout->padded_numel;
    double* exact = (double*)host_alloc(psi * sizeof(double), "exact gradient sum");
    int* inputs = (int*)host_alloc((size_t)BT * sizeof(int), "micro-batch");
    int* targets = (int*)host_alloc((size_t)BT * sizeof(int), "micro-batch");
    for (int k = 0; k < A; k++) {
        for (int i = 0; i < BT; i++) { inputs[i] = (ref->inputs[i] + 37 * k) % ref->V; targets[i] = (ref->targets[i] + 37 * k) % ref->V; }
        zero_step_begin(&model->zero, 1);
        gpt2_forward(model, inputs, targets, B, T, 1.0f / (float)BT, 1.0f);
        gpt2_backward(model, B, T, 1);
        gpt2_take_loss(model);
        read_optimizer_gradient(model, host, psi);
        for (size_t i = 0; i < psi; i++) exact[i] += (double)host[i] / A;
    }
    zero_step_begin(&model->zero, 1);
    for (int k = 0; k < A; k++) {
        for (int i = 0; i < BT; i++) { inputs[i] = (ref->inputs[i] + 37 * k) % ref->V; targets[i] = (ref->targets[i] + 37 * k) % ref->V; }
        gpt2_forward(model, inputs, targets, B, T, 1.0f / (float)(BT * A), 1.0f / A);
        gpt2_backward(model, B, T, k == A - 1);
    }
    gpt2_take_loss(model);
    read_optimizer_gradient(model, host, psi);
    double worst = 0.0;
    const char* worst_name = "";
    for (int t = 0; t < layout->num_tensors; t++) {
        const ParamTensor* pt = &layout->tensors[t];
        double err = 0.0, norm = 0.0;
        for (size_t i = 0; i < pt->numel; i++) {
            double e = host[pt->offset + i] - exact[pt->offset + i];
            err += e * e;
            norm += exact[pt->offset + i] * exact[pt->offset + i];
        }
        double rel = sqrt(err) / (norm > 0 ? sqrt(norm) : 1.0);
        if (!(rel <= worst)) { worst = rel; worst_name = param_kind_names[pt->kind]; }
    }
    printf("  gradient accumulation, %d micro-steps: worst tensor %s\n", A, worst_name);
    // ACCUMULATION_TOLERANCE below, with the measurements.
    report("gradient_accumulation_8_micro_steps_matches_fp64_sum", worst < ACCUMULATION_TOLERANCE,
           "max relative L2 err %.3g, tolerance %.2g", worst, ACCUMULATION_TOLERANCE);
    free(exact); free(inputs); free(targets);
}

int main(int argc, char** argv) {
    const char* model_path = argc > 1 ? argv[1] : "dev/reference/gpt2_ref_model.bin";
    const char* state_path = argc > 2 ? argv[2] : "dev/reference/gpt2_ref_state.bin";
    ReferenceState ref;
    reference_state_load(&ref, state_path);
    int B = ref.B, T = ref.T, V = ref.V, Vp = ref.Vp;

    int rank = 0, world_size = 1;
    zero_ranks_start(&argc, &argv, &rank, &world_size);
    if (world_size != 1) {
        fprintf(stderr, "error: test_gpt2cu runs as one rank; expected no mpirun\n");
        return 1;
    }
    printf("test_gpt2cu: ZeRO stage %d, reference B=%d T=%d V=%d L=%d C=%d\n", ZERO_STAGE, B, T, V, ref.L, ref.C);
    matmul_init();
    GPT2 model;
    gpt2_build(&model, model_path, B, T, 0, rank, world_size, NULL);
    const ParamLayout* layout = &model.layout;
    if (layout->num_parameters != ref.num_parameters) {
        printf("FAIL parameter_count: model %zu, reference %zu\n", layout->num_parameters, ref.num_parameters);
        return 1;
    }
    size_t psi = layout->padded_numel;
    float* host = (float*)host_alloc(((size_t)B * T * Vp > psi ? (size_t)B * T * Vp : psi) * sizeof(float), "readback");

    // Forward without a backward (dloss_scale 0); the logits, which training never holds whole,
    // computed chunk by chunk from the final LayerNorm's output (gpt2_full_logits).
    gpt2_forward(&model, ref.inputs, ref.targets, B, T, 0.0f, 1.0f);
    float loss = gpt2_take_loss(&model);
    gpt2_full_logits(&model, host, B, T);
    double logits_err = 0.0, logits_max = 0.0;
    for (int bt = 0; bt < B * T; bt++) {
        ErrorStats s = compare(host + (size_t)bt * Vp, ref.logits + (size_t)bt * V, (size_t)V);
        if (!(s.max_err <= logits_err)) logits_err = s.max_err;
        if (s.max_ref > logits_max) logits_max = s.max_ref;
    }
    // Logits error relative to the largest logit: ~1% expected (header). Measured 0.40% (4.5e-3
    // of 1.12) in every flavor: plain, device math, contracted, contracted with device math
    // (t_65); 2% allowed (5x; was 5%).
    report("forward_logits_match_pytorch_bf16", logits_err <= 0.02 * logits_max,
           "max abs err %.3g, tolerance %.3g (2%% of max |logit|)", logits_err, 0.02 * logits_max);
    // The loss (~6.9 = log V at init) averages the per-position logsumexp errors, whose signs
    // differ, so it errs far less than a logit. Measured in the emulation (t_65): 4.8e-5, and
    // 7.1e-5 with the device's intrinsic errors and fp32 tensor-core accumulation
    // (EMU_DEVICE_MATH=1), also when contracted (emu.mk EMU_CONTRACT); 1e-3 allowed (14x; was
    // 2e-2, derived before it was measured).
    double loss_err = fabs(loss - ref.loss);
    report("forward_loss_matches_pytorch_bf16", loss_err < 1e-3, "abs err %.3g, tolerance %.1g", loss_err, 1e-3);

    // Backward: every tensor's gradient, in llm.c order via the tensor table.
    zero_step_begin(&model.zero, 1);
    gpt2_forward(&model, ref.inputs, ref.targets, B, T, 1.0f / (float)(B * T), 1.0f);
    gpt2_backward(&model, B, T, 1);
    gpt2_take_loss(&model); // (discarded: resets the accumulator)
    read_optimizer_gradient(&model, host, psi);
    double worst_l2 = 0.0, worst_max = 0.0;
    const char *worst_l2_name = "", *worst_max_name = "";
    for (int t = 0; t < layout->num_tensors; t++) {
        const ParamTensor* pt = &layout->tensors[t];
        ErrorStats s = compare(host + pt->offset, ref.grads + pt->file_offset, pt->numel);
        double l2 = s.l2_err / (s.l2_ref > 0 ? s.l2_ref : 1.0), mx = s.max_err / (s.max_ref > 0 ? s.max_ref : 1.0);
        if (!(l2 <= worst_l2)) { worst_l2 = l2; worst_l2_name = param_kind_names[pt->kind]; }
        if (!(mx <= worst_max)) { worst_max = mx; worst_max_name = param_kind_names[pt->kind]; }
    }
    printf("  worst gradient: %s by relative L2, %s by max error relative to the tensor's max\n", worst_l2_name, worst_max_name);
    // Relative L2 error per tensor: the ~1% scale error of the header (backward has about as
    // many roundings as forward). Measured 0.84% (plain) to 0.88% (contracted, device math); 5%
    // allowed (5.7x).
    report("backward_gradients_match_pytorch_bf16_l2", worst_l2 < 0.05, "max relative L2 err %.3g, tolerance %.2g", worst_l2, 0.05);
    // Worst single element relative to its tensor's largest gradient: small gradients come from
    // sums over B*T = 128 positions that cancel, so an element carries up to sqrt(128) * 2^-9 ~
    // 2% of the terms' scale. Measured 0.89% (plain) to 0.91% (device math, contracted or not);
    // 4% allowed (4.4x, twice that estimate; was 10%).
    report("backward_gradients_match_pytorch_bf16_max", worst_max < 0.04, "max err / max |grad| %.3g, tolerance %.2g", worst_max, 0.04);

    // 10 AdamW steps on the same batch with the reference's hyperparameters. The model's state
    // is still the initial one: the backward above changed only gradients.
    AdamWConfig opt = {ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip};
    double step_loss_err = 0.0, step_norm_err = 0.0;
    for (int step = 0; step < ref.num_steps; step++) {
        zero_step_begin(&model.zero, step + 1);
        gpt2_forward(&model, ref.inputs, ref.targets, B, T, 1.0f / (float)(B * T), 1.0f);
        gpt2_backward(&model, B, T, 1);
        float norm = zero_optimizer_step(&model.zero, &opt, ref.lr, step + 1);
        float step_loss = gpt2_take_loss(&model);
        double le = fabs(step_loss - ref.step_losses[step]);
        double ne = fabs(norm - ref.step_grad_norms[step]) / ref.step_grad_norms[step];
        printf("  step %2d: loss %.6f (ref %.6f), grad norm %.6f (ref %.6f)\n", step + 1, step_loss,
               ref.step_losses[step], norm, ref.step_grad_norms[step]);
        if (!(le <= step_loss_err)) step_loss_err = le;
        if (!(ne <= step_norm_err)) step_norm_err = ne;
    }
    // Losses: the forward error above plus a drift of the trajectory, which the fp32 master
    // weights keep small. Measured (t_65): 8.0e-4, 5.9e-4 with EMU_DEVICE_MATH=1, 7.4e-4
    // contracted, 6.8e-4 contracted with device math; 1e-2 allowed (12x; was 3e-2, derived).
    // Grad norms: the 1% gradient scale error; 5% allowed (measured 6.5e-3, 4.3e-3 with
    // EMU_DEVICE_MATH=1, 5.8e-3 contracted, 8.6e-3 contracted with device math: 5.8x).
    report("adamw_10_step_losses_match_pytorch_bf16", step_loss_err < 1e-2, "max abs err %.3g, tolerance %.1g", step_loss_err, 1e-2);
    report("adamw_10_step_grad_norms_match_pytorch_bf16", step_norm_err < 5e-2, "max rel err %.3g, tolerance %.1g", step_norm_err, 5e-2);

    // Final fp32 master weights. Adam moves every weight by about lr per step whatever the size
    // of its gradient, so where a gradient is below the bf16 noise its direction can be wrong:
    // the worst weight can differ by up to 2 * lr * steps = 2e-2 (allowed: 2.5e-2, which still
    // catches NaN, a wrong lr or decay). The mean error is the meaningful check: most gradients
    // sit far above the noise, so the mean stays ~1% of the lr * steps = 1e-2 total motion.
    // Measured: mean 3.9e-5 to 4.0e-5 (0.4%) in every flavor, 2e-4 (2%, 5x) allowed (was 10%);
    // worst 6.8e-3 to 7.9e-3, under the sign argument's 2e-2 (2.5e-2 allowed, kept).
    zero_device_synchronize(&model.zero, "final parameters");
    CUDA_CHECK(cudaMemcpy(host, model.zero.gpu.master, psi * sizeof(float), cudaMemcpyDeviceToHost));
    double param_max = 0.0, param_sum = 0.0;
    size_t param_count = 0;
    for (int t = 0; t < layout->num_tensors; t++) {
        const ParamTensor* pt = &layout->tensors[t];
        for (size_t i = 0; i < pt->numel; i++) {
            double e = fabs((double)host[pt->offset + i] - (double)ref.final_params[pt->file_offset + i]);
            if (!(e <= param_max)) param_max = e;
            param_sum += e;
        }
        param_count += pt->numel;
    }
    double param_mean = param_sum / (double)param_count;
    double motion = (double)ref.lr * ref.num_steps;
    report("adamw_10_step_final_params_mean_err_bf16", param_mean < 0.02 * motion, "mean abs err %.3g, tolerance %.1g",
           param_mean, 0.02 * motion);
    report("adamw_10_step_final_params_max_err_bf16", param_max < 2.5 * motion, "max abs err %.3g, tolerance %.2g",
           param_max, 2.5 * motion);

    check_gradient_accumulation(&model, &ref, host);

    free(host);
    gpt2_free(&model);
    matmul_destroy();
    reference_state_free(&ref);
    zero_ranks_stop();
    printf("%d failed\n", test_failures);
    return test_failures == 0 ? 0 : 1;
}
