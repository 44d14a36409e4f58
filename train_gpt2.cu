/*
 * train_gpt2.cu: the GPU trainer for GPT-2 (CUDA, cuBLASLt, NCCL, Open MPI; one GPU needs neither
 * NCCL nor MPI: make NO_USE_MPI=1, chosen by itself where Open MPI is not installed).
 *
 * The model, its forward and backward and the ZeRO engine's calls in them are model/gpt2_gpu.cuh;
 * the engine is zero.cuh (under nvcc its model-facing side is zero/gpu/engine_gpu.cuh). This file
 * is the training run around them: sampling, the optimizer step over micro-steps
 * (zero_step_begin, forward + backward, zero_optimizer_step), the step line and log with MFU and
 * the -ot per-op table, validation, checkpoints and main() with the step loop. Same command line,
 * model files and log as the CPU trainer (train_gpt2.c): the host code is shared through common/
 * and train/ (args, checkpoint, dataloader, tokenizer, schedule, logger, init, the gradient noise
 * scale meter train/noise_scale.h, the ZERO_TEST_FAULT hooks common/test_fault.h).
 *
 * Ranks: without mpirun, one process on one GPU. With `mpirun -np N ./train_gpt2cu ...`, rank 0
 * creates the NCCL unique id and broadcasts it over MPI, each rank takes the GPU of its local
 * rank, and NCCL carries all gradient and parameter traffic on a dedicated stream.
 * Checkpoints, -y 1 resume and the -wt collective timeout are the engine's (zero.cuh).
 *
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * test_gpt2.cu includes this file with TESTING defined to reuse everything but main().
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "common/args.h"
#include "common/model_file.h"
#include "common/dataloader.h"
#include "common/gpt2_config.h"
#include "common/flops.h"      // MFU's numerator
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
#include "train/noise_scale.h" // the GNS meter's glue to the engine, shared with train_gpt2.c: after zero.cuh
#include "train/batch_schedule_trainer.h" // the batch schedule's glue, shared with train_gpt2.c: after noise_scale.h
#include "train/plan_exec.h"   // --plan: runs ./plan_gpt2 (plan/plan_gpt2.c) in this process's place
#include "train/hellaswag_eval.h" // -hs: HellaSwag during training, shared with train_gpt2.c: after zero.cuh

#include "model/gpt2_gpu.cuh"     // the model: device buffers, forward, backward (after train/model_source.h)

// Peak dense bf16 tensor-core throughput used for MFU: the H200 (and H100) SXM, 989 TFLOP/s
// (NVIDIA's datasheet, without sparsity).
#define PEAK_BF16_FLOPS 989e12

// ----------------------------------------------------------------------------------------------
// Sampling

// Generate gen_tokens tokens after <|endoftext|> (every rank runs it: ZeRO-3 gathers need all
// ranks); rank 0 prints the text.
static void gpt2_sample(GPT2* model, Tokenizer* tokenizer, int gen_tokens, uint64_t seed, int print) {
    int T = gen_tokens + 1 < model->T ? gen_tokens + 1 : model->T;
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int* tokens = (int*)host_alloc((size_t)T * sizeof(int), "sample tokens");
    tokens[0] = 50256 < V ? 50256 : 0; // <|endoftext|> starts a document
    Rng rng;
    rng_seed(&rng, seed);
    for (int t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, t, 0.0f, 0.0f);
        zero_device_synchronize(&model->zero, "sampling logits");
        CUDA_CHECK(cudaMemcpyAsync(model->logits_staging, model->acts.logits_last, (size_t)Vp * sizeof(bf16),
                                   cudaMemcpyDeviceToHost, model->zero.gpu.compute));
        CUDA_CHECK(cudaStreamSynchronize(model->zero.gpu.compute));
        for (int i = 0; i < Vp; i++) model->logits_host[i] = __bfloat162float(model->logits_staging[i]);
        tokens[t] = sample_from_logits(model->logits_host, V, rng_uniform(&rng));
    }
    if (print) sample_print(tokenizer, tokens + 1, T - 1);
    free(tokens);
}

// ----------------------------------------------------------------------------------------------
// Training loop helpers

// Training FLOPs per token for the MFU column, llm.c's count (common/flops.h; the planner's too).
#define MFU_FORMULA_TEXT "6N + 6LCT FLOPs per token (llm.c's count)"
static double flops_per_token(const GPT2* model, int T) {
    const GPT2Config* c = &model->config;
    return gpt2_flops_per_token(model->layout.num_parameters, c->num_layers, c->channels, T);
}

static float gpt2_val_loss(GPT2* model, DataLoader* val_loader, int val_steps) {
    dataloader_reset(val_loader);
    gpt2_take_loss(model); // start from zero
    for (int i = 0; i < val_steps; i++) {
        dataloader_next_batch(val_loader);
        gpt2_forward(model, val_loader->inputs, val_loader->targets, model->B, model->T, 0.0f, 1.0f / val_steps);
    }
    return (float)zero_all_reduce_mean(&model->zero, gpt2_take_loss(model), "val loss"); // each rank its slices, then the mean
}

// HellaSwag's forward (train/hellaswag_eval.h): per-position losses (fp32) of one (B,T) batch,
// copied to the host (the wait is the eval's: it runs between steps).
static void gpt2_forward_losses(void* m, const int* inputs, const int* targets, float* losses) {
    GPT2* model = (GPT2*)m;
    gpt2_forward(model, inputs, targets, model->B, model->T, 0.0f, 0.0f);
    CUDA_CHECK(cudaMemcpyAsync(losses, model->acts.losses, (size_t)model->B * model->T * sizeof(float), cudaMemcpyDeviceToHost,
                               model->zero.gpu.compute));
    zero_stream_synchronize(&model->zero, model->zero.gpu.compute, "hellaswag losses");
}

// GPU memory in use on this device now (everything: context, cuBLASLt, NCCL, our buffers).
static double gpu_used_mib(void) {
    size_t free_bytes, total_bytes;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return (double)(total_bytes - free_bytes) / 1048576.0;
}

// Rank 0, at start-up: what runs (stage, world size, device, collectives, model, batch), what
// each rank allocates and sends beside the formulas of docs/design.md "Stages" (zero_print_accounting, as the CPU
// trainer), the GNS meter's set-up, on stdout and as the log's config record.
static void print_run_config(const TrainArgs* args, const GPT2* model, const char* init, const DataLoader* train_loader,
                             int do_val, int grad_accum_steps, int total_batch_tokens, int max_steps, int start_step,
                             const GradientNoiseScale* gns, const BatchSchedule* batch, Logger* logger) {
    const GPT2Config* cfg = &model->config;
    const ZeroEngine* z = &model->zero;
    int B = model->B, T = model->T, world_size = z->world_size;
    size_t psi = model->layout.padded_numel;
    int device;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    printf("GPT-2 GPU trainer%s | ZeRO stage %d | world size %d | device %s (sm_%d%d) | collectives %s | attention %s\n",
           ZERO_EXT ? "" : " (the ZeRO core alone: built with ZERO_EXT=none)", ZERO_STAGE, world_size, prop.name, prop.major, prop.minor, ZERO_COMM_NAME, ATTENTION_IMPLEMENTATION);
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
    printf("memory per rank: params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB (master + m + v), working units %.1f MiB, "
           "activations %.1f MiB\n", z->bytes_params / 1048576.0, z->bytes_grads / 1048576.0, z->bytes_optimizer / 1048576.0,
           z->bytes_working / 1048576.0, model->act_bytes / 1048576.0);
    // What the peak on the done line should come to, above the CUDA context: the state the
    // formula counts, working units, activations and the cuBLASLt workspace.
    size_t state = zero_state_bytes_formula_mixed(ZERO_STAGE, psi, world_size);
    printf("device memory: expected %.1f MiB above the CUDA context = %s %.1f + working units %.1f + activations %.1f "
           "+ cuBLASLt workspace %.1f (MiB)\n", (state + z->bytes_working + model->act_bytes + MATMUL_WORKSPACE_BYTES) / 1048576.0,
           zero_state_bytes_formula_mixed_text[ZERO_STAGE], state / 1048576.0, z->bytes_working / 1048576.0,
           model->act_bytes / 1048576.0, MATMUL_WORKSPACE_BYTES / 1048576.0);
    printf("mfu: %s = %.3f GFLOP per token, against %.0f TFLOP/s per GPU (H200/H100 SXM bf16 dense peak)\n",
           MFU_FORMULA_TEXT, flops_per_token(model, T) / 1e9, PEAK_BF16_FLOPS / 1e12);
    printf("train: %zu tokens | val: %s\n", train_loader->num_tokens_total, do_val ? args->val_pattern : "off");
    noise_scale_print_setup(gns);
    if (start_step > 0) printf("resume: from step %d (%s)\n", start_step, init);
    char init_text[8192], gns_fields[256], batch_fields[512], offload_fields[512];
    logger_record(logger, "config", "\"init\":\"%s\",\"wte_units\":%d,\"L\":%d,\"C\":%d,\"NH\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d,\"parameters\":%zu,"
                  "\"B\":%d,\"T\":%d,\"world_size\":%d,\"zero_stage\":%d,\"batch_tokens\":%d,\"grad_accum_steps\":%d,"
                  "\"max_steps\":%d,\"lr\":%g,\"resume_step\":%d,\"padded_parameters\":%zu,"
                  "\"bytes_params\":%zu,\"bytes_grads\":%zu,\"bytes_optimizer\":%zu,\"bytes_working\":%zu,\"bytes_ring\":%zu,\"bytes_activations\":%zu,"
                  "\"bytes_state_formula\":%zu,\"bytes_state_formula_text\":\"%s\","
                  "\"elements_sent_formula\":%lld,\"elements_sent_formula_text\":\"%s\",\"device\":\"%s\",\"collectives\":\"%s\",%s%s,%s",
                  json_escape(init_text, sizeof(init_text), args->init), model->layout.num_wte_units, cfg->num_layers, cfg->channels, cfg->num_heads,
                  cfg->vocab_size, cfg->padded_vocab_size,
                  cfg->max_seq_len, model->layout.num_parameters, B, T, world_size, ZERO_STAGE, total_batch_tokens, grad_accum_steps,
                  max_steps, args->learning_rate, start_step, psi,
                  z->bytes_params, z->bytes_grads, z->bytes_optimizer, z->bytes_working, z->bytes_ring, model->act_bytes,
                  zero_state_bytes_formula_mixed(ZERO_STAGE, psi, world_size), zero_state_bytes_formula_mixed_text[ZERO_STAGE],
                  zero_elements_sent_formula(ZERO_STAGE, psi, world_size, grad_accum_steps, zero_embedding_numel(&model->layout), 0),
                  zero_elements_sent_formula_text[ZERO_STAGE], prop.name, ZERO_COMM_NAME,
                  zero_offload_config_fields(z, grad_accum_steps, offload_fields, sizeof(offload_fields)),
                  noise_scale_config_fields(gns_fields, sizeof(gns_fields), gns),
                  batch_schedule_config_fields(batch_fields, sizeof(batch_fields), batch));
    fflush(stdout);
}

// A step enqueued whose results the host has not read yet (read one step later: finish_step).
typedef struct {
    int step;       // from 1; 0: none
    int max_steps;
    float lr;
    int timed_alone; // a host sync came before it (or it is the first): time it from its own start event
    int first;       // the run's first step: warm-up costs, left out of the mean
    int batch_tokens; // its batch (the schedule's)
} StepPending;

typedef struct {
    long long tokens_seen;
    double train_seconds, comm_wait_s, peak_used_mib, timed_tokens;
    int timed_steps;
} TrainStats;

/*
 * Step p's results, once the device has them (zero_step_result: the host waits, timed, while the
 * next step is already queued): the loss (the mean over ranks, as one process with the global
 * batch would report it), the norm, the GNS meter's update, the step line and the log record.
 * Step time is device time: from the previous step's end to this one's (so a gap the host left
 * shows), or from its own start after a host sync. Then the batch schedule's decision for the
 * step after it (train/batch_schedule_trainer.h: it needs this step's meter update; a no-op for
 * a fixed batch). Returns 0 when the run must stop (a non-finite loss or norm: every rank sees the
 * same all-reduced values, so every rank stops).
 */
static int finish_step(GPT2* model, StepPending* p, BatchSchedule* batch, GradientNoiseScale* gns, Logger* logger,
                       TrainStats* stats, double model_flops_per_token) {
    ZeroEngine* z = &model->zero;
    int total_batch_tokens = p->batch_tokens;
    ZeroStepResult r;
    zero_step_result(z, p->step, &r);
    float train_loss = (float)zero_all_reduce_mean(z, model->loss_host[p->step % ZERO_STEP_SLOTS], "train loss");
    noise_scale_step(gns, z);
    double seconds = !p->timed_alone && isfinite(r.since_previous_s) ? r.since_previous_s : r.device_seconds;
    double used = gpu_used_mib();
    if (used > stats->peak_used_mib) stats->peak_used_mib = used;
    stats->tokens_seen += total_batch_tokens;
    // The mean leaves out the first step (warm-up costs) and the steps timed op by op (-ot).
    int profiled = op_timer_times_step(&model->timer, p->step);
    op_timer_step_read(&model->timer, p->step, r.device_seconds, r.comm_wait_s);
    if (!p->first && !profiled) {
        stats->train_seconds += seconds; stats->comm_wait_s += r.comm_wait_s; stats->timed_tokens += total_batch_tokens;
        stats->timed_steps++;
    }
    double tokens_per_s = total_batch_tokens / seconds;
    double mfu = tokens_per_s * model_flops_per_token / (PEAK_BF16_FLOPS * z->world_size);
    double mean_step = stats->timed_steps > 0 ? stats->train_seconds / stats->timed_steps : seconds;
    char eta[32];
    format_eta(eta, sizeof(eta), mean_step * (p->max_steps - p->step));
    if (z->rank == 0) {
        char gns_text[32], offload_text[256];
        printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | gns %s | %.1f ms | comm wait %.1f ms | sent %lld | "
               "%.0f tok/s | MFU %.1f%% | eta %s%s\n", p->step, p->max_steps, train_loss, p->lr, r.grad_norm,
               noise_scale_text(gns, gns_text, sizeof(gns_text)), seconds * 1000.0, r.comm_wait_s * 1000.0, r.sent_elements,
               tokens_per_s, 100.0 * mfu, eta, zero_offload_step_text(z, offload_text, sizeof(offload_text)));
        fflush(stdout);
    }
    char loss_text[32], norm_text[32], gns_fields[256], offload_fields[256];
    logger_record(logger, "train", "\"step\":%d,\"loss\":%s,\"lr\":%.6g,\"grad_norm\":%s,\"ms\":%.3f,"
                  "\"tokens_per_s\":%.1f,\"tokens\":%lld,\"batch_tokens\":%d,\"comm_wait_ms\":%.3f,"
                  "\"sent_elements\":%lld,\"mfu\":%.4f%s,%s",
                  p->step, json_number(loss_text, sizeof(loss_text), train_loss), p->lr,
                  json_number(norm_text, sizeof(norm_text), r.grad_norm), seconds * 1000.0, tokens_per_s, stats->tokens_seen,
                  total_batch_tokens, r.comm_wait_s * 1000.0, r.sent_elements, mfu,
                  zero_offload_step_fields(z, offload_fields, sizeof(offload_fields)), noise_scale_train_fields(gns_fields, sizeof(gns_fields), gns));
    p->step = 0;
    if (!isfinite(train_loss) || !isfinite(r.grad_norm)) {
        if (z->rank == 0)
            fprintf(stderr, "error: step %d: loss %f, grad norm %f; expected finite values (lower -l, check the data; the last checkpoint is kept)\n",
                    r.step, train_loss, r.grad_norm);
        zero_ranks_stop();
        return 0;
    }
    batch_schedule_after_step(batch, z, gns, r.step, model->B, model->T, logger);
    return 1;
}

#ifndef TESTING
int main(int argc, char** argv) {
    // Flags, ranks, batch arithmetic, output dir, the checkpoint to resume: train/train_setup.h.
    plan_exec_if_asked(argc, argv); // --plan: the planner's own binary, no training, no GPU
    TrainRun run;
    train_run_start(&run, &argc, &argv);
    TrainArgs args = run.args;
    int rank = run.rank, world_size = run.world_size, B = args.B, T = args.T;
    int start_step = run.start_step, do_val = run.do_val;
    BatchSchedule* batch = &run.batch; // the batch of every step: common/batch_schedule.h

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_pattern, B, T, rank, world_size);
    if (do_val) dataloader_init(&val_loader, args.val_pattern, B, T, rank, world_size);

    double baseline_mib = gpu_used_mib(); // the CUDA context (and anything else on the GPU) before our buffers
    matmul_init();
    GPT2 model;
    char offload_err[512];
    if (zero_offload_gpu_check_args(&run.offload, offload_err, sizeof(offload_err)) != 0) train_run_fail(&run, "%s", offload_err);
    gpt2_build(&model, run.init, B, T, (uint64_t)args.seed, rank, world_size, &run.offload);
    ZeroEngine* z = &model.zero;
    z->timeout_s = args.collective_timeout_s;
    zero_pp_setup(z, args.zeropp_qw, args.zeropp_qg, args.zeropp_qg_bits, args.zeropp_hp, args.zeropp_block, args.zeropp_grad_block);
    GNSMeter saved_gns; // the meter's EMAs from the checkpoint (none: steps 0)
    gns_init(&saved_gns, 0.0);
    if (start_step > 0) {
        // Adam m, v and the data position from this rank's state file; the master weights came
        // from the model file (fp32); the bf16 parameters are re-rounded as the last step did.
        DataLoaderState data;
        BatchScheduleState saved_batch;
        zero_checkpoint_load_state(z, args.output_dir, start_step, args.seed, batch_schedule_expected_at(batch, start_step),
                                   &data.shard_index, &data.position, &saved_gns, &saved_batch);
        dataloader_set_state(&train_loader, data);
        batch_schedule_restore(batch, &saved_batch, start_step, rank);
        zero_params_round_as_step(z, start_step);
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
    double model_flops_per_token = flops_per_token(&model, T);
    // -ot K: steps 3 .. K+2 of this run timed op family by op family (common/op_timer.cuh);
    // marks per step: about 30 per layer and micro-step, plus the rest.
    op_timer_init(&model.timer, args.op_timing_steps, start_step + 3, (32 * model.config.num_layers + 48) * grad_accum_steps + 64,
                  z->gpu.compute);

    GradientNoiseScale gns; // train/noise_scale.h: which gradients the engine measures, per stage
    noise_scale_setup(&gns, args.gns_beta, B, T, world_size, grad_accum_steps, total_batch_tokens);
    noise_scale_restore(&gns, &saved_gns, rank); // resume: the EMAs go on where the checkpoint left them
    if (rank == 0) print_run_config(&args, &model, run.init, &train_loader, do_val,
                                    grad_accum_steps, total_batch_tokens, max_steps, start_step, &gns, batch, &logger);

    int trace_first, trace_last; // -tr: the timeline of steps -ts (zero/trace/trace.h)
    train_args_trace_steps(args.trace_steps, &trace_first, &trace_last);
    zero_trace_check_steps(args.trace_path, args.trace_steps, trace_first, trace_last, start_step, max_steps);
    zero_trace_open(z, args.trace_path, trace_first, trace_last, grad_accum_steps);
    TrainStats stats = {0};
    stats.tokens_seen = batch->state.tokens_seen; // 0, or the checkpoint's
    StepPending pending = {0};
    // A batch schedule (-d auto, -ds) picks step t+1's batch from step t's results: then the host
    // reads each step back before queueing the next (one wait per step, the schedule's cost);
    // with a fixed batch it reads step t while step t+1 is already queued. So does -zo cpu|nvme,
    // whose step lines carry the step's own host<->device and NVMe bytes (engine counters the
    // next step restarts); its host already waits inside each step (AdamW runs there), so the
    // read-back costs it no overlap.
    int sync_each_step = batch->kind != BATCH_FIXED || zero_offload_gpu_host_optimizer(z);
    float last_val_loss = NAN;
    int exit_status = 0; // 75 after a checkpoint on a signal
    int synced = 1; // a host sync (eval, sample, checkpoint) since the last step: its gap is not the step's
    for (int step = start_step; step <= max_steps; step++) {
        int last_step = step == max_steps;
        int val_due = do_val && (step % args.val_every == 0 || last_step);
        int sample_due = args.sample_every > 0 && (step % args.sample_every == 0 || last_step) && (step > 0 || last_step);
        int checkpoint_due = args.output_dir && args.checkpoint_every > 0 && step > start_step &&
                             (step % args.checkpoint_every == 0 || last_step);
        int hellaswag_due = hellaswag_eval_due(&hellaswag, step, last_step);
        // Before anything that reads the model or the meter, or ends the run: the last step's
        // results (printed, logged, into the meter).
        int signal = step > start_step ? signal_checkpoint_due(z) : 0; // a -sig signal on any rank (train/signal_checkpoint.h)
        if (pending.step > 0 && (sync_each_step || val_due || hellaswag_due || sample_due || checkpoint_due || signal || last_step || run.fault.step == step)) {
            if (!finish_step(&model, &pending, batch, &gns, &logger, &stats, model_flops_per_token)) return 1;
            synced = 1;
        }
        if (signal) { // the checkpoint of this step, then exit 75
            double t0 = zero_clock();
            DataLoaderState data = dataloader_get_state(&train_loader);
            batch->state.tokens_seen = stats.tokens_seen;
            test_fault_before_signal_checkpoint(&run.fault);
            if (args.output_dir) zero_checkpoint_save(z, args.output_dir, step, data.shard_index, data.position, args.seed, &batch->state, &gns.meter);
            exit_status = signal_checkpoint_finish(z, signal, args.output_dir, step, zero_clock() - t0);
            break;
        }
        z->step = step + 1; // diagnoses name steps as the step lines do: from 1
        if (val_due) {
            last_val_loss = gpt2_val_loss(&model, &val_loader, args.val_max_steps);
            if (rank == 0) printf("step %5d/%d | val loss %.6f\n", step, max_steps, last_val_loss);
            char val_text[32];
            logger_record(&logger, "val", "\"step\":%d,\"loss\":%s,\"tokens\":%lld", step,
                          json_number(val_text, sizeof(val_text), last_val_loss), stats.tokens_seen);
        }
        if (hellaswag_due)
            hellaswag_eval_run(&hellaswag, gpt2_forward_losses, &model, z, step, max_steps, stats.tokens_seen, &logger);
        if (sample_due) gpt2_sample(&model, &tokenizer, args.gen_tokens, (uint64_t)args.seed + (uint64_t)step, rank == 0);
        if (checkpoint_due) {
            DataLoaderState data = dataloader_get_state(&train_loader);
            batch->state.tokens_seen = stats.tokens_seen;
            zero_checkpoint_save(z, args.output_dir, step, data.shard_index, data.position, args.seed, &batch->state, &gns.meter);
        }
        if (last_step || test_fault_at_step(&run.fault, step, rank)) break;

        // One optimizer step, enqueued without waiting: micro-steps of forward + backward (each
        // unit's collective starts on the comm stream as backward finishes it), then AdamW on
        // the owned slices with its clip factor on the device; the loss is copied to pinned
        // memory behind the last forward. The host goes on to the previous step's results. The
        // batch is the schedule's, decided after the previous step.
        total_batch_tokens = batch->state.batch_tokens;
        grad_accum_steps = batch_schedule_grad_accum_steps(batch);
        int t = step + 1, slot = t % ZERO_STEP_SLOTS;
        zero_step_begin(z, t);
        op_timer_step_begin(&model.timer, t);
        model.loss_slot = slot;
        CUDA_CHECK(cudaMemsetAsync(model.loss_sum_device + slot, 0, sizeof(float), z->gpu.compute));
        for (int micro_step = 0; micro_step < grad_accum_steps; micro_step++) {
            if (!args.overfit_single_batch || (step == 0 && micro_step == 0)) dataloader_next_batch(&train_loader);
            gpt2_forward(&model, train_loader.inputs, train_loader.targets, B, T,
                         1.0f / ((float)B * T * grad_accum_steps), 1.0f / grad_accum_steps);
            z->gns.measure_local_grad_norm = noise_scale_measures(&gns, micro_step); // the GNS small batch(es)
            gpt2_backward(&model, B, T, micro_step == grad_accum_steps - 1);
        }
        z->gns.measure_local_grad_norm = 0;
        CUDA_CHECK(cudaMemcpyAsync(model.loss_host + slot, model.loss_sum_device + slot, sizeof(float), cudaMemcpyDeviceToHost,
                                   z->gpu.compute));
        float lr = (float)(lr_at_step(&schedule, step) * batch_schedule_lr_scale(batch));
        OP_MARK(&model, OP_OPTIMIZER);
        zero_trace_compute(z, ZERO_TRACE_OPTIMIZER, -1);
        zero_optimizer_step_async(z, &opt, lr, t);
        zero_trace_step_end(z); // the step as the device runs it: its results are read one step later
        op_timer_step_end(&model.timer);
        model.loss_slot = LOSS_EVAL_SLOT;
        if (pending.step > 0 && !finish_step(&model, &pending, batch, &gns, &logger, &stats, model_flops_per_token))
            return 1;
        pending = StepPending{t, max_steps, lr, synced, t == start_step + 1, total_batch_tokens};
        synced = 0;
    }
    if (pending.step > 0 && !finish_step(&model, &pending, batch, &gns, &logger, &stats, model_flops_per_token))
        return 1;
    if (rank == 0 && stats.timed_steps > 0 && exit_status == 0) {
        double tokens_per_s = stats.timed_tokens / stats.train_seconds;
        printf("done: mean step %.1f ms (comm wait %.1f ms), %.0f tok/s, MFU %.1f%% over %d steps, peak GPU memory %.1f MiB "
               "(%.1f above the CUDA context)%s", 1000.0 * stats.train_seconds / stats.timed_steps,
               1000.0 * stats.comm_wait_s / stats.timed_steps, tokens_per_s,
               100.0 * tokens_per_s * model_flops_per_token / (PEAK_BF16_FLOPS * world_size), stats.timed_steps,
               stats.peak_used_mib, stats.peak_used_mib - baseline_mib, do_val ? "" : "\n");
        if (do_val) printf(", final val loss %.6f\n", last_val_loss);
    }
    if (rank == 0 && args.op_timing_steps > 0) {
        OpCost cost[OP_NUM_FAMILIES];
        const GPT2Config* cfg = &model.config;
        op_costs_step(cost, B, T, cfg->channels, cfg->num_layers, cfg->num_heads, cfg->padded_vocab_size, grad_accum_steps,
                      model.layout.padded_numel);
        if (model.timer.steps_done < args.op_timing_steps)
            printf("op timing: %d of the %d steps asked for were run (-x too small: steps 3 .. %d are timed)\n",
                   model.timer.steps_done, args.op_timing_steps, args.op_timing_steps + 2);
        op_timer_print(&model.timer, cost, stdout);
    }
    op_timer_free(&model.timer);

    zero_trace_close(z, grad_accum_steps);
    logger_close(&logger);
    tokenizer_free(&tokenizer);
    hellaswag_eval_free(&hellaswag);
    dataloader_free(&train_loader);
    if (do_val) dataloader_free(&val_loader);
    gpt2_free(&model);
    matmul_destroy();
    zero_ranks_stop();
    return exit_status;
}
#endif
