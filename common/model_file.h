/*
 * common/model_file.h: llm.c model files, shared by both builds.
 *
 * Model file (llm.c format): header of 256 int32: [0] magic 20240326, [1] version (3: fp32,
 * 5: bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp; then all parameters in llm.c's
 * kind-major tensor order (see gpt2_config.h), 4 or 2 bytes each. Reading permutes them into
 * the flat unit-ordered buffer; writing permutes back. Files are written to "<path>.tmp" and
 * renamed (common/atomic_file.h), so a crash never leaves a half-written checkpoint under the final name.
 * Slots llm.c leaves 0 (it reads [0..7]) carry, in files this trainer writes: [8] MODEL_FILE_EXTRA
 * (marks the rest as set), [9], [10] the FNV-1a 64 checksum of the parameter bytes as stored
 * (low, high 32 bits), [11], [12] the id of the run that wrote it, [13] its step. llm.c reads
 * such a file as any other; model_file_verify checks the checksum where it is set.
 */
#ifndef COMMON_MODEL_FILE_H
#define COMMON_MODEL_FILE_H
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/atomic_file.h"
#include "common/gpt2_config.h"
#include "common/hash.h" // fnv1a64_words: the checksum in header[9], [10]

#define MODEL_FILE_MAGIC 20240326
#define MODEL_FILE_FP32 3
#define MODEL_FILE_BF16 5
#define MODEL_HEADER_INTS 256
#define MODEL_FILE_EXTRA 0x7a65726f // "zero": header[9..13] are set (checksum, run id, step)


// Read and validate the header; fills *cfg and *version. Exits 1 with one line on bad input.
static void model_file_read_header(const char* path, GPT2Config* cfg, int* version) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "error: %s: cannot open model file (%s); expected an llm.c model file or a depth like d12\n", path, strerror(errno));
        exit(1);
    }
    int header[MODEL_HEADER_INTS];
    if (fread(header, sizeof(int), MODEL_HEADER_INTS, f) != MODEL_HEADER_INTS) {
        if (ferror(f)) // a directory opens, then reads EISDIR
            fprintf(stderr, "error: %s: cannot read model file (%s); expected an llm.c model file\n", path, strerror(errno));
        else
            fprintf(stderr, "error: %s: file shorter than the 1024-byte header; expected an llm.c model file\n", path);
        exit(1);
    }
    if (header[0] != MODEL_FILE_MAGIC) {
        fprintf(stderr, "error: %s: bad magic %d; expected %d (llm.c model file)\n", path, header[0], MODEL_FILE_MAGIC);
        exit(1);
    }
    if (header[1] != MODEL_FILE_FP32 && header[1] != MODEL_FILE_BF16) {
        fprintf(stderr, "error: %s: unsupported version %d; expected 3 (fp32) or 5 (bf16)\n", path, header[1]);
        exit(1);
    }
    *version = header[1];
    cfg->max_seq_len = header[2];
    cfg->vocab_size = header[3];
    cfg->num_layers = header[4];
    cfg->num_heads = header[5];
    cfg->channels = header[6];
    cfg->padded_vocab_size = header[7];
    if (cfg->max_seq_len < 1 || cfg->vocab_size < 1 || cfg->num_layers < 1 || cfg->num_heads < 1 ||
        cfg->channels < 1 || cfg->channels % cfg->num_heads != 0 || cfg->padded_vocab_size < cfg->vocab_size) {
        fprintf(stderr, "error: %s: invalid config in header (maxT %d V %d L %d NH %d C %d Vp %d); expected positive sizes, C divisible by NH, Vp >= V\n",
                path, cfg->max_seq_len, cfg->vocab_size, cfg->num_layers, cfg->num_heads, cfg->channels, cfg->padded_vocab_size);
        exit(1);
    }
    // The size check: header + parameters, nothing more, nothing less.
    ParamLayout layout;
    param_layout_build(&layout, cfg, 1, 1);
    size_t elem_bytes = header[1] == MODEL_FILE_FP32 ? 4 : 2;
    long long expected = (long long)(MODEL_HEADER_INTS * sizeof(int) + layout.num_parameters * elem_bytes);
    param_layout_free(&layout);
    fseek(f, 0, SEEK_END);
    long long actual = ftell(f);
    fclose(f);
    if (actual != expected) {
        fprintf(stderr, "error: %s: file is %lld bytes; expected %lld for the config in its header\n", path, actual, expected);
        exit(1);
    }
}

static inline float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// A NaN or Inf weight would first show as `loss nan` at step 1: name the file and tensor now.
static void model_file_check_finite(const char* path, const ParamTensor* t, const float* values) {
    for (size_t j = 0; j < t->numel; j++) {
        if (isfinite(values[j])) continue;
        char layer[32] = "";
        if (t->layer >= 0) snprintf(layer, sizeof(layer), " of layer %d", t->layer);
        fprintf(stderr, "error: %s: tensor %s%s holds %g at element %zu; expected finite weights\n",
                path, param_kind_names[t->kind], layer, values[j], j);
        exit(1);
    }
}

/*
 * Read the parameters of a model file (header already validated by model_file_read_header)
 * into the flat fp32 buffer `params` (layout->padded_numel elements, padding zeroed).
 * If only_unit >= 0, fills just that unit, at params (unit_buf of padded_numel elements).
 */
static void model_file_read_params(const char* path, const ParamLayout* layout, float* params, int only_unit) {
    GPT2Config cfg;
    int version;
    model_file_read_header(path, &cfg, &version);
    if (cfg.channels != layout->config.channels || cfg.num_layers != layout->config.num_layers ||
        cfg.padded_vocab_size != layout->config.padded_vocab_size || cfg.max_seq_len != layout->config.max_seq_len) {
        fprintf(stderr, "error: %s: config does not match the model being built\n", path);
        exit(1);
    }
    FILE* f = fopen(path, "rb");
    size_t elem_bytes = version == MODEL_FILE_FP32 ? 4 : 2;
    size_t first = only_unit >= 0 ? (size_t)only_unit : 0;
    size_t last = only_unit >= 0 ? (size_t)only_unit : (size_t)layout->num_units - 1;
    uint16_t* staging = NULL;
    for (size_t u = first; u <= last; u++) {
        const ParamUnit* unit = &layout->units[u];
        float* base = only_unit >= 0 ? params : params + unit->offset;
        memset(base, 0, unit->padded_numel * sizeof(float));
        for (int i = 0; i < unit->num_tensors; i++) {
            const ParamTensor* t = &layout->tensors[unit->first_tensor + i];
            fseek(f, (long)(MODEL_HEADER_INTS * sizeof(int) + t->file_offset * elem_bytes), SEEK_SET);
            size_t got;
            if (version == MODEL_FILE_FP32) {
                got = fread(base + t->unit_offset, 4, t->numel, f);
            } else {
                staging = (uint16_t*)realloc(staging, t->numel * 2);
                got = fread(staging, 2, t->numel, f);
                for (size_t j = 0; j < got; j++) base[t->unit_offset + j] = bf16_bits_to_float(staging[j]);
            }
            if (got != t->numel) {
                fprintf(stderr, "error: %s: short read of %s; expected %zu elements\n", path, param_kind_names[t->kind], t->numel);
                exit(1);
            }
            model_file_check_finite(path, t, base + t->unit_offset);
        }
    }
    free(staging);
    fclose(f);
}

/*
 * Check the parameter checksum of a model file this trainer wrote (header[8] == MODEL_FILE_EXTRA;
 * other llm.c files have none and pass). Returns 0, or -1 with one error line (no newline) in
 * err when it differs. Sets *run_id and *step from the header (0 when not set); either may be NULL.
 */
static int model_file_verify(const char* path, uint64_t* run_id, int* step, char* err, size_t err_cap) {
    if (run_id) *run_id = 0;
    if (step) *step = 0;
    FILE* f = fopen(path, "rb");
    int header[MODEL_HEADER_INTS];
    if (f == NULL || fread(header, sizeof(int), MODEL_HEADER_INTS, f) != MODEL_HEADER_INTS || header[8] != MODEL_FILE_EXTRA) {
        if (f) fclose(f);
        return 0; // no checksum (or unreadable: model_file_read_header says why)
    }
    size_t chunk = 1 << 20, got;
    float* buf = (float*)malloc(chunk * sizeof(float));
    uint64_t h = FNV1A64_INIT;
    while (buf != NULL && (got = fread(buf, sizeof(float), chunk, f)) > 0) h = fnv1a64_words(buf, got, h);
    free(buf);
    fclose(f);
    uint64_t stored = (uint64_t)(uint32_t)header[9] | (uint64_t)(uint32_t)header[10] << 32;
    if (h != stored) {
        snprintf(err, err_cap, "error: %s: checksum mismatch: the parameters are damaged; expected the checksum in its header "
                 "(slots 9-10) to match them", path);
        return -1;
    }
    if (run_id) *run_id = (uint64_t)(uint32_t)header[11] | (uint64_t)(uint32_t)header[12] << 32;
    if (step) *step = header[13];
    return 0;
}

// Write the full flat buffer as an llm.c fp32 model file (version 3), atomically, with the
// checksum, the run id and the step in the slots llm.c leaves unused (header comment).
static void model_file_write(const char* path, const ParamLayout* layout, const float* params, uint64_t run_id, int step) {
    const GPT2Config* cfg = &layout->config;
    int header[MODEL_HEADER_INTS] = {0};
    header[0] = MODEL_FILE_MAGIC;
    header[1] = MODEL_FILE_FP32;
    header[2] = cfg->max_seq_len;
    header[3] = cfg->vocab_size;
    header[4] = cfg->num_layers;
    header[5] = cfg->num_heads;
    header[6] = cfg->channels;
    header[7] = cfg->padded_vocab_size;
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, header, sizeof(header));
    uint64_t checksum = FNV1A64_INIT;
    // The file is kind-major: visit tensors in file order, i.e. by kind, then by layer (wte by
    // its vocab chunks, which hold consecutive rows).
    for (int kind = 0; kind < NUM_PARAM_KINDS; kind++) {
        int copies = (kind >= P_LN1W && kind <= P_FCPROJB) ? cfg->num_layers : kind == P_WTE ? layout->num_wte_units : 1;
        for (int l = 0; l < copies; l++) {
            const ParamTensor* t = &layout->tensors[kind == P_WTE ? wte_piece_index(layout, l) : param_tensor_index(layout, kind, l)];
            atomic_file_write(&af, params + t->offset, t->numel * sizeof(float));
            checksum = fnv1a64_words(params + t->offset, t->numel, checksum);
        }
    }
    int extra[6] = {MODEL_FILE_EXTRA, (int)(uint32_t)checksum, (int)(uint32_t)(checksum >> 32),
                    (int)(uint32_t)run_id, (int)(uint32_t)(run_id >> 32), step};
    if (fseek(af.f, 8 * sizeof(int), SEEK_SET) != 0) { fprintf(stderr, "error: %s: seek failed (%s)\n", af.tmp_path, strerror(errno)); exit(1); }
    atomic_file_write(&af, extra, sizeof(extra));
    atomic_file_commit(&af);
}

#endif
