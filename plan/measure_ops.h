/*
 * measure_ops.h: the seconds this CPU takes for the step's work that is not one of the big GEMMs,
 * measured for the planner's cpu machine (plan/plan_machine.h, plan/plan_compute.h) with the
 * trainer's own ops on the trainer's OpenMP threads, at the model's shapes:
 *   - one layer's forward: 2 LayerNorms, attention (its blocked per-head sgemms, softmax, the
 *     stored B x NH x T x T probabilities), GELU, 2 residual adds; its backward: GELU's,
 *     attention's, 2 LayerNorms';
 *   - the LM head's classifier over the whole vocabulary: the online-softmax statistics of each
 *     vocab chunk's logits (forward) and the dlogits from the recomputed ones (backward), BT x R
 *     at a time as the trainer runs it (R = the largest chunk's rows), scaled by Vp / R;
 *   - per parameter element: AdamW (cpu/adamw.h), the norm's read (cpu/global_norm.h), the
 *     1/world_size averaging (a plain loop, as zero_optimizer_step runs it), and the gradients'
 *     zeroing (memset) before a step.
 * Why measured and not bytes at the streaming rate: these ops run at rates far from the triad's
 * (scalar expf in the classifier, per-head sgemms of 64 rows in attention, OpenMP regions of a few
 * microseconds at small B x T), so a byte count predicts them poorly; the GEMMs stay FLOPs at the
 * measured sgemm rate (plan/measure.h). Rows are capped at 1024 (B reduced, time scaled by B).
 * The best of 5 rounds (the plan runs alone: the best is the machine's rate, noise is slower).
 * About 0.2-0.5 s for d4-d6 at B x T = 128. Host C (fp32).
 */
#ifndef CPU_MEASURE_OPS_H
#define CPU_MEASURE_OPS_H
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/attention.h"
#include "cpu/classifier.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/residual.h"
#include "cpu/adamw.h"
#include "cpu/global_norm.h"

typedef struct {
    double layer_fwd_s, layer_bwd_s; // one layer, all but its 4 GEMMs, at B x T
    double head_fwd_s, head_bwd_s;   // the classifier over all Vp columns, at B x T
    double optimizer_s;              // per owned element: AdamW + the norm's read (+ averaging when world > 1)
    double zero_grads_s;             // per gradient element: the memset before a step
    int rows_measured;               // B' x T actually run (B' = B capped so that B' T <= 1024)
} MeasureOps;

static float* measure_ops_buffer(size_t n, float scale) {
    float* p = (float*)malloc((n > 0 ? n : 1) * sizeof(float));
    if (p == NULL) { fprintf(stderr, "error: out of host memory measuring this CPU's ops (%zu floats)\n", n); exit(1); }
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) p[i] = scale * ((float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f);
    return p;
}

static int measure_ops(int B, int T, int C, int NH, int Vp, int R, int world_size, MeasureOps* out) {
    memset(out, 0, sizeof(*out));
    int Bm = B;
    if ((long long)Bm * T > 1024) Bm = 1024 / T > 0 ? 1024 / T : 1;
    int BT = Bm * T;
    double scale_b = (double)B / Bm;
    out->rows_measured = BT;
    size_t btc = (size_t)BT * C;
    float *x = measure_ops_buffer(btc, 1.0f), *y = measure_ops_buffer(btc, 1.0f), *y2 = measure_ops_buffer(btc, 1.0f);
    float *dx = measure_ops_buffer(btc, 1e-3f), *dy = measure_ops_buffer(btc, 1e-3f);
    float *w = measure_ops_buffer(C, 1.0f), *bias = measure_ops_buffer(C, 1.0f), *dw = measure_ops_buffer(C, 0.0f), *db = measure_ops_buffer(C, 0.0f);
    float *mean = measure_ops_buffer(BT, 0.0f), *rstd = measure_ops_buffer(BT, 1.0f);
    float *qkv = measure_ops_buffer(3 * btc, 1.0f), *dqkv = measure_ops_buffer(3 * btc, 0.0f);
    float *att = measure_ops_buffer((size_t)Bm * NH * T * T, 0.0f);
    float *h = measure_ops_buffer(4 * btc, 1.0f), *hg = measure_ops_buffer(4 * btc, 1.0f), *dh = measure_ops_buffer(4 * btc, 1e-3f);
    float *logits = measure_ops_buffer((size_t)BT * R, 4.0f);
    float *row_max = measure_ops_buffer(BT, 0.0f), *row_sum = measure_ops_buffer(BT, 0.0f), *target = measure_ops_buffer(BT, 0.0f);
    int* targets = (int*)malloc((size_t)BT * sizeof(int));
    if (targets == NULL) { fprintf(stderr, "error: out of host memory measuring this CPU's ops\n"); exit(1); }
    for (int i = 0; i < BT; i++) targets[i] = (int)((i * 7919u) % (unsigned)R);
    size_t n_opt = (size_t)4 << 20; // 64 MiB of p, g, m, v: beyond the caches, as the real buffers are
    float *p = measure_ops_buffer(n_opt, 1e-2f), *g = measure_ops_buffer(n_opt, 1e-3f);
    float *m = measure_ops_buffer(n_opt, 0.0f), *v = measure_ops_buffer(n_opt, 0.0f);
    double best[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    volatile double sink = 0.0;
    for (int round = 0; round < 5; round++) {
        double t0 = omp_get_wtime();
        layernorm_forward(y, mean, rstd, x, w, bias, BT, C);
        attention_forward(y2, att, qkv, Bm, T, C, NH);
        residual_forward(dx, x, y2, btc);
        layernorm_forward(y, mean, rstd, dx, w, bias, BT, C);
        gelu_forward(hg, h, 4 * btc);
        residual_forward(dx, y, y2, btc);
        double t1 = omp_get_wtime();
        gelu_backward(dh, h, hg, 4 * btc);
        layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, BT, C);
        attention_backward(dqkv, dy, qkv, att, Bm, T, C, NH);
        layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, BT, C);
        double t2 = omp_get_wtime();
        classifier_stats_init(row_max, row_sum, target, BT);
        classifier_forward_chunk(logits, row_max, row_sum, target, targets, BT, 0, R, R);
        double t3 = omp_get_wtime();
        classifier_backward_chunk(logits, row_max, row_sum, targets, BT, 0, R, R, 1.0f / BT);
        double t4 = omp_get_wtime();
        // restore the logits' scale (backward overwrote them with dlogits)
        #pragma omp parallel for
        for (size_t i = 0; i < (size_t)BT * R; i++) logits[i] = 4.0f * ((float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f);
        double t5 = omp_get_wtime();
        sink += norm_squared(g, n_opt);
        adamw_update(p, g, m, v, n_opt, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, round + 1);
        if (world_size > 1) { float inv = 1.0f / (float)world_size; for (size_t i = 0; i < n_opt; i++) g[i] *= inv; }
        double t6 = omp_get_wtime();
        memset(g, 0, n_opt * sizeof(float));
        double t7 = omp_get_wtime();
        #pragma omp parallel for
        for (size_t i = 0; i < n_opt; i++) g[i] = 1e-3f * ((float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f);
        double s[6] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5, t7 - t6};
        for (int k = 0; k < 6; k++) if (s[k] < best[k]) best[k] = s[k];
    }
    out->layer_fwd_s = best[0] * scale_b;
    out->layer_bwd_s = best[1] * scale_b;
    out->head_fwd_s = best[2] * scale_b * Vp / R;
    out->head_bwd_s = best[3] * scale_b * Vp / R;
    out->optimizer_s = best[4] / (double)n_opt;
    out->zero_grads_s = best[5] / (double)n_opt;
    float* bufs[] = {x, y, y2, dx, dy, w, bias, dw, db, mean, rstd, qkv, dqkv, att, h, hg, dh, logits, row_max, row_sum, target, p, g, m, v};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
    free(targets);
    (void)sink;
    return 0;
}

#endif // CPU_MEASURE_OPS_H
