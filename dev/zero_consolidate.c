/*
 * zero_consolidate.c: convert a checkpoint's optimizer state between its sharded form (one
 * state file per rank, as train_gpt2 writes it) and its full form, so that a run saved with N
 * ranks resumes with M ranks, or at another ZeRO stage. Build: make build/zero_consolidate.
 *
 *   build/zero_consolidate -o DIR -to M|full [-x STEP] [-from N|full] [-z STAGE]
 *
 *   -o     the run's output dir (where train_gpt2 -o wrote the checkpoints)
 *   -to    M: write state_STEP_rR_of_M.bin for R = 0..M-1; full: write state_STEP_full.bin
 *   -x     checkpoint step (default: the latest model_STEP.bin in DIR)
 *   -from  N: read the N rank files; full: read the full file (default: the only set of rank
 *          files of that step)
 *   -z     ZeRO stage to record in the M rank files (default: the source's; required from full)
 *
 * The model file (full fp32 parameters) is the same for every N and stage and is left alone.
 * The full form holds the real elements of every unit in unit order; a rank file holds rank R's
 * slice of every unit padded for its world size (common/state_file.h). Converting N -> full
 * -> M moves every element to its place in M's padding; nothing is recomputed, so a resumed run
 * differs from an N-rank run only by the summation order of M-rank gradient reductions.
 * Errors: one line, `error: <file or flag>: <what>; expected <what>`, exit status 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/model_file.h"
#include "common/gpt2_config.h"
#include "common/state_file.h"

#define FULL -1 // -from/-to value meaning the full form

static void usage(FILE* out) {
    fprintf(out, "usage: build/zero_consolidate -o DIR -to M|full [-x STEP] [-from N|full] [-z STAGE]\n"
                 "  convert a train_gpt2 checkpoint's optimizer state between per-rank and full form\n");
}

static void fail(const char* msg) {
    fprintf(stderr, "%s\n", msg);
    exit(1);
}

static int parse_ranks(const char* flag, const char* value) {
    if (strcmp(value, "full") == 0) return FULL;
    char* end;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (errno || end == value || *end != '\0' || n < 1 || n > 65536) {
        fprintf(stderr, "error: %s: '%s' is not a world size; expected a number of ranks >= 1 or 'full'\n", flag, value);
        exit(1);
    }
    return (int)n;
}

// Offsets of each unit's real elements in the full form (units back to back, no padding).
static size_t* real_offsets(const ParamLayout* layout) {
    size_t* off = (size_t*)malloc((size_t)layout->num_units * sizeof(size_t));
    size_t running = 0;
    for (int u = 0; u < layout->num_units; u++) { off[u] = running; running += layout->units[u].numel; }
    return off;
}

int main(int argc, char** argv) {
    const char* dir = NULL;
    int step = -1, from = 0, to = 0, stage = -2;
    int have_to = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "error: %s: missing value; expected a value after the flag (see -h)\n", argv[i]); return 1; }
        const char* value = argv[++i];
        if (strcmp(argv[i - 1], "-o") == 0) dir = value;
        else if (strcmp(argv[i - 1], "-x") == 0) {
            char* end;
            long s = strtol(value, &end, 10);
            if (end == value || *end != '\0' || s < 1) { fprintf(stderr, "error: -x: '%s' is not a step; expected a step >= 1\n", value); return 1; }
            step = (int)s;
        } else if (strcmp(argv[i - 1], "-from") == 0) from = parse_ranks("-from", value);
        else if (strcmp(argv[i - 1], "-to") == 0) { to = parse_ranks("-to", value); have_to = 1; }
        else if (strcmp(argv[i - 1], "-z") == 0) {
            char* end;
            long z = strtol(value, &end, 10);
            if (end == value || *end != '\0' || z < 0 || z > 3) { fprintf(stderr, "error: -z: '%s' is not a ZeRO stage; expected 0, 1, 2 or 3\n", value); return 1; }
            stage = (int)z;
        } else { fprintf(stderr, "error: %s: unknown flag; expected -o, -x, -from, -to, -z (see -h)\n", argv[i - 1]); return 1; }
    }
    if (dir == NULL) fail("error: -o: missing; expected the run's output dir");
    if (!have_to) fail("error: -to: missing; expected a number of ranks or 'full'");
    char path[4300], msg[9000];
    if (step == -1) {
        step = checkpoint_latest_step(dir);
        if (step < 1) { snprintf(msg, sizeof(msg), "error: %s: no model_*.bin checkpoint; expected a train_gpt2 output dir with checkpoints", dir); fail(msg); }
    }
    model_checkpoint_path(path, sizeof(path), dir, step);
    if (!file_exists(path)) { snprintf(msg, sizeof(msg), "error: %s: missing; expected the model file of the checkpoint at step %d", path, step); fail(msg); }
    // The state must be the one written with this model file (its run id), as the trainer checks
    // on resume: the converted files carry rank 0's run id, so a mix converted would pass there.
    uint64_t model_run_id = 0;
    if (model_file_verify(path, &model_run_id, NULL, msg, sizeof(msg)) != 0) fail(msg);
    char model_path[4300];
    snprintf(model_path, sizeof(model_path), "%s", path);
    if (from == 0) { // default source: the only set of rank files, else the full file
        int sizes[16];
        int count = zero_state_world_sizes(dir, step, sizes, 16);
        if (count == 1) from = sizes[0];
        else if (count == 0) {
            zero_state_full_path(path, sizeof(path), dir, step);
            if (!file_exists(path)) { snprintf(msg, sizeof(msg), "error: %s: no state files for step %d; expected state_%08d_r0_of_N.bin or the full file", dir, step, step); fail(msg); }
            from = FULL;
        } else { snprintf(msg, sizeof(msg), "error: %s: state files for several world sizes at step %d; expected -from N to pick one", dir, step); fail(msg); }
    }

    // Read the source into the full form.
    int64_t header[ZERO_STATE_HEADER_INTS], first[ZERO_STATE_HEADER_INTS];
    float *m = NULL, *v = NULL, *full_m = NULL, *full_v = NULL;
    ParamLayout layout; // padded for the source world size (1 for the full form, only its units' numel are used then)
    size_t* real_off = NULL;
    int source_ranks = from == FULL ? 1 : from;
    for (int r = 0; r < source_ranks; r++) {
        if (from == FULL) zero_state_full_path(path, sizeof(path), dir, step);
        else zero_state_rank_path(path, sizeof(path), dir, step, r, from);
        if (!file_exists(path)) { snprintf(msg, sizeof(msg), "error: %s: missing; expected %s state file%s for step %d", path, from == FULL ? "the full" : "one", from == FULL ? "" : " per rank", step); fail(msg); }
        if (zero_state_read(path, header, &m, &v, msg, sizeof(msg)) != 0) fail(msg);
        if (r == 0) {
            memcpy(first, header, sizeof(first));
            GPT2Config cfg = zero_state_header_config(header);
            param_layout_build(&layout, &cfg, from == FULL ? 1 : from, (int)header[ZS_ALIGN]);
            real_off = real_offsets(&layout);
            full_m = (float*)calloc(layout.num_parameters, sizeof(float));
            full_v = (float*)calloc(layout.num_parameters, sizeof(float));
            if (!full_m || !full_v) fail("error: zero_consolidate: out of memory for the full state; expected a host with more memory");
        }
        int64_t want_world = from == FULL ? 0 : from;
        int64_t want_numel = from == FULL ? (int64_t)layout.num_parameters : (int64_t)layout.shard_numel;
        GPT2Config cfg = zero_state_header_config(header), cfg0 = zero_state_header_config(first);
        if (header[ZS_WORLD_SIZE] != want_world || header[ZS_RANK] != r || header[ZS_STEP] != step || header[ZS_NUMEL] != want_numel ||
            !gpt2_config_equal(&cfg, &cfg0) || header[ZS_ZERO_STAGE] != first[ZS_ZERO_STAGE]) {
            snprintf(msg, sizeof(msg), "error: %s: header says rank %lld of %lld, step %lld, %lld elements, stage %lld; expected rank %d of %lld, step %d, "
                     "%lld elements, stage %lld (the same checkpoint as rank 0's file)", path, (long long)header[ZS_RANK], (long long)header[ZS_WORLD_SIZE],
                     (long long)header[ZS_STEP], (long long)header[ZS_NUMEL], (long long)header[ZS_ZERO_STAGE], r, (long long)want_world, step,
                     (long long)want_numel, (long long)first[ZS_ZERO_STAGE]);
            fail(msg);
        }
        if ((model_run_id != 0 && (uint64_t)header[ZS_RUN_ID] != model_run_id) || header[ZS_RUN_ID] != first[ZS_RUN_ID]) {
            snprintf(msg, sizeof(msg), "error: %s: written by run %016llx, but %s by run %016llx; expected the state written with "
                     "that model file (a file of another run left in this dir?)", path, (unsigned long long)header[ZS_RUN_ID],
                     model_run_id != 0 ? model_path : "rank 0's state file", model_run_id != 0 ? (unsigned long long)model_run_id
                     : (unsigned long long)first[ZS_RUN_ID]);
            fail(msg);
        }
        if (from == FULL) {
            memcpy(full_m, m, layout.num_parameters * sizeof(float));
            memcpy(full_v, v, layout.num_parameters * sizeof(float));
        } else {
            for (int u = 0; u < layout.num_units; u++) { // rank r's part of unit u (common/state_file.h)
                size_t begin, end, src;
                zero_state_rank_part(&layout, from, r, u, &begin, &end, &src);
                for (size_t j = begin; j < end; j++) {
                    full_m[real_off[u] + j] = m[src + j - begin];
                    full_v[real_off[u] + j] = v[src + j - begin];
                }
            }
        }
        free(m);
        free(v);
    }
    GPT2Config cfg = zero_state_header_config(first);
    int source_stage = (int)first[ZS_ZERO_STAGE];

    // Write the target.
    int64_t out[ZS_NUM_FIELDS];
    memcpy(out, first, sizeof(out));
    if (to == FULL) {
        out[ZS_ZERO_STAGE] = -1;
        out[ZS_WORLD_SIZE] = 0;
        out[ZS_RANK] = 0;
        out[ZS_NUMEL] = (int64_t)layout.num_parameters;
        zero_state_full_path(path, sizeof(path), dir, step);
        zero_state_write(path, out, full_m, full_v);
        printf("zero_consolidate: step %d: %s %d state into %s (%zu elements of m and v)\n", step, from == FULL ? "full" : "sharded", source_ranks, path, layout.num_parameters);
    } else {
        if (stage == -2) {
            if (source_stage < 0) fail("error: -z: missing; expected the ZeRO stage of the resuming run (the full state has none)");
            stage = source_stage;
        }
        ParamLayout target;
        param_layout_build(&target, &cfg, to, (int)first[ZS_ALIGN]);
        float* slice_m = (float*)calloc(target.shard_numel, sizeof(float));
        float* slice_v = (float*)calloc(target.shard_numel, sizeof(float));
        if (!slice_m || !slice_v) fail("error: zero_consolidate: out of memory for a rank slice; expected a host with more memory");
        for (int r = 0; r < to; r++) {
            memset(slice_m, 0, target.shard_numel * sizeof(float));
            memset(slice_v, 0, target.shard_numel * sizeof(float));
            for (int u = 0; u < target.num_units; u++) { // padding (j >= numel) stays 0, as in training
                size_t begin, end, dst;
                zero_state_rank_part(&target, to, r, u, &begin, &end, &dst);
                for (size_t j = begin; j < end; j++) {
                    slice_m[dst + j - begin] = full_m[real_off[u] + j];
                    slice_v[dst + j - begin] = full_v[real_off[u] + j];
                }
            }
            out[ZS_ZERO_STAGE] = stage;
            out[ZS_WORLD_SIZE] = to;
            out[ZS_RANK] = r;
            out[ZS_NUMEL] = (int64_t)target.shard_numel;
            zero_state_rank_path(path, sizeof(path), dir, step, r, to);
            zero_state_write(path, out, slice_m, slice_v);
        }
        printf("zero_consolidate: step %d: %s state (%d rank%s, stage %d) -> %d rank files for ZeRO stage %d in %s\n", step,
               from == FULL ? "full" : "sharded", source_ranks, source_ranks > 1 ? "s" : "", source_stage, to, stage, dir);
        free(slice_m);
        free(slice_v);
        param_layout_free(&target);
    }
    free(full_m);
    free(full_v);
    free(real_off);
    param_layout_free(&layout);
    return 0;
}
