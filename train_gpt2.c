/*
 * train_gpt2.c: the fp32 CPU reference trainer for GPT-2 (C, OpenBLAS, OpenMP).
 *
 * The model, its forward and backward and the ZeRO engine's calls in them are model/gpt2_cpu.h;
 * the engine is zero.cuh. This file is the training run around them: sampling, the optimizer
 * step over micro-steps (gpt2_train_step), the step line and log, validation, checkpoints and
 * main() with the step loop. Same command line, model files and log as the GPU trainer
 * (train_gpt2.cu); the host code both share is in common/ and train/.
 *
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * test_gpt2.c includes this file with TESTING defined to reuse everything but main().
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>

#include "common/args.h"
#include "common/model_file.h"
#include "common/dataloader.h"
#include "common/gpt2_config.h"
#include "common/init.h"
#include "common/logger.h"
#include "common/rng.h"
#include "common/sampling.h"
#include "common/schedule.h"
#include "common/test_fault.h"
#include "common/tokenizer.h"
#include "common/state_file.h"
#include "zero.cuh"
#include "train/model_source.h" // where the model comes from (-e, or the resume checkpoint): after zero.cuh
#include "train/train_setup.h" // after zero.cuh: starts the ranks through it
#include "train/noise_scale.h" // the GNS meter's glue to the engine: after zero.cuh
#include "train/batch_schedule_trainer.h" // the batch schedule's glue: after noise_scale.h
#include "train/plan_exec.h"   // --plan: runs ./plan_gpt2 (plan/plan_gpt2.c) in this process's place
#include "train/hellaswag_eval.h" // -hs: HellaSwag during training, after zero.cuh
#include "model/gpt2_cpu.h"      // the model: activations, forward, backward (after train/model_source.h)

// ----------------------------------------------------------------------------
// Sampling

// Generate gen_tokens tokens after <|endoftext|> (every rank runs it: ZeRO-3 needs all ranks in
// the gathers); rank 0 prints the UTF-8 text.
static void gpt2_sample(GPT2* model, Tokenizer* tokenizer, int gen_tokens, uint64_t seed, int print) {
    int T = gen_tokens + 1 < model->T ? gen_tokens + 1 : model->T;
    int* tokens = (int*)zero_calloc((size_t)T, sizeof(int), "sample tokens");
    tokens[0] = 50256 < model->config.vocab_size ? 50256 : 0; // <|endoftext|> starts a document
    Rng rng;
    rng_seed(&rng, seed);
    for (int t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, t);
        tokens[t] = sample_from_logits(model->acts.logits_last, model->config.vocab_size, rng_uniform(&rng));
    }
    if (print) sample_print(tokenizer, tokens + 1, T - 1);
    free(tokens);
}

// ----------------------------------------------------------------------------
// Training loop helpers

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; // ru_maxrss is in KiB on Linux
}

// Mean val loss over val_steps global batches: each rank its slices, then the mean over ranks.
static float gpt2_val_loss(GPT2* model, DataLoader* val_loader, int val_steps) {
    dataloader_reset(val_loader);
    double sum = 0.0;
    for (int i = 0; i < val_steps; i++) {
        dataloader_next_batch(val_loader);
        gpt2_forward(model, val_loader->inputs, val_loader->targets, model->B, model->T);
        sum += model->mean_loss;
    }
    return (float)zero_all_reduce_mean(&model->zero, sum / val_steps, "val loss");
}

// HellaSwag's forward (train/hellaswag_eval.h): per-position losses of one (B,T) batch.
static void gpt2_forward_losses(void* m, const int* inputs, const int* targets, float* losses) {
    GPT2* model = (GPT2*)m;
    gpt2_forward(model, inputs, targets, model->B, model->T);
    memcpy(losses, model->acts.losses, (size_t)model->B * model->T * sizeof(float));
}

// ----------------------------------------------------------------------------

/*
 * One optimizer step (0-based `step`): grad_accum_steps micro-steps of forward + backward on
 * this rank's slice of the next batches (each unit's collective starts as backward finishes
 * it), then AdamW on the owned slices with learning rate lr. Returns the train loss averaged
 * over micro-steps and ranks; *grad_norm gets the global norm before clipping.
 */
static float gpt2_train_step(GPT2* model, DataLoader* loader, GradientNoiseScale* gns, const AdamWConfig* opt,
                             float lr, int step, int grad_accum_steps, int overfit_single_batch, float* grad_norm) {
    ZeroEngine* z = &model->zero;
    int B = model->B, T = model->T;
    zero_step_begin(z, step + 1);
    double loss_sum = 0.0;
    for (int micro_step = 0; micro_step < grad_accum_steps; micro_step++) {
        if (!overfit_single_batch || (step == 0 && micro_step == 0)) dataloader_next_batch(loader);
        model->backward_follows = 1;
        gpt2_forward(model, loader->inputs, loader->targets, B, T);
        loss_sum += model->mean_loss;
        z->gns.measure_local_grad_norm = noise_scale_measures(gns, micro_step); // the GNS small batch(es)
        gpt2_backward(model, loader->targets, B, T, 1.0f / ((float)B * T * grad_accum_steps),
                      micro_step == grad_accum_steps - 1);
    }
    z->gns.measure_local_grad_norm = 0;
    zero_trace_compute(z, ZERO_TRACE_OPTIMIZER, -1);
    *grad_norm = zero_optimizer_step(z, opt, lr, step + 1);
    noise_scale_step(gns, z);
    float loss = (float)zero_all_reduce_mean(z, loss_sum / grad_accum_steps, "train loss");
    zero_trace_step_end(z);
    return loss;
}

// What one optimizer step did, for the step line and the log.
typedef struct {
    int step, max_steps; // step from 1, as printed
    float loss, lr, grad_norm;
    double seconds, comm_wait_ms, tokens_per_s;
    long long sent_elements, tokens_seen;
    int batch_tokens;
    const char* eta;
    const ZeroEngine* zero; // its offload counters (NVMe bytes, exposed I/O wait) for this step
} StepReport;

// Rank 0 prints the step line; the log (rank 0 only) gets the train record, with the meter's
// fields (noise_scale_train_fields).
static void report_train_step(const StepReport* r, const GradientNoiseScale* gns, Logger* logger, int print) {
    char gns_text[32], gns_fields[256], loss_text[32], norm_text[32], offload_text[128], offload_fields[160];
    if (print) {
        printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | gns %s | %.1f ms | comm wait %.1f ms | sent %lld | %.0f tok/s | eta %s%s\n",
               r->step, r->max_steps, r->loss, r->lr, r->grad_norm, noise_scale_text(gns, gns_text, sizeof(gns_text)),
               r->seconds * 1000.0, r->comm_wait_ms, r->sent_elements, r->tokens_per_s, r->eta,
               zero_offload_step_text(r->zero, offload_text, sizeof(offload_text)));
        fflush(stdout);
    }
    logger_record(logger, "train", "\"step\":%d,\"loss\":%s,\"lr\":%.6g,\"grad_norm\":%s,\"ms\":%.3f,"
                  "\"tokens_per_s\":%.1f,\"tokens\":%lld,\"batch_tokens\":%d,\"comm_wait_ms\":%.3f,\"sent_elements\":%lld%s,%s",
                  r->step, json_number(loss_text, sizeof(loss_text), r->loss), r->lr,
                  json_number(norm_text, sizeof(norm_text), r->grad_norm), r->seconds * 1000.0, r->tokens_per_s, r->tokens_seen,
                  r->batch_tokens, r->comm_wait_ms, r->sent_elements, zero_offload_step_fields(r->zero, offload_fields, sizeof(offload_fields)),
                  noise_scale_train_fields(gns_fields, sizeof(gns_fields), gns));
}

// ZeRO++ (zero/zeropp/zeropp.h): this rank's bytes sent this step within its host and to other hosts,
// beside the formula, as a line after the step line and a "zeropp" log record (config: the formulas).
static void report_zeropp_step(const ZeroEngine* z, int step, int grad_accum_steps, Logger* logger, int print) {
    long long within, across, within_formula, across_formula;
    zero_pp_step_bytes(z, &within, &across);
    zero_pp_formula_split(z, grad_accum_steps, &within_formula, &across_formula);
    long long formula = within_formula + across_formula;
    if (print) printf("zero++ step %5d | rank 0 sent %lld B (formula %lld): within host %lld B (formula %lld), to other hosts %lld B (formula %lld)\n",
                      step, 4 * z->sent_elements_step, formula, within, within_formula, across, across_formula);
    logger_record(logger, "zeropp", "\"step\":%d,\"bytes_sent\":%lld,\"bytes_formula\":%lld,\"bytes_within_host\":%lld,"
                  "\"bytes_across_hosts\":%lld,\"bytes_within_host_formula\":%lld,\"bytes_across_hosts_formula\":%lld",
                  step, 4 * z->sent_elements_step, formula, within, across, within_formula, across_formula);
}

// ----------------------------------------------------------------------------

// Rank 0, at start-up: what runs (stage, world size, model, batch), what each rank allocates
// and sends beside the formulas of docs/design.md "Stages", on stdout and as the log's config record.
static void print_run_config(const TrainArgs* args, const GPT2* model, const char* init, const DataLoader* train_loader,
                             int do_val, int grad_accum_steps, int total_batch_tokens, int max_steps, int start_step,
                             const GradientNoiseScale* gns, const BatchSchedule* batch, Logger* logger) {
    const GPT2Config* cfg = &model->config;
    const ZeroEngine* z = &model->zero;
    int B = model->B, T = model->T, world_size = z->world_size;
    size_t psi = model->layout.padded_numel;
    int threads = omp_get_max_threads();
    char gns_fields[256], batch_fields[512], init_text[8192], offload_fields[512];
    printf("GPT-2 CPU trainer%s | ZeRO stage %d | world size %d | threads per rank %d\n",
           ZERO_EXT ? "" : " (the ZeRO core alone: built with ZERO_EXT=none)", ZERO_STAGE, world_size, threads);
    blas_print_report(stdout); // library, version, kernel; a warning when it runs a generic kernel
    // Ranks on one machine share its cores: more threads than cores in total slows every rank.
    const char* local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local_ranks = local_size ? atoi(local_size) : 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (local_ranks > 1 && threads > 1 && (long)local_ranks * threads > cores)
        printf("note: %d ranks on this machine x %d threads each > %ld cores; set OMP_NUM_THREADS so that ranks x threads <= cores\n",
               local_ranks, threads, cores);
    printf("model: %s | L %d | C %d | NH %d | V %d (Vp %d) | maxT %d | parameters %zu\n", init,
           cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size,
           cfg->max_seq_len, model->layout.num_parameters);
    printf("batch: B %d x T %d x %d ranks x %d accumulation steps = %d tokens | steps %d | lr %g (%s, warmup %d, final x%g)\n",
           B, T, world_size, grad_accum_steps, total_batch_tokens, max_steps, args->learning_rate,
           args->lr_schedule, args->warmup_steps, args->final_lr_fraction);
    batch_schedule_print_setup(batch);
    if (zero_pp_on(z)) {
        char pp_fields[768];
        logger_record(logger, "zeropp_config", "%s", zero_pp_config_fields(z, grad_accum_steps, pp_fields, sizeof(pp_fields)));
    }
    zero_print_accounting(z, grad_accum_steps, stdout);
    zero_pp_print_setup(z, grad_accum_steps, stdout);
    printf("memory per rank: params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, working units %.1f MiB, activations %.1f MiB\n",
           z->bytes_params / 1048576.0, z->bytes_grads / 1048576.0, z->bytes_optimizer / 1048576.0,
           z->bytes_working / 1048576.0, model->act_bytes / 1048576.0);
    printf("train: %zu tokens | val: %s\n", train_loader->num_tokens_total, do_val ? args->val_pattern : "off");
    noise_scale_print_setup(gns);
    if (start_step > 0) printf("resume: from step %d (%s)\n", start_step, init);
    logger_record(logger, "config", "\"init\":\"%s\",\"L\":%d,\"C\":%d,\"NH\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d,\"parameters\":%zu,"
                  "\"B\":%d,\"T\":%d,\"world_size\":%d,\"zero_stage\":%d,\"batch_tokens\":%d,\"grad_accum_steps\":%d,"
                  "\"max_steps\":%d,\"lr\":%g,\"resume_step\":%d,\"padded_parameters\":%zu,\"wte_units\":%d,"
                  "\"bytes_params\":%zu,\"bytes_grads\":%zu,\"bytes_optimizer\":%zu,\"bytes_working\":%zu,\"bytes_ring\":%zu,\"bytes_activations\":%zu,"
                  "\"bytes_state_formula\":%zu,\"bytes_state_formula_text\":\"%s\","
                  "\"elements_sent_formula\":%lld,\"elements_sent_formula_text\":\"%s\","
                  "%s%s,%s",
                  json_escape(init_text, sizeof(init_text), args->init), cfg->num_layers, cfg->channels, cfg->num_heads,
                  cfg->vocab_size, cfg->padded_vocab_size,
                  cfg->max_seq_len, model->layout.num_parameters, B, T, world_size, ZERO_STAGE, total_batch_tokens, grad_accum_steps,
                  max_steps, args->learning_rate, start_step, psi, model->layout.num_wte_units,
                  z->bytes_params, z->bytes_grads, z->bytes_optimizer, z->bytes_working, z->bytes_ring, model->act_bytes,
                  zero_state_bytes_formula(ZERO_STAGE, psi, world_size), zero_state_bytes_formula_text[ZERO_STAGE],
                  zero_elements_sent_formula(ZERO_STAGE, psi, world_size, grad_accum_steps, zero_embedding_numel(&model->layout),
                                             zero_hook_tied_block_numel(z)),
                  zero_elements_sent_text(ZERO_STAGE, zero_hook_tied_block_numel(z)), zero_offload_config_fields(z, grad_accum_steps, offload_fields, sizeof(offload_fields)),
                  noise_scale_config_fields(gns_fields, sizeof(gns_fields), gns),
                  batch_schedule_config_fields(batch_fields, sizeof(batch_fields), batch));
    fflush(stdout);
}

#ifndef TESTING
int main(int argc, char** argv) {
    // Flags, ranks, batch arithmetic, output dir, the checkpoint to resume: train/train_setup.h.
    plan_exec_if_asked(argc, argv); // --plan: the planner's own binary, no training
    TrainRun run;
    train_run_start(&run, &argc, &argv);
    TrainArgs args = run.args;
    int rank = run.rank, world_size = run.world_size, B = args.B, T = args.T;
    int start_step = run.start_step, do_val = run.do_val;
    BatchSchedule* batch = &run.batch; // the batch of every step: common/batch_schedule.h

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_pattern, B, T, rank, world_size);
    if (do_val) dataloader_init(&val_loader, args.val_pattern, B, T, rank, world_size);

    GPT2 model;
    gpt2_build(&model, run.init, B, T, (uint64_t)args.seed, rank, world_size, &run.offload);
    model.zero.timeout_s = args.collective_timeout_s;
    zero_pp_setup(&model.zero, args.zeropp_qw, args.zeropp_qg, args.zeropp_qg_bits, args.zeropp_hp, args.zeropp_block,
                  args.zeropp_grad_block);
    GNSMeter saved_gns; // the meter's EMAs from the checkpoint (none: steps 0)
    gns_init(&saved_gns, 0.0);
    if (start_step > 0) { // checkpoints: zero_checkpoint_save / zero_checkpoint_load_state in zero/checkpoint.h
        DataLoaderState data;
        BatchScheduleState saved_batch;
        zero_checkpoint_load_state(&model.zero, args.output_dir, start_step, args.seed, batch_schedule_expected_at(batch, start_step),
                                   &data.shard_index, &data.position, &saved_gns, &saved_batch);
        dataloader_set_state(&train_loader, data);
        batch_schedule_restore(batch, &saved_batch, start_step, rank);
    }
    int total_batch_tokens = batch->state.batch_tokens, grad_accum_steps = batch_schedule_grad_accum_steps(batch);
    int max_steps = train_run_checks_with_model(&run, &model.config, &train_loader, do_val ? &val_loader : NULL);

    HellaSwagEval hellaswag; // -hs: every rank loads -hf
    hellaswag_eval_init(&hellaswag, &run, model.config.vocab_size, B, T);
    Tokenizer tokenizer = {0}; // only read when samples are printed
    if (args.sample_every > 0) tokenizer_init(&tokenizer, tokenizer_path_beside(args.train_pattern));

    Logger logger;
    logger_init(&logger, rank == 0 ? args.output_dir : NULL, start_step > 0);

    LRSchedule schedule = {LR_COSINE, args.learning_rate, args.warmup_steps, max_steps, args.final_lr_fraction};
    lr_kind_from_name(args.lr_schedule, &schedule.kind); // checked in train_args_validate
    AdamWConfig opt = {0.9f, 0.95f, 1e-8f, args.weight_decay, args.grad_clip};

    ZeroEngine* z = &model.zero;
    GradientNoiseScale gns;
    noise_scale_setup(&gns, args.gns_beta, B, T, world_size, grad_accum_steps, total_batch_tokens);
    noise_scale_restore(&gns, &saved_gns, rank); // resume: the EMAs go on where the checkpoint left them
    if (rank == 0) print_run_config(&args, &model, run.init, &train_loader, do_val,
                                    grad_accum_steps, total_batch_tokens, max_steps, start_step, &gns, batch, &logger);

    int trace_first, trace_last; // -tr: the timeline of steps -ts (zero/trace/trace.h)
    train_args_trace_steps(args.trace_steps, &trace_first, &trace_last);
    zero_trace_check_steps(args.trace_path, args.trace_steps, trace_first, trace_last, start_step, max_steps);
    zero_trace_open(z, args.trace_path, trace_first, trace_last, grad_accum_steps);
    double train_seconds = 0.0, train_comm_wait_s = 0.0, timed_tokens = 0.0;
    long long tokens_seen = batch->state.tokens_seen; // 0, or the checkpoint's
    int timed_steps = 0;
    float last_val_loss = NAN;
    int exit_status = 0;
    for (int step = start_step; step <= max_steps; step++) {
        int last_step = step == max_steps;
        // A -sig signal on any rank: the checkpoint of this step, then exit 75 (train/signal_checkpoint.h).
        int signal = step > start_step ? signal_checkpoint_due(z) : 0;
        if (signal) {
            double t0 = wall_seconds();
            DataLoaderState data = dataloader_get_state(&train_loader);
            batch->state.tokens_seen = tokens_seen;
            test_fault_before_signal_checkpoint(&run.fault);
            if (args.output_dir) zero_checkpoint_save(z, args.output_dir, step, data.shard_index, data.position, args.seed, &batch->state, &gns.meter);
            exit_status = signal_checkpoint_finish(z, signal, args.output_dir, step, wall_seconds() - t0);
            break;
        }
        z->step = step + 1; // diagnoses name steps as the step lines do: from 1
        if (do_val && (step % args.val_every == 0 || last_step)) {
            last_val_loss = gpt2_val_loss(&model, &val_loader, args.val_max_steps);
            if (rank == 0) printf("step %5d/%d | val loss %.6f\n", step, max_steps, last_val_loss);
            char val_text[32];
            logger_record(&logger, "val", "\"step\":%d,\"loss\":%s,\"tokens\":%lld", step,
                          json_number(val_text, sizeof(val_text), last_val_loss), tokens_seen);
        }
        if (hellaswag_eval_due(&hellaswag, step, last_step))
            hellaswag_eval_run(&hellaswag, gpt2_forward_losses, &model, z, step, max_steps, tokens_seen, &logger);
        if (args.sample_every > 0 && (step % args.sample_every == 0 || last_step) && (step > 0 || last_step)) {
            gpt2_sample(&model, &tokenizer, args.gen_tokens, (uint64_t)args.seed + (uint64_t)step, rank == 0);
        }
        if (args.output_dir && args.checkpoint_every > 0 && step > start_step && (step % args.checkpoint_every == 0 || last_step)) {
            DataLoaderState data = dataloader_get_state(&train_loader);
            batch->state.tokens_seen = tokens_seen;
            zero_checkpoint_save(z, args.output_dir, step, data.shard_index, data.position, args.seed, &batch->state, &gns.meter);
        }
        if (last_step || test_fault_at_step(&run.fault, step, rank)) break;

        // This step's batch (the schedule's, decided after the previous step) and its learning rate.
        total_batch_tokens = batch->state.batch_tokens;
        grad_accum_steps = batch_schedule_grad_accum_steps(batch);
        double t0 = wall_seconds();
        float lr = (float)(lr_at_step(&schedule, step) * batch_schedule_lr_scale(batch)), grad_norm;
        float train_loss = gpt2_train_step(&model, &train_loader, &gns, &opt, lr, step, grad_accum_steps,
                                           args.overfit_single_batch, &grad_norm);
        double seconds = wall_seconds() - t0;
        double comm_wait_ms = z->comm_wait_s_step * 1000.0;
        long long sent = z->sent_elements_step;
        tokens_seen += total_batch_tokens;
        if (step > start_step) { // the first step includes warm-up costs
            train_seconds += seconds; train_comm_wait_s += z->comm_wait_s_step; timed_tokens += total_batch_tokens; timed_steps++;
        }
        double tokens_per_s = total_batch_tokens / seconds;
        double mean_step = timed_steps > 0 ? train_seconds / timed_steps : seconds;
        char eta[32];
        format_eta(eta, sizeof(eta), mean_step * (max_steps - step - 1));
        StepReport report = {step + 1, max_steps, train_loss, lr, grad_norm, seconds, comm_wait_ms, tokens_per_s,
                             sent, tokens_seen, total_batch_tokens, eta, z};
        report_train_step(&report, &gns, &logger, rank == 0);
        if (zero_pp_on(z)) report_zeropp_step(z, step + 1, grad_accum_steps, &logger, rank == 0);
        if (!isfinite(train_loss) || !isfinite(grad_norm)) {
            // Every rank sees the same (all-reduced) values, so every rank stops here.
            if (rank == 0)
                fprintf(stderr, "error: step %d: loss %f, grad norm %f; expected finite values (lower -l, check the data; the last checkpoint is kept)\n",
                        step + 1, train_loss, grad_norm);
            zero_ranks_stop();
            return 1;
        }
        batch_schedule_after_step(batch, z, &gns, step + 1, B, T, &logger); // the next step's batch, from this step's meter
    }
    if (rank == 0 && exit_status == 0) {
        printf("done: %d steps", max_steps - start_step);
        if (timed_steps > 0)
            printf(", mean step %.1f ms (comm wait %.1f ms), %.0f tok/s over the last %d", 1000.0 * train_seconds / timed_steps,
                   1000.0 * train_comm_wait_s / timed_steps, timed_tokens / train_seconds, timed_steps);
        printf(", peak memory %.1f MiB", peak_rss_mib());
        if (do_val) printf(", final val loss %.6f", last_val_loss);
        printf("\n");
    }

    zero_trace_close(z, grad_accum_steps);
    logger_close(&logger);
    tokenizer_free(&tokenizer);
    hellaswag_eval_free(&hellaswag);
    dataloader_free(&train_loader);
    if (do_val) dataloader_free(&val_loader);
    gpt2_free(&model);
    zero_ranks_stop();
    return exit_status;
}
#endif
