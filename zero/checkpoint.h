/*
 * zero/checkpoint.h: checkpoints over the engine's interface (DESIGN.md "Checkpoints"; file
 * formats in common/model_file.h and common/state_file.h). Host code, the same in both
 * builds: a checkpoint written by either build resumes in either (the state files hold fp32 Adam
 * slices; the model file the fp32 parameters, which on the GPU are the master weights).
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_CHECKPOINT_H
#define ZERO_CHECKPOINT_H
#ifndef ZERO_CUH
#error "zero/checkpoint.h is part of the ZeRO engine; include zero.cuh"
#endif
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

// Rank `rank` of N's part of any unit overlaps rank o of N_old's? (layouts padded for N and N_old)
static int zero_checkpoint_parts_overlap(const ParamLayout* now, int N, int rank, const ParamLayout* old, int N_old, int o) {
    for (int u = 0; u < now->num_units; u++) {
        size_t b, e, at, ob, oe, oat;
        zero_state_rank_part(now, N, rank, u, &b, &e, &at);
        zero_state_rank_part(old, N_old, o, u, &ob, &oe, &oat);
        if ((b > ob ? b : ob) < (e < oe ? e : oe)) return 1;
    }
    return 0;
}

/*
 * Resume at another world size (resharding on load): the checkpoint has state files of N_old
 * ranks, this run N. Is every old file this rank's part overlaps there, on this host, of the
 * same checkpoint (step, config, run)? Returns 1 with rank 0's old header in header (every old
 * file carries the same step, data position, meters and record), or 0 with one line naming the
 * file and this host.
 */
static int zero_checkpoint_confirm_reshard(const char* dir, int step, const GPT2Config* cfg, int rank, int N, int N_old,
                                           int64_t* header, char* err, size_t err_cap) {
    char path[4300], who[128];
    snprintf(who, sizeof(who), "error: rank %d (%s)", rank, zero_cluster.host);
    ParamLayout now, old;
    param_layout_build(&now, cfg, N, ZERO_ALIGN);
    param_layout_build(&old, cfg, N_old, ZERO_ALIGN);
    int ok = 1;
    for (int o = 0; o < N_old && ok; o++) {
        if (o != 0 && !zero_checkpoint_parts_overlap(&now, N, rank, &old, N_old, o)) continue;
        zero_state_rank_path(path, sizeof(path), dir, step, o, N_old);
        int64_t h[ZERO_STATE_HEADER_INTS];
        FILE* f = fopen(path, "rb");
        size_t got = f ? fread(h, sizeof(int64_t), ZERO_STATE_HEADER_INTS, f) : 0;
        if (f) fclose(f);
        GPT2Config file_cfg = zero_state_header_config(h);
        if (f == NULL) {
            snprintf(err, err_cap, "%s: %s: missing on this host; expected every state file of the %d-rank checkpoint at step %d "
                     "that rank %d's part overlaps, to reshard it onto %d ranks on load (a node-local -o: copy the files here, "
                     "or resume on the hosts that wrote them)", who, path, N_old, step, rank, N);
            ok = 0;
        } else if (got != ZERO_STATE_HEADER_INTS || h[ZS_MAGIC] != ZERO_STATE_MAGIC || h[ZS_VERSION] != ZERO_STATE_VERSION ||
                   h[ZS_WORLD_SIZE] != N_old || h[ZS_RANK] != o || h[ZS_STEP] != step || !gpt2_config_equal(&file_cfg, cfg) ||
                   h[ZS_ALIGN] != ZERO_ALIGN || h[ZS_NUMEL] != (int64_t)old.shard_numel) {
            snprintf(err, err_cap, "%s: %s: not the state of rank %d of %d at step %d of this model (header differs); expected "
                     "the state files written with model_%08d.bin", who, path, o, N_old, step, step);
            ok = 0;
        } else if ((uint64_t)h[ZS_RUN_ID] != zero_cluster.run_id) {
            snprintf(err, err_cap, "%s: %s: written by run %016llx, but model_%08d.bin by run %016llx; expected the state written "
                     "with that model file (a file of another run left in this dir?)", who, path, (unsigned long long)h[ZS_RUN_ID],
                     step, (unsigned long long)zero_cluster.run_id);
            ok = 0;
        } else if (o == 0) {
            memcpy(header, h, sizeof(h));
        }
    }
    param_layout_free(&now);
    param_layout_free(&old);
    return ok;
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
        if (count > 0 && sizes[0] != N)
            return zero_checkpoint_confirm_reshard(dir, step, cfg, rank, N, sizes[0], header, err, err_cap);
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
 * Resume at another world size: this rank's AdamW slices (z->layout's shard_numel each, into
 * malloc'd *m, *v; padding 0, as in training) from the N_old-rank files its part overlaps, each
 * read whole (its checksum checked) and copied element by element through zero_state_rank_part,
 * the map build/zero_consolidate converts with: the same values as converting first. Returns 1,
 * or 0 with one error line in err (nothing to free).
 */
static int zero_checkpoint_reshard_read(ZeroEngine* z, const char* dir, int step, int N_old, float** m, float** v,
                                        char* err, size_t err_cap) {
    const ParamLayout* now = z->layout;
    int N = z->world_size;
    ParamLayout old;
    param_layout_build(&old, &now->config, N_old, ZERO_ALIGN);
    *m = (float*)zero_calloc(now->shard_numel, sizeof(float), "resharded Adam m slice");
    *v = (float*)zero_calloc(now->shard_numel, sizeof(float), "resharded Adam v slice");
    int ok = 1;
    for (int o = 0; o < N_old && ok; o++) {
        if (!zero_checkpoint_parts_overlap(now, N, z->rank, &old, N_old, o)) continue;
        char path[4300], line[9000];
        int64_t h[ZERO_STATE_HEADER_INTS];
        float *om = NULL, *ov = NULL;
        zero_state_rank_path(path, sizeof(path), dir, step, o, N_old);
        if (zero_state_read(path, h, &om, &ov, line, sizeof(line)) != 0) {
            snprintf(err, err_cap, "error: rank %d (%s): %.8800s", z->rank, zero_cluster.host, line + strlen("error: "));
            ok = 0;
            break;
        }
        for (int u = 0; u < now->num_units; u++) {
            size_t b, e, at, ob, oe, oat;
            zero_state_rank_part(now, N, z->rank, u, &b, &e, &at);
            zero_state_rank_part(&old, N_old, o, u, &ob, &oe, &oat);
            for (size_t j = b > ob ? b : ob; j < (e < oe ? e : oe); j++) {
                (*m)[at + j - b] = om[oat + j - ob];
                (*v)[at + j - b] = ov[oat + j - ob];
            }
        }
        free(om);
        free(ov);
    }
    param_layout_free(&old);
    if (!ok) { free(*m); free(*v); *m = *v = NULL; }
    return ok;
}

/*
 * Resume, step 2: load this rank's state file of the checkpoint at `step` (confirmed in step 1)
 * into the engine's AdamW slices, and return the train data position, the gradient noise scale
 * meter state (steps 0 when it has none) and the batch schedule's state it names. The parameters
 * came from the model file (model_source_unit). An error on any rank (a damaged payload) stops
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
    if (ok && N_old != N) {
        ok = zero_checkpoint_reshard_read(z, dir, step, N_old, &m, &v, err, sizeof(err));
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

// ---- where the model comes from ----

/*
 * The resume checkpoint's model file is on rank 0's disk (with a node-local -o, only there):
 * train_run_start sets this when resuming, from rank 0's decision (the config rank 0 read from
 * the file's header comes with it), and model_source_* then read that file on rank 0 only and
 * broadcast it, unit by unit.
 */
static struct {
    int active;
    char path[4300];
    GPT2Config config;
} zero_resume_model;

/*
 * The model config for init (-e, or the resume checkpoint's model file): a depth descriptor
 * (returns 0), or a model file (returns 1: model_source_unit reads its parameters) whose header
 * is read and whose checksum is checked here (the resume checkpoint's: by rank 0 when it decided,
 * train/train_setup.h, as the other ranks may not have it). Bad input: one error line, exit 1.
 */
static int model_source_config(const char* init, GPT2Config* cfg) {
    if (zero_resume_model.active && strcmp(init, zero_resume_model.path) == 0) {
        *cfg = zero_resume_model.config; // rank 0 checked the file when it decided to resume
        return 1;
    }
    if (gpt2_config_from_descriptor(init, cfg) == 0) return 0;
    if (init[0] == 'd' && init[1] >= '0' && init[1] <= '9' && strchr(init, '.') == NULL && strchr(init, '/') == NULL) {
        fprintf(stderr, "error: -e %s: unknown depth descriptor; expected d1, d2, d3, d4, d6, d12, d24, d36, d48 or a model file\n", init);
        exit(1);
    }
    int version;
    model_file_read_header(init, cfg, &version);
    char err[4400] = "";
    int ok = model_file_verify(init, NULL, NULL, err, sizeof(err)) == 0;
    zero_startup_agree(ok, err, "checking the model file's checksum"); // every rank reads -e: one line, not one per rank
    return 1;
}

// One unit of a model file's parameters into unit_buf (padded_numel elements): read here, or
// (the resume checkpoint) read by rank 0 and broadcast to every rank.
static void model_source_unit(const char* init, const ParamLayout* layout, int unit, float* unit_buf) {
    if (!(zero_resume_model.active && strcmp(init, zero_resume_model.path) == 0 && zero_cluster.world_size > 1)) {
        model_file_read_params(init, layout, unit_buf, unit);
        return;
    }
    if (zero_cluster.rank == 0) model_file_read_params(init, layout, unit_buf, unit);
    // Broadcast: padded_numel fp32 elements of the unit, rank 0's file to every rank.
    zero_startup_bcast(unit_buf, layout->units[unit].padded_numel * sizeof(float), "the resume checkpoint's parameters from rank 0");
}

#endif // ZERO_CHECKPOINT_H
