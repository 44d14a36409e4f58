/*
 * common/atomic_file.h: write a file under "<path>.tmp" and rename it to <path> when complete, so
 * a crash or a kill never leaves a half-written file under the final name (rename(2) replaces
 * atomically within one file system, POSIX). Used for model files (common/model_file.h) and
 * state files (common/state_file.h).
 *
 * The temporary file being written is remembered, so that a handler that ends the process on a
 * signal removes it too (atomic_file_remove_unfinished, async-signal-safe: unlink(2)): a second
 * signal during a checkpoint leaves the previous checkpoint and no "<name>.tmp" behind. Only
 * SIGKILL can still leave one; nothing reads a ".tmp" file.
 *
 * Errors: one line naming the temporary file and the reason, the file removed, exit 1.
 */
#ifndef COMMON_ATOMIC_FILE_H
#define COMMON_ATOMIC_FILE_H
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// An open temporary file that becomes `path` on atomic_file_commit.
typedef struct { FILE* f; char path[4096]; char tmp_path[4096 + 8]; } AtomicFile;

// The temporary file being written now ("" when none). The path is complete before the flag is
// set (release) and the handler reads it only when set (acquire): the signal may arrive on any
// thread of the rank, the progress thread included.
static char atomic_file_unfinished_path[4096 + 8];
static volatile sig_atomic_t atomic_file_unfinished_set;

// Tests only (ZERO_TEST_FAULT=slowsave:N, common/test_fault.h): seconds a complete file stays under
// its temporary name before atomic_file_commit renames it; 0: none.
static unsigned atomic_file_hold_s;

static void atomic_file_forget_unfinished(void) { __atomic_store_n(&atomic_file_unfinished_set, 0, __ATOMIC_RELEASE); }

// Async-signal-safe: remove the temporary file being written, if any.
static void atomic_file_remove_unfinished(void) {
    if (__atomic_load_n(&atomic_file_unfinished_set, __ATOMIC_ACQUIRE)) unlink(atomic_file_unfinished_path);
}

static void atomic_file_open(AtomicFile* af, const char* path) {
    if (strlen(path) + 5 > sizeof(af->path)) { fprintf(stderr, "error: %s: path too long; expected under 4090 characters\n", path); exit(1); }
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp", path);
    atomic_file_forget_unfinished();
    memcpy(atomic_file_unfinished_path, af->tmp_path, sizeof(atomic_file_unfinished_path));
    __atomic_store_n(&atomic_file_unfinished_set, 1, __ATOMIC_RELEASE); // before fopen creates it
    af->f = fopen(af->tmp_path, "wb");
    if (af->f == NULL) {
        atomic_file_forget_unfinished();
        fprintf(stderr, "error: %s: cannot open for writing (%s); expected a writable directory\n", af->tmp_path, strerror(errno));
        exit(1);
    }
}

static void atomic_file_write(AtomicFile* af, const void* data, size_t bytes) {
    if (bytes > 0 && fwrite(data, 1, bytes, af->f) != bytes) {
        fprintf(stderr, "error: %s: write failed (%s); expected %zu bytes written\n", af->tmp_path, strerror(errno), bytes);
        fclose(af->f);
        remove(af->tmp_path);
        atomic_file_forget_unfinished();
        exit(1);
    }
}

static void atomic_file_commit(AtomicFile* af) {
    if (atomic_file_hold_s > 0) sleep(atomic_file_hold_s); // a signal's handler may end the rank here
    if (fflush(af->f) != 0 || fclose(af->f) != 0) {
        fprintf(stderr, "error: %s: close failed (%s); expected the file to be flushed\n", af->tmp_path, strerror(errno));
        remove(af->tmp_path);
        atomic_file_forget_unfinished();
        exit(1);
    }
    if (rename(af->tmp_path, af->path) != 0) {
        fprintf(stderr, "error: %s: rename to %s failed (%s)\n", af->tmp_path, af->path, strerror(errno));
        remove(af->tmp_path);
        atomic_file_forget_unfinished();
        exit(1);
    }
    atomic_file_forget_unfinished();
}

#endif // COMMON_ATOMIC_FILE_H
