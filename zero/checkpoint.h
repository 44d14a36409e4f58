/*
 * zero/checkpoint.h: checkpoints over the engine's interface (docs/design.md "Checkpoints"; file
 * formats in common/model_file.h and common/state_file.h). Host code, the same in both
 * builds: a checkpoint written by either build resumes in either (the state files hold fp32 Adam
 * slices; the model file the fp32 parameters, which on the GPU are the master weights).
 * Resuming at another world size is zero/reshard/reshard.h (two calls below); where the model
 * comes from (-e, the resume checkpoint's model file) is trainer glue, train/model_source.h.
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_CHECKPOINT_H
#define ZERO_CHECKPOINT_H
#ifndef ZERO_CUH
#error "zero/checkpoint.h is part of the ZeRO engine; include zero.cuh"
#endif
#include "common/state_file.h" // the state file's format (zero_state_*)
#include "common/run_record.h"

// The run's settings every state file records (common/run_record.h): set by the trainer's
// start (train/train_setup.h) once resume has applied a checkpoint's record; not present: none.
static RunRecord zero_checkpoint_record;

/*
 * Write the checkpoint of `step` into dir. Every rank writes its state file (its AdamW slices,
 * the step, the train data position, the seed, the gradient noise scale meter's EMAs, the batch
 * schedule's state (the batch of the next step, tokens seen), the run id) into dir on its own
 * host; once all are in place, rank 0 writes the model file from the gathered parameters (with
 * its checksum, run id and step), which marks the checkpoint complete. dir may be shared or
 * node-local (the same path, each host its own disk): nothing here reads another host's files.
 * Every rank calls it.
 */
static void zero_checkpoint_save(ZeroEngine* z, const char* dir, int step, long data_shard, long data_position,
                                 int seed, const BatchScheduleState* batch, const GNSMeter* gns) {
    const ParamLayout* layout = z->layout;
    size_t n = layout->shard_numel;
    float* m = (float*)zero_calloc(n, sizeof(float), "checkpoint Adam m slice");
    float* v = (float*)zero_calloc(n, sizeof(float), "checkpoint Adam v slice");
    zero_get_optimizer_shard(z, m, v);
    int64_t header[ZS_NUM_FIELDS] = {0};
    header[ZS_ZERO_STAGE] = ZERO_STAGE;
    header[ZS_WORLD_SIZE] = z->world_size;
    header[ZS_RANK] = z->rank;
    header[ZS_STEP] = step;
    zero_state_header_set_config(header, &layout->config);
    header[ZS_ALIGN] = layout->align;
    header[ZS_NUMEL] = (int64_t)n;
    header[ZS_DATA_SHARD] = data_shard;
    header[ZS_DATA_POSITION] = data_position;
    header[ZS_SEED] = seed;
    zero_state_header_set_batch(header, batch);
    zero_state_header_set_gns(header, gns);
    header[ZS_RUN_ID] = (int64_t)zero_cluster.run_id;
    run_record_to_header(&zero_checkpoint_record, header);
    char path[4300];
    zero_state_rank_path(path, sizeof(path), dir, step, z->rank, z->world_size);
    zero_state_write(path, header, m, v);
    free(m);
    free(v);
    zero_barrier(z, "checkpoint state files");
    float* full = z->rank == 0 ? (float*)zero_calloc(layout->padded_numel, sizeof(float), "checkpoint parameters") : NULL;
    zero_get_full_params(z, full); // stages 1-3 (GPU), 3 (CPU): gathered unit by unit to rank 0
    if (z->rank == 0) {
        model_checkpoint_path(path, sizeof(path), dir, step);
        model_file_write(path, layout, full, zero_cluster.run_id, step);
        printf("checkpoint: %s + %d state file%s\n", path, z->world_size, z->world_size > 1 ? "s" : "");
    }
    free(full);
    if (!zero_replicas_agree(z) && z->rank == 0)
        fprintf(stderr, "warning: step %d: the replicated parameters%s differ across ranks (ZeRO stage %d); expected bit-identical replicas\n",
                step, ZERO_STAGE == 0 ? " or optimizer state" : "", ZERO_STAGE);
}

/*
 * Resume, step 1 (train/train_setup.h, before any collective that depends on the checkpoint):
 * rank 0 has decided to resume from `step` of the run zero_cluster.run_id, whose model file on
 * its host holds a model of config cfg. Is this rank's own state file for that step in dir (on
 * this host), for this rank and world size, this stage, that config, and of that run? Returns 1,
 * or 0 with one error line in err naming this rank, its host and the file. header gets the
 * file's header (ZERO_STATE_HEADER_INTS) when it returns 1. The payload (and its checksum) is read
 * in zero_checkpoint_load_state.
 */
static int zero_checkpoint_confirm_state(const char* dir, int step, const GPT2Config* cfg, int rank, int N,
                                         int64_t* header, char* err, size_t err_cap) {
    char path[4300], who[128];
    snprintf(who, sizeof(who), "error: rank %d (%s)", rank, zero_cluster.host);
    zero_state_rank_path(path, sizeof(path), dir, step, rank, N);
    if (!file_exists(path)) {
        int sizes[16];
        int count = zero_state_world_sizes(dir, step, sizes, 16);
        char full[4300];
        zero_state_full_path(full, sizeof(full), dir, step);
        if (count > 0 && sizes[0] != N) // written by another number of ranks: resharded on load (zero/reshard/reshard.h)
            return zero_reshard_confirm(dir, step, cfg, rank, N, sizes[0], header, err, err_cap);
        else if (count == 0 && file_exists(full))
            snprintf(err, err_cap, "%s: %s: missing: the checkpoint at step %d has only its full state; expected per-rank state "
                     "— convert first: build/zero_consolidate -o %s -x %d -from full -to %d -z %d", who, path, step, dir, step, N, ZERO_STAGE);
        else
            snprintf(err, err_cap, "%s: %s: missing state file; expected this rank's state for step %d, which rank 0 resumes from "
                     "(model_%08d.bin on %s; a node-local -o keeps each rank's state on the host it ran on)", who, path, step, step,
                     zero_rank_host(0));
        return 0;
    }
    FILE* f = fopen(path, "rb");
    size_t got = f ? fread(header, sizeof(int64_t), ZERO_STATE_HEADER_INTS, f) : 0;
    long long bytes = -1;
    if (f) { fseek(f, 0, SEEK_END); bytes = ftell(f); fclose(f); }
    if (got != ZERO_STATE_HEADER_INTS || header[ZS_MAGIC] != ZERO_STATE_MAGIC || header[ZS_VERSION] != ZERO_STATE_VERSION) {
        snprintf(err, err_cap, "%s: %s: not a state file (short, or bad magic/version); expected a state file written by train_gpt2",
                 who, path);
        return 0;
    }
    ParamLayout layout;
    param_layout_build(&layout, cfg, N, ZERO_ALIGN);
    long long numel = (long long)layout.shard_numel;
    param_layout_free(&layout);
    GPT2Config file_cfg = zero_state_header_config(header);
    if (header[ZS_WORLD_SIZE] != N || header[ZS_RANK] != rank || header[ZS_STEP] != step)
        snprintf(err, err_cap, "%s: %s: holds rank %lld of %lld at step %lld; expected rank %d of %d at step %d",
                 who, path, (long long)header[ZS_RANK], (long long)header[ZS_WORLD_SIZE], (long long)header[ZS_STEP], rank, N, step);
    else if (!gpt2_config_equal(&file_cfg, cfg) || header[ZS_ALIGN] != ZERO_ALIGN || header[ZS_NUMEL] != numel)
        snprintf(err, err_cap, "%s: %s: model config or slice size differs from model_%08d.bin; expected the state of the same checkpoint",
                 who, path, step);
    else if ((uint64_t)header[ZS_RUN_ID] != zero_cluster.run_id)
        snprintf(err, err_cap, "%s: %s: written by run %016llx, but model_%08d.bin (rank 0, %s) by run %016llx; expected the state "
                 "written with that model file (a file of another run left in this dir?)", who, path,
                 (unsigned long long)header[ZS_RUN_ID], step, zero_rank_host(0), (unsigned long long)zero_cluster.run_id);
    else if (bytes != (long long)sizeof(int64_t) * ZERO_STATE_HEADER_INTS + 2 * numel * (long long)sizeof(float))
        snprintf(err, err_cap, "%s: %s: file is %lld bytes; expected %lld for the %lld-element slices its header names (truncated or damaged)",
                 who, path, bytes, (long long)sizeof(int64_t) * ZERO_STATE_HEADER_INTS + 2 * numel * (long long)sizeof(float), numel);
    else
        return 1;
    return 0;
}

/*
 * Resume, step 2: load this rank's state file of the checkpoint at `step` (confirmed in step 1)
 * into the engine's AdamW slices, and return the train data position, the gradient noise scale
 * meter state (steps 0 when it has none) and the batch schedule's state it names. The parameters
 * came from the model file (train/model_source.h). An error on any rank (a damaged payload) stops
 * every rank, with that rank's error line; another batch size than batch_tokens (-1: none
 * expected, -d auto takes the checkpoint's) or another seed than the checkpoint's is a warning
 * (rank 0).
 */
static void zero_checkpoint_load_state(ZeroEngine* z, const char* dir, int step, int seed, long long batch_tokens,
                                       long* data_shard, long* data_position, GNSMeter* gns, BatchScheduleState* batch) {
    int N = z->world_size;
    const ParamLayout* layout = z->layout;
    char path[4300], err[9000] = "";
    int64_t header[ZERO_STATE_HEADER_INTS];
    float *m = NULL, *v = NULL;
    int ok = zero_checkpoint_confirm_state(dir, step, &layout->config, z->rank, N, header, err, sizeof(err));
    int N_old = ok ? (int)header[ZS_WORLD_SIZE] : N, stage_old = (int)header[ZS_ZERO_STAGE];
    zero_state_rank_path(path, sizeof(path), dir, step, z->rank, N);
    if (ok && N_old != N) { // zero/reshard/reshard.h
        ok = zero_reshard_read(z, dir, step, N_old, &m, &v, err, sizeof(err));
    } else if (ok && zero_state_read(path, header, &m, &v, err, sizeof(err)) != 0) {
        char line[sizeof(err)];
        snprintf(line, sizeof(line), "error: rank %d (%s): %.8800s", z->rank, zero_cluster.host, err + strlen("error: "));
        memcpy(err, line, sizeof(err));
        ok = 0;
    }
    int bad = zero_first_failing_rank(z, ok);
    if (bad >= 0) {
        if (z->rank == bad) fprintf(stderr, "%s\n", err);
        free(m);
        free(v);
        zero_ranks_stop();
        exit(1);
    }
    zero_set_optimizer_shard(z, m, v);
    if (z->rank == 0 && (N_old != N || stage_old != ZERO_STAGE))
        printf("resume: the checkpoint's state of %d rank%s at ZeRO stage %d, resharded on load onto %d rank%s at stage %d "
               "(as build/zero_consolidate -from %d -to %d -z %d would)\n", N_old, N_old > 1 ? "s" : "", stage_old, N,
               N > 1 ? "s" : "", ZERO_STAGE, N_old, N, ZERO_STAGE);
    if (batch_tokens == -1) batch_tokens = header[ZS_BATCH_TOKENS];
    // With a run record, resume already said each value that differs (common/run_record.h).
    if (z->rank == 0 && header[ZS_RECORD] != 1 && (header[ZS_BATCH_TOKENS] != batch_tokens || header[ZS_SEED] != seed))
        printf("warning: resuming with a batch of %lld tokens and seed %d, but the checkpoint was written with %lld and %lld: "
               "training continues, not on the same trajectory\n", batch_tokens, seed,
               (long long)header[ZS_BATCH_TOKENS], (long long)header[ZS_SEED]);
    *batch = zero_state_header_batch(header);
    *data_shard = (long)header[ZS_DATA_SHARD];
    *data_position = (long)header[ZS_DATA_POSITION];
    *gns = zero_state_header_gns(header);
    free(m);
    free(v);
}

#endif // ZERO_CHECKPOINT_H
