/*
 * train/model_source.h: where the trainer's model comes from: a depth descriptor (-e dN, built
 * from scratch), an llm.c model file (-e FILE, its header and checksum checked here), or the
 * resume checkpoint's model file, which is on rank 0's disk (with a node-local -o, only there):
 * rank 0 reads it and broadcasts it unit by unit. Trainer glue over the engine's start-up
 * broadcasts (zero/cluster/handshake.h); model/gpt2_cpu.h's and model/gpt2_gpu_buffers.cuh's gpt2_build call it,
 * train/train_setup.h's resume decision fills zero_resume_model.
 * Host C; include after zero.cuh.
 */
#ifndef TRAIN_MODEL_SOURCE_H
#define TRAIN_MODEL_SOURCE_H
#ifndef ZERO_CUH
#error "include zero.cuh before train/model_source.h"
#endif
#include "common/gpt2_config.h"
#include "common/init.h"
#include "common/model_file.h"

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

// model_source_config for a run of sequence length T: a T beyond the model's context is one error
// line, exit 1. Returns 0 (a depth) or 1 (a model file), as model_source_config.
static int model_source_config_for(const char* init, int T, GPT2Config* cfg) {
    int from_file = model_source_config(init, cfg);
    if (T > cfg->max_seq_len) {
        fprintf(stderr, "error: -t %d: longer than the model's max sequence length; expected T <= %d\n", T, cfg->max_seq_len);
        exit(1);
    }
    return from_file;
}

/*
 * Every parameter of init into the engine, one unit at a time, so no rank holds more than one unit
 * of fp32 scratch beyond what its stage keeps: each unit initialized (the same on every rank:
 * per-tensor seeded streams, common/init.h) or read from the file (model_source_unit), then handed
 * to the engine (zero_set_unit_params), which keeps what this rank's stage stores.
 */
static void model_source_params_to_engine(ZeroEngine* z, const ParamLayout* layout, const char* init, int from_file,
                                          uint64_t seed) {
    float* unit_buf = (float*)zero_calloc(zero_max_unit_numel(layout), sizeof(float), "parameter unit");
    for (int u = 0; u < layout->num_units; u++) {
        if (from_file) model_source_unit(init, layout, u, unit_buf);
        else gpt2_init_unit(layout, u, unit_buf, seed);
        zero_set_unit_params(z, u, unit_buf);
    }
    free(unit_buf);
}

#endif // TRAIN_MODEL_SOURCE_H
