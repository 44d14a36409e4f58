/*
 * state_file.h: the training-state files of a sharded checkpoint (one per rank, DeepSpeed-
 * style), their full (consolidated) form, and finding the latest checkpoint. Plain C, no MPI:
 * the trainer and build/zero_consolidate (dev/zero_consolidate.c) share it.
 *
 * A checkpoint at step S in the output dir (-o) is:
 *   state_SSSSSSSS_rR_of_N.bin  one per rank R of N ranks: header + the rank's slices of AdamW m, v
 *   model_SSSSSSSS.bin          llm.c model file (full fp32 parameters, common/model_file.h),
 *                               written by rank 0 after every state file is in place: a model
 *                               file marks a complete checkpoint
 *   state_SSSSSSSS_full.bin     only from `build/zero_consolidate -to full`: the whole m and v
 * Every file is written to "<name>.tmp" and renamed (AtomicFile), so a crash leaves no half file.
 * Parameters need no state file: the model file holds them exactly (fp32).
 *
 * State file = header of 128 int64 (1024 bytes; fields ZS_*, including the gradient noise scale
 * meter's EMAs and the batch schedule's state), then m, then v, fp32, numel each:
 *   rank file: rank R's slice of every unit in unit order, units padded for N ranks
 *              (zero_get_optimizer_shard: zero/engine_cpu.h, zero/gpu/state_io_gpu.cuh): numel = padded_numel / N. The same at every
 *              ZeRO stage (stage 0 writes slice R of its replicated state).
 *   full file: the real (unpadded) elements of every unit in unit order: numel = parameters.
 * The checksum (FNV-1a, 64 bit, over the 32-bit words of m then v) catches a damaged payload;
 * the run id ties the file to the model file of the same checkpoint (a file of another run at
 * the same step, e.g. left in a node-local dir, is refused on resume).
 * Little-endian int64/fp32, as every machine this runs on.
 */
#ifndef COMMON_STATE_FILE_H
#define COMMON_STATE_FILE_H
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/batch_schedule.h"
#include "common/model_file.h"
#include "common/gns.h"
#include "common/gpt2_config.h"

#define ZERO_STATE_MAGIC 20261130
#define ZERO_STATE_VERSION 1
#define ZERO_STATE_HEADER_INTS 128

enum {
    ZS_MAGIC, ZS_VERSION,
    ZS_ZERO_STAGE,      // stage that wrote it; -1 in a full file
    ZS_WORLD_SIZE,      // N; 0 marks a full file
    ZS_RANK,
    ZS_STEP,            // optimizer steps done; training resumes at this step
    ZS_MAX_SEQ_LEN, ZS_VOCAB_SIZE, ZS_PADDED_VOCAB_SIZE, ZS_NUM_LAYERS, ZS_NUM_HEADS, ZS_CHANNELS,
    ZS_ALIGN,           // ZERO_ALIGN of the layout the slices were cut with
    ZS_NUMEL,           // elements of m (and of v) in this file
    ZS_DATA_SHARD,      // train DataLoaderState: shard index and token position of the next global batch
    ZS_DATA_POSITION,
    ZS_SEED,            // -sd of the run (sampling draws from seed + step; no other RNG state)
    ZS_BATCH_TOKENS,    // tokens per optimizer step of the next step (the batch schedule's current batch)
    ZS_CHECKSUM,
    // The gradient noise scale meter's running state (common/gns.h; identical on every rank),
    // doubles as their 64-bit patterns. 0 in files written before these fields existed: the
    // meter then starts afresh on resume.
    ZS_GNS_STEPS, ZS_GNS_BETA, ZS_GNS_BETA_POW, ZS_GNS_EMA_G2, ZS_GNS_EMA_TRACE,
    // The batch schedule's state (common/batch_schedule.h BatchScheduleState; the same on every
    // rank) besides ZS_BATCH_TOKENS: the lr rule's first batch, -d auto's window (steps, and its
    // smallest B_simple as a double's bit pattern), tokens trained on. 0 in older files: resume
    // then counts tokens as steps x batch and starts the window afresh.
    ZS_BATCH_START_TOKENS, ZS_BATCH_WINDOW_STEPS, ZS_BATCH_WINDOW_MIN, ZS_TOKENS_SEEN,
    ZS_RUN_ID,          // the run that wrote it (as the model file's header says); 0 in older files
    // The run's settings (common/run_record.h): ZS_RECORD 1 when set, 0 in older files. Floats
    // as their 32-bit patterns.
    ZS_RECORD, ZS_RECORD_LR, ZS_RECORD_SCHEDULE, ZS_RECORD_WARMUP, ZS_RECORD_FINAL_FRACTION, ZS_RECORD_WEIGHT_DECAY,
    ZS_RECORD_CLIP, ZS_RECORD_MAX_STEPS, ZS_RECORD_BATCH_TOKENS, ZS_RECORD_B, ZS_RECORD_SEED,
    ZS_NUM_FIELDS
};

static int64_t zero_state_double_bits(double x) { int64_t b; memcpy(&b, &x, sizeof(b)); return b; }
static double zero_state_bits_double(int64_t b) { double x; memcpy(&x, &b, sizeof(x)); return x; }

// The meter's EMAs into a state header (meter may be NULL: nothing recorded).
static void zero_state_header_set_gns(int64_t* header, const GNSMeter* meter) {
    if (meter == NULL) return;
    header[ZS_GNS_STEPS] = meter->steps;
    header[ZS_GNS_BETA] = zero_state_double_bits(meter->ema_beta);
    header[ZS_GNS_BETA_POW] = zero_state_double_bits(meter->beta_pow);
    header[ZS_GNS_EMA_G2] = zero_state_double_bits(meter->ema_g2);
    header[ZS_GNS_EMA_TRACE] = zero_state_double_bits(meter->ema_trace);
}

// The meter state a header holds (steps 0: none); the latest estimates are NaN until the next update.
static GNSMeter zero_state_header_gns(const int64_t* header) {
    GNSMeter meter;
    gns_init(&meter, zero_state_bits_double(header[ZS_GNS_BETA]));
    if (header[ZS_GNS_STEPS] <= 0) return meter;
    meter.steps = (long)header[ZS_GNS_STEPS];
    meter.beta_pow = zero_state_bits_double(header[ZS_GNS_BETA_POW]);
    meter.ema_g2 = zero_state_bits_double(header[ZS_GNS_EMA_G2]);
    meter.ema_trace = zero_state_bits_double(header[ZS_GNS_EMA_TRACE]);
    return meter;
}

// The batch schedule's state into a state header, and back (all 0: a file without it).
static void zero_state_header_set_batch(int64_t* header, const BatchScheduleState* b) {
    header[ZS_BATCH_TOKENS] = b->batch_tokens;
    header[ZS_BATCH_START_TOKENS] = b->start_tokens;
    header[ZS_BATCH_WINDOW_STEPS] = b->window_steps;
    header[ZS_BATCH_WINDOW_MIN] = zero_state_double_bits(b->window_min);
    header[ZS_TOKENS_SEEN] = b->tokens_seen;
}
static BatchScheduleState zero_state_header_batch(const int64_t* header) {
    BatchScheduleState b;
    b.batch_tokens = (int)header[ZS_BATCH_TOKENS];
    b.start_tokens = (int)header[ZS_BATCH_START_TOKENS];
    b.window_steps = (int)header[ZS_BATCH_WINDOW_STEPS];
    b.window_min = zero_state_bits_double(header[ZS_BATCH_WINDOW_MIN]);
    b.tokens_seen = header[ZS_TOKENS_SEEN];
    return b;
}

static void model_checkpoint_path(char* out, size_t cap, const char* dir, int step) {
    snprintf(out, cap, "%s/model_%08d.bin", dir, step);
}
static void zero_state_rank_path(char* out, size_t cap, const char* dir, int step, int rank, int world_size) {
    snprintf(out, cap, "%s/state_%08d_r%d_of_%d.bin", dir, step, rank, world_size);
}
static void zero_state_full_path(char* out, size_t cap, const char* dir, int step) {
    snprintf(out, cap, "%s/state_%08d_full.bin", dir, step);
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// Fill the config fields of a header from cfg.
static void zero_state_header_set_config(int64_t* header, const GPT2Config* cfg) {
    header[ZS_MAX_SEQ_LEN] = cfg->max_seq_len;
    header[ZS_VOCAB_SIZE] = cfg->vocab_size;
    header[ZS_PADDED_VOCAB_SIZE] = cfg->padded_vocab_size;
    header[ZS_NUM_LAYERS] = cfg->num_layers;
    header[ZS_NUM_HEADS] = cfg->num_heads;
    header[ZS_CHANNELS] = cfg->channels;
}
static GPT2Config zero_state_header_config(const int64_t* header) {
    GPT2Config cfg;
    cfg.max_seq_len = (int)header[ZS_MAX_SEQ_LEN];
    cfg.vocab_size = (int)header[ZS_VOCAB_SIZE];
    cfg.padded_vocab_size = (int)header[ZS_PADDED_VOCAB_SIZE];
    cfg.num_layers = (int)header[ZS_NUM_LAYERS];
    cfg.num_heads = (int)header[ZS_NUM_HEADS];
    cfg.channels = (int)header[ZS_CHANNELS];
    return cfg;
}
static int gpt2_config_equal(const GPT2Config* a, const GPT2Config* b) {
    return a->max_seq_len == b->max_seq_len && a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->channels == b->channels;
}

/*
 * Where rank r of N keeps unit u (layout padded for N ranks): its real elements [*begin, *end)
 * of the unit (none when *end <= *begin: the rank's part is padding), the first of which sits at
 * element *at of the rank's m and v slices (its rank file's payload). The one map from a rank
 * file to unit elements: build/zero_consolidate converts through it, and a resume at another
 * world size reshards on load with it (zero/reshard/reshard.h).
 */
static void zero_state_rank_part(const ParamLayout* layout, int N, int r, int u, size_t* begin, size_t* end, size_t* at) {
    const ParamUnit* pu = &layout->units[u];
    *begin = (size_t)r * pu->shard_numel;
    *end = *begin + pu->shard_numel < pu->numel ? *begin + pu->shard_numel : pu->numel;
    *at = pu->offset / (size_t)N;
}

// Write a state file atomically. header[ZS_NUMEL] gives the length of m and v; magic, version
// and checksum are filled in here.
static void zero_state_write(const char* path, int64_t* header, const float* m, const float* v) {
    size_t n = (size_t)header[ZS_NUMEL];
    int64_t block[ZERO_STATE_HEADER_INTS] = {0};
    memcpy(block, header, ZS_NUM_FIELDS * sizeof(int64_t));
    block[ZS_MAGIC] = ZERO_STATE_MAGIC;
    block[ZS_VERSION] = ZERO_STATE_VERSION;
    block[ZS_CHECKSUM] = (int64_t)fnv1a64_words(v, n, fnv1a64_words(m, n, FNV1A64_INIT));
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, block, sizeof(block));
    atomic_file_write(&af, m, n * sizeof(float));
    atomic_file_write(&af, v, n * sizeof(float));
    atomic_file_commit(&af);
}

/*
 * Read and check a state file: magic, version, size against its header, checksum. On success
 * returns 0 with header (ZERO_STATE_HEADER_INTS) filled and *m, *v malloc'd. On failure returns
 * -1 with one house-style error line (no newline) in err; nothing to free. The caller checks
 * that step, world size, rank, stage and config are the ones it wants.
 */
static int zero_state_read(const char* path, int64_t* header, float** m, float** v, char* err, size_t err_cap) {
    *m = *v = NULL;
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_cap, "error: %s: cannot open state file (%s); expected one state file per rank beside the model file", path, strerror(errno));
        return -1;
    }
    if (fread(header, sizeof(int64_t), ZERO_STATE_HEADER_INTS, f) != ZERO_STATE_HEADER_INTS) {
        snprintf(err, err_cap, "error: %s: shorter than the 1024-byte header; expected a state file written by train_gpt2", path);
        fclose(f);
        return -1;
    }
    if (header[ZS_MAGIC] != ZERO_STATE_MAGIC || header[ZS_VERSION] != ZERO_STATE_VERSION) {
        snprintf(err, err_cap, "error: %s: bad magic/version %lld/%lld; expected %d/%d (a train_gpt2 state file)", path,
                 (long long)header[ZS_MAGIC], (long long)header[ZS_VERSION], ZERO_STATE_MAGIC, ZERO_STATE_VERSION);
        fclose(f);
        return -1;
    }
    // The header is outside the payload checksum: bound every field used for sizes or layouts
    // before anything divides by it or allocates from it.
    int full_file = header[ZS_WORLD_SIZE] == 0 && header[ZS_ZERO_STAGE] == -1;
    int sharded_ok = header[ZS_WORLD_SIZE] >= 1 && header[ZS_WORLD_SIZE] <= (1 << 20) && header[ZS_RANK] >= 0 &&
                     header[ZS_RANK] < header[ZS_WORLD_SIZE] && header[ZS_ZERO_STAGE] >= 0 && header[ZS_ZERO_STAGE] <= 3;
    if (header[ZS_ALIGN] < 1 || header[ZS_ALIGN] > (1 << 20) || !(full_file || sharded_ok) ||
        header[ZS_NUMEL] < 0 || header[ZS_NUMEL] > (1LL << 40)) {
        snprintf(err, err_cap, "error: %s: header fields out of range (align %lld, world size %lld, rank %lld, stage %lld, numel %lld); "
                 "expected a state file written by train_gpt2 (header damaged)", path, (long long)header[ZS_ALIGN],
                 (long long)header[ZS_WORLD_SIZE], (long long)header[ZS_RANK], (long long)header[ZS_ZERO_STAGE], (long long)header[ZS_NUMEL]);
        fclose(f);
        return -1;
    }
    long long numel = header[ZS_NUMEL];
    long long expected = (long long)sizeof(int64_t) * ZERO_STATE_HEADER_INTS + 2LL * numel * (long long)sizeof(float);
    fseek(f, 0, SEEK_END);
    long long actual = ftell(f);
    if (numel < 0 || actual != expected) {
        snprintf(err, err_cap, "error: %s: file is %lld bytes; expected %lld for the %lld-element slices its header names (truncated or damaged)",
                 path, actual, expected, numel);
        fclose(f);
        return -1;
    }
    fseek(f, (long)(sizeof(int64_t) * ZERO_STATE_HEADER_INTS), SEEK_SET);
    *m = (float*)malloc((size_t)numel * sizeof(float) + 1);
    *v = (float*)malloc((size_t)numel * sizeof(float) + 1);
    if (*m == NULL || *v == NULL) {
        snprintf(err, err_cap, "error: %s: out of memory for %lld-element slices; expected a host with more memory", path, numel);
        free(*m); free(*v); *m = *v = NULL;
        fclose(f);
        return -1;
    }
    size_t got_m = fread(*m, sizeof(float), (size_t)numel, f), got_v = fread(*v, sizeof(float), (size_t)numel, f);
    fclose(f);
    uint64_t checksum = fnv1a64_words(*v, (size_t)numel, fnv1a64_words(*m, (size_t)numel, FNV1A64_INIT));
    if (got_m != (size_t)numel || got_v != (size_t)numel || checksum != (uint64_t)header[ZS_CHECKSUM]) {
        snprintf(err, err_cap, "error: %s: checksum mismatch (payload damaged); expected the checksum stored in its header", path);
        free(*m); free(*v); *m = *v = NULL;
        return -1;
    }
    return 0;
}

// The largest step S with a model_SSSSSSSS.bin in dir, or -1 if there is none.
static int checkpoint_latest_step(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) return -1;
    int latest = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char tail[8];
        if (strlen(e->d_name) == 18 && sscanf(e->d_name, "model_%8d.%3s", &step, tail) == 2 && strcmp(tail, "bin") == 0 && step > latest)
            latest = step;
    }
    closedir(d);
    return latest;
}

// World sizes N for which dir holds state_<step>_r0_of_N.bin, ascending; returns how many
// (at most cap). For error messages and for the consolidation tool's default source.
static int zero_state_world_sizes(const char* dir, int step, int* sizes, int cap) {
    DIR* d = opendir(dir);
    if (d == NULL) return 0;
    int count = 0;
    struct dirent* e;
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "state_%08d_r0_of_", step);
    size_t plen = strlen(prefix);
    while ((e = readdir(d)) != NULL) {
        int n;
        char tail[8];
        if (strncmp(e->d_name, prefix, plen) == 0 && sscanf(e->d_name + plen, "%d.%3s", &n, tail) == 2 && strcmp(tail, "bin") == 0 && n > 0) {
            if (count < cap) sizes[count++] = n;
        }
    }
    closedir(d);
    for (int i = 1; i < count; i++) // insertion sort: a handful of entries
        for (int j = i; j > 0 && sizes[j - 1] > sizes[j]; j--) { int t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t; }
    return count;
}

#endif // COMMON_STATE_FILE_H
