/*
 * op_profile.c: one CPU training step op by op (not a test), beside what the planner charges
 * for each (--plan cpu, plan/plan_compute.h). Builds the model (stage 0, one rank), runs 2 warm-up
 * steps, then times every op of the step with the model's own buffers, in the step's order:
 * layer 0's forward and backward ops (times L), the LM head chunk by chunk (GEMMs, classifier),
 * the encoder, the optimizer's parts; the best of `rounds` for each. Beside it: the plan's
 * estimate of the op, FLOPs at the measured sgemm mix rate (plan/measure.h) and bytes at the
 * measured streaming rate (the model before plan/measure_ops.h), and the calibrated one
 * (plan/measure_ops.h: the ops measured on their own at these shapes). Wall time: run it on a
 * quiet machine, OMP_NUM_THREADS as the run's.
 * usage: build/op_profile dN B T [rounds]
 */
#define TESTING
#include "train_gpt2.c"
#include "plan/plan.h"        // the planner's model of each op (plan/plan_compute.h)
#include "plan/measure.h"     // the planner's rate measurements (train_gpt2.c no longer carries them)
#include "plan/measure_ops.h"

// Wall time; OP_PROFILE_CPU=1: the process's CPU time instead (with one thread, a loaded machine's
// time slices do not count; with several, OpenMP's spinning does, so only one thread is meaningful).
static int use_cpu_time = 0;
static double now(void) {
    if (!use_cpu_time) return omp_get_wtime();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
#define TIME(acc, stmt) do { double t0_ = now(); stmt; (acc) += now() - t0_; } while (0)

int main(int argc, char** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s dN B T [rounds]\n", argv[0]); return 1; }
    int B = atoi(argv[2]), T = atoi(argv[3]), rounds = argc > 4 ? atoi(argv[4]) : 5;
    GPT2Config probe;
    if (gpt2_config_from_descriptor(argv[1], &probe) != 0 || B < 1 || T < 1 || rounds < 1) { fprintf(stderr, "error: arguments: expected dN B T [rounds]\n"); return 1; }
    use_cpu_time = getenv("OP_PROFILE_CPU") != NULL && atoi(getenv("OP_PROFILE_CPU")) == 1;
    // The planner's rates first (as --plan measures them: before this process runs the model)
    int rows = B * T < 1024 ? B * T : 1024;
    ParamLayout probe_layout;
    param_layout_build(&probe_layout, &probe, 1, ZERO_ALIGN);
    int R = 0;
    for (int k = 0; k < probe_layout.num_wte_units; k++) if ((int)probe_layout.tensors[wte_piece_index(&probe_layout, k)].shape[0] > R) R = (int)probe_layout.tensors[wte_piece_index(&probe_layout, k)].shape[0];
    param_layout_free(&probe_layout);
    double rate = measure_sgemm_flops(rows, probe.channels, probe.padded_vocab_size, R, probe.num_layers);
    double bw = measure_memory_bandwidth();
    { // the plan's GEMM mix again, each shape timed by this profiler's clock (OP_PROFILE_CPU: CPU time)
        MeasureGemms mg;
        measure_gemms_alloc(&mg, rows, probe.channels, probe.padded_vocab_size, R, probe.num_layers);
        double sec[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
        for (int r = 0; r < 3; r++) for (int s = 0; s < 5; s++) { double t0 = now(); measure_gemm(&mg, s); double d = now() - t0; if (d < sec[s]) sec[s] = d; }
        printf("plan's GEMM shapes (fwd+bwd, best of 3, this clock):");
        for (int s = 0; s < 5; s++) printf(" %dx%d %.1f GFLOP/s", mg.shapes[s][0], mg.shapes[s][1], 6.0 * mg.N * mg.shapes[s][0] * mg.shapes[s][1] / sec[s] / 1e9);
        printf(" | mix %.1f GFLOP/s\n", measure_gemm_mix(&mg, sec) / 1e9);
        measure_gemms_free(&mg);
    }
    GPT2 model;
    gpt2_build(&model, argv[1], B, T, 42, 0, 1, NULL);
    const GPT2Config* c = &model.config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size, BT = B * T;
    MeasureOps mo;
    measure_ops(B, T, C, NH, Vp, (int)model.wte_rows_max, 1, &mo);
    int* tokens = (int*)malloc(sizeof(int) * (size_t)(BT + 1));
    Rng rng;
    rng_seed(&rng, 1);
    for (int i = 0; i < BT + 1; i++) tokens[i] = (int)(rng_next(&rng) % (uint64_t)V);
    AdamWConfig opt = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    double step_best = 1e30;
    for (int s = 0; s < 2 + rounds; s++) {
        double t0 = now();
        zero_step_begin(&model.zero, s + 1);
        gpt2_forward(&model, tokens, tokens + 1, B, T);
        gpt2_backward(&model, tokens + 1, B, T, 1.0f / BT, 1);
        zero_optimizer_step(&model.zero, &opt, 1e-4f, s + 1);
        if (s >= 2 && now() - t0 < step_best) step_best = now() - t0;
    }
    enum { LN1, QKV, ATT, ATTPROJ, RES1, LN2, FC, GELU, FCPROJ, RES2,
           B_FCPROJ, B_GELU, B_FC, B_LN2, B_ATTPROJ, B_ATT, B_QKV, B_LN1,
           H_MM, H_CLS, H_MM_RE, H_CLS_B, H_MM_B, ENC, ENC_B, NORM, ADAMW, ZEROG, NOPS };
    const char* names[NOPS] = {"ln1 fwd", "qkv matmul fwd", "attention fwd", "attproj matmul fwd", "residual fwd", "ln2 fwd",
        "fc matmul fwd", "gelu fwd", "fcproj matmul fwd", "residual fwd", "fcproj matmul bwd", "gelu bwd", "fc matmul bwd",
        "ln2 bwd", "attproj matmul bwd", "attention bwd", "qkv matmul bwd", "ln1 bwd", "lm head matmul fwd", "classifier fwd",
        "lm head matmul recompute", "classifier bwd", "lm head matmul bwd", "encoder fwd", "encoder bwd", "grad norm",
        "adamw", "zero grads"};
    double best[NOPS];
    for (int k = 0; k < NOPS; k++) best[k] = 1e30;
    Activations* a = &model.acts;
    BackwardScratch* sc = &model.scratch;
    ParamLayout* layout = &model.layout;
    ZeroEngine* z = &model.zero;
    LayerTensors p = layer_tensors(layout, 0, z->params + layout->units[UNIT_LAYER(0)].offset);
    LayerTensors g = layer_tensors(layout, 0, z->grads + layout->units[UNIT_LAYER(0)].offset);
    int K = layout->num_wte_units;
    size_t n_all = layout->padded_numel;
    for (int r = 0; r < rounds; r++) {
        double t[NOPS] = {0};
        float* resid_in = a->encoded;
        TIME(t[LN1], layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, resid_in, p.ln1w, p.ln1b, BT, C));
        TIME(t[QKV], matmul_forward(a->qkv, a->ln1, p.qkvw, p.qkvb, BT, C, 3 * C));
        TIME(t[ATT], attention_forward(a->atty, a->att, a->qkv, B, T, C, NH));
        TIME(t[ATTPROJ], matmul_forward(a->attproj, a->atty, p.attprojw, p.attprojb, BT, C, C));
        TIME(t[RES1], residual_forward(a->residual2, resid_in, a->attproj, (size_t)BT * C));
        TIME(t[LN2], layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2, p.ln2w, p.ln2b, BT, C));
        TIME(t[FC], matmul_forward(a->fch, a->ln2, p.fcw, p.fcb, BT, C, 4 * C));
        TIME(t[GELU], gelu_forward(a->fch_gelu, a->fch, (size_t)BT * 4 * C));
        TIME(t[FCPROJ], matmul_forward(a->fcproj, a->fch_gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C));
        TIME(t[RES2], residual_forward(a->residual3, a->residual2, a->fcproj, (size_t)BT * C));
        TIME(t[B_FCPROJ], matmul_backward_ex(sc->dfch_gelu, g.fcprojw, g.fcprojb, sc->dresidual, a->fch_gelu, p.fcprojw, BT, 4 * C, C, 0));
        TIME(t[B_GELU], gelu_backward(sc->dfch, a->fch, sc->dfch_gelu, (size_t)BT * 4 * C));
        TIME(t[B_FC], matmul_backward_ex(sc->dln, g.fcw, g.fcb, sc->dfch, a->ln2, p.fcw, BT, C, 4 * C, 0));
        TIME(t[B_LN2], layernorm_backward(sc->dresidual, g.ln2w, g.ln2b, sc->dln, a->residual2, p.ln2w, a->ln2_mean, a->ln2_rstd, BT, C));
        TIME(t[B_ATTPROJ], matmul_backward_ex(sc->datty, g.attprojw, g.attprojb, sc->dresidual, a->atty, p.attprojw, BT, C, C, 0));
        TIME(t[B_ATT], attention_backward(sc->dqkv, sc->datty, a->qkv, a->att, B, T, C, NH));
        TIME(t[B_QKV], matmul_backward_ex(sc->dln, g.qkvw, g.qkvb, sc->dqkv, a->ln1, p.qkvw, BT, C, 3 * C, 0));
        TIME(t[B_LN1], layernorm_backward(sc->dresidual, g.ln1w, g.ln1b, sc->dln, resid_in, p.ln1w, a->ln1_mean, a->ln1_rstd, BT, C));
        classifier_stats_init(a->row_max, a->row_sum, a->target_logit, BT);
        for (int k = 0; k < K; k++) {
            const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
            int row0 = (int)piece->row0, n = (int)piece->shape[0];
            float* wte = z->params + layout->units[wte_unit(layout, k)].offset + piece->unit_offset;
            TIME(t[H_MM], matmul_forward(a->logits, a->lnf, wte, NULL, BT, C, n));
            TIME(t[H_CLS], classifier_forward_chunk(a->logits, a->row_max, a->row_sum, a->target_logit, tokens + 1, BT, row0, n, V));
        }
        for (int k = 0; k < K; k++) {
            const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
            int row0 = (int)piece->row0, n = (int)piece->shape[0];
            float* wte = z->params + layout->units[wte_unit(layout, k)].offset + piece->unit_offset;
            float* dwte = z->grads + layout->units[wte_unit(layout, k)].offset + piece->unit_offset;
            TIME(t[H_MM_RE], matmul_forward(a->logits, a->lnf, wte, NULL, BT, C, n));
            TIME(t[H_CLS_B], classifier_backward_chunk(a->logits, a->row_max, a->row_sum, tokens + 1, BT, row0, n, V, 1.0f / BT));
            TIME(t[H_MM_B], matmul_backward_ex(sc->dln, dwte, NULL, a->logits, a->lnf, wte, BT, C, n, k > 0));
            TIME(t[ENC], encoder_forward_chunk(a->encoded, tokens, wte, row0, n, B, T, C));
            TIME(t[ENC_B], encoder_backward_chunk(dwte, sc->dresidual, tokens, row0, n, B, T, C));
        }
        volatile double sink = 0.0;
        TIME(t[NORM], sink += norm_squared(z->grads, n_all));
        (void)sink;
        TIME(t[ADAMW], adamw_update(z->params, z->grads, z->m, z->v, n_all, 1e-6f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 3 + r));
        TIME(t[ZEROG], memset(z->grads, 0, n_all * sizeof(float)));
        for (int k = 0; k < NOPS; k++) if (t[k] < best[k]) best[k] = t[k];
    }
    // The plan's model of each op (plan/plan_compute.h's terms): GEMM FLOPs at `rate`, bytes at `bw`.
    double e = 4.0, btc = (double)BT * C;
    double gemm[4][2] = {{C, 3.0 * C}, {C, C}, {C, 4.0 * C}, {4.0 * C, C}};
    double plan[NOPS] = {0};
    double att = plan_attention_product_flops(&(PlanModel){.config = c, .B = B, .T = T, .attention_block = 64});
    double att_matrix = att / (2.0 * C) * NH * e;
    int gemm_op[4] = {QKV, ATTPROJ, FC, FCPROJ}, gemm_bop[4] = {B_QKV, B_ATTPROJ, B_FC, B_FCPROJ};
    for (int i = 0; i < 4; i++) { plan[gemm_op[i]] = 2.0 * BT * gemm[i][0] * gemm[i][1] / rate; plan[gemm_bop[i]] = 2.0 * plan[gemm_op[i]]; }
    plan[LN1] = plan[LN2] = 2 * btc * e / bw;
    plan[ATT] = (2.0 * att) / rate + (btc * e * 2 + 2.0 * att_matrix) / bw; // the attention output and the probabilities
    plan[RES1] = plan[RES2] = 3 * btc * e / bw;
    plan[GELU] = 8 * btc * e / bw;
    plan[B_LN1] = plan[B_LN2] = 2 * plan[LN1];
    plan[B_GELU] = 2 * plan[GELU];
    plan[B_ATT] = 4.0 * att / rate + 2.0 * (btc * e * 2 + 2.0 * att_matrix) / bw;
    plan[H_MM] = 2.0 * BT * C * (double)Vp / rate;
    plan[H_CLS] = 2.0 * BT * Vp * e / bw;
    plan[H_MM_RE] = plan[H_MM];
    plan[H_CLS_B] = 3.0 * BT * Vp * e / bw;
    plan[H_MM_B] = 2.0 * plan[H_MM];
    plan[ENC] = plan[ENC_B] = 3 * btc * e / bw;
    plan[NORM] = 4.0 * n_all / bw;
    plan[ADAMW] = 28.0 * n_all / bw;
    plan[ZEROG] = 0.0;
    printf("op_profile %s B %d T %d, %d threads, best of %d | plan rates: sgemm mix %.1f GFLOP/s, stream %.1f GB/s | load %s", argv[1], B, T,
           omp_get_max_threads(), rounds, rate / 1e9, bw / 1e9, "");
    FILE* la = fopen("/proc/loadavg", "r");
    char lbuf[64] = "";
    if (la) { if (fgets(lbuf, sizeof(lbuf), la) == NULL) lbuf[0] = 0; fclose(la); }
    printf("%s", lbuf);
    printf("%-26s %10s %10s %10s %8s\n", "op (per step)", "measured", "plan", "meas/plan", "GFLOP/s");
    double tot_m = 0, tot_p = 0, groups[4][2] = {{0}};
    for (int k = 0; k < NOPS; k++) {
        double mult = k <= B_LN1 ? L : 1; // layer ops: layer 0's, L times
        double m = best[k] * mult, pl = plan[k] * mult;
        double fl = 0.0;
        for (int i = 0; i < 4; i++) { if (k == gemm_op[i]) fl = 2.0 * BT * gemm[i][0] * gemm[i][1]; if (k == gemm_bop[i]) fl = 4.0 * BT * gemm[i][0] * gemm[i][1]; }
        if (k == H_MM || k == H_MM_RE) fl = 2.0 * BT * C * (double)Vp;
        if (k == H_MM_B) fl = 4.0 * BT * C * (double)Vp;
        int grp = (k <= RES2) ? 0 : (k <= B_LN1) ? 1 : (k <= H_MM_B) ? 2 : 3;
        int is_gemm = fl > 0;
        groups[grp][0] += is_gemm ? 0 : m; groups[grp][1] += is_gemm ? 0 : pl;
        tot_m += m; tot_p += pl;
        printf("%-26s %8.2f ms %8.2f ms %9.2fx", names[k], 1e3 * m, 1e3 * pl, pl > 0 ? m / pl : 0.0);
        if (fl > 0) printf(" %8.1f", fl * mult / m / 1e9);
        printf("\n");
    }
    printf("%-26s %8.2f ms %8.2f ms %9.2fx  (full step measured: %.2f ms)\n", "sum", 1e3 * tot_m, 1e3 * tot_p, tot_m / tot_p, 1e3 * step_best);
    const char* gname[4] = {"layer fwd non-GEMM", "layer bwd non-GEMM", "head non-GEMM", "encoder+optimizer"};
    double cal[4] = {mo.layer_fwd_s * L, mo.layer_bwd_s * L, mo.head_fwd_s + mo.head_bwd_s,
                     (mo.optimizer_s + mo.zero_grads_s) * n_all};
    for (int i = 0; i < 4; i++)
        printf("%-26s measured %8.2f ms | plan (bytes) %8.2f ms | calibrated (measure_ops) %8.2f ms%s\n", gname[i], 1e3 * groups[i][0],
               1e3 * groups[i][1], 1e3 * cal[i], i == 3 ? " (optimizer only)" : "");
    return 0;
}
