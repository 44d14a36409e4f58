/*
 * train_setup.h: the start of a training run, shared by train_gpt2.c and train_gpt2.cu:
 * flags, ranks, the batch arithmetic (micro-batch B*T per rank, gradient accumulation up to -d
 * tokens, or the batch schedule of -d auto / -ds: common/batch_schedule.h), the output dir and the checkpoint to resume, and the checks that need the model.
 * Host C; include after zero.cuh (it starts and stops the ranks through the engine).
 * Every user error is one line from rank 0 and exit status 1.
 */
#ifndef COMMON_TRAIN_SETUP_H
#define COMMON_TRAIN_SETUP_H
#ifndef ZERO_CUH
#error "include zero.cuh before common/train_setup.h"
#endif
#include <limits.h>
#include <stdarg.h>
#include "common/args.h"
#include "common/batch_schedule.h"
#include "common/dataloader.h"
#include "common/logger.h"
#include "common/test_fault.h"
#include "common/zero_checkpoint.h"

typedef struct {
    TrainArgs args;
    TestFault fault;           // ZERO_TEST_FAULT hooks (tests only)
    int rank, world_size;
    int tokens_per_micro_step; // B*T*world_size
    int total_batch_tokens;    // -d, tokens per optimizer step (the first one's, with a schedule)
    int grad_accum_steps;      // micro-steps per optimizer step (the first one's)
    BatchSchedule batch;       // -d, -d auto or -ds: the batch of every step
    int start_step;            // 0, or the step of the checkpoint being resumed
    char resume_model[4300];   // that checkpoint's model file
    const char* init;          // what the model is built from: -e, or resume_model
    int do_val;
    ZeroOffloadArgs offload;   // -zo, -zp, -zd (zero/offload.h)
} TrainRun;

// After the ranks started: rank 0 prints the error line, every rank stops, exit 1.
static void train_run_fail(const TrainRun* run, const char* fmt, ...) {
    if (run->rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n");
    }
    zero_ranks_stop();
    exit(1);
}

// Flags, ranks, batch arithmetic, output dir and the checkpoint to resume (-y 1).
static void train_run_start(TrainRun* run, int* argc, char*** argv) {
    memset(run, 0, sizeof(*run));
    TrainArgs* args = &run->args;
    train_args_parse(args, *argc, *argv);
    train_args_validate(args);
    if (args->zero_stage != -1 && args->zero_stage != ZERO_STAGE) {
        fprintf(stderr, "error: -z %d: this binary was compiled for ZeRO stage %d; expected -z %d or a rebuild with make ZERO_STAGE=%d\n",
                args->zero_stage, ZERO_STAGE, ZERO_STAGE, args->zero_stage);
        exit(1);
    }
    char offload_err[8400] = "";
    zero_placement_parse(args->offload_optimizer, &run->offload.optimizer); // values checked in train_args_validate
    zero_placement_parse(args->offload_params, &run->offload.params);
    run->offload.dir = args->offload_dir;
    if (zero_offload_check_args(&run->offload, ZERO_STAGE, offload_err, sizeof(offload_err)) != 0) args_fail("%s", offload_err);
#if !ZERO_GPU_BUILD
    if (args->op_timing_steps > 0) {
        fprintf(stderr, "error: -ot %d: the per-kernel table times CUDA kernels; expected -ot 0 here (train_gpt2cu has it)\n",
                args->op_timing_steps);
        exit(1);
    }
#endif
    if (args->resume && args->output_dir == NULL) {
        fprintf(stderr, "error: -y 1: resuming needs the checkpoint directory; expected -o <dir> as well\n");
        exit(1);
    }
    run->fault = test_fault_from_env();
    zero_ranks_start(argc, argv, &run->rank, &run->world_size);

    // Batch: each micro-step every rank processes B*T tokens; accumulate up to -d tokens.
    int B = args->B, T = args->T, N = run->world_size;
    long long per_micro_step = (long long)B * T * N;
    if (per_micro_step > INT_MAX / 2)
        train_run_fail(run, "error: -b %d -t %d: B*T*ranks = %lld tokens per micro-step; expected at most %d", B, T, per_micro_step, INT_MAX / 2);
    run->tokens_per_micro_step = (int)per_micro_step;
    char err[1024];
    if (batch_schedule_from_args(&run->batch, args, B, T, N, err, sizeof(err)) != 0) train_run_fail(run, "%s", err);
    run->total_batch_tokens = run->batch.state.batch_tokens;
    run->grad_accum_steps = batch_schedule_grad_accum_steps(&run->batch);

    // Resume (-y 1) from the latest complete checkpoint in -o: its model file replaces -e.
    if (args->output_dir && run->rank == 0) output_dir_prepare(args->output_dir);
    zero_ranks_barrier(N); // the dir exists before any rank looks into it
    if (!args->resume && args->output_dir && output_dir_has_run(args->output_dir))
        train_run_fail(run, "error: -o %s: holds a previous run (log.jsonl or model_*.bin); expected a new or empty directory, or -y 1 to resume it",
                       args->output_dir);
    run->init = args->init;
    if (args->resume) {
        int latest = checkpoint_latest_step(args->output_dir);
        if (latest > 0) {
            run->start_step = latest;
            model_checkpoint_path(run->resume_model, sizeof(run->resume_model), args->output_dir, latest);
            run->init = run->resume_model;
        } else if (run->rank == 0) {
            printf("resume: no checkpoint in %s; starting from scratch\n", args->output_dir);
        }
    }
    run->do_val = args->val_every > 0;
}

/*
 * Once the model is built: the number of optimizer steps (-x, or one epoch of the train data),
 * checked against the resumed step and the model's context, and the vocab size every batch's
 * token ids are checked against. Returns the number of steps.
 */
static int train_run_checks_with_model(const TrainRun* run, const GPT2Config* cfg, DataLoader* train_loader,
                                       DataLoader* val_loader) {
    const TrainArgs* args = &run->args;
    int max_steps = args->max_steps;
    if (max_steps == -1) max_steps = (int)(train_loader->num_tokens_total / (size_t)run->total_batch_tokens);
    if (max_steps < 1 && args->max_steps == -1) max_steps = 1;
    if (max_steps < run->start_step)
        train_run_fail(run, "error: -x %d: the checkpoint being resumed is at step %d; expected -x >= %d", max_steps,
                       run->start_step, run->start_step);
    if (args->sample_every > 0 && args->gen_tokens >= cfg->max_seq_len)
        train_run_fail(run, "error: -g %d: longer than the model's context; expected -g < %d", args->gen_tokens, cfg->max_seq_len);
    // Samples run within the training sequence length (the activations are sized for -t): the
    // prompt token and the new tokens fit in T, so a longer -g is cut to T-1 tokens, said once.
    if (args->sample_every > 0 && args->gen_tokens >= args->T && run->rank == 0)
        printf("note: -g %d: samples are generated within the sequence length -t %d, so each has %d tokens\n",
               args->gen_tokens, args->T, args->T - 1);
    dataloader_set_vocab_size(train_loader, cfg->vocab_size);
    if (val_loader) dataloader_set_vocab_size(val_loader, cfg->vocab_size);
    return max_steps;
}

#endif // COMMON_TRAIN_SETUP_H
