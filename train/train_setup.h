/*
 * train_setup.h: the start of a training run, shared by train_gpt2.c and train_gpt2.cu:
 * flags, ranks, the batch arithmetic (micro-batch B*T per rank, gradient accumulation up to -d
 * tokens, or the batch schedule of -d auto / -ds: common/batch_schedule.h), the output dir and the checkpoint to resume, and the checks that need the model.
 * Host C; include after zero.cuh (it starts and stops the ranks through the engine).
 * Across hosts (README "Many nodes"): the handshake first (zero/cluster/handshake.h: the same build,
 * flags, model and data on every rank, within -wt), then -o on every host with the run's lock,
 * then rank 0's resume decision, which every rank confirms with its own state file and which
 * brings the checkpoint's settings (common/run_record.h), then the batch arithmetic with them.
 * Every user error is one line (from rank 0, or from the rank that found it) and exit status 1.
 */
#ifndef COMMON_TRAIN_SETUP_H
#define COMMON_TRAIN_SETUP_H
#ifndef ZERO_CUH
#error "include zero.cuh before train/train_setup.h"
#endif
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/stat.h>
#include "common/args.h"
#include "common/batch_schedule.h"
#include "common/dataloader.h"
#include "common/logger.h"
#include "common/test_fault.h"
#include "common/state_file.h"
#include "train/signal_checkpoint.h"
#include "train/model_source.h" // zero_resume_model: the resume decision says where the model comes from

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
    ZeroOffloadArgs offload;   // -zo, -zp, -zd (zero/offload/offload.h)
    int argc;                  // the command line as given: which flags a resume keeps (common/run_record.h)
    char** argv;
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

// The data a pattern names as the fingerprint sees it: file count, total bytes, and a hash of
// the (name, size) list, so that a missing or different shard on one host shows.
static void train_run_fingerprint_data(ZeroFingerprint* fp, const char* field, const char* pattern) {
    glob_t g;
    size_t files = 0;
    long long bytes = 0;
    uint64_t h = FNV1A64_INIT;
    if (glob(pattern, 0, NULL, &g) == 0) {
        files = g.gl_pathc;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            struct stat st;
            long long size = stat(g.gl_pathv[i], &st) == 0 ? (long long)st.st_size : -1;
            bytes += size;
            for (const char* c = g.gl_pathv[i]; *c; c++) { h ^= (unsigned char)*c; h *= 0x100000001B3ull; }
            h ^= (uint64_t)size; h *= 0x100000001B3ull;
        }
    }
    globfree(&g);
    zero_fingerprint_add(fp, field, "%zu file%s, %lld bytes (list hash %016llx)", files, files == 1 ? "" : "s", bytes, (unsigned long long)h);
}

/*
 * What must be the same on every rank: the build, every flag (as given: -d auto and the batch
 * schedule's -dm, -d0, -df, -dw, -dl, -ds included, as every rank must pick the same batch), the
 * model -e names (its config; for a file also its size and checksum slot) and the data (files
 * and sizes).
 */
static void train_run_fingerprint(const TrainArgs* args, ZeroFingerprint* fp) {
    zero_fingerprint_add_build(fp);
    for (int i = 0; i < NUM_ARG_SPECS; i++) {
        const ArgSpec* spec = &arg_specs[i];
        const char* field = (const char*)args + spec->offset;
        if (spec->type == ARG_INT_OR_AUTO && *(const int*)field == TOTAL_BATCH_AUTO) zero_fingerprint_add(fp, spec->flag, "auto");
        else if (spec->type == ARG_INT || spec->type == ARG_INT_OR_AUTO) zero_fingerprint_add(fp, spec->flag, "%d", *(const int*)field);
        else if (spec->type == ARG_FLOAT) zero_fingerprint_add(fp, spec->flag, "%.9g", *(const float*)field);
        else zero_fingerprint_add(fp, spec->flag, "%s", *(const char* const*)field ? *(const char* const*)field : "(none)");
    }
    GPT2Config cfg;
    if (gpt2_config_from_descriptor(args->init, &cfg) == 0) {
        zero_fingerprint_add(fp, "model", "%s: L %d C %d NH %d V %d Vp %d maxT %d", args->init, cfg.num_layers, cfg.channels,
                             cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size, cfg.max_seq_len);
    } else {
        int header[MODEL_HEADER_INTS] = {0};
        struct stat st;
        FILE* f = fopen(args->init, "rb");
        int ok = f != NULL && fread(header, sizeof(int), MODEL_HEADER_INTS, f) == MODEL_HEADER_INTS && stat(args->init, &st) == 0;
        if (f) fclose(f);
        if (ok) zero_fingerprint_add(fp, "model", "%s: %lld bytes, header %d %d %d %d %d %d %d %d, checksum %08x%08x", args->init,
                                     (long long)st.st_size, header[0], header[1], header[2], header[3], header[4], header[5], header[6],
                                     header[7], header[8] == MODEL_FILE_EXTRA ? (unsigned)header[10] : 0u,
                                     header[8] == MODEL_FILE_EXTRA ? (unsigned)header[9] : 0u);
        else zero_fingerprint_add(fp, "model", "%s: not readable here", args->init);
    }
    train_run_fingerprint_data(fp, "train data (-i)", args->train_pattern);
    if (args->val_every > 0) train_run_fingerprint_data(fp, "val data (-j)", args->val_pattern);
}

/*
 * -o on every host (shared, or node-local: the same path, each host its own disk): created by
 * every rank, locked for this run (zero/cluster/run_lock.h), and, unless resuming, free of a previous
 * run on any host. One error line (naming rank and host) from the first rank that fails.
 */
static void train_run_output_dir(const TrainRun* run) {
    const char* dir = run->args.output_dir;
    char err[4800] = "", found[256];
    int ok = output_dir_create(dir, err, sizeof(err)) == 0;
    if (!ok) {
        char line[sizeof(err)]; // "error: -o DIR: ..." with the rank and host after DIR
        snprintf(line, sizeof(line), "error: -o %s (rank %d on %s)%.4500s", dir, run->rank, zero_cluster.host,
                 err + strlen("error: -o ") + strlen(dir));
        memcpy(err, line, sizeof(err));
    }
    zero_startup_agree(ok, err, "creating -o");
    zero_run_lock(dir);
    if (!run->args.resume) {
        ok = !output_dir_has_run(dir, found, sizeof(found));
        if (!ok) snprintf(err, sizeof(err), "error: -o %s: holds a previous run (%s, on rank %d's host %s); expected a new or empty "
                          "directory, or -y 1 to resume it", dir, found, run->rank, zero_cluster.host);
        zero_startup_agree(ok, err, "checking -o for a previous run");
    }
}

// A new run's id (rank 0): random, so that no two runs share one.
static uint64_t train_run_new_id(void) {
    uint64_t id = 0;
    FILE* f = fopen("/dev/urandom", "rb");
    if (f == NULL || fread(&id, sizeof(id), 1, f) != 1) id = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
    if (f) fclose(f);
    return id ? id : 1;
}

/*
 * Rank 0, resuming the checkpoint at step in dir: the run record (common/run_record.h) in the
 * header of its rank-0 state file (this world size's, else any world size's there). Not present
 * when the file has none or cannot be read here (the confirmation that follows names the file).
 */
static RunRecord train_run_checkpoint_record(const char* dir, int step, int world_size) {
    char path[4300];
    int sizes[16];
    zero_state_rank_path(path, sizeof(path), dir, step, 0, world_size);
    if (!file_exists(path) && zero_state_world_sizes(dir, step, sizes, 16) > 0) zero_state_rank_path(path, sizeof(path), dir, step, 0, sizes[0]);
    int64_t header[ZERO_STATE_HEADER_INTS] = {0};
    FILE* f = fopen(path, "rb");
    if (f == NULL || fread(header, sizeof(int64_t), ZERO_STATE_HEADER_INTS, f) != ZERO_STATE_HEADER_INTS || header[ZS_MAGIC] != ZERO_STATE_MAGIC)
        memset(header, 0, sizeof(header));
    if (f) fclose(f);
    return run_record_from_header(header);
}

/*
 * -y 1: rank 0 decides the step to resume (the latest model file in its -o: a model file marks
 * a complete checkpoint) and tells every rank, with the run id and config from that file's
 * header; every rank then confirms its own state file of that step, on its host, before
 * anything else (one error line naming rank, host and file, else every rank exits 1). The model
 * itself comes from rank 0 (zero_resume_model, model_source_*). Without a checkpoint: a new run.
 */
static void train_run_resume_decision(TrainRun* run) {
    const char* dir = run->args.output_dir;
    struct { int64_t step; uint64_t run_id; GPT2Config config; RunRecord record; } decision;
    memset(&decision, 0, sizeof(decision));
    char err[9000] = "";
    int ok = 1;
    if (run->rank == 0) {
        int latest = checkpoint_latest_step(dir);
        if (latest > 0) {
            char path[4300];
            GPT2Config cfg;
            int version, step_in_file;
            model_checkpoint_path(path, sizeof(path), dir, latest);
            model_file_read_header(path, &cfg, &version);
            ok = model_file_verify(path, &decision.run_id, &step_in_file, err, sizeof(err)) == 0;
            decision.step = latest;
            decision.config = cfg;
            decision.record = train_run_checkpoint_record(dir, latest, run->world_size);
        } else {
            decision.run_id = train_run_new_id();
        }
    }
    zero_startup_agree(ok, err, "checking the resume checkpoint's model file");
    zero_startup_bcast(&decision, sizeof(decision), "the resume decision from rank 0");
    zero_cluster.run_id = decision.run_id;
    if (decision.step == 0) {
        if (run->rank == 0) printf("resume: no checkpoint in %s; starting from scratch\n", dir);
        return;
    }
    run->start_step = (int)decision.step;
    run_record_apply(&decision.record, &run->args, run->argc, run->argv, run->rank == 0); // the run's settings, unless given
    model_checkpoint_path(run->resume_model, sizeof(run->resume_model), dir, run->start_step);
    run->init = run->resume_model;
    GPT2Config cfg = decision.config;
    zero_resume_model.active = 1;
    snprintf(zero_resume_model.path, sizeof(zero_resume_model.path), "%s", run->resume_model);
    zero_resume_model.config = cfg;
    int64_t header[ZERO_STATE_HEADER_INTS];
    ok = zero_checkpoint_confirm_state(dir, run->start_step, &cfg, run->rank, run->world_size, header, err, sizeof(err));
    zero_startup_agree(ok, err, "confirming the resume checkpoint's state files");
}

// Flags, ranks, the handshake, batch arithmetic, output dir and the checkpoint to resume (-y 1).
static void train_run_start(TrainRun* run, int* argc, char*** argv) {
    memset(run, 0, sizeof(*run));
    run->argc = *argc;
    run->argv = *argv;
    TrainArgs* args = &run->args;
    train_args_parse(args, *argc, *argv);
    train_args_validate(args);
    if (args->zero_stage != -1 && args->zero_stage != ZERO_STAGE && args->plan_machine == NULL) { // --plan: -z picks the offload rows' stage
        fprintf(stderr, "error: -z %d: this binary was compiled for ZeRO stage %d; expected -z %d or a rebuild with make ZERO_STAGE=%d\n",
                args->zero_stage, ZERO_STAGE, ZERO_STAGE, args->zero_stage);
        exit(1);
    }
    char offload_err[8400] = "";
    zero_placement_parse(args->offload_optimizer, &run->offload.optimizer); // values checked in train_args_validate
    zero_placement_parse(args->offload_params, &run->offload.params);
    run->offload.dir = args->offload_dir;
    if (args->plan_machine == NULL && zero_offload_check_args(&run->offload, ZERO_STAGE, offload_err, sizeof(offload_err)) != 0)
        args_fail("%s", offload_err); // --plan checks them against the stages it plans (plan/plan_setup.h)
#if !ZERO_GPU_BUILD
    if (args->op_timing_steps > 0) {
        fprintf(stderr, "error: -ot %d: the per-kernel table times CUDA kernels; expected -ot 0 here (train_gpt2cu has it)\n",
                args->op_timing_steps);
        exit(1);
    }
#endif
    char pp_err[512]; // ZeRO++ flags against the stage and build (zero/zeropp/zeropp.h; --plan checks them for its stage-3 rows)
    if (args->plan_machine == NULL && zero_pp_check_flags(args->zeropp_qw, args->zeropp_qg, args->zeropp_qg_bits, args->zeropp_hp, args->zeropp_block, ZERO_STAGE,
                            ZERO_GPU_BUILD, pp_err, sizeof(pp_err)))
        args_fail("%s", pp_err);
    if (zero_pp_check_grad_block(args->zeropp_grad_block, pp_err, sizeof(pp_err))) args_fail("%s", pp_err);
    if (zero_pp_check_offload(args->zeropp_qw, args->zeropp_hp, &run->offload, ZERO_GPU_BUILD, pp_err, sizeof(pp_err)))
        args_fail("%s", pp_err);
    if (args->resume && args->output_dir == NULL) {
        fprintf(stderr, "error: -y 1: resuming needs the checkpoint directory; expected -o <dir> as well\n");
        exit(1);
    }
    int signal_mask;
    if (signal_checkpoint_parse(args->checkpoint_signals, &signal_mask) != 0)
        args_fail("error: -sig %s: unknown signal list; expected 0 or names from USR1, USR2, TERM, INT, HUP separated by commas",
                  args->checkpoint_signals);
    if (args->plan_machine != NULL) return; // --plan: no ranks, no training (plan/plan_setup.h)
    run->fault = test_fault_from_env();
    test_fault_before_mpi(&run->fault);
    zero_cluster.timeout_s = args->collective_timeout_s; // before MPI starts: its start-up watchdog's bound too
    zero_ranks_start(argc, argv, &run->rank, &run->world_size);
    test_fault_at_startup(&run->fault, run->rank);

    // Every rank: the same build, flags, model and data, and every rank's host (within -wt).
    ZeroFingerprint fingerprint = {"", 0};
    train_run_fingerprint(args, &fingerprint);
    zero_handshake(&fingerprint);
    signal_checkpoint_install(signal_mask); // after the handshake's fault handlers: -sig's signals checkpoint
    zero_faults_check_launcher(args->collective_timeout_s);

    run->init = args->init;
    if (args->output_dir) train_run_output_dir(run);
    // Resume (-y 1) from the latest complete checkpoint in rank 0's -o: its model file replaces -e.
    if (args->resume) train_run_resume_decision(run);
    else {
        uint64_t id = run->rank == 0 ? train_run_new_id() : 0;
        zero_startup_bcast(&id, sizeof(id), "the run id from rank 0");
        zero_cluster.run_id = id;
    }
    run_record_from_args(&zero_checkpoint_record, args); // every checkpoint of this run records its settings
    run->do_val = args->val_every > 0;

    // Batch: each micro-step every rank processes B*T tokens; accumulate up to -d tokens.
    int B = args->B, T = args->T, N = run->world_size;
    long long per_micro_step = (long long)B * T * N;
    if (per_micro_step > INT_MAX / 2)
        train_run_fail(run, "error: -b %d -t %d: B*T*ranks = %lld tokens per micro-step; expected at most %d", B, T, per_micro_step, INT_MAX / 2);
    run->tokens_per_micro_step = (int)per_micro_step;
    char err[1024];
    if (zero_pp_check_group(args->zeropp_hp, N, err, sizeof(err)) != 0) train_run_fail(run, "%s", err); // ZeRO++ -hp
#if ZERO_GPU_BUILD && ZERO_COMM_MPI
    if (args->zeropp_qw && N > 1)
        train_run_fail(run, "error: -qw 1: the host-staged MPI backend (ZERO_COMM=mpi) gathers bf16 values, not int8 packets; "
                       "expected -qw 0, or the NCCL build");
    if (args->zeropp_hp != 1 && N > 1)
        train_run_fail(run, "error: -hp %d: the host-staged MPI backend (ZERO_COMM=mpi) has no group communicator for hpZ's "
                       "gather; expected -hp 1, or the NCCL build", args->zeropp_hp);
    if (args->zeropp_qg && N > 1)
        train_run_fail(run, "error: -qg 1: the host-staged MPI backend (ZERO_COMM=mpi) reduces bf16 values, not codes; "
                       "expected -qg 0, or the NCCL build");
#endif
    if (batch_schedule_from_args(&run->batch, args, B, T, N, err, sizeof(err)) != 0) train_run_fail(run, "%s", err);
    run->total_batch_tokens = run->batch.state.batch_tokens;
    run->grad_accum_steps = batch_schedule_grad_accum_steps(&run->batch);
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
