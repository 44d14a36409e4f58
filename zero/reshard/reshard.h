/*
 * zero/reshard/reshard.h: resuming at another world size (docs/checkpoints.md): the checkpoint's
 * state files were written by N_old ranks, this run has N; each rank reads the old files its own
 * slice overlaps and copies its elements out through zero_state_rank_part (common/state_file.h),
 * the map build/zero_consolidate converts with, so the values are the same as converting first.
 * What it adds to the core's engine checkpoints (zero/checkpoint.h): zero_checkpoint_confirm_state
 * calls zero_reshard_confirm when this rank's own file is missing but the step's files are of
 * another world size, and zero_checkpoint_load_state calls zero_reshard_read instead of reading
 * its one file. Host code, the same in both builds.
 */
#ifndef ZERO_RESHARD_H
#define ZERO_RESHARD_H
#ifndef ZERO_CUH
#error "zero/reshard/reshard.h is part of the ZeRO engine; include zero.cuh"
#endif
#include "common/state_file.h" // the state file's format and the rank-part map (zero_state_*)

// Rank `rank` of N's part of any unit overlaps rank o of N_old's? (layouts padded for N and N_old)
static int zero_reshard_parts_overlap(const ParamLayout* now, int N, int rank, const ParamLayout* old, int N_old, int o) {
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
static int zero_reshard_confirm(const char* dir, int step, const GPT2Config* cfg, int rank, int N, int N_old,
                                int64_t* header, char* err, size_t err_cap) {
    char path[4300], who[128];
    snprintf(who, sizeof(who), "error: rank %d (%s)", rank, zero_cluster.host);
    ParamLayout now, old;
    param_layout_build(&now, cfg, N, ZERO_ALIGN);
    param_layout_build(&old, cfg, N_old, ZERO_ALIGN);
    int ok = 1;
    for (int o = 0; o < N_old && ok; o++) {
        if (o != 0 && !zero_reshard_parts_overlap(&now, N, rank, &old, N_old, o)) continue;
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
 * Resume at another world size: this rank's AdamW slices (z->layout's shard_numel each, into
 * malloc'd *m, *v; padding 0, as in training) from the N_old-rank files its part overlaps, each
 * read whole (its checksum checked) and copied element by element through zero_state_rank_part,
 * the map build/zero_consolidate converts with: the same values as converting first. Returns 1,
 * or 0 with one error line in err (nothing to free).
 */
static int zero_reshard_read(ZeroEngine* z, const char* dir, int step, int N_old, float** m, float** v,
                             char* err, size_t err_cap) {
    const ParamLayout* now = z->layout;
    int N = z->world_size;
    ParamLayout old;
    param_layout_build(&old, &now->config, N_old, ZERO_ALIGN);
    *m = (float*)zero_calloc(now->shard_numel, sizeof(float), "resharded Adam m slice");
    *v = (float*)zero_calloc(now->shard_numel, sizeof(float), "resharded Adam v slice");
    int ok = 1;
    for (int o = 0; o < N_old && ok; o++) {
        if (!zero_reshard_parts_overlap(now, N, z->rank, &old, N_old, o)) continue;
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

#endif // ZERO_RESHARD_H
