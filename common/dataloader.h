/*
 * Token shard data loader for training and evaluation (host C, header-only).
 *
 * Shard file format (llm.c's; written by the data/ scripts), little-endian:
 *   header  256 x int32: [0] 20240520 magic, [1] 1 version, [2] token count n, rest unused
 *   body    n x uint16 token ids
 * so a shard's size in bytes is 1024 + 2n.
 *
 * A loader reads every shard matched by a glob(3) pattern, in sorted name order. Each call to
 * dataloader_next_batch consumes one *global* batch of world_size * B * T tokens from the
 * current shard, starting at `position` (in tokens). Rank r reads its own contiguous slice of
 * B*T + 1 tokens at position + r*B*T (the +1 is the last target), so the ranks see disjoint
 * B*T-token slices of each global batch, and together exactly the tokens one rank would see
 * with B' = world_size * B. Then position advances by world_size * B * T. When the current
 * shard cannot supply another global batch (position + world_size*B*T + 1 > n), the loader
 * moves to the next shard at position 0, wrapping from the last shard back to the first
 * (one epoch). Leftover tokens at the end of a shard are skipped.
 *
 *   inputs[b*T + t]  = token at slice start + b*T + t      (B x T, int)
 *   targets[b*T + t] = token at slice start + b*T + t + 1  (B x T, int)
 *
 * Tokens are read with fseek/fread per batch (B*T+1 tokens), so shards of any size cost
 * only one batch of memory. All shard headers are checked at init, so a bad shard stops the
 * run before training starts, not hours in.
 *
 * DataLoaderState {shard_index, position} names the next global batch; it does not depend on
 * the rank or world size, so a checkpoint taken with N ranks resumes with M ranks at the same
 * point in the data (given the same B*T per global batch).
 *
 * Bad input (no matching file, unreadable file, bad header, truncated file, shard too small
 * for one global batch) prints one line, `error: <file>: <what>; expected <what>`, and exits 1.
 */
#ifndef DATALOADER_H
#define DATALOADER_H

#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define DATALOADER_HEADER_INTS 256
#define DATALOADER_MAGIC 20240520
#define DATALOADER_VERSION 1

typedef struct {
    // configuration
    size_t B, T;
    int process_rank, num_processes;   // this rank and the world size
    // shards: names in sorted order and their token counts (from the checked headers)
    glob_t glob_result;
    size_t num_shards;
    size_t* shard_num_tokens;
    // position of the next global batch
    long current_shard;
    long current_position;             // in tokens, from the start of the shard's body
    FILE* shard_file;                  // the open current shard (NULL until the first read)
    long open_shard;                   // which shard shard_file is (-1 when none)
    // buffers
    uint16_t* read_buffer;             // B*T + 1 tokens of this rank's slice
    int* inputs;                       // B*T
    int* targets;                      // B*T
    size_t num_tokens_total;           // sum of the token counts of all shards
    int vocab_size;                    // token ids must be < this (0: unchecked); see dataloader_set_vocab_size
} DataLoader;

// Token ids index the embedding table: an id >= V would read past the model's vocabulary.
// Every batch is checked against V once the model (and so V) is known.
static void dataloader_set_vocab_size(DataLoader* loader, int vocab_size) { loader->vocab_size = vocab_size; }

// Where the loader is in the data: the next global batch starts at token `position` of shard
// `shard_index` (index into the sorted list of matched files).
typedef struct {
    long shard_index;
    long position;
} DataLoaderState;

// Print the user error line and exit 1. `expected_fmt` is printf-style.
static void dataloader_fail(const char* subject, const char* what, const char* expected_fmt, ...) {
    fprintf(stderr, "error: %s: %s; expected ", subject, what);
    va_list args;
    va_start(args, expected_fmt);
    vfprintf(stderr, expected_fmt, args);
    va_end(args);
    fprintf(stderr, "\n");
    exit(1);
}

// Tokens per global batch (all ranks), plus the one extra target token at the end.
static size_t dataloader_global_batch_tokens(const DataLoader* loader) {
    return (size_t)loader->num_processes * loader->B * loader->T;
}

// Open a shard, check its header and file size, return its token count. The file is left
// open (positioned after the header) in *file_out if file_out is not NULL, else closed.
static size_t dataloader_check_shard(const char* filename, FILE** file_out) {
    FILE* file = fopen(filename, "rb");
    if (file == NULL) {
        dataloader_fail(filename, "cannot open for reading", "a readable token shard");
    }
    int32_t header[DATALOADER_HEADER_INTS];
    size_t header_ints = fread(header, sizeof(int32_t), DATALOADER_HEADER_INTS, file);
    if (ferror(file)) {  // e.g. the pattern matched a directory
        char what[96];
        snprintf(what, sizeof(what), "cannot read (%s)", strerror(errno));
        dataloader_fail(filename, what, "a readable token shard");
    }
    if (header_ints != DATALOADER_HEADER_INTS) {
        dataloader_fail(filename, "file shorter than the shard header",
                        "a %d-byte header (256 x int32) then uint16 tokens",
                        (int)sizeof(header));
    }
    if (header[0] != DATALOADER_MAGIC) {
        char what[64];
        snprintf(what, sizeof(what), "bad magic number %d", header[0]);
        dataloader_fail(filename, what, "%d (an llm.c token shard, as data/prepare.py writes)",
                        DATALOADER_MAGIC);
    }
    if (header[1] != DATALOADER_VERSION) {
        char what[64];
        snprintf(what, sizeof(what), "unsupported shard version %d", header[1]);
        dataloader_fail(filename, what, "version %d (uint16 tokens)", DATALOADER_VERSION);
    }
    if (header[2] < 0) {
        char what[64];
        snprintf(what, sizeof(what), "negative token count %d in header", header[2]);
        dataloader_fail(filename, what, "a token count >= 0");
    }
    size_t num_tokens = (size_t)header[2];
    if (fseeko(file, 0, SEEK_END) != 0) {
        dataloader_fail(filename, "cannot seek", "a regular, seekable file");
    }
    off_t file_bytes = ftello(file);
    off_t expected_bytes = (off_t)sizeof(header) + (off_t)num_tokens * (off_t)sizeof(uint16_t);
    if (file_bytes != expected_bytes) {
        char what[128];
        snprintf(what, sizeof(what), "file is %lld bytes but its header says %zu tokens (%s)",
                 (long long)file_bytes, num_tokens,
                 file_bytes < expected_bytes ? "truncated" : "trailing bytes");
        dataloader_fail(filename, what, "%lld bytes (1024-byte header + 2 bytes per token)",
                        (long long)expected_bytes);
    }
    if (file_out != NULL) {
        *file_out = file;
    } else {
        fclose(file);
    }
    return num_tokens;
}

// Set up a loader over every file matching filename_pattern (glob(3)), for rank process_rank
// of num_processes, with micro-batches of B sequences of T tokens. Checks every shard header
// now. inputs/targets are allocated here (B*T ints each); the first batch comes from
// dataloader_next_batch.
static void dataloader_init(DataLoader* loader, const char* filename_pattern, size_t B, size_t T,
                            int process_rank, int num_processes) {
    memset(loader, 0, sizeof(*loader));
    if (B == 0 || T == 0) {
        char what[64];
        snprintf(what, sizeof(what), "batch size B=%zu, sequence length T=%zu", B, T);
        dataloader_fail("dataloader", what, "B >= 1 and T >= 1");
    }
    if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes) {
        char what[64];
        snprintf(what, sizeof(what), "rank %d of %d processes", process_rank, num_processes);
        dataloader_fail("dataloader", what, "0 <= rank < number of processes");
    }
    loader->B = B;
    loader->T = T;
    loader->process_rank = process_rank;
    loader->num_processes = num_processes;

    int glob_status = glob(filename_pattern, 0, NULL, &loader->glob_result);
    if (glob_status == GLOB_NOMATCH) {
        dataloader_fail(filename_pattern, "no file matches this pattern",
                        "one or more token shards (make them with data/tinyshakespeare.py or "
                        "data/prepare.py)");
    }
    if (glob_status != 0) {
        dataloader_fail(filename_pattern, "glob failed (read error or out of memory)",
                        "a readable directory of token shards");
    }
    // glob(3) without GLOB_NOSORT returns the names sorted: shard order is name order.
    loader->num_shards = loader->glob_result.gl_pathc;
    loader->shard_num_tokens = (size_t*)malloc(loader->num_shards * sizeof(size_t));
    if (loader->shard_num_tokens == NULL) {
        dataloader_fail("dataloader", "out of memory for the shard list", "fewer shards");
    }
    size_t needed = dataloader_global_batch_tokens(loader) + 1;
    for (size_t i = 0; i < loader->num_shards; i++) {
        const char* filename = loader->glob_result.gl_pathv[i];
        size_t num_tokens = dataloader_check_shard(filename, NULL);
        if (num_tokens < needed) {
            char what[160];
            snprintf(what, sizeof(what),
                     "shard has %zu tokens, too few for one global batch of "
                     "processes*B*T+1 = %d*%zu*%zu+1", num_tokens, num_processes, B, T);
            dataloader_fail(filename, what, "at least %zu tokens in every shard: a smaller -b or -t, or "
                            "the shards made again with a larger --shard-size (data/prepare.py --force)", needed);
        }
        loader->shard_num_tokens[i] = num_tokens;
        loader->num_tokens_total += num_tokens;
    }

    loader->read_buffer = (uint16_t*)malloc((B * T + 1) * sizeof(uint16_t));
    loader->inputs = (int*)malloc(B * T * sizeof(int));
    loader->targets = (int*)malloc(B * T * sizeof(int));
    if (!loader->read_buffer || !loader->inputs || !loader->targets) {
        dataloader_fail("dataloader", "out of memory for the batch buffers",
                        "B*T small enough to fit in memory");
    }
    loader->shard_file = NULL;
    loader->open_shard = -1;
    loader->current_shard = 0;
    loader->current_position = 0;
}

// Back to the first global batch of the first shard.
static void dataloader_reset(DataLoader* loader) {
    loader->current_shard = 0;
    loader->current_position = 0;
}

// Fill inputs and targets (B x T each) with this rank's slice of the next global batch, then
// advance to the global batch after it (moving to the next shard, or back to the first, when
// this one cannot supply another).
static void dataloader_next_batch(DataLoader* loader) {
    size_t global_tokens = dataloader_global_batch_tokens(loader);
    // Move on when the current shard is used up. Checked before reading rather than after,
    // so that a state restored from another configuration (different B*T) is still valid.
    if ((size_t)loader->current_position + global_tokens + 1 >
        loader->shard_num_tokens[loader->current_shard]) {
        loader->current_shard = (loader->current_shard + 1) % (long)loader->num_shards;
        loader->current_position = 0;
    }
    const char* filename = loader->glob_result.gl_pathv[loader->current_shard];
    if (loader->open_shard != loader->current_shard) {
        if (loader->shard_file != NULL) {
            fclose(loader->shard_file);
        }
        // Re-checked on open: the file may have been replaced since init.
        size_t num_tokens = dataloader_check_shard(filename, &loader->shard_file);
        if (num_tokens != loader->shard_num_tokens[loader->current_shard]) {
            dataloader_fail(filename, "shard changed size since the loader started",
                            "shards left unchanged during a run");
        }
        loader->open_shard = loader->current_shard;
    }
    size_t slice_tokens = loader->B * loader->T;
    off_t slice_start = (off_t)loader->current_position +
                        (off_t)loader->process_rank * (off_t)slice_tokens;
    off_t offset = (off_t)(DATALOADER_HEADER_INTS * sizeof(int32_t)) +
                   slice_start * (off_t)sizeof(uint16_t);
    if (fseeko(loader->shard_file, offset, SEEK_SET) != 0 ||
        fread(loader->read_buffer, sizeof(uint16_t), slice_tokens + 1, loader->shard_file) !=
            slice_tokens + 1) {
        dataloader_fail(filename, "read failed in the middle of the file",
                        "a shard that stays readable during a run");
    }
    if (loader->vocab_size > 0) {
        for (size_t i = 0; i <= slice_tokens; i++) {
            if (loader->read_buffer[i] >= loader->vocab_size) {
                dataloader_fail(filename, "token id out of range", "token ids < the model's vocab size %d; token %zu of the file is %u",
                                loader->vocab_size, (size_t)slice_start + i, (unsigned)loader->read_buffer[i]);
            }
        }
    }
    for (size_t i = 0; i < slice_tokens; i++) {
        loader->inputs[i] = (int)loader->read_buffer[i];
        loader->targets[i] = (int)loader->read_buffer[i + 1];
    }
    loader->current_position += (long)global_tokens;
}

// The position of the next global batch, for a checkpoint.
static DataLoaderState dataloader_get_state(const DataLoader* loader) {
    DataLoaderState state = {loader->current_shard, loader->current_position};
    return state;
}

// Continue from a checkpointed position. A position at or past the end of its shard is
// valid: the next batch then comes from the following shard.
static void dataloader_set_state(DataLoader* loader, DataLoaderState state) {
    if (state.shard_index < 0 || (size_t)state.shard_index >= loader->num_shards ||
        state.position < 0 ||
        (size_t)state.position > loader->shard_num_tokens[state.shard_index]) {
        char what[96];
        snprintf(what, sizeof(what), "data position shard %ld, token %ld is out of range",
                 state.shard_index, state.position);
        dataloader_fail("dataloader state", what,
                        "a shard index < %zu and a position inside that shard (same shards as "
                        "when the checkpoint was written)", loader->num_shards);
    }
    loader->current_shard = state.shard_index;
    loader->current_position = state.position;
}

static void dataloader_free(DataLoader* loader) {
    if (loader->shard_file != NULL) {
        fclose(loader->shard_file);
    }
    free(loader->read_buffer);
    free(loader->inputs);
    free(loader->targets);
    free(loader->shard_num_tokens);
    globfree(&loader->glob_result);
    memset(loader, 0, sizeof(*loader));
}

#endif  // DATALOADER_H
