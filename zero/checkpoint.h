/*
 * zero/checkpoint.h: checkpoints over the engine's interface (DESIGN.md "Checkpoints"; file
 * formats in common/checkpoint.h and common/zero_checkpoint.h). Host code, the same in both
 * builds: a checkpoint written by either build resumes in either (the state files hold fp32 Adam
 * slices; the model file the fp32 parameters, which on the GPU are the master weights).
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_CHECKPOINT_H
#define ZERO_CHECKPOINT_H
#ifndef ZERO_CUH
#error "zero/checkpoint.h is part of the ZeRO engine; include zero.cuh"
#endif

/*
 * Write the checkpoint of `step` into dir. Every rank writes its state file (its AdamW slices,
 * the step, the train data position, the seed, the gradient noise scale meter's EMAs, the batch
 * schedule's state: the batch of the next step, tokens seen); once all
 * are in place, rank 0 writes the model
 * file from the gathered parameters, which marks the checkpoint complete. Every rank calls it.
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
        model_file_write(path, layout, full);
        printf("checkpoint: %s + %d state file%s\n", path, z->world_size, z->world_size > 1 ? "s" : "");
    }
    free(full);
    if (!zero_replicas_agree(z) && z->rank == 0)
        fprintf(stderr, "warning: step %d: the replicated parameters%s differ across ranks (ZeRO stage %d); expected bit-identical replicas\n",
                step, ZERO_STAGE == 0 ? " or optimizer state" : "", ZERO_STAGE);
}

/*
 * Resume: load this rank's state file of the checkpoint at `step` (same world size and stage as
 * this run) into the engine's AdamW slices, and return the train data position, the gradient
 * noise scale meter state (steps 0 when it has none) and the batch schedule's state it names. The
 * parameters came from the model file. An error on any rank stops every rank, with that rank's
 * error line; another batch size than batch_tokens (-1: none expected, -d auto takes the
 * checkpoint's) or another seed than the checkpoint's is a warning (rank 0).
 */
static void zero_checkpoint_load_state(ZeroEngine* z, const char* dir, int step, int seed, long long batch_tokens,
                                       long* data_shard, long* data_position, GNSMeter* gns, BatchScheduleState* batch) {
    int N = z->world_size;
    const ParamLayout* layout = z->layout;
    char path[4300], err[9000] = "";
    int64_t header[ZERO_STATE_HEADER_INTS];
    float *m = NULL, *v = NULL;
    int ok = 0;
    zero_state_rank_path(path, sizeof(path), dir, step, z->rank, N);
    if (!file_exists(path)) {
        int sizes[16];
        int count = zero_state_world_sizes(dir, step, sizes, 16);
        char full[4300];
        zero_state_full_path(full, sizeof(full), dir, step);
        if (count > 0 && sizes[0] != N)
            snprintf(err, sizeof(err), "error: %s: missing: the checkpoint at step %d has state for world size %d; expected world size %d "
                     "(this run); convert first: build/zero_consolidate -o %s -x %d -from %d -to %d -z %d",
                     path, step, sizes[0], N, dir, step, sizes[0], N, ZERO_STAGE);
        else if (count == 0 && file_exists(full))
            snprintf(err, sizeof(err), "error: %s: missing: the checkpoint at step %d has only its full state; expected per-rank state "
                     "— convert first: build/zero_consolidate -o %s -x %d -from full -to %d -z %d", path, step, dir, step, N, ZERO_STAGE);
        else
            snprintf(err, sizeof(err), "error: %s: missing state file; expected one state file per rank beside model_%08d.bin", path, step);
    } else if (zero_state_read(path, header, &m, &v, err, sizeof(err)) == 0) {
        GPT2Config cfg = zero_state_header_config(header);
        if (header[ZS_WORLD_SIZE] != N || header[ZS_RANK] != z->rank || header[ZS_STEP] != step)
            snprintf(err, sizeof(err), "error: %s: holds rank %lld of %lld at step %lld; expected rank %d of %d at step %d",
                     path, (long long)header[ZS_RANK], (long long)header[ZS_WORLD_SIZE], (long long)header[ZS_STEP], z->rank, N, step);
        else if (!gpt2_config_equal(&cfg, &layout->config) || header[ZS_ALIGN] != layout->align ||
                 header[ZS_NUMEL] != (int64_t)layout->shard_numel)
            snprintf(err, sizeof(err), "error: %s: model config or slice size differs from model_%08d.bin; expected the state of the same checkpoint",
                     path, step);
        else if (header[ZS_ZERO_STAGE] != ZERO_STAGE)
            snprintf(err, sizeof(err), "error: %s: written at ZeRO stage %lld; expected stage %d (this binary) "
                     "— convert first: build/zero_consolidate -o %s -x %d -from %d -to %d -z %d",
                     path, (long long)header[ZS_ZERO_STAGE], ZERO_STAGE, dir, step, N, N, ZERO_STAGE);
        else
            ok = 1;
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
    if (batch_tokens == -1) batch_tokens = header[ZS_BATCH_TOKENS];
    if (z->rank == 0 && (header[ZS_BATCH_TOKENS] != batch_tokens || header[ZS_SEED] != seed))
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
