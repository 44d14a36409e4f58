/*
 * Unit tests for common/dataloader.h and common/tokenizer.h. Prints one line per check,
 * "PASS <name>" or "FAIL <name>: <why>", and exits 1 if any check failed.
 *
 * The data is made here, in a fresh /tmp directory: three small shards whose token at index i
 * of shard k is k*1000 + i, so every token names its shard and position, and the expected
 * batch contents follow in closed form from the shard sizes (no second loader needed).
 * Shard sizes 100, 130, 70 tokens are chosen so that no shard divides evenly into batches:
 * the leftover-skipping and the wrap-around both get exercised.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dataloader.h"
#include "common/tokenizer.h"

static int num_failed = 0;

// One line per check. `why` is only printed on failure.
static void report(const char* name, int ok, const char* why) {
    if (ok) {
        printf("PASS %s\n", name);
    } else {
        printf("FAIL %s: %s\n", name, why);
        num_failed++;
    }
}

#define NUM_SHARDS 3
static const size_t shard_sizes[NUM_SHARDS] = {100, 130, 70};
static char test_dir[] = "/tmp/test_dataloader_XXXXXX";
static char pattern[256];

static int token_value(int shard, size_t index) { return shard * 1000 + (int)index; }

static void write_test_shard(const char* path, int shard, size_t num_tokens) {
    int32_t header[256] = {0};
    header[0] = 20240520;
    header[1] = 1;
    header[2] = (int32_t)num_tokens;
    FILE* f = fopen(path, "wb");
    if (f == NULL) { perror(path); exit(2); }
    fwrite(header, sizeof(int32_t), 256, f);
    for (size_t i = 0; i < num_tokens; i++) {
        uint16_t token = (uint16_t)token_value(shard, i);
        fwrite(&token, sizeof(token), 1, f);
    }
    fclose(f);
}

// Expected start (token index) of global batch number `step` for a loader over the test shards
// with `global` tokens per global batch: each shard holds floor((n - 1) / global) batches.
static void expected_batch_start(size_t step, size_t global, int* shard, size_t* start) {
    *shard = 0;
    *start = 0;
    size_t per_epoch = 0;
    for (int k = 0; k < NUM_SHARDS; k++) per_epoch += (shard_sizes[k] - 1) / global;
    step %= per_epoch;
    for (int k = 0; k < NUM_SHARDS; k++) {
        size_t batches = (shard_sizes[k] - 1) / global;
        if (step < batches) { *shard = k; *start = step * global; return; }
        step -= batches;
    }
}

// 1 if inputs[i] / targets[i] are the tokens at start + i and start + i + 1 of `shard`.
static int batch_matches(const DataLoader* loader, int shard, size_t start, char* why) {
    size_t n = loader->B * loader->T;
    for (size_t i = 0; i < n; i++) {
        int want = token_value(shard, start + i);
        if (loader->inputs[i] != want || loader->targets[i] != want + 1) {
            snprintf(why, 160, "position %zu: input %d target %d, want %d %d (shard %d token %zu)",
                     i, loader->inputs[i], loader->targets[i], want, want + 1, shard, start + i);
            return 0;
        }
    }
    return 1;
}

static void test_shards_found_in_name_order(void) {
    DataLoader loader;
    dataloader_init(&loader, pattern, 2, 4, 0, 1);
    char why[160] = "";
    int ok = loader.num_shards == NUM_SHARDS &&
             loader.num_tokens_total == shard_sizes[0] + shard_sizes[1] + shard_sizes[2];
    snprintf(why, sizeof(why), "%zu shards, %zu tokens; want 3, 300", loader.num_shards,
             loader.num_tokens_total);
    report("dataloader_counts_all_shards_and_tokens", ok, why);
    // Shards were written last-first, so creation order differs from name order.
    dataloader_next_batch(&loader);
    report("dataloader_reads_shards_in_sorted_name_order", loader.inputs[0] == token_value(0, 0),
           "first batch does not start at shard 000's first token");
    dataloader_free(&loader);
}

static void test_next_batch_contents(void) {
    DataLoader loader;
    dataloader_init(&loader, pattern, 2, 4, 0, 1);
    char why[160] = "";
    int ok = 1;
    for (size_t step = 0; step < 3 && ok; step++) {
        dataloader_next_batch(&loader);
        ok = batch_matches(&loader, 0, step * 8, why);
    }
    report("next_batch_reads_consecutive_tokens_targets_shifted_by_one", ok, why);
    // The shift property on its own, stated without the token numbering: targets[i] is the
    // token after inputs[i], which is inputs[i+1] inside the batch.
    ok = 1;
    for (size_t i = 0; i + 1 < 8; i++) ok &= loader.targets[i] == loader.inputs[i + 1];
    report("targets_equal_inputs_shifted_left_by_one", ok, "targets[i] != inputs[i+1]");
    dataloader_free(&loader);
}

static void test_wrap_around(void) {
    // B*T = 8 per batch: shards hold 99/8 = 12, 129/8 = 16, 69/8 = 8 batches = 36 per epoch.
    DataLoader loader;
    dataloader_init(&loader, pattern, 1, 8, 0, 1);
    char why[160] = "";
    int ok = 1;
    for (size_t step = 0; step < 2 * 36 + 5 && ok; step++) {
        int shard; size_t start;
        expected_batch_start(step, 8, &shard, &start);
        dataloader_next_batch(&loader);
        ok = batch_matches(&loader, shard, start, why);
    }
    report("shard_change_skips_leftover_and_wraps_to_first_shard", ok, why);
    // Spot checks of the closed form itself at the boundaries.
    int shard; size_t start;
    expected_batch_start(12, 8, &shard, &start);
    int ok2 = shard == 1 && start == 0;
    expected_batch_start(36, 8, &shard, &start);
    ok2 &= shard == 0 && start == 0;
    report("expected_positions_closed_form_boundaries", ok2, "step 12 -> shard 1, 36 -> shard 0");
    dataloader_reset(&loader);
    dataloader_next_batch(&loader);
    report("reset_returns_to_first_batch", batch_matches(&loader, 0, 0, why), why);
    dataloader_free(&loader);
}

// For world sizes 1, 2, 3: every rank reads exactly its own B*T slice of each global batch,
// the slices are disjoint and together cover the global batch, and the union equals what a
// single rank with B' = world_size * B reads (a second code path).
static void test_rank_slices(int world_size) {
    const size_t B = 2, T = 3, slice = B * T, global = world_size * slice;
    DataLoader ranks[3], single;
    for (int r = 0; r < world_size; r++) dataloader_init(&ranks[r], pattern, B, T, r, world_size);
    dataloader_init(&single, pattern, B * world_size, T, 0, 1);
    char why[160] = "";
    int ok_slices = 1, ok_disjoint = 1, ok_single = 1;
    for (size_t step = 0; step < 40; step++) {  // 40 > one epoch for every world size here
        int shard; size_t start;
        expected_batch_start(step, global, &shard, &start);
        dataloader_next_batch(&single);
        int seen[1000] = {0};  // tokens of one shard are k*1000 + i, i < 1000
        for (int r = 0; r < world_size; r++) {
            dataloader_next_batch(&ranks[r]);
            if (ok_slices && !batch_matches(&ranks[r], shard, start + r * slice, why)) {
                ok_slices = 0;
            }
            for (size_t i = 0; i < slice; i++) {
                int index = ranks[r].inputs[i] % 1000;
                if (seen[index]++) ok_disjoint = 0;
                if (ranks[r].inputs[i] != single.inputs[r * slice + i] ||
                    ranks[r].targets[i] != single.targets[r * slice + i]) ok_single = 0;
            }
        }
    }
    char name[96];
    snprintf(name, sizeof(name), "rank_reads_own_slice_at_rank_times_BT_np%d", world_size);
    report(name, ok_slices, why);
    snprintf(name, sizeof(name), "rank_slices_disjoint_np%d", world_size);
    report(name, ok_disjoint, "a token appeared in two ranks' slices of one global batch");
    snprintf(name, sizeof(name), "np%d_ranks_together_equal_one_rank_with_np_times_B", world_size);
    report(name, ok_single, "concatenated rank slices differ from the B*np single-rank batch");
    for (int r = 0; r < world_size; r++) dataloader_free(&ranks[r]);
    dataloader_free(&single);
}

static void test_state_round_trip(void) {
    enum { STEPS = 20 };
    DataLoader loader;
    dataloader_init(&loader, pattern, 1, 8, 0, 1);
    for (int i = 0; i < 10; i++) dataloader_next_batch(&loader);  // 20 more crosses a shard
    DataLoaderState state = dataloader_get_state(&loader);
    int first[STEPS], second[STEPS], third[STEPS];
    for (int i = 0; i < STEPS; i++) {
        dataloader_next_batch(&loader);
        first[i] = loader.inputs[3];
    }
    dataloader_set_state(&loader, state);
    for (int i = 0; i < STEPS; i++) {
        dataloader_next_batch(&loader);
        second[i] = loader.inputs[3];
    }
    // A fresh loader (as after a restart) resumes at the same point too.
    DataLoader resumed;
    dataloader_init(&resumed, pattern, 1, 8, 0, 1);
    dataloader_set_state(&resumed, state);
    for (int i = 0; i < STEPS; i++) {
        dataloader_next_batch(&resumed);
        third[i] = resumed.inputs[3];
    }
    int ok = memcmp(first, second, sizeof(first)) == 0 && memcmp(first, third, sizeof(first)) == 0;
    report("state_get_set_round_trip_replays_same_batches", ok,
           "batches after set_state differ from those after get_state");
    report("state_is_shard_and_position", state.shard_index == 0 && state.position == 80,
           "after 10 batches of 8 tokens, want shard 0 position 80");
    // A position at the very end of a shard is valid: the next batch is the next shard's first.
    DataLoaderState at_end = {1, (long)shard_sizes[1]};
    dataloader_set_state(&resumed, at_end);
    dataloader_next_batch(&resumed);
    char why[160] = "";
    report("state_at_shard_end_continues_with_next_shard", batch_matches(&resumed, 2, 0, why), why);
    dataloader_free(&loader);
    dataloader_free(&resumed);
}

// ----------------------------------------------------------------------------------------
// tokenizer

// A 10-token vocabulary that exercises the UTF-8 repair: parts of characters split across
// tokens, bytes that can never appear in UTF-8, an overlong form and a surrogate.
static const char* tiny_vocab[] = {
    "Hi",                 // 0
    " there",             // 1
    "\xE2\x82",           // 2  first two bytes of EURO SIGN U+20AC (E2 82 AC)
    "\xAC",               // 3  its last byte
    "\xFF",               // 4  never valid in UTF-8
    "\xC0\x80",           // 5  overlong NUL: C0 is never valid, 80 is a lone continuation
    "\xED\xA0\x80",       // 6  surrogate U+D800, ill-formed in UTF-8
    "\xF0\x9F",           // 7  first half of U+1F600 (F0 9F 98 80)
    "\x98\x80",           // 8  second half
    "<|endoftext|>",      // 9  end of text
};
#define TINY_VOCAB 10

static void write_tiny_tokenizer(const char* path) {
    int32_t header[256] = {0};
    header[0] = 20240328;
    header[1] = 2;
    header[2] = TINY_VOCAB;
    header[3] = 9;
    FILE* f = fopen(path, "wb");
    if (f == NULL) { perror(path); exit(2); }
    fwrite(header, sizeof(int32_t), 256, f);
    for (int i = 0; i < TINY_VOCAB; i++) {
        uint8_t length = (uint8_t)strlen(tiny_vocab[i]);
        fwrite(&length, 1, 1, f);
        fwrite(tiny_vocab[i], 1, length, f);
    }
    fclose(f);
}

#define FFFD "\xEF\xBF\xBD"

// Decode `tokens` with capacity cap and compare with the expected bytes.
static void check_decode(Tokenizer* tokenizer, const char* name, const int* tokens, int n,
                         size_t cap, const char* want) {
    char out[128];
    memset(out, 'x', sizeof(out));
    size_t written = tokenizer_decode_utf8(tokenizer, tokens, n, out, cap);
    char why[200];
    snprintf(why, sizeof(why), "got %zu bytes, want %zu (\"%s\")", written, strlen(want), want);
    report(name, written == strlen(want) && memcmp(out, want, written + 1) == 0, why);
}

static void test_tokenizer(void) {
    char path[300];
    snprintf(path, sizeof(path), "%s/tokenizer.bin", test_dir);
    write_tiny_tokenizer(path);
    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, path);
    report("tokenizer_reads_header", tokenizer.init_ok && tokenizer.vocab_size == TINY_VOCAB &&
           tokenizer.eot_token == 9, "init_ok, vocab 10, eot 9");
    const char* eot = tokenizer_decode(&tokenizer, 9);
    report("tokenizer_decode_returns_token_bytes",
           eot != NULL && strcmp(eot, "<|endoftext|>") == 0 &&
           strcmp(tokenizer_decode(&tokenizer, 1), " there") == 0, "token 9 / token 1 bytes");
    report("tokenizer_decode_out_of_range_is_null", tokenizer_decode(&tokenizer, 10) == NULL,
           "token 10 of a 10-token vocab is not NULL");

    check_decode(&tokenizer, "decode_utf8_joins_ascii_tokens", (int[]){0, 1}, 2, 128, "Hi there");
    check_decode(&tokenizer, "decode_utf8_keeps_character_split_across_tokens",
                 (int[]){0, 2, 3, 7, 8}, 5, 128, "Hi\xE2\x82\xAC\xF0\x9F\x98\x80");
    check_decode(&tokenizer, "decode_utf8_replaces_invalid_byte", (int[]){0, 4, 0}, 3, 128,
                 "Hi" FFFD "Hi");
    check_decode(&tokenizer, "decode_utf8_replaces_truncated_sequence_once",
                 (int[]){2, 0}, 2, 128, FFFD "Hi");
    check_decode(&tokenizer, "decode_utf8_replaces_truncated_sequence_at_end",
                 (int[]){0, 7}, 2, 128, "Hi" FFFD);
    check_decode(&tokenizer, "decode_utf8_replaces_overlong_bytes_each", (int[]){5}, 1, 128,
                 FFFD FFFD);
    check_decode(&tokenizer, "decode_utf8_replaces_surrogate_bytes_each", (int[]){6}, 1, 128,
                 FFFD FFFD FFFD);
    check_decode(&tokenizer, "decode_utf8_replaces_out_of_vocab_ids", (int[]){0, 10, -1}, 3, 128,
                 "Hi" FFFD FFFD);
    // cap 5 leaves room for "Hi" (2) + NUL but not for the 3-byte euro sign: cut before it.
    check_decode(&tokenizer, "decode_utf8_stops_at_last_whole_character_that_fits",
                 (int[]){0, 2, 3}, 3, 5, "Hi");
    tokenizer_free(&tokenizer);

    Tokenizer unusable = {0};
    char out[8] = "junk";
    report("decode_utf8_on_unusable_tokenizer_gives_empty_string",
           tokenizer_decode_utf8(&unusable, (int[]){0}, 1, out, sizeof(out)) == 0 && out[0] == 0 &&
           tokenizer_decode(&unusable, 0) == NULL, "want 0 bytes, \"\" and NULL");
    unlink(path);
}

int main(void) {
    if (mkdtemp(test_dir) == NULL) { perror("mkdtemp"); return 2; }
    char path[300];
    for (int k = NUM_SHARDS - 1; k >= 0; k--) {  // last-first: creation order != name order
        snprintf(path, sizeof(path), "%s/shard_%03d.bin", test_dir, k);
        write_test_shard(path, k, shard_sizes[k]);
    }
    snprintf(pattern, sizeof(pattern), "%s/shard_*.bin", test_dir);

    test_shards_found_in_name_order();
    test_next_batch_contents();
    test_wrap_around();
    for (int world_size = 1; world_size <= 3; world_size++) test_rank_slices(world_size);
    test_state_round_trip();
    test_tokenizer();

    for (int k = 0; k < NUM_SHARDS; k++) {
        snprintf(path, sizeof(path), "%s/shard_%03d.bin", test_dir, k);
        unlink(path);
    }
    rmdir(test_dir);
    return num_failed ? 1 : 0;
}
