/*
 * test_batch_schedule.c: the batch schedule's decision rule and flags (common/batch_schedule.h)
 * on synthetic B_simple series, without a trainer. Prints "PASS <name>" or "FAIL <name>: <why>"
 * per check; exits 1 if any failed.
 *
 * The rule (batch_schedule.h): after each step, b = smoothed B_simple; b > factor * batch counts
 * into the window, anything else (smaller, equal, NaN) restarts it; after `window` counted steps
 * in a row the batch becomes min(max_tokens, 2 * batch, max(batch + unit, floor(min(b over the
 * window) / factor / unit) * unit)) and the window restarts. The expected batches below are worked out by
 * hand from that sentence (comments show the arithmetic); the random series is checked against
 * the properties the rule promises, each tested on the series itself, not on the rule's state.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch_schedule.h"

static int failures = 0;
static void report(int ok, const char* name, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

// A -d auto schedule: unit tokens per micro-step, start and max in tokens.
static BatchSchedule auto_schedule(int unit, int start, int max, double factor, int window) {
    BatchSchedule s;
    memset(&s, 0, sizeof(s));
    s.kind = BATCH_AUTO;
    s.tokens_per_micro_step = unit;
    s.max_tokens = max;
    s.factor = factor;
    s.window = window;
    s.lr_rule = BATCH_LR_SQRT;
    s.state.batch_tokens = s.state.start_tokens = start;
    return s;
}

// Feed series[0..n) (one value per finished step); batches[i] = the batch after step i+1.
static void feed(BatchSchedule* s, const double* series, int n, int* batches) {
    for (int i = 0; i < n; i++) {
        s->state.batch_tokens = batch_schedule_next(s, i + 1, series[i]);
        batches[i] = s->state.batch_tokens;
    }
}

static int same_ints(const int* a, const int* b, int n, char* why, size_t cap) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) { snprintf(why, cap, "after step %d: batch %d, expected %d", i + 1, a[i], b[i]); return 0; }
    return 1;
}

static void test_hand_worked_series(void) {
    char why[256] = "";
    // unit 128, start 256, max 2048, factor 0.5, window 3: the threshold at 256 is 128 tokens.
    BatchSchedule s = auto_schedule(128, 256, 2048, 0.5, 3);
    double series[] = {
        200, 129, 128,      // 128 is not > 128: the window restarts (strict)
        200, NAN, 100,      // NaN (undefined B_simple) restarts it too, and so does a value below
        300, 400, 310,      // 3 in a row, smallest 300: 300/0.5 = 600 -> 4 micro-steps = 512
        300, 300, 300,      // 300 > 0.5*512 = 256, three times: 600 -> 512 = the current: one more micro-step, 640
        400, 1e9, 400,      // 400 > 320: smallest 400 -> 800 -> 6 micro-steps = 768
        100, 50, 10,        // B_simple falls: no change, never shrinks
        5000, 6000, 7000,   // smallest 5000 -> 10000: at most doubling, 1536
        1e9, 1e9, 1e9, 1e9, // > 768 three times: 3072 > max: 2048; then at max it stays
    };
    int expected[] = {
        256, 256, 256,
        256, 256, 256,
        256, 256, 512,
        512, 512, 640,
        640, 640, 768,
        768, 768, 768,
        768, 768, 1536,
        1536, 1536, 2048, 2048,
    };
    int n = (int)(sizeof(series) / sizeof(series[0]));
    int batches[64];
    feed(&s, series, n, batches);
    report(same_ints(batches, expected, n, why, sizeof(why)), "auto_rule_hand_worked_series_grows_exactly_when_expected_at_most_doubling", why);
}

static void test_window_one_and_rounding(void) {
    char why[256] = "";
    // unit 96 (not a power of 2), factor 2, window 1: grows on every step with b > 2 * batch.
    BatchSchedule s = auto_schedule(96, 96, 96 * 50, 2.0, 1);
    double series[] = {
        193,   // > 192: 193/2 = 96.5 -> 1 micro-step = the current: one more, 192
        385,   // > 384: 192.5 -> 2 micro-steps = the current: 288
        2000,  // > 576: 1000 -> floor(1000/96) = 10 -> 960, more than doubling: 576
        1900,  // > 1152: 950 -> 9 micro-steps, 864
        1e7,   // 5e6: doubling, 1728 (max 4800)
    };
    int expected[] = {192, 288, 576, 864, 1728};
    int batches[8];
    feed(&s, series, 5, batches);
    int ok = same_ints(batches, expected, 5, why, sizeof(why));
    for (int i = 0; ok && i < 5; i++)
        if (batches[i] % 96 != 0) { ok = 0; snprintf(why, sizeof(why), "batch %d not a whole number of 96-token micro-steps", batches[i]); }
    report(ok, "auto_rule_rounds_down_to_whole_micro_steps_at_least_one_more", why);
}

// Random B_simple series (a drifting log-normal with NaN gaps and spikes): properties of the rule.
static void test_random_series_properties(void) {
    char why[256] = "";
    const int n = 4000, unit = 64, max = 64 * 40, window = 5;
    const double factor = 0.7;
    BatchSchedule s = auto_schedule(unit, 2 * unit, max, factor, window);
    double* b = (double*)malloc(n * sizeof(double));
    int* batch = (int*)malloc(n * sizeof(int));
    unsigned long long rng = 88172645463325252ull;
    double level = 50.0;
    for (int i = 0; i < n; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        double u = (double)(rng >> 11) / 9007199254740992.0;
        level *= 1.0 + 0.006 * (u - 0.3); // drifts up, as B_simple does over training
        b[i] = u < 0.03 ? NAN : u > 0.98 ? level * 20 : level * (0.5 + u);
    }
    feed(&s, b, n, batch);
    int ok = 1, growths = 0, at_max_steps = 0;
    int previous = 2 * unit, run = 0; // run: values in a row since the last restart, tested on the series
    for (int i = 0; i < n && ok; i++) {
        int exceeded = isfinite(b[i]) && b[i] > factor * previous;
        run = exceeded ? run + 1 : 0;
        if (batch[i] < previous) { ok = 0; snprintf(why, sizeof(why), "shrank after step %d: %d -> %d", i + 1, previous, batch[i]); }
        else if (batch[i] % unit != 0) { ok = 0; snprintf(why, sizeof(why), "batch %d after step %d not a multiple of %d", batch[i], i + 1, unit); }
        else if (batch[i] > max) { ok = 0; snprintf(why, sizeof(why), "batch %d after step %d above max %d", batch[i], i + 1, max); }
        else if (run == window) { // a full window: grows unless at max; to the formula's batch
            double smallest = b[i];
            for (int k = i - window + 1; k <= i; k++) smallest = fmin(smallest, b[k]);
            long long want = (long long)floor(smallest / factor / unit) * unit;
            if (want <= previous) want = previous + unit;
            long long cap = 2LL * previous < max ? 2LL * previous : max;
            if (want > cap || smallest / factor >= cap) want = cap;
            if (previous == max) want = max;
            if (batch[i] != want) { ok = 0; snprintf(why, sizeof(why), "after step %d (full window, smallest %.1f): batch %d, expected %lld", i + 1, smallest, batch[i], want); }
            run = 0;
        } else if (batch[i] != previous) { // no full window: no change
            ok = 0; snprintf(why, sizeof(why), "grew after step %d without %d steps above %.2f x %d in a row (run %d)", i + 1, window, factor, previous, run);
        }
        if (batch[i] > previous) growths++;
        if (batch[i] == max) at_max_steps++;
        previous = batch[i];
    }
    if (ok && (growths < 5 || at_max_steps == 0)) {
        ok = 0; snprintf(why, sizeof(why), "series too tame to test: %d growths, %d steps at max", growths, at_max_steps);
    }
    report(ok, "auto_rule_random_series_grows_only_on_full_windows_at_most_doubling_never_shrinks_respects_max", why);
    free(b);
    free(batch);
}

static void test_lr_scale(void) {
    BatchSchedule s = auto_schedule(128, 256, 4096, 0.5, 3);
    s.state.batch_tokens = 1024;
    double r = 4.0, got[3];
    BatchLRRule rules[3] = {BATCH_LR_NONE, BATCH_LR_SQRT, BATCH_LR_LINEAR};
    for (int i = 0; i < 3; i++) { s.lr_rule = rules[i]; got[i] = batch_schedule_lr_scale(&s); }
    char why[128];
    snprintf(why, sizeof(why), "at 4x the first batch: none %g sqrt %g linear %g; expected 1 2 4", got[0], got[1], got[2]);
    report(got[0] == 1.0 && got[1] == sqrt(r) && got[2] == r, "lr_rule_none_sqrt_linear_scale_by_1_sqrt_r_r", why);
}

static TrainArgs args_with(const char* d, int dm, int d0, float gb, int steps, const char* ds) {
    TrainArgs a;
    train_args_defaults(&a);
    a.B = 4;
    a.T = 16; // 64 tokens per rank and micro-step
    a.total_batch_tokens = d == NULL ? -1 : strcmp(d, "auto") == 0 ? TOTAL_BATCH_AUTO : atoi(d);
    a.batch_max_tokens = dm;
    a.batch_start_tokens = d0;
    a.gns_beta = gb;
    a.max_steps = steps;
    a.batch_schedule = ds;
    return a;
}

// Flags: defaults and one error line each.
static void test_from_args(void) {
    BatchSchedule s;
    char err[1024], why[1200];
    TrainArgs a = args_with("auto", 1024, -1, 0.95f, 10, NULL);
    int rc1 = batch_schedule_from_args(&s, &a, a.B, a.T, 1, err, sizeof(err));
    int one_rank = s.state.batch_tokens;
    int rc2 = batch_schedule_from_args(&s, &a, a.B, a.T, 2, err, sizeof(err));
    int two_ranks = s.state.batch_tokens;
    snprintf(why, sizeof(why), "rc %d %d, first batch %d (1 rank), %d (2 ranks); expected 128 = 2 micro-steps, 128 = 1 per rank", rc1, rc2,
             one_rank, two_ranks);
    report(rc1 == 0 && rc2 == 0 && one_rank == 128 && two_ranks == 128, "d0_default_one_micro_batch_per_rank_two_on_one_rank", why);

    struct { const char* name; TrainArgs a; int world; const char* want; } bad[] = {
        {"dm_below_start", args_with("auto", 64, 128, 0.95f, 10, NULL), 1, "error: -dm 64: below the starting batch of 128 tokens"},
        {"dm_not_multiple", args_with("auto", 1000, -1, 0.95f, 10, NULL), 1, "error: -dm 1000: not a multiple of B*T*ranks = 4*16*1 = 64"},
        {"dm_missing", args_with("auto", -1, -1, 0.95f, 10, NULL), 1, "error: -d auto: no -dm"},
        {"meter_off", args_with("auto", 1024, -1, -1.0f, 10, NULL), 1, "error: -d auto: the gradient noise scale meter is off (-gb -1)"},
        {"one_rank_no_accumulation", args_with("auto", 1024, 64, 0.95f, 10, NULL), 1, "error: -d0 64: one rank without gradient accumulation"},
        {"d0_not_multiple", args_with("auto", 1024, 100, 0.95f, 10, NULL), 2, "error: -d0 100: not a multiple of B*T*ranks = 4*16*2 = 128"},
        {"epoch_steps", args_with("auto", 1024, -1, 0.95f, -1, NULL), 1, "error: -x -1: one epoch is counted in steps of a fixed batch"},
        {"dm_without_auto", args_with("512", 1024, -1, 0.95f, 10, NULL), 1, "error: -dm 1024: only with -d auto"},
        {"hand_with_d", args_with("512", -1, -1, 0.95f, 10, "0:128"), 1, "error: -ds: given with -d TOKENS"},
        {"hand_not_multiple", args_with(NULL, -1, -1, 0.95f, 10, "0:128,5:200"), 1, "error: -ds 0:128,5:200: 200 tokens (after step 5) is not a multiple"},
        {"hand_not_from_0", args_with(NULL, -1, -1, 0.95f, 10, "3:128"), 1, "error: -ds 3:128: entry 1 is for step 3"},
        {"hand_not_rising", args_with(NULL, -1, -1, 0.95f, 10, "0:128,5:256,5:512"), 1, "error: -ds 0:128,5:256,5:512: entry 3 is for step 5"},
        {"hand_malformed", args_with(NULL, -1, -1, 0.95f, 10, "0:128;4:256"), 1, "error: -ds 0:128;4:256: entry 1 has no positive TOKENS"},
        {"fixed_not_multiple", args_with("100", -1, -1, 0.95f, 10, NULL), 1, "error: -d 100: not a multiple of B*T*ranks"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int rc = batch_schedule_from_args(&s, &bad[i].a, bad[i].a.B, bad[i].a.T, bad[i].world, err, sizeof(err));
        char name[128];
        snprintf(name, sizeof(name), "bad_flags_%s_one_error_line", bad[i].name);
        snprintf(why, sizeof(why), "rc %d, message '%s'; expected -1 and '%s...'", rc, err, bad[i].want);
        report(rc == -1 && strncmp(err, bad[i].want, strlen(bad[i].want)) == 0 && strchr(err, '\n') == NULL &&
               strstr(err, "; expected") != NULL, name, why);
    }
    // -df, -dw, -dl steer a schedule: without one (a fixed -d; -dl also with -ds) one error line.
    struct { const char* name; const char* d; const char* ds; float df; int dw; const char* dl; const char* want; } idle[] = {
        {"df_without_auto", "512", NULL, 0.5f, 3, "sqrt", "error: -df 0.5: only with -d auto; expected -d auto as well, or no -df"},
        {"dw_without_auto", NULL, "0:128", 0.0625f, 5, "sqrt", "error: -dw 5: only with -d auto; expected -d auto as well, or no -dw"},
        {"dl_without_schedule", "512", NULL, 0.0625f, 3, "linear", "error: -dl linear: the batch never changes; expected -d auto or -ds"},
    };
    for (size_t i = 0; i < sizeof(idle) / sizeof(idle[0]); i++) {
        TrainArgs b = args_with(idle[i].d, -1, -1, 0.95f, 10, idle[i].ds);
        b.batch_growth_factor = idle[i].df;
        b.batch_window = idle[i].dw;
        b.batch_lr_rule = idle[i].dl;
        err[0] = '\0';
        int rc = batch_schedule_from_args(&s, &b, b.B, b.T, 1, err, sizeof(err));
        char name[128];
        snprintf(name, sizeof(name), "bad_flags_%s_one_error_line", idle[i].name);
        snprintf(why, sizeof(why), "rc %d, message '%s'; expected -1 and '%s...'", rc, err, idle[i].want);
        report(rc == -1 && strncmp(err, idle[i].want, strlen(idle[i].want)) == 0 && strchr(err, '\n') == NULL, name, why);
    }
    TrainArgs hand_dl = args_with(NULL, -1, -1, 0.95f, 10, "0:128,4:256");
    hand_dl.batch_lr_rule = "linear";
    report(batch_schedule_from_args(&s, &hand_dl, hand_dl.B, hand_dl.T, 1, err, sizeof(err)) == 0, "dl_with_hand_schedule_accepted", err);
}

// -ds: parse and look-up; resume restores each kind's batch.
static void test_hand_and_resume(void) {
    BatchSchedule s;
    char err[512], why[700];
    TrainArgs a = args_with(NULL, -1, -1, 0.95f, 30, "0:64,4:192,10:128");
    int rc = batch_schedule_from_args(&s, &a, a.B, a.T, 1, err, sizeof(err));
    int want[] = {64, 64, 64, 64, 192, 192, 192, 192, 192, 192, 128, 128};
    int ok = rc == 0 && s.kind == BATCH_HAND && s.state.batch_tokens == 64;
    for (int k = 0; ok && k < 12; k++)
        if (batch_hand_at(&s, k) != want[k]) { ok = 0; snprintf(why, sizeof(why), "after %d steps %d, expected %d", k, batch_hand_at(&s, k), want[k]); }
    if (rc != 0) snprintf(why, sizeof(why), "%s", err);
    report(ok, "hand_schedule_parses_and_gives_the_last_entry_at_or_before_each_step", why);

    BatchScheduleState saved = {384, 128, 2, 321.5, 99999};
    BatchSchedule au = auto_schedule(64, 128, 1024, 0.5, 3);
    int rc_auto = batch_schedule_resume(&au, &saved, 20, err, sizeof(err));
    BatchScheduleState old_file = {128, 0, 0, 0.0, 0}; // a checkpoint written before the schedule fields
    BatchSchedule au2 = auto_schedule(64, 128, 1024, 0.5, 3);
    batch_schedule_resume(&au2, &old_file, 20, err, sizeof(err));
    int rc_hand = batch_schedule_resume(&s, &saved, 5, err, sizeof(err));
    snprintf(why, sizeof(why), "auto: batch %d window %d min %g tokens %lld; old file tokens %lld; hand: batch %d",
             au.state.batch_tokens, au.state.window_steps, au.state.window_min, au.state.tokens_seen, au2.state.tokens_seen,
             s.state.batch_tokens);
    report(rc_auto == 0 && rc_hand == 0 && au.state.batch_tokens == 384 && au.state.window_steps == 2 && au.state.window_min == 321.5 &&
           au.state.tokens_seen == 99999 && au2.state.tokens_seen == 20 * 128 && s.state.batch_tokens == 192,
           "resume_restores_auto_window_and_batch_hand_lookup_and_tokens", why);
    BatchScheduleState too_big = {2048, 128, 0, 0.0, 1};
    rc = batch_schedule_resume(&au, &too_big, 20, err, sizeof(err));
    report(rc == -1 && strstr(err, "error: -d auto: the checkpoint at step 20 was training at a batch of 2048 tokens") == err,
           "resume_checkpoint_batch_beyond_dm_one_error_line", err);
}

int main(void) {
    test_hand_worked_series();
    test_window_one_and_rounding();
    test_random_series_properties();
    test_lr_scale();
    test_from_args();
    test_hand_and_resume();
    return failures ? 1 : 0;
}
