/*
 * batch_schedule.h: the total batch of every optimizer step, in tokens: fixed (-d N), grown by the
 * gradient noise scale meter (-d auto), or given by hand (-ds). Host C, header-only, libc + libm
 * only (the unit test includes it alone); shared by train_gpt2.c and train_gpt2.cu through
 * train/train_setup.h. The glue to the engine, the meter and the log is
 * train/batch_schedule_trainer.h.
 *
 * Why grow the batch: the critical batch size grows as the loss falls (McCandlish et al. 2018,
 * "An Empirical Model of Large-Batch Training", sec. 4; Merrill et al. 2025, "Critical Batch Size
 * Revisited", arXiv 2505.23971: it starts near zero and rises, and a batch-size warmup reaches
 * the same loss in fewer steps). A batch well below it wastes steps, well above it wastes tokens;
 * the trainer's meter estimates it every step (B_simple, common/gns.h), so -d auto follows it.
 *
 * Every batch is a whole number of micro-steps: A * B*T*N tokens (N ranks, A micro-steps of
 * gradient accumulation), so a change is a change of A on every rank at once.
 *
 * The rule (-d auto; batch_auto_next): after each finished step, with b = the meter's smoothed
 * B_simple (tokens) and batch the current batch,
 *   - if b is a number and b > factor * batch (-df), the step counts into the window; otherwise
 *     (b smaller, or undefined: '-' on the step line) the window starts over;
 *   - after window (-dw) counted steps in a row the batch grows to the batch the window's
 *     smallest b supports, min(b) / factor, rounded down to whole micro-steps, at least one
 *     micro-step more than now, at most twice the current batch and at most max_tokens (-dm);
 *     then the window starts over. At most doubling: the meter's EMAs hold one gradient spike's
 *     inflated tr(Σ) for tens of steps (docs/results/sweep/README.md), long enough to fill a window with
 *     readings far above where the batch should go; doubling per window still reaches any
 *     B_simple / factor within log2 of the ratio windows.
 *   It never shrinks: B_simple is an estimate of where the efficient batch is heading, and a
 *   gradient spike or a val-loss plateau that lowers it for a while is no reason to give back steps.
 * The factor sets where the batch goes relative to the meter: the batch grows towards
 * B_simple / factor, so factor 1 keeps it at most B_simple and the default 1/16 lets it reach 16 x
 * B_simple: in the CPU experiments of docs/results/batch_schedule/README.md B_simple read 12-35x below the
 * critical batch fitted from fixed-batch sweeps (docs/results/sweep/: 2-9x for d2), and 1/16 with a window
 * of 3 steps came closest to that frontier. Calibrate it for another model with a sweep.
 *
 * The learning rate when the batch changes (-dl): lr = (the -k schedule's lr at the step) *
 * scale(batch / start_tokens), scale = 1 (none), sqrt(r) (sqrt: the Adam rule, Malladi et al.
 * 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms") or r (linear: Goyal et
 * al. 2017, "Accurate, Large Minibatch SGD"), so -l is the learning rate at the first batch.
 *
 * By hand (-ds "STEP:TOKENS,STEP:TOKENS,..."): after STEP finished optimizer steps the batch is
 * TOKENS (the first entry is for step 0). A -d auto run's "batch" records in log.jsonl read back
 * as such a list give the same batch sequence: that is how the tests check the auto rule's runs.
 * Steps count as checkpoints do: "after 40 steps" is model_00000040.bin's state, and its next step
 * is printed as step 41.
 */
#ifndef COMMON_BATCH_SCHEDULE_H
#define COMMON_BATCH_SCHEDULE_H
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/args.h"

typedef enum { BATCH_FIXED, BATCH_AUTO, BATCH_HAND } BatchScheduleKind;
typedef enum { BATCH_LR_NONE, BATCH_LR_SQRT, BATCH_LR_LINEAR } BatchLRRule;
static const char* const batch_schedule_kind_names[] = {"fixed", "auto", "hand"};
static const char* const batch_lr_rule_names[] = {"none", "sqrt", "linear"};

#define BATCH_HAND_MAX_ENTRIES 256

// What a checkpoint carries (common/state_file.h ZS_BATCH_*): the same on every rank.
typedef struct {
    int batch_tokens;        // the batch of the next step (tokens)
    int start_tokens;        // the first batch: the learning-rate rule's reference
    int window_steps;        // auto: steps in a row so far with B_simple > factor * batch
    double window_min;       // auto: the smallest B_simple over those steps (tokens)
    long long tokens_seen;   // tokens trained on so far (the log's "tokens")
} BatchScheduleState;

typedef struct {
    BatchScheduleKind kind;
    int tokens_per_micro_step; // B*T*N: every batch is a whole multiple of it
    int max_tokens;            // auto: -dm
    double factor;             // auto: -df
    int window;                // auto: -dw
    BatchLRRule lr_rule;       // -dl
    int hand_entries;          // by hand: -ds
    int hand_step[BATCH_HAND_MAX_ENTRIES], hand_tokens[BATCH_HAND_MAX_ENTRIES];
    BatchScheduleState state;
} BatchSchedule;

static int batch_lr_rule_from_name(const char* name, BatchLRRule* rule) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, batch_lr_rule_names[i]) == 0) { *rule = (BatchLRRule)i; return 0; }
    return -1;
}

// Micro-steps of gradient accumulation per optimizer step at the current batch.
static int batch_schedule_grad_accum_steps(const BatchSchedule* s) {
    return s->state.batch_tokens / s->tokens_per_micro_step;
}

// The factor the -k schedule's learning rate is multiplied by at the current batch (rule above).
static double batch_schedule_lr_scale(const BatchSchedule* s) {
    double r = (double)s->state.batch_tokens / (double)s->state.start_tokens;
    switch (s->lr_rule) {
    case BATCH_LR_SQRT: return sqrt(r);
    case BATCH_LR_LINEAR: return r;
    default: return 1.0;
    }
}

/*
 * The -d auto rule after one finished step whose smoothed B_simple is b_simple (tokens; NaN when
 * undefined): updates the window and returns the batch of the next step (the current one when it
 * does not grow). The caller makes it the current batch (batch_schedule_trainer.h, after all ranks
 * agree). Pure arithmetic on the state, so every rank that feeds it the same values decides the same.
 */
static int batch_auto_next(BatchSchedule* s, double b_simple) {
    BatchScheduleState* st = &s->state;
    int batch = st->batch_tokens;
    if (!(isfinite(b_simple) && b_simple > s->factor * (double)batch)) {
        st->window_steps = 0;
        return batch;
    }
    st->window_min = st->window_steps == 0 ? b_simple : fmin(st->window_min, b_simple);
    st->window_steps++;
    if (st->window_steps < s->window) return batch;
    st->window_steps = 0;
    if (batch >= s->max_tokens) return batch;
    long long unit = s->tokens_per_micro_step, cap = 2LL * batch < s->max_tokens ? 2LL * batch : s->max_tokens;
    double target = st->window_min / s->factor; // > batch: every step of the window exceeded factor * batch
    if (target >= (double)cap) return (int)cap;
    long long next = (long long)floor(target / (double)unit) * unit;
    if (next <= batch) next = batch + unit;
    return next < cap ? (int)next : (int)cap;
}

// The -ds batch after steps_done finished steps: the last entry at or before it.
static int batch_hand_at(const BatchSchedule* s, int steps_done) {
    int tokens = s->hand_tokens[0];
    for (int i = 1; i < s->hand_entries && s->hand_step[i] <= steps_done; i++) tokens = s->hand_tokens[i];
    return tokens;
}

// The batch of the step after steps_done finished steps (b_simple: the meter's, after that step).
static int batch_schedule_next(BatchSchedule* s, int steps_done, double b_simple) {
    switch (s->kind) {
    case BATCH_AUTO: return batch_auto_next(s, b_simple);
    case BATCH_HAND: return batch_hand_at(s, steps_done);
    default: return s->state.batch_tokens;
    }
}

// The batch a checkpoint after steps_done steps should name, for the resume warning: -d's, or
// -ds's at that step; -1 for -d auto (its batch comes from the checkpoint).
static long long batch_schedule_expected_at(const BatchSchedule* s, int steps_done) {
    if (s->kind == BATCH_AUTO) return -1;
    return s->kind == BATCH_HAND ? batch_hand_at(s, steps_done) : s->state.batch_tokens;
}

// Parse -ds "STEP:TOKENS,..." into s. Returns 0, or -1 with one error line in err.
static int batch_hand_parse(BatchSchedule* s, const char* text, char* err, size_t cap) {
    int unit = s->tokens_per_micro_step;
    const char* expected = "expected STEP:TOKENS pairs separated by commas, steps from 0 and rising, TOKENS a positive multiple of B*T*ranks";
    const char* p = text;
    s->hand_entries = 0;
    while (1) {
        char* end = NULL;
        errno = 0;
        long step = strtol(p, &end, 10);
        if (end == p || *end != ':' || errno || step < 0 || step > INT_MAX) {
            snprintf(err, cap, "error: -ds %s: entry %d does not start with a step >= 0 and ':'; %s", text, s->hand_entries + 1, expected);
            return -1;
        }
        p = end + 1;
        errno = 0;
        long tokens = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || errno || tokens < 1 || tokens > INT_MAX) {
            snprintf(err, cap, "error: -ds %s: entry %d has no positive TOKENS after '%ld:'; %s", text, s->hand_entries + 1, step, expected);
            return -1;
        }
        if (tokens % unit != 0) {
            snprintf(err, cap, "error: -ds %s: %ld tokens (after step %ld) is not a multiple of B*T*ranks = %d; expected multiples of %d",
                     text, tokens, step, unit, unit);
            return -1;
        }
        int n = s->hand_entries;
        if ((n == 0 && step != 0) || (n > 0 && step <= s->hand_step[n - 1])) {
            snprintf(err, cap, "error: -ds %s: entry %d is for step %ld; %s", text, n + 1, step, expected);
            return -1;
        }
        if (n == BATCH_HAND_MAX_ENTRIES) {
            snprintf(err, cap, "error: -ds %s: more than %d entries; expected at most %d", text, BATCH_HAND_MAX_ENTRIES, BATCH_HAND_MAX_ENTRIES);
            return -1;
        }
        s->hand_step[n] = (int)step;
        s->hand_tokens[n] = (int)tokens;
        s->hand_entries = n + 1;
        if (*end == '\0') return 0;
        p = end + 1;
    }
}

/*
 * The schedule from the flags, for B x T micro-batches on world_size ranks: the kind, the first
 * batch and every check of -d, -d auto, -dm, -d0, -df, -dw, -dl, -ds and -x against it.
 * Returns 0, or -1 with one house-style error line in err (the caller prints it from rank 0).
 * Defaults: -d0 is one micro-batch per rank, except on one rank, where it is two micro-steps:
 * one rank without accumulation has only one batch size, so the meter (and so the rule) would
 * have no small batch to compare with.
 */
static int batch_schedule_from_args(BatchSchedule* s, const TrainArgs* a, int B, int T, int world_size, char* err, size_t cap) {
    memset(s, 0, sizeof(*s));
    int unit = B * T * world_size; // checked against INT_MAX / 2 by the caller
    s->tokens_per_micro_step = unit;
    s->factor = a->batch_growth_factor;
    s->window = a->batch_window;
    if (batch_lr_rule_from_name(a->batch_lr_rule, &s->lr_rule) != 0) {
        snprintf(err, cap, "error: -dl %s: unknown learning-rate rule; expected none, sqrt or linear", a->batch_lr_rule);
        return -1;
    }
    int is_auto = a->total_batch_tokens == TOTAL_BATCH_AUTO;
    if (a->batch_schedule != NULL && a->total_batch_tokens != -1) {
        snprintf(err, cap, "error: -ds: given with -d %s; expected one of -d TOKENS, -d auto or -ds STEP:TOKENS,...",
                 is_auto ? "auto" : "TOKENS");
        return -1;
    }
    if (!is_auto && (a->batch_max_tokens != -1 || a->batch_start_tokens != -1)) {
        snprintf(err, cap, "error: %s %d: only with -d auto; expected -d auto as well, or no %s",
                 a->batch_max_tokens != -1 ? "-dm" : "-d0", a->batch_max_tokens != -1 ? a->batch_max_tokens : a->batch_start_tokens,
                 a->batch_max_tokens != -1 ? "-dm" : "-d0");
        return -1;
    }
    // -df, -dw (and -dl) steer a schedule: given without one they would change nothing, silently.
    TrainArgs d;
    train_args_defaults(&d);
    if (!is_auto && (a->batch_growth_factor != d.batch_growth_factor || a->batch_window != d.batch_window)) {
        char value[32];
        if (a->batch_growth_factor != d.batch_growth_factor) snprintf(value, sizeof(value), "-df %g", a->batch_growth_factor);
        else snprintf(value, sizeof(value), "-dw %d", a->batch_window);
        snprintf(err, cap, "error: %s: only with -d auto; expected -d auto as well, or no %.3s", value, value);
        return -1;
    }
    if (!is_auto && a->batch_schedule == NULL && strcmp(a->batch_lr_rule, d.batch_lr_rule) != 0) {
        snprintf(err, cap, "error: -dl %s: the batch never changes; expected -d auto or -ds as well, or no -dl", a->batch_lr_rule);
        return -1;
    }
    if ((is_auto || a->batch_schedule != NULL) && a->max_steps == -1) {
        snprintf(err, cap, "error: -x -1: one epoch is counted in steps of a fixed batch, and %s changes the batch; expected -x STEPS",
                 is_auto ? "-d auto" : "-ds");
        return -1;
    }
    if (a->batch_schedule != NULL) {
        s->kind = BATCH_HAND;
        if (batch_hand_parse(s, a->batch_schedule, err, cap) != 0) return -1;
        s->state.batch_tokens = s->state.start_tokens = s->hand_tokens[0];
        return 0;
    }
    if (!is_auto) {
        s->kind = BATCH_FIXED;
        int total = a->total_batch_tokens == -1 ? unit : a->total_batch_tokens;
        if (total % unit != 0) {
            snprintf(err, cap, "error: -d %d: not a multiple of B*T*ranks = %d*%d*%d = %d; expected a multiple of %d",
                     total, B, T, world_size, unit, unit);
            return -1;
        }
        s->state.batch_tokens = s->state.start_tokens = total;
        return 0;
    }
    s->kind = BATCH_AUTO;
    if (a->gns_beta < 0.0f) {
        snprintf(err, cap, "error: -d auto: the gradient noise scale meter is off (-gb -1) and the schedule reads its B_simple; "
                 "expected -gb in [0, 1)");
        return -1;
    }
    int start = a->batch_start_tokens != -1 ? a->batch_start_tokens : (world_size > 1 ? unit : 2 * unit);
    if (start % unit != 0) {
        snprintf(err, cap, "error: -d0 %d: not a multiple of B*T*ranks = %d*%d*%d = %d; expected a multiple of %d",
                 start, B, T, world_size, unit, unit);
        return -1;
    }
    if (world_size == 1 && start == unit) {
        snprintf(err, cap, "error: -d0 %d: one rank without gradient accumulation gives the noise scale meter no smaller batch; "
                 "expected -d0 >= 2*B*T = %d (the default)", start, 2 * unit);
        return -1;
    }
    if (a->batch_max_tokens == -1) {
        snprintf(err, cap, "error: -d auto: no -dm; expected -dm MAX_TOKENS, a multiple of B*T*ranks = %d, at least -d0 = %d", unit, start);
        return -1;
    }
    if (a->batch_max_tokens < start) {
        snprintf(err, cap, "error: -dm %d: below the starting batch of %d tokens (-d0); expected -dm >= %d", a->batch_max_tokens, start, start);
        return -1;
    }
    if (a->batch_max_tokens % unit != 0) {
        snprintf(err, cap, "error: -dm %d: not a multiple of B*T*ranks = %d*%d*%d = %d; expected a multiple of %d",
                 a->batch_max_tokens, B, T, world_size, unit, unit);
        return -1;
    }
    s->max_tokens = a->batch_max_tokens;
    s->state.batch_tokens = s->state.start_tokens = start;
    return 0;
}

/*
 * Resume after steps_done steps from a checkpoint's schedule state (saved->batch_tokens 0: a file
 * without it). -d auto continues the checkpoint's batch and window; -ds looks its batch up; a fixed
 * batch stays -d. Returns 0, or -1 with one error line in err (a checkpoint batch that this run's
 * micro-batch or -dm cannot hold).
 */
static int batch_schedule_resume(BatchSchedule* s, const BatchScheduleState* saved, int steps_done, char* err, size_t cap) {
    BatchScheduleState* st = &s->state;
    if (s->kind == BATCH_AUTO && saved->batch_tokens > 0) {
        if (saved->batch_tokens % s->tokens_per_micro_step != 0 || saved->batch_tokens > s->max_tokens) {
            snprintf(err, cap, "error: -d auto: the checkpoint at step %d was training at a batch of %d tokens; expected a multiple of "
                     "B*T*ranks = %d within -dm %d (resume with the checkpoint's micro-batch and ranks)", steps_done,
                     saved->batch_tokens, s->tokens_per_micro_step, s->max_tokens);
            return -1;
        }
        st->batch_tokens = saved->batch_tokens;
        st->window_steps = saved->window_steps;
        st->window_min = saved->window_min;
    } else if (s->kind == BATCH_HAND) {
        st->batch_tokens = batch_hand_at(s, steps_done);
    }
    st->tokens_seen = saved->tokens_seen > 0 ? saved->tokens_seen : (long long)steps_done * st->batch_tokens;
    return 0;
}

#endif // COMMON_BATCH_SCHEDULE_H
