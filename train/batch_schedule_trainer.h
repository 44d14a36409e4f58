/*
 * batch_schedule_trainer.h: the batch schedule (common/batch_schedule.h) inside a training run,
 * shared by train_gpt2.c and train_gpt2.cu: the set-up line and config fields, resuming, and after
 * every step the decision, agreed by all ranks, with its step line and log record, and the gradient
 * noise scale meter moved to the new accumulation count. Host C; include after zero.cuh and
 * train/noise_scale.h (it reads the engine's rank and the meter).
 *
 * Every rank must pick the same batch, or the ranks' collectives stop pairing up (ZeRO-3 would
 * wait for an all-gather that never comes). The rule's only input is the meter's smoothed B_simple,
 * and the meter is fed only the two all-reduced squared norms of zero_optimizer_step (the reduced
 * gradient's, and the mean over ranks of the local ones), so every rank holds the same B_simple and
 * decides the same. An all-reduce hands every rank the same bits in practice (NCCL's ring and Open
 * MPI's algorithms do) but MPI does not promise it, so the decision itself, an integer, is agreed
 * in one more collective (the smallest and largest over ranks; -d auto with N > 1 only): every
 * rank takes the smallest, and a disagreement is said on rank 0. The meter must have been updated
 * with the step that just finished (noise_scale_step): an engine that reads norms back late must
 * call this after that read-back, not before.
 */
#ifndef COMMON_BATCH_SCHEDULE_TRAINER_H
#define COMMON_BATCH_SCHEDULE_TRAINER_H
#ifndef NOISE_SCALE_H
#error "include train/noise_scale.h (after zero.cuh) before train/batch_schedule_trainer.h"
#endif
#include "common/batch_schedule.h"
#include "common/logger.h"

// Rank 0, at start-up: the schedule's line (nothing for a fixed batch).
static void batch_schedule_print_setup(const BatchSchedule* s) {
    if (s->kind == BATCH_AUTO)
        printf("batch schedule: auto from %d to at most %d tokens (-dm), by whole micro-steps of %d tokens: grows when the "
               "smoothed B_simple > %g x batch for %d steps in a row, to min(B_simple) / %g (at most doubling); lr x %s(batch / %d) (-dl %s)\n",
               s->state.start_tokens, s->max_tokens, s->tokens_per_micro_step, s->factor, s->window, s->factor,
               s->lr_rule == BATCH_LR_NONE ? "1 " : s->lr_rule == BATCH_LR_SQRT ? "sqrt" : "", s->state.start_tokens,
               batch_lr_rule_names[s->lr_rule]);
    else if (s->kind == BATCH_HAND)
        printf("batch schedule: by hand (-ds), %d entries from %d tokens; lr x %s(batch / %d) (-dl %s)\n", s->hand_entries,
               s->state.start_tokens, s->lr_rule == BATCH_LR_NONE ? "1 " : s->lr_rule == BATCH_LR_SQRT ? "sqrt" : "",
               s->state.start_tokens, batch_lr_rule_names[s->lr_rule]);
}

// The config record's schedule fields (JSON members, no leading comma).
static const char* batch_schedule_config_fields(char* buf, size_t cap, const BatchSchedule* s) {
    snprintf(buf, cap, "\"batch_schedule\":\"%s\",\"batch_start_tokens\":%d,\"batch_max_tokens\":%d,\"batch_growth_factor\":%g,"
             "\"batch_window\":%d,\"batch_lr_rule\":\"%s\"", batch_schedule_kind_names[s->kind], s->state.start_tokens,
             s->kind == BATCH_AUTO ? s->max_tokens : s->state.batch_tokens, s->factor, s->window, batch_lr_rule_names[s->lr_rule]);
    return buf;
}

// Resume after steps_done steps from the checkpoint's schedule state (zero_checkpoint_load_state).
// A checkpoint batch this run cannot hold stops every rank with one error line (rank 0).
static void batch_schedule_restore(BatchSchedule* s, const BatchScheduleState* saved, int steps_done, int rank) {
    char err[512];
    if (batch_schedule_resume(s, saved, steps_done, err, sizeof(err)) != 0) {
        if (rank == 0) fprintf(stderr, "%s\n", err);
        zero_ranks_stop();
        exit(1);
    }
    if (rank == 0 && s->kind != BATCH_FIXED && saved->start_tokens > 0 && saved->start_tokens != s->state.start_tokens)
        printf("warning: the checkpoint's schedule started at %d tokens, this run at %d: the lr rule's reference differs, "
               "training continues, not on the same trajectory\n", saved->start_tokens, s->state.start_tokens);
}

/*
 * After step steps_done finished and the meter took its norms: the batch of the next step. On a
 * change, rank 0 prints one line and logs a "batch" record ("step": steps_done, as -ds reads it),
 * and the meter moves to the new accumulation count. Every rank calls it.
 */
static void batch_schedule_after_step(BatchSchedule* s, ZeroEngine* z, GradientNoiseScale* gns, int steps_done, int B, int T,
                                      Logger* logger) {
    int before = s->state.batch_tokens;
    double b_simple = gns->on ? gns->meter.b_simple : NAN;
    int window = s->state.window_steps + 1; // the auto rule resets the window when it grows: read it first
    double smallest = window == 1 ? b_simple : fmin(s->state.window_min, b_simple);
    int next = batch_schedule_next(s, steps_done, b_simple);
    if (s->kind == BATCH_AUTO && z->world_size > 1) {
        int lo, hi;
        zero_all_reduce_min_max_int(z, next, &lo, &hi, "batch schedule agreement");
        if (lo != hi && z->rank == 0)
            printf("warning: after step %d the ranks' batch rules disagree (%d to %d tokens): all ranks take %d\n", steps_done, lo, hi, lo);
        next = lo;
    }
    if (next == before) return;
    s->state.batch_tokens = next;
    int A = batch_schedule_grad_accum_steps(s);
    noise_scale_set_grad_accum(gns, B, T, z->world_size, A, next);
    double lr_scale = batch_schedule_lr_scale(s);
    if (z->rank == 0) {
        if (s->kind == BATCH_AUTO)
            printf("batch: after step %d: B_simple > %g x %d tokens for %d steps (smallest %.0f): %d -> %d tokens (%d micro-steps), lr x %.4g\n",
                   steps_done, s->factor, before, window, smallest, before, next, A, lr_scale);
        else
            printf("batch: after step %d: %d -> %d tokens (%d micro-steps) by -ds, lr x %.4g\n", steps_done, before, next, A, lr_scale);
        fflush(stdout);
    }
    char b_text[32], small_text[32], big_text[32];
    logger_record(logger, "batch", "\"step\":%d,\"batch_tokens\":%d,\"previous_batch_tokens\":%d,\"grad_accum_steps\":%d,"
                  "\"lr_scale\":%.9g,\"reason\":\"%s\",\"b_simple\":%s,\"gns_b_small\":%s,\"gns_b_big\":%s",
                  steps_done, next, before, A, lr_scale, s->kind == BATCH_AUTO ? "auto" : "hand",
                  json_number(b_text, sizeof(b_text), b_simple), json_number(small_text, sizeof(small_text), gns->on ? gns->b_small : NAN),
                  json_number(big_text, sizeof(big_text), gns->on ? gns->b_big : NAN));
}

#endif // COMMON_BATCH_SCHEDULE_TRAINER_H
