/*
 * gns.h: gradient noise scale meter (B_simple) for choosing the batch size.
 * Host C, header-only, libc + libm only; shared by the CPU and CUDA trainers.
 *
 * Source: McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training":
 * section 2 (the simple noise scale B_simple = tr(Σ) / |G|^2) and Appendix A (unbiased estimates
 * of |G|^2 and tr(Σ) from gradient norms measured at two batch sizes).
 *
 * Why two batch sizes are enough. Let G be the true gradient and Σ the per-example gradient
 * covariance. The gradient averaged over B independent examples, G_B, satisfies
 *     E |G_B|^2 = |G|^2 + tr(Σ) / B.
 * Two measurements, at B_small and B_big, give two linear equations in the two unknowns; solving
 * them gives estimates whose expectations are exactly |G|^2 and tr(Σ):
 *     |G|^2  ≈ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
 *     tr(Σ)  ≈ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
 * In a data-parallel trainer both come for free: |G_small|^2 is one rank's local gradient norm
 * (before the all-reduce / reduce-scatter), |G_big|^2 the norm of the reduced global gradient.
 * With one rank, micro-steps of gradient accumulation play the role of the small batches.
 *
 * Each per-step estimate is very noisy (the |G|^2 one is often negative early and late in
 * training), and the ratio of two noisy numbers is biased, so, as the paper recommends, the
 * numerator and denominator are smoothed separately by exponential moving averages and only the
 * smoothed values are divided. The EMAs are bias-corrected like Adam's moments (Kingma & Ba 2015,
 * section 3): ema_t = beta ema_{t-1} + (1 - beta) x_t, reported as ema_t / (1 - beta^t), so a
 * constant input is reported unchanged from the first step instead of ramping up from zero.
 *
 * Units. B_small and B_big may be in any unit (tokens, sequences) as long as both use the same
 * one; B_simple comes out in that unit. The trainers pass TOKENS (B_small = B*T of one rank's
 * micro-batch, B_big = the global batch tokens, -d), so the logged b_simple is in tokens and
 * compares directly with the batch_tokens of a sweep. (Tokens of one sequence are not
 * independent examples, so this is an "effective" per-token noise scale: what matters is that the
 * sweep's batch sizes and b_simple share the unit.)
 *
 * What the caller must pass:
 *   - norms of MEAN gradients: the loss averaged over that batch's own B_small (or B_big) tokens.
 *     If a micro-step's gradient was scaled by 1/grad_accum_steps for accumulation, undo that
 *     scale (multiply the squared norm by grad_accum_steps^2) before passing it.
 *   - norms BEFORE gradient clipping.
 *   - several small batches in one step (one per rank, or one per micro-step): pass the MEAN of
 *     their squared norms as g_small_sq; it is still an unbiased estimate of E|G_small|^2 and has
 *     lower variance than any single one.
 *   - the big batch should be the union of the small ones (as it is in a trainer); the formulas
 *     hold for any two batch sizes of independent examples.
 */
#ifndef GNS_H
#define GNS_H

#include <math.h>

typedef struct {
    double ema_beta;        // EMA decay per step, e.g. 0.99 (about 100 steps of memory)
    long steps;             // updates accepted into the EMAs (t in the bias correction)
    double beta_pow;        // ema_beta^steps, for the bias correction
    double ema_g2;          // raw EMA of the |G|^2 estimates (biased towards 0 for small t)
    double ema_trace;       // raw EMA of the tr(Σ) estimates
    double g2;              // latest per-step estimate of |G|^2 (can be negative: it is noisy)
    double trace;           // latest per-step estimate of tr(Σ)
    double g2_smooth;       // bias-corrected EMA of g2:    ema_g2 / (1 - beta^t)
    double trace_smooth;    // bias-corrected EMA of trace: ema_trace / (1 - beta^t)
    double b_simple;        // trace_smooth / g2_smooth, in the unit of b_small/b_big; NaN when
                            // undefined (see gns_update); JSON writers should print NaN as null
} GNSMeter;

/*
 * Per-step unbiased estimates of |G|^2 and tr(Σ) from the squared norms of mean gradients over
 * b_small and b_big examples (McCandlish et al. 2018, Appendix A).
 * Returns 0, or -1 (outputs untouched) when the inputs cannot give an estimate: a non-finite
 * norm, b_small <= 0, or b_big <= b_small.
 */
static int gns_estimate(double g_small_sq, double b_small, double g_big_sq, double b_big,
                        double* g2, double* trace) {
    if (!isfinite(g_small_sq) || !isfinite(g_big_sq) || !isfinite(b_small) || !isfinite(b_big) ||
        !(b_small > 0.0) || !(b_big > b_small)) {
        return -1;
    }
    *g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small);
    *trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big);
    return 0;
}

// Start a meter; ema_beta in [0, 1): 0 keeps no memory (B_simple from the latest step alone).
static void gns_init(GNSMeter* meter, double ema_beta) {
    meter->ema_beta = ema_beta;
    meter->steps = 0;
    meter->beta_pow = 1.0;
    meter->ema_g2 = 0.0;
    meter->ema_trace = 0.0;
    meter->g2 = NAN;
    meter->trace = NAN;
    meter->g2_smooth = NAN;
    meter->trace_smooth = NAN;
    meter->b_simple = NAN;
}

/*
 * Feed one optimizer step: g_small_sq = |G_small|^2 (mean over the small batches of the step, see
 * the header comment), b_small its batch size; g_big_sq = |G_big|^2 of the global gradient,
 * b_big the global batch size (same unit as b_small). Updates the latest estimates, both EMAs and
 * b_simple. Returns 0, or -1 when the step was rejected (invalid inputs, see gns_estimate, e.g. an
 * overflowed norm): then the meter is left exactly as it was, so one bad step cannot poison the
 * averages, and the caller may log a warning.
 *
 * b_simple is NaN while it is undefined: when the smoothed |G|^2 is <= 0 (noise dominates the
 * signal so much that the estimate of |G|^2 has not settled above zero: the honest reading is
 * "larger than the batch sizes measured", not a number), or when the smoothed tr(Σ) is <= 0
 * (no noise detected yet). It becomes finite again as soon as both smoothed values are positive.
 */
static int gns_update(GNSMeter* meter, double g_small_sq, double b_small, double g_big_sq,
                      double b_big) {
    double g2, trace;
    if (gns_estimate(g_small_sq, b_small, g_big_sq, b_big, &g2, &trace) != 0) { return -1; }
    double beta = meter->ema_beta;
    meter->steps += 1;
    meter->beta_pow *= beta;
    meter->g2 = g2;
    meter->trace = trace;
    meter->ema_g2 = beta * meter->ema_g2 + (1.0 - beta) * g2;
    meter->ema_trace = beta * meter->ema_trace + (1.0 - beta) * trace;
    double correction = 1.0 - meter->beta_pow; // > 0 for beta in [0, 1) and steps >= 1
    meter->g2_smooth = meter->ema_g2 / correction;
    meter->trace_smooth = meter->ema_trace / correction;
    meter->b_simple = (meter->g2_smooth > 0.0 && meter->trace_smooth > 0.0)
                          ? meter->trace_smooth / meter->g2_smooth
                          : NAN;
    return 0;
}

#endif // GNS_H
