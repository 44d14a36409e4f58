/*
 * args.h: the trainer's command line, shared by the CPU and CUDA builds. llm.c's flags where
 * they mean the same thing (-i -j -e -o -n -y -b -t -d -l -u -q -c -k -x -v -m -s -g -a -z),
 * plus -gc (gradient clip), -sd (seed), -wt (collective wait timeout, seconds), -gb (EMA beta of
 * the gradient noise scale meter, common/gns.h; -1 turns the meter off), the batch schedule
 * (common/batch_schedule.h): -d auto with -dm, -d0, -df, -dw, -dl, or -ds by hand, -ot (CUDA
 * build: the per-kernel table over that many steps, common/op_timer.cuh), -tr/-ts (the per-rank
 * timeline of chosen steps, zero/trace/trace.h), --plan/-np/-rpn (the planner, plan/plan.h: no training),
 * the ZeRO-Offload / ZeRO-Infinity placement (zero/offload/offload.h): -zo (optimizer state), -zp (stage-3
 * parameter shard), none|cpu|nvme each, and -zd (the NVMe directory), and ZeRO++
 * (zero/zeropp/zeropp.h): -qw (quantized weights), -hp (secondary shard group), -qg (quantized
 * gradients), -qgb (their bits), -qb (the weights' quantization block size), -qbg (the gradients'),
 * and HellaSwag during training (train/hellaswag_eval.h): -hs (every n steps), -hf (file), -hm (examples),
 * and -sig (the signals that checkpoint and exit 75: train/signal_checkpoint.h).
 * Every flag takes one value. -h prints every flag with its default and exits 0; an unknown
 * flag or a malformed value prints one error line and exits 1.
 */
#ifndef COMMON_ARGS_H
#define COMMON_ARGS_H
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/schedule.h"

typedef struct {
    const char* train_pattern; // -i
    const char* val_pattern;   // -j
    const char* init;          // -e: llm.c model file, or a depth descriptor d1..d48
    const char* output_dir;    // -o: log, checkpoints (NULL: none)
    int checkpoint_every;      // -n
    int resume;                // -y
    int B;                     // -b micro-batch size (sequences per rank)
    int T;                     // -t sequence length
    int total_batch_tokens;    // -d (-1: B*T*world_size, no accumulation; TOTAL_BATCH_AUTO: -d auto)
    float learning_rate;       // -l
    int warmup_steps;          // -u
    float final_lr_fraction;   // -q
    float weight_decay;        // -c
    const char* lr_schedule;   // -k
    int max_steps;             // -x (-1: one epoch of the train data)
    int val_every;             // -v
    int val_max_steps;         // -m
    int sample_every;          // -s
    int gen_tokens;            // -g
    int overfit_single_batch;  // -a
    int zero_stage;            // -z (-1: the compiled stage; otherwise must equal it; with --plan: the offload rows' stage)
    float grad_clip;           // -gc (0 disables)
    int seed;                  // -sd
    float collective_timeout_s; // -wt
    float gns_beta;            // -gb: GNS EMA beta in [0, 1); -1: meter off
    int batch_max_tokens;      // -dm: -d auto's largest batch (tokens)
    int batch_start_tokens;    // -d0: -d auto's first batch (-1: one micro-batch per rank, two on one rank)
    float batch_growth_factor; // -df: -d auto grows when B_simple > factor * batch ...
    int batch_window;          // -dw: ... for this many steps in a row
    const char* batch_lr_rule; // -dl: lr when the batch changes: none, sqrt, linear
    const char* batch_schedule; // -ds: the batch by hand, "STEP:TOKENS,..." (NULL: none)
    const char* offload_optimizer; // -zo: none, cpu, nvme
    const char* offload_params;    // -zp: none, cpu, nvme (ZeRO stage 3)
    const char* offload_dir;       // -zd: directory of the NVMe offload files (NULL: none)
    int op_timing_steps;       // -ot: CUDA build, steps timed op family by op family (0: off)
    int zeropp_qw;             // -qw: ZeRO++ int8 forward all-gather (stage 3)
    int zeropp_hp;             // -hp: ZeRO++ secondary shard over K ranks (1: off, 0: the ranks of a host)
    int zeropp_qg;             // -qg: ZeRO++ quantized gradient all-to-all (stages 2-3)
    int zeropp_qg_bits;        // -qgb: its code width, 4 or 8
    int zeropp_block;          // -qb: elements per quantization block of the weights (qwZ)
    int zeropp_grad_block;     // -qbg: elements per quantization block of the gradients (qgZ)
    const char* trace_path;    // -tr: per-rank timeline (Chrome trace JSON), NULL: none
    const char* trace_steps;   // -ts: "FIRST-LAST" or "STEP", steps from 1
    const char* checkpoint_signals; // -sig: signals that checkpoint and exit 75 (train/signal_checkpoint.h), "0": none
    const char* plan_machine;  // --plan: print the plan for this machine and exit (no training)
    int plan_world_size;       // -np: ranks to plan for (-1: 1); only with --plan
    int plan_ranks_per_node;   // -rpn: ranks per node to plan for (0: the machine's); only with --plan
    const char* plan_json;     // -pj: the plan's JSON rows to this file ("-": stdout), NULL: none; only with --plan
    int plan_zeropp;           // -pz: 1: the usual ZeRO++ rows beside stage 3 (-qw/-hp/-qg given: that row anyway); only with --plan
    int hellaswag_every;       // -hs: HellaSwag accuracy every n steps (0: never; train/hellaswag_eval.h)
    const char* hellaswag_file; // -hf: its eval file (data/hellaswag.py)
    int hellaswag_max_examples; // -hm: the first m examples (-1: all)
} TrainArgs;

#define TOTAL_BATCH_AUTO (-2) // -d auto

typedef enum { ARG_INT, ARG_FLOAT, ARG_STRING, ARG_INT_OR_AUTO } ArgType; // ARG_INT_OR_AUTO: "auto" reads as TOTAL_BATCH_AUTO
typedef struct { const char* flag; ArgType type; size_t offset; const char* help; } ArgSpec;

#define ARG_FIELD(f) offsetof(TrainArgs, f)
static const ArgSpec arg_specs[] = {
    {"-i", ARG_STRING, ARG_FIELD(train_pattern), "train token shards (glob)"},
    {"-j", ARG_STRING, ARG_FIELD(val_pattern), "val token shards (glob)"},
    {"-e", ARG_STRING, ARG_FIELD(init), "init: llm.c model file, or depth d1-d4, d6, d12, d24, d36, d48 (from scratch)"},
    {"-o", ARG_STRING, ARG_FIELD(output_dir), "output dir for log.jsonl and checkpoints (none: no files)"},
    {"-n", ARG_INT, ARG_FIELD(checkpoint_every), "write a checkpoint every n steps (0: never)"},
    {"-y", ARG_INT, ARG_FIELD(resume), "resume from the latest checkpoint in -o (0/1)"},
    {"-b", ARG_INT, ARG_FIELD(B), "micro-batch size B (sequences per rank per micro-step)"},
    {"-t", ARG_INT, ARG_FIELD(T), "sequence length T"},
    {"-d", ARG_INT_OR_AUTO, ARG_FIELD(total_batch_tokens), "total batch in tokens (-1: B*T*ranks; auto: grown by the noise scale); accumulation fills the rest"},
    {"-l", ARG_FLOAT, ARG_FIELD(learning_rate), "peak learning rate"},
    {"-u", ARG_INT, ARG_FIELD(warmup_steps), "learning-rate warmup steps"},
    {"-q", ARG_FLOAT, ARG_FIELD(final_lr_fraction), "final learning rate as a fraction of the peak"},
    {"-c", ARG_FLOAT, ARG_FIELD(weight_decay), "AdamW weight decay (2-D weights only)"},
    {"-k", ARG_STRING, ARG_FIELD(lr_schedule), "learning-rate decay: cosine, linear, constant"},
    {"-x", ARG_INT, ARG_FIELD(max_steps), "optimizer steps (-1: one epoch of the train data)"},
    {"-v", ARG_INT, ARG_FIELD(val_every), "val loss every v steps (0: never)"},
    {"-m", ARG_INT, ARG_FIELD(val_max_steps), "val batches per evaluation"},
    {"-s", ARG_INT, ARG_FIELD(sample_every), "print a text sample every s steps (0: never)"},
    {"-g", ARG_INT, ARG_FIELD(gen_tokens), "tokens per sample"},
    {"-a", ARG_INT, ARG_FIELD(overfit_single_batch), "overfit one batch (0/1), for debugging"},
    {"-z", ARG_INT, ARG_FIELD(zero_stage), "ZeRO stage; fixed at compile time (make ZERO_STAGE=N), -1: that one; with --plan: the -zo/-zp rows' stage"},
    {"-gc", ARG_FLOAT, ARG_FIELD(grad_clip), "clip the gradient to this global norm (0: off)"},
    {"-sd", ARG_INT, ARG_FIELD(seed), "random seed (init, sampling)"},
    {"-wt", ARG_FLOAT, ARG_FIELD(collective_timeout_s), "abort all ranks if a collective waits longer (s)"},
    {"-gb", ARG_FLOAT, ARG_FIELD(gns_beta), "gradient noise scale EMA beta, [0, 1); -1: meter off"},
    {"-dm", ARG_INT, ARG_FIELD(batch_max_tokens), "-d auto: largest batch in tokens (required with -d auto)"},
    {"-d0", ARG_INT, ARG_FIELD(batch_start_tokens), "-d auto: first batch in tokens (-1: B*T*ranks, 2*B*T on one rank)"},
    {"-df", ARG_FLOAT, ARG_FIELD(batch_growth_factor), "-d auto: grow when B_simple > df x batch ..."},
    {"-dw", ARG_INT, ARG_FIELD(batch_window), "-d auto: ... for dw steps in a row"},
    {"-dl", ARG_STRING, ARG_FIELD(batch_lr_rule), "lr when the batch changes: none, sqrt, linear (x ratio to the first)"},
    {"-ds", ARG_STRING, ARG_FIELD(batch_schedule), "batch by hand: STEP:TOKENS,... (after STEP steps, TOKENS)"},
    {"-zo", ARG_STRING, ARG_FIELD(offload_optimizer), "optimizer state + AdamW: none (device), cpu (host RAM), nvme (files in -zd)"},
    {"-zp", ARG_STRING, ARG_FIELD(offload_params), "ZeRO-3 parameter shard between uses: none, cpu, nvme (files in -zd)"},
    {"-zd", ARG_STRING, ARG_FIELD(offload_dir), "directory for the NVMe offload files (one per rank, removed at exit)"},
    {"-ot", ARG_INT, ARG_FIELD(op_timing_steps), "CUDA build: time op families over n steps after 2 warm-up ones, print the per-kernel table"},
    {"-qw", ARG_INT, ARG_FIELD(zeropp_qw), "ZeRO++ qwZ: stage 3's forward all-gather as int8 codes + block scales (0/1)"},
    {"-hp", ARG_INT, ARG_FIELD(zeropp_hp), "ZeRO++ hpZ: backward all-gather from a secondary shard over K ranks (1: off, 0: a host's ranks)"},
    {"-qg", ARG_INT, ARG_FIELD(zeropp_qg), "ZeRO++ qgZ: gradient reduce-scatter as a two-level all-to-all of codes (0/1)"},
    {"-qgb", ARG_INT, ARG_FIELD(zeropp_qg_bits), "ZeRO++ qgZ: bits per gradient code, 4 or 8"},
    {"-qb", ARG_INT, ARG_FIELD(zeropp_block), "ZeRO++ qwZ: elements per weight quantization block (multiple of 32, 32-65536)"},
    {"-qbg", ARG_INT, ARG_FIELD(zeropp_grad_block), "ZeRO++ qgZ: elements per gradient quantization block (multiple of 32, 32-65536)"},
    {"-tr", ARG_STRING, ARG_FIELD(trace_path), "timeline of steps -ts, FILE.json (rank R: FILE.rankR.json)"},
    {"-ts", ARG_STRING, ARG_FIELD(trace_steps), "steps the timeline holds: FIRST-LAST or STEP (from 1)"},
    {"-sig", ARG_STRING, ARG_FIELD(checkpoint_signals), "signals that checkpoint after the step and exit 75: USR1,TERM,... (0: none)"},
    {"--plan", ARG_STRING, ARG_FIELD(plan_machine), "plan stages 0-3 on h100, h200, cpu[,key=value...]; exit"},
    {"-np", ARG_INT, ARG_FIELD(plan_world_size), "with --plan: the number of ranks to plan for (-1: 1)"},
    {"-rpn", ARG_INT, ARG_FIELD(plan_ranks_per_node), "with --plan: ranks per node (0: the machine's)"},
    {"-pj", ARG_STRING, ARG_FIELD(plan_json), "with --plan: the rows as JSON lines to FILE (-: stdout)"},
    {"-pz", ARG_INT, ARG_FIELD(plan_zeropp), "with --plan: 1 adds the ZeRO++ rows beside stage 3 (0/1)"},
    {"-hs", ARG_INT, ARG_FIELD(hellaswag_every), "HellaSwag accuracy every n steps (0: never)"},
    {"-hf", ARG_STRING, ARG_FIELD(hellaswag_file), "HellaSwag eval file (data/hellaswag.py)"},
    {"-hm", ARG_INT, ARG_FIELD(hellaswag_max_examples), "HellaSwag: the first m examples (-1: all)"},
};
#define NUM_ARG_SPECS (int)(sizeof(arg_specs) / sizeof(arg_specs[0]))

// The accepted range of each integer flag, checked while parsing, so that a value out of range
// (one past int's too, like -b 99999999999) gets one line that gives the range. Unlisted: any int.
static const struct { const char* flag; long min, max; } arg_int_ranges[] = {
    {"-n", 0, INT_MAX}, {"-y", 0, 1},       {"-b", 1, INT_MAX},  {"-t", 1, INT_MAX}, {"-d", -1, INT_MAX},
    {"-u", 0, INT_MAX}, {"-x", -1, INT_MAX}, {"-v", 0, INT_MAX}, {"-m", 1, INT_MAX}, {"-s", 0, INT_MAX},
    {"-g", 1, 1048576}, {"-a", 0, 1},       {"-z", -1, 3},
    {"-dm", -1, INT_MAX}, {"-d0", -1, INT_MAX}, {"-dw", 1, INT_MAX}, {"-ot", 0, INT_MAX}, {"-np", -1, 1 << 20},
    {"-rpn", 0, 1 << 16}, {"-qw", 0, 1}, {"-qg", 0, 1}, {"-hp", 0, INT_MAX}, {"-pz", 0, 1},
    {"-hs", 0, INT_MAX}, {"-hm", -1, 65536},
    {"-qb", 32, 65536}, {"-qbg", 32, 65536}, // blocks: also multiples of 32 (zero/zeropp/zeropp.h)
};

static void arg_int_range(const char* flag, long* min, long* max) {
    *min = INT_MIN;
    *max = INT_MAX;
    for (size_t k = 0; k < sizeof(arg_int_ranges) / sizeof(arg_int_ranges[0]); k++)
        if (strcmp(flag, arg_int_ranges[k].flag) == 0) { *min = arg_int_ranges[k].min; *max = arg_int_ranges[k].max; }
}

// -ts when not given (the pointer tells it from a -ts 2-4 on the command line)
static const char ARGS_TRACE_STEPS_DEFAULT[] = "2-4";

static void train_args_defaults(TrainArgs* a) {
    a->train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    a->val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    a->init = "d12";
    a->output_dir = NULL;
    a->checkpoint_every = 0;
    a->resume = 0;
    a->B = 4;
    a->T = 64;
    a->total_batch_tokens = -1;
    a->learning_rate = 3e-4f;
    a->warmup_steps = 0;
    a->final_lr_fraction = 1.0f;
    a->weight_decay = 0.0f;
    a->lr_schedule = "cosine";
    a->max_steps = -1;
    a->val_every = 20;
    a->val_max_steps = 20;
    a->sample_every = 20;
    a->gen_tokens = 64;
    a->overfit_single_batch = 0;
    a->zero_stage = -1;
    a->grad_clip = 1.0f;
    a->seed = 42;
    a->collective_timeout_s = 300.0f;
    a->gns_beta = 0.95f;
    a->batch_max_tokens = -1;
    a->batch_start_tokens = -1;
    a->batch_growth_factor = 0.0625f;
    a->batch_window = 3;
    a->batch_lr_rule = "sqrt";
    a->batch_schedule = NULL;
    a->offload_optimizer = "none";
    a->offload_params = "none";
    a->offload_dir = NULL;
    a->op_timing_steps = 0;
    a->zeropp_qw = 0;
    a->zeropp_hp = 1;
    a->zeropp_qg = 0;
    a->zeropp_qg_bits = 4;
    a->zeropp_block = 2048; // ZERO_PP_DEFAULT_BLOCK (zero/zeropp/zeropp.h)
    a->zeropp_grad_block = 256; // ZERO_PP_DEFAULT_GRAD_BLOCK (zero/zeropp/zeropp.h)
    a->trace_path = NULL;
    a->trace_steps = ARGS_TRACE_STEPS_DEFAULT;
    a->checkpoint_signals = "USR1,TERM";
    a->plan_machine = NULL;
    a->plan_world_size = -1;
    a->plan_ranks_per_node = 0;
    a->plan_json = NULL;
    a->plan_zeropp = 0;
    a->hellaswag_every = 0;
    a->hellaswag_file = "data/hellaswag/hellaswag_val.bin";
    a->hellaswag_max_examples = -1;
}

// -ts "FIRST-LAST" or "STEP" into steps from 1; returns 0, or -1 when malformed.
static int train_args_trace_steps(const char* text, int* first, int* last) {
    char* end = NULL;
    if (!isdigit((unsigned char)text[0])) return -1; // strtol would take " 2" and "+2"
    long a = strtol(text, &end, 10), b = a;
    if (end == text) return -1;
    if (*end == '-') {
        const char* rest = end + 1;
        if (!isdigit((unsigned char)rest[0])) return -1;
        b = strtol(rest, &end, 10);
        if (end == rest) return -1;
    }
    if (*end != '\0' || a < 1 || b < a || b > INT_MAX) return -1;
    *first = (int)a;
    *last = (int)b;
    return 0;
}

static void train_args_print_help(const char* program, FILE* out) {
    TrainArgs d;
    train_args_defaults(&d);
    fprintf(out, "usage: %s [flag value] ...\n", program);
    for (int i = 0; i < NUM_ARG_SPECS; i++) {
        const ArgSpec* s = &arg_specs[i];
        const char* field = (const char*)&d + s->offset;
        char def[128];
        if (s->type == ARG_INT || s->type == ARG_INT_OR_AUTO) snprintf(def, sizeof(def), "%d", *(const int*)field);
        else if (s->type == ARG_FLOAT) snprintf(def, sizeof(def), "%g", *(const float*)field);
        else snprintf(def, sizeof(def), "%s", *(const char* const*)field ? *(const char* const*)field : "(none)");
        fprintf(out, "  %-4s %-60s default %s\n", s->flag, s->help, def);
    }
    fprintf(out, "  -h   print this help\n");
}

// Under mpirun every rank parses the same argv and meets the same error: rank 0 alone prints
// it (launcher's rank variables: Open MPI, PMIx, MPICH/Slurm PMI); every rank exits 1.
static void args_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void args_fail(const char* fmt, ...) {
    const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    int quiet = 0;
    for (int k = 0; k < 3; k++) {
        const char* rank = getenv(names[k]);
        if (rank != NULL) { quiet = atoi(rank) != 0; break; }
    }
    if (!quiet) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    exit(1);
}

// Parse argv into *a (defaults first). Exits 0 after -h, 1 on a bad flag or value.
static void train_args_parse(TrainArgs* a, int argc, char** argv) {
    train_args_defaults(a);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            train_args_print_help(argv[0], stdout);
            exit(0);
        }
        const ArgSpec* spec = NULL;
        for (int k = 0; k < NUM_ARG_SPECS; k++) if (strcmp(argv[i], arg_specs[k].flag) == 0) spec = &arg_specs[k];
        if (spec == NULL) {
            // A word that is not a flag but follows a value: most likely the shell expanded an
            // unquoted glob (-i data/x_*.bin) into several file names, the second landing here.
            if (argv[i][0] != '-' && i > 1 && (strchr(argv[i], '/') != NULL || strstr(argv[i], ".bin") != NULL))
                args_fail("error: %s: unknown flag; expected a flag listed by -h (a file name here usually means the shell "
                          "expanded an unquoted glob: quote it, -i 'data/x_train_*.bin')", argv[i]);
            args_fail("error: %s: unknown flag; expected one of the flags listed by -h", argv[i]);
        }
        if (i + 1 >= argc) {
            args_fail("error: %s: missing value; expected a value after the flag (see -h)", argv[i]);
        }
        const char* value = argv[++i];
        char* field = (char*)a + spec->offset;
        char* end = NULL;
        errno = 0;
        if (spec->type == ARG_INT_OR_AUTO && strcmp(value, "auto") == 0) {
            *(int*)field = TOTAL_BATCH_AUTO;
        } else if (spec->type == ARG_INT || spec->type == ARG_INT_OR_AUTO) {
            long min, max;
            arg_int_range(spec->flag, &min, &max);
            const char* or_auto = spec->type == ARG_INT_OR_AUTO ? " or auto" : "";
            long v = strtol(value, &end, 10);
            if (end == value || *end != '\0') {
                args_fail("error: %s: '%s' is not an integer; expected an integer in [%ld, %ld]%s", spec->flag, value, min, max, or_auto);
            }
            if (errno == ERANGE || v < min || v > max) {
                args_fail("error: %s: %s is out of range; expected an integer in [%ld, %ld]", spec->flag, value, min, max);
            }
            *(int*)field = (int)v;
        } else if (spec->type == ARG_FLOAT) {
            float v = strtof(value, &end);
            if (errno || end == value || *end != '\0' || !isfinite(v)) {
                args_fail("error: %s: '%s' is not a finite float number; expected a number like 0.1 or 3e-4", spec->flag, value);
            }
            *(float*)field = v;
        } else {
            // "-o -v" is almost surely a forgotten value, not a path named "-v".
            if (value[0] == '\0' || (value[0] == '-' && value[1] != '\0')) {
                args_fail("error: %s: '%s' is empty or looks like a flag; expected a value after %s", spec->flag, value, spec->flag);
            }
            *(const char**)field = value;
        }
    }
}

// Checks beyond the integer ranges (train_args_parse): one error line and exit 1 on the first violation.
static void train_args_validate(const TrainArgs* a) {
#define ARG_REQUIRE(cond, flag, expected) \
    do { if (!(cond)) args_fail("error: %s: invalid value; expected %s", flag, expected); } while (0)
    ARG_REQUIRE(a->total_batch_tokens == -1 || a->total_batch_tokens == TOTAL_BATCH_AUTO || a->total_batch_tokens >= 1, "-d",
                "-1, auto or a positive number of tokens");
    ARG_REQUIRE(a->batch_max_tokens == -1 || a->batch_max_tokens >= 1, "-dm", "a positive number of tokens");
    ARG_REQUIRE(a->batch_start_tokens == -1 || a->batch_start_tokens >= 1, "-d0", "-1 or a positive number of tokens");
    ARG_REQUIRE(a->batch_growth_factor > 0.0f, "-df", "a factor > 0");
    ARG_REQUIRE(a->learning_rate >= 0.0f, "-l", "a learning rate >= 0");
    ARG_REQUIRE(a->final_lr_fraction >= 0.0f && a->final_lr_fraction <= 1.0f, "-q", "a fraction in [0, 1]");
    ARG_REQUIRE(a->weight_decay >= 0.0f, "-c", "weight decay >= 0");
    ARG_REQUIRE(a->grad_clip >= 0.0f, "-gc", "a norm >= 0");
    ARG_REQUIRE(a->collective_timeout_s > 0.0f, "-wt", "seconds > 0");
    ARG_REQUIRE(a->gns_beta == -1.0f || (a->gns_beta >= 0.0f && a->gns_beta < 1.0f), "-gb", "an EMA beta in [0, 1), or -1 (meter off)");
    LRKind kind;
    if (lr_kind_from_name(a->lr_schedule, &kind) != 0) {
        args_fail("error: -k %s: unknown schedule; expected cosine, linear or constant", a->lr_schedule);
    }
    const char* placements[2][2] = {{"-zo", a->offload_optimizer}, {"-zp", a->offload_params}};
    for (int k = 0; k < 2; k++)
        if (strcmp(placements[k][1], "none") != 0 && strcmp(placements[k][1], "cpu") != 0 && strcmp(placements[k][1], "nvme") != 0)
            args_fail("error: %s %s: unknown placement; expected none, cpu or nvme", placements[k][0], placements[k][1]);
    int first, last;
    if (train_args_trace_steps(a->trace_steps, &first, &last) != 0) {
        args_fail("error: -ts %s: not a step range; expected FIRST-LAST or STEP with 1 <= FIRST <= LAST", a->trace_steps);
    }
    if (a->trace_path == NULL && a->trace_steps != ARGS_TRACE_STEPS_DEFAULT) // given on the command line
        args_fail("error: -ts %s: steps of a timeline that is not written; expected -tr FILE.json as well", a->trace_steps);
    size_t tn = a->trace_path ? strlen(a->trace_path) : 0;
    if (a->trace_path != NULL && (tn < 6 || strcmp(a->trace_path + tn - 5, ".json") != 0)) {
        args_fail("error: -tr %s: not a .json file name; expected a path ending in .json (rank R writes .rankR.json)", a->trace_path);
    }
    if (a->plan_machine == NULL && (a->plan_json != NULL || a->plan_zeropp != 0)) {
        args_fail("error: %s: a plan's output; expected --plan MACHINE as well", a->plan_json != NULL ? "-pj" : "-pz");
    }
    if (a->plan_machine == NULL && (a->plan_world_size != -1 || a->plan_ranks_per_node != 0)) {
        args_fail("error: %s: only plans take a world; expected --plan MACHINE as well (a run's ranks come from mpirun)",
                  a->plan_world_size != -1 ? "-np" : "-rpn");
    }
    if (a->checkpoint_every > 0 && a->output_dir == NULL) {
        args_fail("error: -n %d: checkpoints need a directory; expected -o <dir> as well", a->checkpoint_every);
    }
#undef ARG_REQUIRE
}

#endif
