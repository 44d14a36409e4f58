/*
 * test_gpt2.c: the CPU model against the PyTorch reference state (dev/reference/, made by
 * dev/make_reference.py in float64): logits, loss, every parameter gradient, and 10 AdamW steps
 * (loss and grad norm before each update, final parameters). Prints one PASS/FAIL line per check.
 *
 * Tolerances are set from the error measured against the float64 reference (fp32 arithmetic,
 * L=2, C=64, T=32, V=1000), with headroom of about 10x so that a different BLAS kernel or
 * summation order still passes while a real bug (a wrong sign, a missing term, a transposed
 * weight: errors of order the values themselves) fails. The measured values are printed.
 */
#define TESTING
#include "train_gpt2.c"
#include "common/reference_state.h"
#include "common/test_report.h"


// Max |a - b| over n elements, and max |b| (to state errors relative to the tensor's scale).
static double max_abs_diff(const float* a, const float* b, size_t n, double* max_ref) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e; // also catches NaN
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    if (max_ref) *max_ref = m;
    return d;
}

int main(int argc, char** argv) {
    const char* model_path = argc > 1 ? argv[1] : "dev/reference/gpt2_ref_model.bin";
    const char* state_path = argc > 2 ? argv[2] : "dev/reference/gpt2_ref_state.bin";
    ReferenceState ref;
    reference_state_load(&ref, state_path);
    int B = ref.B, T = ref.T, V = ref.V, Vp = ref.Vp;

    GPT2 model;
    gpt2_build(&model, model_path, B, T, 0, 0, 1, NULL);
    const ParamLayout* layout = &model.layout;
    if (layout->num_parameters != ref.num_parameters) {
        printf("FAIL parameter_count: model %zu, reference %zu\n", layout->num_parameters, ref.num_parameters);
        return 1;
    }

    // Forward: logits (only the V real columns; training never holds them all, gpt2_full_logits
    // computes them chunk by chunk) and the mean loss (from the chunks' online softmax).
    gpt2_forward(&model, ref.inputs, ref.targets, B, T);
    float* logits = (float*)zero_calloc((size_t)B * T * Vp, sizeof(float), "test logits");
    gpt2_full_logits(&model, logits, B, T);
    double logits_err = 0.0;
    for (int bt = 0; bt < B * T; bt++) {
        double e = max_abs_diff(logits + (size_t)bt * Vp, ref.logits + (size_t)bt * V, (size_t)V, NULL);
        if (!(e <= logits_err)) logits_err = e;
    }
    free(logits);
    // Measured 3.0e-7 (logits are O(0.1)): fp32 rounding through 2 layers of C=64 sums.
    report("forward_logits_match_pytorch", logits_err < 3e-6, "max abs err %.3g, tolerance %.2g", logits_err, 3e-6);
    double loss_err = fabs(model.mean_loss - ref.loss);
    // Measured 0 in fp32 (below one ulp of 6.9, 4.8e-7); allow a few ulps for another BLAS.
    report("forward_loss_matches_pytorch", loss_err < 1e-5, "abs err %.3g, tolerance %.2g", loss_err, 1e-5);

    // Backward: every tensor's gradient, compared in llm.c order via the tensor table.
    zero_grads_zero(&model.zero);
    gpt2_backward(&model, ref.targets, B, T, 1.0f / (float)(B * T), 1);
    double worst_rel = 0.0;
    const char* worst_name = "";
    int worst_layer = -1;
    for (int t = 0; t < layout->num_tensors; t++) {
        const ParamTensor* pt = &layout->tensors[t];
        double max_ref;
        double err = max_abs_diff(model.zero.grads + pt->offset, ref.grads + pt->file_offset, pt->numel, &max_ref);
        double rel = err / (max_ref > 0 ? max_ref : 1.0);
        if (!(rel <= worst_rel)) { worst_rel = rel; worst_name = param_kind_names[pt->kind]; worst_layer = pt->layer; }
    }
    // Error relative to each tensor's largest gradient; measured worst 7.1e-7 (fp32 sums over
    // B*T = 128 positions and the Vp = 1024 classifier columns). Bugs show up at O(1).
    printf("  worst gradient: %s (layer %d)\n", worst_name, worst_layer);
    report("backward_all_gradients_match_pytorch", worst_rel < 1e-5, "max rel err %.3g, tolerance %.2g", worst_rel, 1e-5);

    // 10 AdamW steps on the same batch with the reference's hyperparameters.
    AdamWConfig opt = {ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip};
    double step_loss_err = 0.0, step_norm_err = 0.0;
    for (int step = 0; step < ref.num_steps; step++) {
        zero_grads_zero(&model.zero);
        gpt2_forward(&model, ref.inputs, ref.targets, B, T);
        gpt2_backward(&model, ref.targets, B, T, 1.0f / (float)(B * T), 1);
        float norm = zero_optimizer_step(&model.zero, &opt, ref.lr, step + 1);
        double le = fabs(model.mean_loss - ref.step_losses[step]);
        double ne = fabs(norm - ref.step_grad_norms[step]) / ref.step_grad_norms[step];
        printf("  step %2d: loss %.6f (ref %.6f), grad norm %.6f (ref %.6f)\n", step + 1, model.mean_loss,
               ref.step_losses[step], norm, ref.step_grad_norms[step]);
        if (!(le <= step_loss_err)) step_loss_err = le;
        if (!(ne <= step_norm_err)) step_norm_err = ne;
    }
    // Measured: loss error 4.8e-7 (one ulp at 6.0), grad norm relative error 1.1e-6.
    report("adamw_10_step_losses_match_pytorch", step_loss_err < 5e-6, "max abs err %.3g, tolerance %.2g", step_loss_err, 5e-6);
    report("adamw_10_step_grad_norms_match_pytorch", step_norm_err < 1e-5, "max rel err %.3g, tolerance %.2g", step_norm_err, 1e-5);
    double param_err = 0.0;
    for (int t = 0; t < layout->num_tensors; t++) {
        const ParamTensor* pt = &layout->tensors[t];
        double e = max_abs_diff(model.zero.params + pt->offset, ref.final_params + pt->file_offset, pt->numel, NULL);
        if (!(e <= param_err)) param_err = e;
    }
    // Measured 2.4e-5. Adam divides by sqrt(v) + eps, so for weights whose gradients are near
    // eps = 1e-8 the fp32 rounding of g is amplified up to the full step size lr = 1e-3; a real
    // bug moves weights by O(lr) per step, i.e. up to 1e-2 after 10 steps.
    report("adamw_10_step_final_params_match_pytorch", param_err < 2.5e-4, "max abs err %.3g, tolerance %.2g", param_err, 2.5e-4);

    gpt2_free(&model);
    reference_state_free(&ref);
    return test_failures == 0 ? 0 : 1;
}
