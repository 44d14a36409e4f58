/*
 * test_gns.c: the gradient noise scale meter (common/gns.h) against synthetic gradients whose
 * |G|^2 and tr(Σ) are known exactly, and its EMA bias correction against closed forms.
 * Prints "PASS <name>" or "FAIL <name>: <why>" per check; exits 1 if any check failed.
 *
 * Synthetic model (McCandlish et al. 2018, section 2 and Appendix A): D-dimensional per-example
 * gradients g_i = G + e_i, e_i ~ N(0, diag(s)), independent. Then tr(Σ) = sum_j s_j and the true
 * simple noise scale is B_simple = tr(Σ) / |G|^2, in examples. Each step draws k = B_big/B_small
 * disjoint small batches of B_small examples; their means are the "per-rank" gradients and the
 * mean of those is the global (big-batch) gradient, exactly as in a data-parallel trainer.
 * Fixed seed, own RNG (xorshift64* + Box-Muller), so the run is reproducible everywhere.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gns.h"

static int failures = 0;
static int verbose = 0; // GNS_TEST_VERBOSE=1: print the measured values after a PASS too

static void report(int ok, const char* name, const char* why) {
    if (ok) {
        if (verbose) { printf("PASS %s (%s)\n", name, why); } else { printf("PASS %s\n", name); }
    } else {
        printf("FAIL %s: %s\n", name, why);
        failures++;
    }
}

// ---------------------------------------------------------------------------------------------
// RNG: xorshift64* (Vigna 2016) for uniforms, Box-Muller for standard normals.

typedef struct { uint64_t state; int have_spare; double spare; } Rng;

static uint64_t rng_next(Rng* rng) {
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

// Uniform in (0, 1): 53 random bits, shifted by half a step so 0 is never returned (log(0)).
static double rng_uniform(Rng* rng) { return ((rng_next(rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double rng_normal(Rng* rng) {
    if (rng->have_spare) {
        rng->have_spare = 0;
        return rng->spare;
    }
    double radius = sqrt(-2.0 * log(rng_uniform(rng)));
    double angle = 2.0 * M_PI * rng_uniform(rng);
    rng->spare = radius * sin(angle);
    rng->have_spare = 1;
    return radius * cos(angle);
}

// ---------------------------------------------------------------------------------------------
// The synthetic problem.

#define DIM 1000
#define TRUE_B_SIMPLE 24.0 // examples; between the batch sizes tested, so both regimes are seen

typedef struct {
    double G[DIM];       // true gradient
    double var[DIM];     // per-dimension noise variance s_j (diagonal Σ)
    double stddev[DIM];
    double g2;           // |G|^2
    double trace;        // tr(Σ) = sum_j s_j
    double sum_var_sq;   // sum_j s_j^2
    double sum_g2_var;   // sum_j G_j^2 s_j
} Problem;

static void problem_init(Problem* p) {
    // Uneven variances and an uneven G, so no formula can pass by accident of isotropy.
    double raw_g2 = 0.0;
    p->trace = 0.0;
    for (int j = 0; j < DIM; j++) {
        p->var[j] = 0.5 + 0.25 * (j % 7);
        p->stddev[j] = sqrt(p->var[j]);
        p->G[j] = (j % 2 ? -1.0 : 1.0) * (1.0 + (j % 5));
        raw_g2 += p->G[j] * p->G[j];
        p->trace += p->var[j];
    }
    double scale = sqrt(p->trace / TRUE_B_SIMPLE / raw_g2); // makes tr(Σ)/|G|^2 = TRUE_B_SIMPLE
    p->g2 = 0.0;
    p->sum_var_sq = 0.0;
    p->sum_g2_var = 0.0;
    for (int j = 0; j < DIM; j++) {
        p->G[j] *= scale;
        p->g2 += p->G[j] * p->G[j];
        p->sum_var_sq += p->var[j] * p->var[j];
        p->sum_g2_var += p->G[j] * p->G[j] * p->var[j];
    }
}

/*
 * One training step's gradient norms: k = b_big / b_small small batches of b_small examples.
 * Out: mean over small batches of |G_small|^2, and |G_big|^2 of the mean of all b_big examples.
 */
static void draw_step(const Problem* p, Rng* rng, int b_small, int b_big, double* g_small_sq,
                      double* g_big_sq) {
    static double small_sum[DIM], big_sum[DIM];
    int k = b_big / b_small;
    memset(big_sum, 0, sizeof(big_sum));
    double small_sq_total = 0.0;
    for (int r = 0; r < k; r++) {
        memset(small_sum, 0, sizeof(small_sum));
        for (int i = 0; i < b_small; i++) {
            for (int j = 0; j < DIM; j++) { small_sum[j] += p->G[j] + p->stddev[j] * rng_normal(rng); }
        }
        double sq = 0.0;
        for (int j = 0; j < DIM; j++) {
            double mean = small_sum[j] / b_small;
            sq += mean * mean;
            big_sum[j] += small_sum[j];
        }
        small_sq_total += sq;
    }
    double big_sq = 0.0;
    for (int j = 0; j < DIM; j++) {
        double mean = big_sum[j] / b_big;
        big_sq += mean * mean;
    }
    *g_small_sq = small_sq_total / k;
    *g_big_sq = big_sq;
}

/*
 * Exact moments of one step's estimates for this Gaussian model (derivation, per dimension j with
 * mean mu = G_j and variance s = s_j; dimensions are independent, so moments add over j):
 *   Let a_1..a_k be the small-batch noise means, a_r ~ N(0, s/b) with b = B_small, B = k b,
 *   c = (1/k) sum_r a_r ~ N(0, s/B) the big-batch noise, Q = sum_r (a_r - c)^2 ~ (s/b) chi2_{k-1},
 *   independent of c (Gaussian sample mean and sample variance are independent).
 *   S = (1/k) sum_r (mu + a_r)^2,  L = (mu + c)^2.   Identity: S - L = Q / k.
 *   trace_hat = (S - L) / (1/b - 1/B) = (Q/k) B / (k - 1) = s chi2_{k-1} / (k - 1)
 *     => E = s,  Var = 2 s^2 / (k - 1).
 *   g2_hat = (B L - b S) / (B - b) = (mu + c)^2 - Q / (k (k - 1))
 *     => E = mu^2 + s/B - (s/B) = mu^2,
 *        Var = 4 mu^2 s / B + 2 (s/B)^2 + 2 (s/B)^2 / (k - 1) = 4 mu^2 s / B + 2 (s/B)^2 k / (k - 1).
 *   Cov(g2_hat, trace_hat) = -Var(Q) b / (k (k - 1)^2) = -2 s^2 / (B k (k - 1)).
 * Summed over j: Var(trace_hat) = 2 sum s_j^2 / (k-1); Var(g2_hat) = 4 sum G_j^2 s_j / B +
 * 2 k sum s_j^2 / ((k-1) B^2); Cov = -2 sum s_j^2 / (B k (k-1)).
 */
typedef struct { double var_g2, var_trace, cov; } EstimateMoments;

static EstimateMoments estimate_moments(const Problem* p, int b_small, int b_big) {
    double k = (double)b_big / b_small, B = b_big;
    EstimateMoments m;
    m.var_trace = 2.0 * p->sum_var_sq / (k - 1.0);
    m.var_g2 = 4.0 * p->sum_g2_var / B + 2.0 * k * p->sum_var_sq / ((k - 1.0) * B * B);
    m.cov = -2.0 * p->sum_var_sq / (B * k * (k - 1.0));
    return m;
}

/*
 * Effective sample count of a bias-corrected EMA after n steps. Its weights are
 * w_t = (1 - beta) beta^(n-t) / (1 - beta^n), t = 1..n, summing to 1; for i.i.d. inputs of
 * variance v the average has variance v sum_t w_t^2 = v / n_eff with
 * sum_t w_t^2 = (1-beta)^2 (1 - beta^(2n)) / ((1 - beta^2)(1 - beta^n)^2)
 *            = (1 - beta)(1 + beta^n) / ((1 + beta)(1 - beta^n)).
 */
static double ema_effective_samples(double beta, long n) {
    double bn = pow(beta, (double)n);
    return (1.0 + beta) * (1.0 - bn) / ((1.0 - beta) * (1.0 + bn));
}

// ---------------------------------------------------------------------------------------------
// Checks on synthetic gradients.

#define STEPS 800
#define EMA_BETA 0.99

static void check_pair(const Problem* p, int b_small, int b_big, uint64_t seed) {
    Rng rng = {seed, 0, 0.0};
    GNSMeter meter, wrong_unit_meter;
    gns_init(&meter, EMA_BETA);
    gns_init(&wrong_unit_meter, EMA_BETA);
    static double g2_hat[STEPS], trace_hat[STEPS];
    for (int t = 0; t < STEPS; t++) {
        double g_small_sq, g_big_sq;
        draw_step(p, &rng, b_small, b_big, &g_small_sq, &g_big_sq);
        gns_update(&meter, g_small_sq, b_small, g_big_sq, b_big);
        // Negative control: the big batch given in a unit twice the small one's (as if b_small
        // were sequences of 2 tokens and b_big tokens). The check below must be able to see it.
        gns_update(&wrong_unit_meter, g_small_sq, b_small, g_big_sq, 2.0 * b_big);
        g2_hat[t] = meter.g2;
        trace_hat[t] = meter.trace;
    }
    EstimateMoments mom = estimate_moments(p, b_small, b_big);
    char name[128], why[512];
    const double N = STEPS;

    // 1. Unbiasedness of the per-step estimates: the plain mean of N i.i.d. estimates has standard
    //    error sqrt(Var/N) with Var from estimate_moments; a 4-sigma band fails by chance with
    //    probability ~6e-5 per quantity (the means are Gaussian to high accuracy: each estimate is
    //    already a sum over DIM=1000 independent dimensions, then averaged over N=800 steps).
    double mean_g2 = 0.0, mean_trace = 0.0;
    for (int t = 0; t < STEPS; t++) { mean_g2 += g2_hat[t] / N; mean_trace += trace_hat[t] / N; }
    double tol_g2 = 4.0 * sqrt(mom.var_g2 / N), tol_trace = 4.0 * sqrt(mom.var_trace / N);
    snprintf(name, sizeof(name), "gns_estimates_unbiased_bsmall%d_bbig%d", b_small, b_big);
    snprintf(why, sizeof(why), "mean |G|^2 estimate %.5g vs true %.5g (tol %.3g); mean tr(Sigma) %.5g vs %.5g (tol %.3g)",
             mean_g2, p->g2, tol_g2, mean_trace, p->trace, tol_trace);
    report(fabs(mean_g2 - p->g2) <= tol_g2 && fabs(mean_trace - p->trace) <= tol_trace, name, why);

    // 2. The derived per-step variances (which the tolerances here rest on) match the sample
    //    variances. For near-Gaussian estimates (see 1) the sample variance of N draws has
    //    relative standard error sqrt(2/(N-1)) = 5.0% at N=800; a 5-sigma band is 25%.
    double var_g2 = 0.0, var_trace = 0.0;
    for (int t = 0; t < STEPS; t++) {
        var_g2 += (g2_hat[t] - mean_g2) * (g2_hat[t] - mean_g2) / (N - 1);
        var_trace += (trace_hat[t] - mean_trace) * (trace_hat[t] - mean_trace) / (N - 1);
    }
    double rel_tol = 5.0 * sqrt(2.0 / (N - 1));
    snprintf(name, sizeof(name), "gns_estimate_variance_matches_derivation_bsmall%d_bbig%d", b_small, b_big);
    snprintf(why, sizeof(why), "Var(|G|^2 est) sample %.4g vs derived %.4g; Var(tr est) sample %.4g vs derived %.4g; rel tol %.2f",
             var_g2, mom.var_g2, var_trace, mom.var_trace, rel_tol);
    report(fabs(var_g2 / mom.var_g2 - 1.0) <= rel_tol && fabs(var_trace / mom.var_trace - 1.0) <= rel_tol,
           name, why);

    // 3. B_simple from the EMAs recovers tr(Σ)/|G|^2. The smoothed values are weighted means with
    //    effective sample count n_eff (ema_effective_samples: ~199 for beta=0.99, N=800). Delta
    //    method for the ratio R = T/G of the two means (Var/Cov per step from estimate_moments):
    //      Var(R_hat) ~= R^2 [Var(T)/T^2 + Var(G)/G^2 - 2 Cov/(T G)] / n_eff
    //      bias(R_hat) ~= R [Var(G)/G^2 - Cov/(T G)] / n_eff     (second-order term of 1/G)
    //    Tolerance: |bias| + 4 sigma (chance failure ~6e-5). It must also be tight enough to matter:
    //    under 10% of R, and the wrong-unit meter must fall outside it (negative control).
    double n_eff = ema_effective_samples(EMA_BETA, STEPS);
    double R = p->trace / p->g2, T = p->trace, G = p->g2;
    double rel_var = (mom.var_trace / (T * T) + mom.var_g2 / (G * G) - 2.0 * mom.cov / (T * G)) / n_eff;
    double bias = R * (mom.var_g2 / (G * G) - mom.cov / (T * G)) / n_eff;
    double tol = fabs(bias) + 4.0 * R * sqrt(rel_var);
    snprintf(name, sizeof(name), "gns_b_simple_recovers_truth_bsmall%d_bbig%d", b_small, b_big);
    snprintf(why, sizeof(why), "b_simple %.5g vs true %.5g, tol %.3g (n_eff %.1f)", meter.b_simple, R, tol, n_eff);
    report(fabs(meter.b_simple - R) <= tol && tol < 0.1 * R, name, why);

    snprintf(name, sizeof(name), "gns_b_simple_detects_unit_mismatch_bsmall%d_bbig%d", b_small, b_big);
    snprintf(why, sizeof(why), "b_small in one unit, b_big in a unit twice as small gave b_simple %.5g, within tol %.3g of true %.5g",
             wrong_unit_meter.b_simple, tol, R);
    report(!(fabs(wrong_unit_meter.b_simple - R) <= tol), name, why);
}

// ---------------------------------------------------------------------------------------------
// Checks of the estimator algebra and the EMA.

// With the exact expected norms E|G_B|^2 = |G|^2 + tr(Σ)/B as input, the estimates are exact.
// Tolerance 1e-12 relative: a handful of double roundings (~1e-16 each) in a well-conditioned
// 2x2 solve (B_big/B_small = 8 here).
static void check_closed_form(void) {
    double g2 = 3.25, trace = 78.0, b_small = 512, b_big = 4096, est_g2 = 0, est_trace = 0;
    int rc = gns_estimate(g2 + trace / b_small, b_small, g2 + trace / b_big, b_big, &est_g2, &est_trace);
    char why[256];
    snprintf(why, sizeof(why), "rc %d, |G|^2 %.17g (want %.17g), tr %.17g (want %.17g)", rc, est_g2, g2, est_trace, trace);
    report(rc == 0 && fabs(est_g2 / g2 - 1) < 1e-12 && fabs(est_trace / trace - 1) < 1e-12,
           "gns_estimate_exact_on_expected_norms", why);
}

// Constant input: the bias-corrected EMA equals the input from step 1 on (the uncorrected EMA
// would read (1-beta) x at step 1). Tolerance 1e-12 relative, not bit-exactness: each step
// rounds a few times, and the EMA forgets old rounding errors at rate beta, so the relative error
// stays near 1/(1-beta) roundings ~ 1000 * 1.1e-16 = 1.1e-13 for beta = 0.999.
static void check_ema_constant_input(void) {
    const double betas[] = {0.0, 0.9, 0.99, 0.999};
    // Inputs whose estimates are g2 = 2, trace = 1536 (b_small 256, b_big 1024) exactly.
    double b_small = 256, b_big = 1024, g2 = 2.0, trace = 1536.0;
    double g_small_sq = g2 + trace / b_small, g_big_sq = g2 + trace / b_big;
    double est_g2, est_trace;
    gns_estimate(g_small_sq, b_small, g_big_sq, b_big, &est_g2, &est_trace);
    int ok = 1;
    char why[256] = "1000 steps each at beta 0, 0.9, 0.99, 0.999 within 1e-12";
    for (int bi = 0; bi < 4 && ok; bi++) {
        GNSMeter meter;
        gns_init(&meter, betas[bi]);
        for (int t = 1; t <= 1000 && ok; t++) {
            gns_update(&meter, g_small_sq, b_small, g_big_sq, b_big);
            if (fabs(meter.g2_smooth / est_g2 - 1) > 1e-12 || fabs(meter.trace_smooth / est_trace - 1) > 1e-12 ||
                fabs(meter.b_simple / (est_trace / est_g2) - 1) > 1e-12 || meter.steps != t) {
                snprintf(why, sizeof(why), "beta %g step %d: smoothed |G|^2 %.17g tr %.17g b_simple %.17g; want %.17g %.17g %.17g",
                         betas[bi], t, meter.g2_smooth, meter.trace_smooth, meter.b_simple, est_g2, est_trace,
                         est_trace / est_g2);
                ok = 0;
            }
        }
    }
    report(ok, "gns_ema_bias_correction_constant_input", why);
}

// Two steps by hand: corrected EMA = (beta(1-beta) x1 + (1-beta) x2) / (1 - beta^2)
// = (beta x1 + x2) / (1 + beta). With b_small = 1, b_big = 2 the estimates are
// g2 = 2 L - S and trace = 2 (S - L), written out here independently of gns_estimate.
static void check_ema_two_steps(void) {
    double beta = 0.9, S1 = 5.0, L1 = 3.0, S2 = 7.0, L2 = 4.5;
    double g2_1 = 2 * L1 - S1, tr_1 = 2 * (S1 - L1), g2_2 = 2 * L2 - S2, tr_2 = 2 * (S2 - L2);
    double want_g2 = (beta * g2_1 + g2_2) / (1 + beta), want_tr = (beta * tr_1 + tr_2) / (1 + beta);
    GNSMeter meter;
    gns_init(&meter, beta);
    gns_update(&meter, S1, 1, L1, 2);
    gns_update(&meter, S2, 1, L2, 2);
    char why[256];
    snprintf(why, sizeof(why), "smoothed |G|^2 %.17g (want %.17g), tr %.17g (want %.17g), latest raw %g %g (want %g %g)",
             meter.g2_smooth, want_g2, meter.trace_smooth, want_tr, meter.g2, meter.trace, g2_2, tr_2);
    // 1e-12: a few roundings, see check_ema_constant_input.
    report(fabs(meter.g2_smooth / want_g2 - 1) < 1e-12 && fabs(meter.trace_smooth / want_tr - 1) < 1e-12 &&
               fabs(meter.b_simple / (want_tr / want_g2) - 1) < 1e-12 && meter.g2 == g2_2 && meter.trace == tr_2,
           "gns_ema_two_steps_closed_form", why);
}

// A fresh meter reports NaN (nothing measured yet), not 0 or garbage.
static void check_fresh_meter(void) {
    GNSMeter meter;
    gns_init(&meter, 0.99);
    char why[128];
    snprintf(why, sizeof(why), "fresh meter: b_simple %g g2_smooth %g steps %ld; want NaN NaN 0", meter.b_simple,
             meter.g2_smooth, meter.steps);
    report(isnan(meter.b_simple) && isnan(meter.g2_smooth) && meter.steps == 0, "gns_fresh_meter_reports_nan", why);
}

// Noise-dominated steps make the |G|^2 estimate negative: b_simple must be NaN (not a negative or
// infinite batch size), nothing crashes, and signal-dominated steps afterwards bring it back.
static void check_negative_g2(void) {
    GNSMeter meter;
    gns_init(&meter, 0.5);
    // |G_big|^2 below (b_small/b_big) |G_small|^2 => negative |G|^2 estimate.
    int rc = gns_update(&meter, 10.0, 100, 0.5, 1000);
    int ok = rc == 0 && meter.g2 < 0 && meter.g2_smooth < 0 && isnan(meter.b_simple);
    char why[256];
    snprintf(why, sizeof(why), "after a negative step: rc %d g2 %g smoothed %g b_simple %g (want NaN)", rc, meter.g2,
             meter.g2_smooth, meter.b_simple);
    if (ok) {
        // g2 = 2, trace = 1000 exactly: (2 + 10, 100) and (2 + 1, 1000).
        for (int t = 0; t < 20; t++) { gns_update(&meter, 12.0, 100, 3.0, 1000); }
        ok = isfinite(meter.b_simple) && fabs(meter.b_simple - 500.0) < 1.0;
        snprintf(why, sizeof(why), "after 20 good steps (beta 0.5): b_simple %g, want ~500", meter.b_simple);
    }
    report(ok, "gns_negative_g2_gives_nan_then_recovers", why);
}

// Invalid inputs (overflowed norm, equal batch sizes, swapped batch sizes, zero batch) are
// rejected with -1 and leave the meter bit-for-bit unchanged.
static void check_invalid_inputs(void) {
    GNSMeter meter, before;
    gns_init(&meter, 0.9);
    gns_update(&meter, 12.0, 100, 3.0, 1000);
    before = meter;
    int all_rejected = 1;
    all_rejected &= gns_update(&meter, INFINITY, 100, 3.0, 1000) == -1;
    all_rejected &= gns_update(&meter, 12.0, 100, NAN, 1000) == -1;
    all_rejected &= gns_update(&meter, 12.0, 1000, 3.0, 1000) == -1;
    all_rejected &= gns_update(&meter, 12.0, 1000, 3.0, 100) == -1;
    all_rejected &= gns_update(&meter, 12.0, 0, 3.0, 1000) == -1;
    all_rejected &= gns_update(&meter, 12.0, -5, 3.0, 1000) == -1;
    int unchanged = memcmp(&meter, &before, sizeof(meter)) == 0;
    report(all_rejected && unchanged, "gns_rejects_invalid_inputs_unchanged",
           !all_rejected ? "an invalid input was accepted" : !unchanged ? "meter changed by a rejected step"
                                                           : "6 invalid inputs rejected, meter unchanged");
}

int main(void) {
    verbose = getenv("GNS_TEST_VERBOSE") != NULL;
    // GNS_TEST_SEED=n reruns the statistical checks on other draws (to see the tolerances hold
    // for seeds other than the committed one); the default is fixed, so the test is reproducible.
    uint64_t seed = getenv("GNS_TEST_SEED") ? strtoull(getenv("GNS_TEST_SEED"), NULL, 10) * 1000003ULL + 1 : 0x9E3779B97F4A7C15ULL;
    Problem problem;
    problem_init(&problem);
    check_closed_form();
    check_ema_constant_input();
    check_ema_two_steps();
    check_fresh_meter();
    check_negative_g2();
    check_invalid_inputs();
    // (B_small, B_big): one example per rank; typical 8 ranks; k = 2 (the noisiest trace estimate:
    // chi2 with one degree of freedom per dimension); big batches far above B_simple.
    static const int pairs[][2] = {{1, 8}, {4, 32}, {16, 32}, {8, 64}};
    for (int i = 0; i < 4; i++) { check_pair(&problem, pairs[i][0], pairs[i][1], seed + (uint64_t)i); }
    return failures ? 1 : 0;
}
