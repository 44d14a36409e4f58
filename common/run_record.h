/*
 * run_record.h: the settings that define a run's trajectory, kept in its checkpoints so that
 * `-y 1` continues with them (a requeued job reruns the same command line, often without the
 * flags of the first launch). Plain C, no MPI.
 *
 * Recorded: -l (peak lr), -k (schedule), -u (warmup steps), -q (final lr fraction), -c (weight
 * decay), -gc (clip norm), -x (steps; -1: one epoch), -d (total batch tokens as given: -1, -2
 * for auto, or a number), -b (micro-batch), -sd (seed). Stored in the state file's header (common/
 * state_file.h, fields ZS_RECORD..ZS_RECORD_SEED, inside the 1024-byte header that has room for
 * them: the file format and size are unchanged; files written before have 0 there, which reads
 * as "no record", and such a checkpoint resumes as before, with the flags given). Floats as
 * their 32-bit patterns, so a value comes back bit for bit.
 *
 * On resume every recorded value replaces the flag's value unless the flag is on the command
 * line; rank 0 prints one line per value that differs from the command line's (taken, or given
 * and kept).
 */
#ifndef COMMON_RUN_RECORD_H
#define COMMON_RUN_RECORD_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "common/args.h"
#include "common/schedule.h"
#include "common/state_file.h"

typedef struct {
    int present;            // 0: the checkpoint holds no record (written before records existed)
    float learning_rate;    // -l
    int lr_schedule;        // -k as LRKind
    int warmup_steps;       // -u
    float final_lr_fraction; // -q
    float weight_decay;     // -c
    float grad_clip;        // -gc
    int max_steps;          // -x
    int total_batch_tokens; // -d (TOTAL_BATCH_AUTO: auto)
    int B;                  // -b
    int seed;               // -sd
} RunRecord;

static int64_t run_record_float_bits(float x) { uint32_t b; memcpy(&b, &x, sizeof(b)); return (int64_t)b; }
static float run_record_bits_float(int64_t b) { uint32_t w = (uint32_t)b; float x; memcpy(&x, &w, sizeof(x)); return x; }

static void run_record_from_args(RunRecord* r, const TrainArgs* a) {
    LRKind kind = LR_COSINE;
    lr_kind_from_name(a->lr_schedule, &kind); // checked in train_args_validate
    *r = (RunRecord){1, a->learning_rate, (int)kind, a->warmup_steps, a->final_lr_fraction, a->weight_decay, a->grad_clip,
                     a->max_steps, a->total_batch_tokens, a->B, a->seed};
}

static void run_record_to_header(const RunRecord* r, int64_t* header) {
    if (!r->present) return;
    header[ZS_RECORD] = 1;
    header[ZS_RECORD_LR] = run_record_float_bits(r->learning_rate);
    header[ZS_RECORD_SCHEDULE] = r->lr_schedule;
    header[ZS_RECORD_WARMUP] = r->warmup_steps;
    header[ZS_RECORD_FINAL_FRACTION] = run_record_float_bits(r->final_lr_fraction);
    header[ZS_RECORD_WEIGHT_DECAY] = run_record_float_bits(r->weight_decay);
    header[ZS_RECORD_CLIP] = run_record_float_bits(r->grad_clip);
    header[ZS_RECORD_MAX_STEPS] = r->max_steps;
    header[ZS_RECORD_BATCH_TOKENS] = r->total_batch_tokens;
    header[ZS_RECORD_B] = r->B;
    header[ZS_RECORD_SEED] = r->seed;
}

static RunRecord run_record_from_header(const int64_t* header) {
    RunRecord r;
    memset(&r, 0, sizeof(r));
    if (header[ZS_RECORD] != 1) return r;
    r.present = 1;
    r.learning_rate = run_record_bits_float(header[ZS_RECORD_LR]);
    r.lr_schedule = (int)header[ZS_RECORD_SCHEDULE];
    r.warmup_steps = (int)header[ZS_RECORD_WARMUP];
    r.final_lr_fraction = run_record_bits_float(header[ZS_RECORD_FINAL_FRACTION]);
    r.weight_decay = run_record_bits_float(header[ZS_RECORD_WEIGHT_DECAY]);
    r.grad_clip = run_record_bits_float(header[ZS_RECORD_CLIP]);
    r.max_steps = (int)header[ZS_RECORD_MAX_STEPS];
    r.total_batch_tokens = (int)header[ZS_RECORD_BATCH_TOKENS];
    r.B = (int)header[ZS_RECORD_B];
    r.seed = (int)header[ZS_RECORD_SEED];
    return r;
}

// Was flag on the command line? (argv is flag/value pairs: train_args_parse accepted it.)
static int run_record_flag_given(int argc, char** argv, const char* flag) {
    for (int i = 1; i + 1 < argc; i += 2)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

static const char* run_record_schedule_name(int kind) {
    return kind == LR_LINEAR ? "linear" : kind == LR_CONSTANT ? "constant" : "cosine";
}

/*
 * Resume: the record's values into a (each flag not on the command line, argc/argv as given);
 * rank 0 (print) says one line per value that differs from what the command line had. A record
 * not present changes nothing. Returns how many values differ.
 */
static int run_record_apply(const RunRecord* r, TrainArgs* a, int argc, char** argv, int print) {
    if (!r->present) return 0;
    int differ = 0;
    char now[64], rec[64];
#define RUN_RECORD_FIELD(flag, field, value, fmt, text_value)                                                              \
    do {                                                                                                                   \
        if (a->field != (value)) {                                                                                         \
            differ++;                                                                                                      \
            snprintf(now, sizeof(now), fmt, text_value(a->field));                                                         \
            snprintf(rec, sizeof(rec), fmt, text_value(value));                                                            \
            if (run_record_flag_given(argc, argv, flag)) {                                                                 \
                if (print) printf("resume: %s %s as given; the checkpoint's run used %s: not the same trajectory\n", flag, now, rec); \
            } else {                                                                                                       \
                if (print) printf("resume: %s %s, the checkpoint's run's value (without %s: %s)\n", flag, rec, flag, now);  \
                a->field = (value);                                                                                        \
            }                                                                                                              \
        }                                                                                                                  \
    } while (0)
#define RUN_RECORD_SAME(x) (x)
    RUN_RECORD_FIELD("-l", learning_rate, r->learning_rate, "%.9g", (double)RUN_RECORD_SAME);
    LRKind kind = LR_COSINE;
    lr_kind_from_name(a->lr_schedule, &kind);
    if ((int)kind != r->lr_schedule) {
        differ++;
        if (run_record_flag_given(argc, argv, "-k")) {
            if (print) printf("resume: -k %s as given; the checkpoint's run used %s: not the same trajectory\n", a->lr_schedule,
                              run_record_schedule_name(r->lr_schedule));
        } else {
            if (print) printf("resume: -k %s, the checkpoint's run's value (without -k: %s)\n", run_record_schedule_name(r->lr_schedule),
                              a->lr_schedule);
            a->lr_schedule = run_record_schedule_name(r->lr_schedule);
        }
    }
    RUN_RECORD_FIELD("-u", warmup_steps, r->warmup_steps, "%d", RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-q", final_lr_fraction, r->final_lr_fraction, "%.9g", (double)RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-c", weight_decay, r->weight_decay, "%.9g", (double)RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-gc", grad_clip, r->grad_clip, "%.9g", (double)RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-x", max_steps, r->max_steps, "%d", RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-d", total_batch_tokens, r->total_batch_tokens, "%d", RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-b", B, r->B, "%d", RUN_RECORD_SAME);
    RUN_RECORD_FIELD("-sd", seed, r->seed, "%d", RUN_RECORD_SAME);
#undef RUN_RECORD_FIELD
#undef RUN_RECORD_SAME
    return differ;
}

#endif // COMMON_RUN_RECORD_H
