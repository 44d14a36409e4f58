/*
 * noise_scale.h: the trainers' gradient noise scale glue (train_gpt2.c and train_gpt2.cu share
 * it): which gradients the ZeRO engine measures, their batch sizes and scales, the meter update
 * after each optimizer step, and the step line's and the log's GNS fields. The meter itself (the
 * estimates and EMAs) is common/gns.h; this file ties it to the engine (zero.cuh), so include it
 * after zero.cuh. Host C, header-only.
 * Source: docs/design.md "Batch-size recipe"; McCandlish et al. 2018, "An Empirical Model of
 * Large-Batch Training", Appendix A.
 */
#ifndef NOISE_SCALE_H
#define NOISE_SCALE_H
#ifndef ZERO_CUH
#error "train/noise_scale.h reads the ZeRO engine's GNS fields; include zero.cuh first"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/gns.h"
#include "common/logger.h" // json_number

// Every step the meter gets the squared norms of two MEAN gradients (loss averaged over that
// batch's own tokens), both before clipping, and their batch sizes in tokens. N = world_size,
// A = grad_accum_steps; backward scales each micro-step's gradient by 1/(B*T*A), so a buffer
// holding k micro-steps' gradients holds k/A times their mean gradient.
//   big:   the reduced global gradient, the mean over all N*A micro-batches: B_big = N*A*B*T
//          tokens (-d); |G_big|^2 is the squared norm zero_optimizer_step computes for clipping.
//   small: a rank's own gradient, which the engine reads unit by unit in zero_grads_unit_ready
//          before the unit's collective, on the micro-steps the trainer flags; summed over units,
//          then averaged over ranks on the global norm's all-reduce. Which gradient that is
//          depends on what the stage keeps:
//
//   stages ranks  measured on        the buffer then holds                  B_small  |G_small|^2
//   0, 1   N > 1  last micro-step    the rank's whole accumulated batch     A*B*T    mean over ranks of |buf|^2
//   0, 1   N = 1  first micro-step   micro-step 0 alone (zeroed before it)  B*T      A^2 |buf|^2
//   2, 3   any    every micro-step   that micro-step alone (working unit)   B*T      mean over the N*A micro-batches
//                                                                                    of A^2 |buf|^2
//
// Where the small batches together make up the big one (every row but the second), the mean of
// their squared norms is at least the squared norm of their mean, so |G_small|^2 >= |G_big|^2
// and the tr(Σ) estimate is >= 0 on every step, not only in expectation. The second row has no
// such bound (one rank, stages 0, 1: backward accumulates later micro-steps in place, so only
// micro-step 0 exists on its own): a gradient spike in another micro-batch gives one strongly
// negative tr(Σ) estimate that can hold B_simple undefined for tens of steps. One rank with
// accumulation therefore measures best with a stage-2/3 binary (build/train_gpt2_z2).
// With A = 1 every row measures the same gradients, so every stage logs the same values; with
// A > 1 stages 0/1 and 2/3 estimate the same B_simple from different small batches.
// One rank without accumulation has one batch size only: no small batch, the meter is off.
// Checkpoints carry the EMAs, so a resume continues the meter (noise_scale_restore).
// When the batch schedule (common/batch_schedule.h) changes A, the small batch keeps its row of
// the table (noise_scale_set_grad_accum): B_big and, in the first row, B_small follow A, and the
// scales are recomputed. The EMAs go on across the change: every step's estimates are unbiased
// estimates of the same |G|^2 and tr(Σ) whatever the two batch sizes were, so averaging steps
// measured at different A is averaging estimates of the same two numbers.

typedef enum { GNS_OFF, GNS_RANK_BATCH, GNS_FIRST_MICRO_BATCH, GNS_EVERY_MICRO_BATCH } GNSSmallBatch;
static const char* const gns_small_batch_names[] = {"off", "rank_batch", "first_micro_batch", "every_micro_batch"};

typedef struct {
    GNSSmallBatch small_batch;   // the table's row (GNS_OFF: no small batch, or -gb -1)
    float ema_beta_flag;         // -gb as given (-1: off)
    int on;                      // small_batch != GNS_OFF
    const char* off_reason;      // why not, when off
    int grad_accum_steps;        // A
    double b_small, b_big;       // tokens
    double small_scale;          // |G_small|^2 = small_scale * the engine's mean over ranks
    double g_small_sq, g_big_sq; // this step's |G_small|^2 and |G_big|^2 (NaN when off)
    GNSMeter meter;
} GradientNoiseScale;

static void noise_scale_setup(GradientNoiseScale* g, float ema_beta, int B, int T, int world_size, int grad_accum_steps,
                              int total_batch_tokens) {
    memset(g, 0, sizeof(*g));
    g->ema_beta_flag = ema_beta;
    double A = grad_accum_steps, micro_batch = (double)B * T;
    g->grad_accum_steps = grad_accum_steps;
    g->b_big = (double)total_batch_tokens;
    g->b_small = micro_batch;
    if (ema_beta < 0.0f) {
        g->small_batch = GNS_OFF;
        g->off_reason = "-gb -1";
    } else if (world_size * grad_accum_steps == 1) {
        g->small_batch = GNS_OFF;
        g->off_reason = "one rank without accumulation has no smaller batch; accumulate with -d > B*T to measure";
    } else if (ZERO_STAGE >= 2) {
        g->small_batch = GNS_EVERY_MICRO_BATCH;
        g->small_scale = A; // A^2 per micro-batch, summed over A micro-steps: / A for the mean
    } else if (world_size > 1) {
        g->small_batch = GNS_RANK_BATCH;
        g->b_small = A * micro_batch;
        g->small_scale = 1.0; // the accumulated buffer is already the mean over the rank's A micro-batches
    } else {
        g->small_batch = GNS_FIRST_MICRO_BATCH;
        g->small_scale = A * A;
    }
    g->on = g->small_batch != GNS_OFF;
    g->g_small_sq = g->g_big_sq = NAN;
    gns_init(&g->meter, ema_beta >= 0.0f ? ema_beta : 0.0);
}

// The batch changed to grad_accum_steps micro-steps (total_batch_tokens): the small batch's
// sizes and scales at the new A, the EMAs unchanged (see the table's notes above).
static void noise_scale_set_grad_accum(GradientNoiseScale* g, int B, int T, int world_size, int grad_accum_steps,
                                       int total_batch_tokens) {
    GNSMeter meter = g->meter;
    noise_scale_setup(g, g->ema_beta_flag, B, T, world_size, grad_accum_steps, total_batch_tokens);
    g->meter = meter;
}

// Resume: continue the meter's EMAs from the checkpoint's (zero_checkpoint_load_state), when
// they were taken with this run's EMA beta; otherwise the meter starts afresh, said on rank 0.
static void noise_scale_restore(GradientNoiseScale* g, const GNSMeter* saved, int rank) {
    if (saved->steps <= 0) return;
    if (saved->ema_beta != g->meter.ema_beta) {
        if (rank == 0)
            printf("gns: the checkpoint's averages used -gb %g, this run %g: the meter starts afresh\n", saved->ema_beta,
                   g->meter.ema_beta);
        return;
    }
    g->meter = *saved;
}

// Does the engine read the rank's local gradient norms on this micro-step? (the table above)
static int noise_scale_measures(const GradientNoiseScale* g, int micro_step) {
    switch (g->small_batch) {
    case GNS_RANK_BATCH: return micro_step == g->grad_accum_steps - 1;
    case GNS_FIRST_MICRO_BATCH: return micro_step == 0;
    case GNS_EVERY_MICRO_BATCH: return 1;
    default: return 0;
    }
}

// After zero_optimizer_step: this step's two squared norms into the meter (see above).
static void noise_scale_step(GradientNoiseScale* g, const ZeroEngine* z) {
    if (!g->on) return;
    g->g_small_sq = g->small_scale * z->gns.local_grad_norm_sq_mean;
    g->g_big_sq = z->gns.grad_norm_sq;
    gns_update(&g->meter, g->g_small_sq, g->b_small, g->g_big_sq, g->b_big); // -1 (non-finite): meter unchanged
}

// The step line's B_simple in tokens: "n/a" when the meter is off, "-" while it is undefined
// (a smoothed |G|^2 or tr(Σ) not yet positive: noise swamps the signal, see gns_update).
static const char* noise_scale_text(const GradientNoiseScale* g, char* buf, size_t cap) {
    if (!g->on) snprintf(buf, cap, "n/a");
    else if (!isfinite(g->meter.b_simple)) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.0f", g->meter.b_simple);
    return buf;
}

// A JSON number with `digits` significant digits, null when not finite (the raw norms get 9:
// B_simple recomputed from the log depends on their difference).
static const char* json_number_digits(char* buf, size_t cap, double x, int digits) {
    if (isfinite(x)) snprintf(buf, cap, "%.*g", digits, x);
    else snprintf(buf, cap, "null");
    return buf;
}

// Rank 0, at start-up: the meter's set-up line (stdout), or why it is off.
static void noise_scale_print_setup(const GradientNoiseScale* gns) {
    static const char* const small_batch_text[] = {"", "each rank's whole batch", "the first micro-batch",
                                                   "every micro-batch of every rank"};
    if (gns->on)
        printf("gns: B_small %.0f tokens (%s) | B_big %.0f tokens (the global batch) | EMA beta %g "
               "| step lines show B_simple in tokens ('-' while undefined)\n", gns->b_small,
               small_batch_text[gns->small_batch], gns->b_big, gns->meter.ema_beta);
    else
        printf("gns: off (%s)\n", gns->off_reason);
}

// The config record's GNS fields (JSON members, no leading comma): the small batch's name from
// the table, B_small and B_big in tokens and the EMA beta (null when off).
static const char* noise_scale_config_fields(char* buf, size_t cap, const GradientNoiseScale* gns) {
    char b_small[32], b_big[32], beta[32];
    snprintf(buf, cap, "\"gns_small_batch\":\"%s\",\"gns_b_small\":%s,\"gns_b_big\":%s,\"gns_beta\":%s",
             gns_small_batch_names[gns->small_batch],
             json_number(b_small, sizeof(b_small), gns->on ? gns->b_small : NAN),
             json_number(b_big, sizeof(b_big), gns->on ? gns->b_big : NAN),
             json_number(beta, sizeof(beta), gns->on ? gns->meter.ema_beta : NAN));
    return buf;
}

// The train record's GNS fields (JSON members, no leading comma): gns_small_sq, gns_big_sq are
// this step's |G_small|^2, |G_big|^2; gns_g2, gns_trace the smoothed |G|^2 and tr(Σ) whose ratio
// is b_simple (tokens); null when off or not finite.
static const char* noise_scale_train_fields(char* buf, size_t cap, const GradientNoiseScale* gns) {
    char small_sq[32], big_sq[32], g2[32], trace[32], b_simple[32];
    snprintf(buf, cap, "\"gns_small_sq\":%s,\"gns_big_sq\":%s,\"gns_g2\":%s,\"gns_trace\":%s,\"b_simple\":%s",
             json_number_digits(small_sq, sizeof(small_sq), gns->g_small_sq, 9),
             json_number_digits(big_sq, sizeof(big_sq), gns->g_big_sq, 9),
             json_number(g2, sizeof(g2), gns->on ? gns->meter.g2_smooth : NAN),
             json_number(trace, sizeof(trace), gns->on ? gns->meter.trace_smooth : NAN),
             json_number(b_simple, sizeof(b_simple), gns->on ? gns->meter.b_simple : NAN));
    return buf;
}

#endif // NOISE_SCALE_H
