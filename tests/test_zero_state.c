/*
 * test_zero_state.c: the per-rank training-state file (common/state_file.h): a write/read
 * round trip is bit-exact; a flipped payload byte, a truncated file, a bad magic and a missing
 * file each give one house-style error line; the latest-checkpoint scan and the world-size scan
 * read the file names train_gpt2 writes. Prints PASS/FAIL lines; exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/state_file.h"

static int failures = 0;
static void report(int ok, const char* name, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static void touch(const char* dir, const char* name) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    if (f) fclose(f);
}

int main(void) {
    char dir[] = "/tmp/test_zero_state.XXXXXX";
    if (mkdtemp(dir) == NULL) { printf("FAIL zero_state_tmpdir: mkdtemp failed\n"); return 1; }
    const size_t n = 1000;
    float* m = (float*)malloc(n * sizeof(float));
    float* v = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { m[i] = (float)i * 0.001f - 0.3f; v[i] = 1.0f / (float)(i + 1); }
    int64_t header[ZS_NUM_FIELDS] = {0};
    GPT2Config cfg = {1024, 50257, 50304, 2, 2, 128};
    header[ZS_ZERO_STAGE] = 2; header[ZS_WORLD_SIZE] = 3; header[ZS_RANK] = 1; header[ZS_STEP] = 7;
    zero_state_header_set_config(header, &cfg);
    header[ZS_ALIGN] = 64; header[ZS_NUMEL] = (int64_t)n; header[ZS_DATA_SHARD] = 0; header[ZS_DATA_POSITION] = 12345;
    header[ZS_SEED] = 42; header[ZS_BATCH_TOKENS] = 384;
    char path[4300], err[9000];
    zero_state_rank_path(path, sizeof(path), dir, 7, 1, 3);

    // Round trip.
    zero_state_write(path, header, m, v);
    int64_t got[ZERO_STATE_HEADER_INTS];
    float *m2, *v2;
    int rc = zero_state_read(path, got, &m2, &v2, err, sizeof(err));
    GPT2Config cfg2 = rc == 0 ? zero_state_header_config(got) : cfg;
    int ok = rc == 0 && memcmp(m, m2, n * 4) == 0 && memcmp(v, v2, n * 4) == 0 && got[ZS_STEP] == 7 && got[ZS_RANK] == 1 &&
             got[ZS_WORLD_SIZE] == 3 && got[ZS_ZERO_STAGE] == 2 && got[ZS_DATA_POSITION] == 12345 && gpt2_config_equal(&cfg, &cfg2);
    report(ok, "zero_state_file_round_trip_bit_exact", err);
    if (rc == 0) { free(m2); free(v2); }
    char tmp_path[4400];
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", path);
    report(!file_exists(tmp_path), "zero_state_file_written_atomically_no_tmp_left", tmp_path);

    // A flipped byte in the payload.
    FILE* f = fopen(path, "r+b");
    fseek(f, 1024 + 4 * 500 + 2, SEEK_SET);
    fputc(0x5A, f);
    fclose(f);
    rc = zero_state_read(path, got, &m2, &v2, err, sizeof(err));
    report(rc == -1 && strstr(err, "checksum mismatch") && strncmp(err, "error: ", 7) == 0 && strstr(err, "; expected "),
           "zero_state_file_flipped_byte_detected", err);

    // Truncated.
    zero_state_write(path, header, m, v);
    if (truncate(path, 1024 + 4 * n) != 0) report(0, "zero_state_truncate", "truncate failed");
    rc = zero_state_read(path, got, &m2, &v2, err, sizeof(err));
    report(rc == -1 && strstr(err, "truncated or damaged"), "zero_state_file_truncated_detected", err);

    // Bad magic (a model file given as a state file, say).
    zero_state_write(path, header, m, v);
    f = fopen(path, "r+b");
    int64_t bad = 20240326;
    fwrite(&bad, 8, 1, f);
    fclose(f);
    rc = zero_state_read(path, got, &m2, &v2, err, sizeof(err));
    report(rc == -1 && strstr(err, "bad magic"), "zero_state_file_bad_magic_detected", err);

    // Missing.
    zero_state_rank_path(path, sizeof(path), dir, 7, 2, 3);
    rc = zero_state_read(path, got, &m2, &v2, err, sizeof(err));
    report(rc == -1 && strstr(err, "cannot open state file"), "zero_state_file_missing_detected", err);

    // Scans: the latest model file, and the world sizes with a rank-0 file at a step.
    touch(dir, "model_00000005.bin");
    touch(dir, "model_00000020.bin");
    touch(dir, "model_00000010.bin.tmp"); // a half-written checkpoint never counts
    touch(dir, "state_00000020_r0_of_4.bin");
    touch(dir, "state_00000020_r0_of_2.bin");
    touch(dir, "state_00000020_r1_of_2.bin");
    int sizes[4];
    int count = zero_state_world_sizes(dir, 20, sizes, 4);
    char what[128];
    snprintf(what, sizeof(what), "latest %d, %d world sizes", checkpoint_latest_step(dir), count);
    report(checkpoint_latest_step(dir) == 20 && count == 2 && sizes[0] == 2 && sizes[1] == 4, "zero_checkpoint_scans_find_latest_and_world_sizes", what);

    char cmd[4400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    free(m);
    free(v);
    return failures ? 1 : 0;
}
