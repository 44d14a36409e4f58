/*
 * test_reference_state.c: internal consistency of the committed PyTorch reference
 * (dev/reference/gpt2_ref_state.bin and gpt2_ref_model.bin, from dev/make_reference.py) before
 * any trainer is compared against it. Each check recomputes a value from other parts of the
 * files (closed-form or a second path) rather than trusting one stored number.
 *
 * Usage: build/test_reference_state [state.bin [model.bin]]   (run from the repo root)
 * Prints "PASS <name>" or "FAIL <name>: <why>" per check; exits 1 if any check fails.
 */
#include <math.h>

#include "common/reference_state.h"

static int failures = 0;

static void report(const char* name, int ok, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static int all_finite(const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) if (!isfinite(x[i])) return 0;
    return 1;
}

// Initial parameters from an llm.c fp32 model file; checks its header against the state.
static float* load_model_params(const char* filename, const ReferenceState* rs, char* why, size_t why_len) {
    FILE* f = fopen(filename, "rb");
    if (!f) { snprintf(why, why_len, "cannot open %s", filename); return NULL; }
    int32_t header[256];
    float* params = (float*)malloc(rs->num_parameters * sizeof(float));
    int ok = params && fread(header, sizeof(int32_t), 256, f) == 256;
    if (!ok) { snprintf(why, why_len, "%s: short header", filename); }
    else if (header[0] != 20240326 || header[1] != 3) {
        snprintf(why, why_len, "%s: magic/version %d/%d, wanted 20240326/3 (llm.c fp32)", filename, header[0], header[1]);
        ok = 0;
    } else if (header[2] != rs->maxT || header[3] != rs->V || header[4] != rs->L || header[5] != rs->NH ||
               header[6] != rs->C || header[7] != rs->Vp) {
        snprintf(why, why_len, "%s: config maxT=%d V=%d L=%d NH=%d C=%d Vp=%d differs from the state's", filename,
                 header[2], header[3], header[4], header[5], header[6], header[7]);
        ok = 0;
    } else if (fread(params, sizeof(float), rs->num_parameters, f) != rs->num_parameters || fgetc(f) != EOF) {
        snprintf(why, why_len, "%s: size is not 1024 + 4 * %zu bytes", filename, rs->num_parameters);
        ok = 0;
    }
    fclose(f);
    if (!ok) { free(params); return NULL; }
    return params;
}

int main(int argc, char** argv) {
    const char* state_path = argc > 1 ? argv[1] : "dev/reference/gpt2_ref_state.bin";
    const char* model_path = argc > 2 ? argv[2] : "dev/reference/gpt2_ref_model.bin";
    ReferenceState rs;
    reference_state_load(&rs, state_path);
    char why[512];
    size_t BT = (size_t)rs.B * (size_t)rs.T, V = (size_t)rs.V, C = (size_t)rs.C;

    // The config and hyperparameters documented in dev/reference/FORMAT.md.
    int config_ok = rs.B == 4 && rs.T == 32 && rs.V == 1000 && rs.Vp == 1024 && rs.L == 2 && rs.NH == 4 &&
                    rs.C == 64 && rs.maxT == 64 && rs.num_steps == 10 && rs.num_parameters == 169728;
    snprintf(why, sizeof(why), "B=%d T=%d V=%d Vp=%d L=%d NH=%d C=%d maxT=%d steps=%d params=%zu", rs.B, rs.T,
             rs.V, rs.Vp, rs.L, rs.NH, rs.C, rs.maxT, rs.num_steps, rs.num_parameters);
    report("reference_config_matches_format_md", config_ok, why);
    int hyper_ok = rs.lr == 1e-3f && rs.beta1 == 0.9f && rs.beta2 == 0.95f && rs.eps == 1e-8f &&
                   rs.weight_decay == 0.1f && rs.grad_clip == 1.0f && rs.clip_eps == 1e-6f && rs.layernorm_eps == 1e-5f;
    snprintf(why, sizeof(why), "lr=%g beta1=%g beta2=%g eps=%g wd=%g clip=%g clip_eps=%g ln_eps=%g", rs.lr, rs.beta1,
             rs.beta2, rs.eps, rs.weight_decay, rs.grad_clip, rs.clip_eps, rs.layernorm_eps);
    report("reference_hyperparameters_match_format_md", hyper_ok, why);

    report("reference_logits_finite", all_finite(rs.logits, BT * V), "non-finite logit");
    report("reference_grads_and_final_params_finite",
           all_finite(rs.grads, rs.num_parameters) && all_finite(rs.final_params, rs.num_parameters) &&
               all_finite(rs.step_losses, (size_t)rs.num_steps) && all_finite(rs.step_grad_norms, (size_t)rs.num_steps),
           "non-finite value");

    // A random init predicts close to uniformly: loss near ln V.
    snprintf(why, sizeof(why), "loss %.6f, ln V %.6f", rs.loss, log((double)V));
    report("reference_loss_near_ln_vocab", fabs(rs.loss - log((double)V)) < 0.5, why);

    // Cross-entropy recomputed in double from the stored logits and targets. Tolerance 1e-5: the
    // float32 storage of the loss (~4e-7 relative at ~6.9) and of the logits (~1e-7 each).
    double loss = 0.0;
    for (size_t i = 0; i < BT; i++) {
        const float* row = rs.logits + i * V;
        double maxv = row[0], sum = 0.0;
        for (size_t v = 1; v < V; v++) if (row[v] > maxv) maxv = row[v];
        for (size_t v = 0; v < V; v++) sum += exp((double)row[v] - maxv);
        loss += maxv + log(sum) - row[rs.targets[i]];
    }
    loss /= (double)BT;
    snprintf(why, sizeof(why), "stored %.7f, from logits %.7f", rs.loss, loss);
    report("reference_loss_matches_logits_cross_entropy", fabs(loss - rs.loss) < 1e-5, why);

    // Step 1 runs on the initial weights and the same batch: its loss is the reference loss.
    snprintf(why, sizeof(why), "step 1 loss %.7f, loss %.7f", rs.step_losses[0], rs.loss);
    report("reference_first_step_loss_is_loss", rs.num_steps > 0 && rs.step_losses[0] == rs.loss, why);

    int decreasing = rs.num_steps > 1;
    for (int s = 1; s < rs.num_steps; s++) {
        if (!(rs.step_losses[s] < rs.step_losses[s - 1])) {
            decreasing = 0;
            snprintf(why, sizeof(why), "step %d loss %.6f >= step %d loss %.6f", s + 1, rs.step_losses[s], s,
                     rs.step_losses[s - 1]);
            break;
        }
    }
    report("reference_step_losses_decrease", decreasing, why);

    // Step 1's pre-clip norm is the norm of the stored gradient. Tolerance 1e-5 relative: float32
    // rounding of ~1.7e5 gradient entries and of the stored norm.
    double sumsq = 0.0;
    for (size_t i = 0; i < rs.num_parameters; i++) sumsq += (double)rs.grads[i] * rs.grads[i];
    double norm = sqrt(sumsq);
    snprintf(why, sizeof(why), "stored %.7f, from grads %.7f", rs.step_grad_norms[0], norm);
    report("reference_first_grad_norm_matches_grads",
           rs.num_steps > 0 && fabs(norm - rs.step_grad_norms[0]) <= 1e-5 * norm, why);

    // wte rows V..Vp-1 are vocabulary padding: never used, so zero gradient and (zero init,
    // decoupled decay of zero, zero Adam update) zero after training. wte is first in llm.c order.
    int padded_zero = 1;
    for (size_t i = V * C; i < (size_t)rs.Vp * C; i++)
        if (rs.grads[i] != 0.0f || rs.final_params[i] != 0.0f) padded_zero = 0;
    report("reference_padded_wte_rows_zero", padded_zero, "non-zero grad or parameter in wte rows V..Vp-1");

    float* initial = load_model_params(model_path, &rs, why, sizeof(why));
    report("reference_model_file_matches_state", initial != NULL, why);
    if (initial) {
        int init_pad_zero = 1;
        for (size_t i = V * C; i < (size_t)rs.Vp * C; i++) if (initial[i] != 0.0f) init_pad_zero = 0;
        report("reference_model_padded_wte_rows_zero", init_pad_zero, "non-zero initial wte row >= V");

        /*
         * Closed-form bound on how far num_steps AdamW steps can move one parameter. By Cauchy-
         * Schwarz, |m_hat_t| / sqrt(v_hat_t) <= r_t = (1-b1)/sqrt(1-b2) * sqrt(sum_{j<t} (b1^2/b2)^j)
         * * sqrt(1-b2^t) / (1-b1^t) for any gradients (eps only shrinks it), so
         * |p_t| <= |p_{t-1}| + lr * (r_t + wd * |p_{t-1}|) (decay assumed on every tensor: an upper
         * bound). Slack 1e-6 absolute covers float32 storage of both files.
         */
        double b1 = rs.beta1, b2 = rs.beta2, lr = rs.lr, wd = rs.weight_decay;
        double r[64], geometric = 0.0;
        int steps = rs.num_steps < 64 ? rs.num_steps : 64;
        for (int t = 1; t <= steps; t++) {
            geometric += pow(b1 * b1 / b2, t - 1);
            r[t - 1] = (1 - b1) / sqrt(1 - b2) * sqrt(geometric) * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
        }
        double max_move = 0.0, worst_excess = -1.0;
        size_t worst = 0;
        for (size_t i = 0; i < rs.num_parameters; i++) {
            double p0 = fabs((double)initial[i]), bound = p0;
            for (int t = 0; t < steps; t++) bound += lr * (r[t] + wd * bound);
            double move = fabs((double)rs.final_params[i] - initial[i]);
            if (move > max_move) max_move = move;
            double excess = move - (bound - p0) - 1e-6;
            if (excess > worst_excess) { worst_excess = excess; worst = i; }
        }
        snprintf(why, sizeof(why), "parameter %zu moved %.3e, beyond the Adam bound by %.3e", worst,
                 fabs((double)rs.final_params[worst] - initial[worst]), worst_excess);
        report("reference_final_params_within_adamw_reach", worst_excess <= 0.0, why);
        // Clipped Adam moves most parameters by about lr per step; no movement means no training.
        snprintf(why, sizeof(why), "largest move %.3e, wanted > lr = %.1e", max_move, lr);
        report("reference_final_params_moved", max_move > lr, why);
        free(initial);
    }

    reference_state_free(&rs);
    return failures ? 1 : 0;
}
