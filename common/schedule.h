/*
 * schedule.h: learning-rate schedule: linear warmup, then decay to final_fraction * max_lr.
 * kinds: "cosine" (Loshchilov & Hutter 2017, SGDR, eq. 5 without restarts), "linear", "constant".
 * Steps count from 0; warmup step s (s < warmup) uses max_lr * (s + 1) / warmup.
 */
#ifndef COMMON_SCHEDULE_H
#define COMMON_SCHEDULE_H
#include <math.h>
#include <string.h>

typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT } LRKind;

typedef struct {
    LRKind kind;
    float max_lr;
    int warmup_steps;
    int total_steps;
    float final_fraction; // lr at the last step, as a fraction of max_lr
} LRSchedule;

// Returns 0 and sets *kind for a known name, -1 otherwise.
static inline int lr_kind_from_name(const char* name, LRKind* kind) {
    if (strcmp(name, "cosine") == 0) { *kind = LR_COSINE; return 0; }
    if (strcmp(name, "linear") == 0) { *kind = LR_LINEAR; return 0; }
    if (strcmp(name, "constant") == 0) { *kind = LR_CONSTANT; return 0; }
    return -1;
}

static inline float lr_at_step(const LRSchedule* s, int step) {
    if (step < s->warmup_steps) return s->max_lr * (float)(step + 1) / (float)s->warmup_steps;
    if (s->kind == LR_CONSTANT) return s->max_lr;
    float min_lr = s->max_lr * s->final_fraction;
    int decay_steps = s->total_steps - s->warmup_steps;
    float progress = decay_steps > 0 ? (float)(step - s->warmup_steps) / (float)decay_steps : 1.0f;
    if (progress > 1.0f) progress = 1.0f;
    float coeff = s->kind == LR_COSINE ? 0.5f * (1.0f + cosf(3.14159265358979f * progress)) : 1.0f - progress;
    return min_lr + coeff * (s->max_lr - min_lr);
}

#endif
