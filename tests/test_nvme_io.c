/*
 * test_nvme_io.c: the offload I/O engine (zero/offload/nvme_io.h), each backend (io_uring, worker
 * threads) on its own:
 *   - many writes then reads in flight at once, O_DIRECT, read back byte for byte
 *   - a read past the end of a truncated file: the short part is resubmitted, then NVME_ESHORT
 *   - errors come back as the request's errno: a closed fd (EBADF), a misaligned O_DIRECT buffer
 *     (EINVAL)
 *   - a real full filesystem: a 1 MiB tmpfs this test mounts (and unmounts) in argv[1]; a 2 MiB
 *     write ends FAILED with ENOSPC after the part that fit (SKIP when mounting is not allowed)
 *   - the ZERO_TEST_NVME_FAULT hook fails writes past its byte count with ENOSPC
 *   - the region checksum changes when one byte of the region does
 * Usage: build/test_nvme_io DIR (an empty scratch directory on a disk, e.g. from mktemp -d).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include "zero/offload/nvme_io.h"

static int failures = 0;
static void report(int ok, const char* name, const char* detail) {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    if (!ok) failures++;
}

static void fill(unsigned char* p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; p[i] = (unsigned char)(seed >> 16); }
}

static void test_backend(NvmeBackend want, const char* dir) {
    NvmeIO io;
    NvmeBackend got = nvme_io_init(&io, want);
    char name[256], detail[512] = "";
    const char* b = nvme_backend_names[want];
    if (got != want) {
        printf("SKIP nvme_%s_*: this machine or build has no io_uring (fell back to %s)\n", b, nvme_backend_names[got]);
        nvme_io_free(&io);
        return;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/io_%s.bin", dir, b);
    int direct;
    int fd = nvme_open(path, &direct);
    // 1. 24 regions of mixed sizes in flight together, then read back in another order.
    enum { R = 24 };
    size_t sizes[R], offsets[R], at = 0;
    unsigned char *src[R], *dst[R];
    NvmeRequest req[R];
    for (int i = 0; i < R; i++) {
        sizes[i] = (size_t)NVME_ALIGN * (1 + (i * 37) % 300); // 4 KiB .. 1.2 MiB
        offsets[i] = at;
        at += sizes[i];
        src[i] = (unsigned char*)nvme_alloc(sizes[i], "test");
        dst[i] = (unsigned char*)nvme_alloc(sizes[i], "test");
        fill(src[i], sizes[i], (unsigned)i + 1);
        nvme_submit(&io, &req[i], NVME_WRITE, fd, src[i], sizes[i], offsets[i]);
    }
    int errors = 0;
    for (int i = 0; i < R; i++) errors += nvme_wait(&io, &req[i]) != 0;
    for (int i = R - 1; i >= 0; i--) nvme_submit(&io, &req[i], NVME_READ, fd, dst[i], sizes[i], offsets[i]);
    int same = 1;
    for (int i = 0; i < R; i++) { errors += nvme_wait(&io, &req[i]) != 0; same &= memcmp(src[i], dst[i], sizes[i]) == 0; }
    snprintf(detail, sizeof(detail), "%d regions, %zu bytes, O_DIRECT %s, %d errors, read %lld written %lld bytes", R, at,
             direct ? "yes" : "no", errors, io.bytes_read, io.bytes_written);
    snprintf(name, sizeof(name), "nvme_%s_many_in_flight_round_trip", b);
    report(same && errors == 0 && direct && io.bytes_read == (long long)at && io.bytes_written == (long long)at, name, detail);

    // 2. Truncate the file into the middle of the last region: its read comes back short, the
    // rest is asked for again and meets the end of the file.
    size_t cut = offsets[R - 1] + sizes[R - 1] / 2 / NVME_ALIGN * NVME_ALIGN;
    int rc_trunc = ftruncate(fd, (off_t)cut);
    nvme_submit(&io, &req[0], NVME_READ, fd, dst[R - 1], sizes[R - 1], offsets[R - 1]);
    int rc = nvme_wait(&io, &req[0]);
    snprintf(detail, sizeof(detail), "got %s after %zu of %zu bytes", nvme_strerror(rc), req[0].done, sizes[R - 1]);
    snprintf(name, sizeof(name), "nvme_%s_read_past_end_is_short_then_eof", b);
    report(rc_trunc == 0 && rc == NVME_ESHORT && req[0].done == cut - offsets[R - 1], name, detail);

    // 3. Errors: a misaligned buffer under O_DIRECT (EINVAL), a closed descriptor (EBADF).
    nvme_submit(&io, &req[0], NVME_READ, fd, src[1] + 1, NVME_ALIGN, 0);
    rc = nvme_wait(&io, &req[0]);
    snprintf(detail, sizeof(detail), "got %s", nvme_strerror(rc));
    snprintf(name, sizeof(name), "nvme_%s_misaligned_direct_read_fails_einval", b);
    report(rc == EINVAL, name, detail);
    close(fd);
    nvme_submit(&io, &req[0], NVME_WRITE, fd, src[1], NVME_ALIGN, 0);
    rc = nvme_wait(&io, &req[0]);
    snprintf(detail, sizeof(detail), "got %s", nvme_strerror(rc));
    snprintf(name, sizeof(name), "nvme_%s_closed_fd_fails_ebadf", b);
    report(rc == EBADF, name, detail);
    unlink(path);

    // 4. A real full filesystem: 1 MiB of tmpfs, a 2 MiB write.
    char mnt[4096];
    snprintf(mnt, sizeof(mnt), "%s/tmpfs_%s", dir, b);
    mkdir(mnt, 0700);
    snprintf(name, sizeof(name), "nvme_%s_full_filesystem_fails_enospc", b);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        printf("SKIP %s: cannot mount a tmpfs here (%s)\n", name, strerror(errno));
    } else {
        snprintf(path, sizeof(path), "%.4000s/full.bin", mnt);
        fd = nvme_open(path, &direct);
        unsigned char* big = (unsigned char*)nvme_alloc(2u << 20, "test");
        nvme_submit(&io, &req[0], NVME_WRITE, fd, big, 2u << 20, 0);
        rc = nvme_wait(&io, &req[0]);
        snprintf(detail, sizeof(detail), "got %s after %zu of %u bytes", nvme_strerror(rc), req[0].done, 2u << 20);
        report(rc == ENOSPC && req[0].done > 0 && req[0].done <= (1u << 20), name, detail);
        close(fd);
        free(big);
        umount2(mnt, MNT_DETACH);
    }
    rmdir(mnt);
    for (int i = 0; i < R; i++) { free(src[i]); free(dst[i]); }
    nvme_io_free(&io);

    // 5. The test hook: writes past 8 KiB fail with ENOSPC, the ones before succeed.
    setenv("ZERO_TEST_NVME_FAULT", "enospc@8192", 1);
    nvme_io_init(&io, want);
    unsetenv("ZERO_TEST_NVME_FAULT");
    snprintf(path, sizeof(path), "%s/fault_%s.bin", dir, b);
    fd = nvme_open(path, &direct);
    unsigned char* page = (unsigned char*)nvme_alloc(NVME_ALIGN, "test");
    int results[3];
    for (int i = 0; i < 3; i++) {
        nvme_submit(&io, &req[0], NVME_WRITE, fd, page, NVME_ALIGN, (uint64_t)i * NVME_ALIGN);
        results[i] = nvme_wait(&io, &req[0]);
    }
    snprintf(detail, sizeof(detail), "writes: %s, %s, %s", nvme_strerror(results[0]), nvme_strerror(results[1]), nvme_strerror(results[2]));
    snprintf(name, sizeof(name), "nvme_%s_fault_hook_fails_writes_past_its_bytes", b);
    report(results[0] == 0 && results[1] == 0 && results[2] == ENOSPC, name, detail);
    close(fd);
    unlink(path);
    free(page);
    nvme_io_free(&io);
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]); return 2; }
    test_backend(NVME_BACKEND_URING, argv[1]);
    test_backend(NVME_BACKEND_THREADS, argv[1]);
    unsigned char* a = (unsigned char*)nvme_alloc(1 << 16, "test");
    fill(a, 1 << 16, 7);
    uint64_t h0 = nvme_checksum(a, 1 << 16);
    a[12345] ^= 1;
    uint64_t h1 = nvme_checksum(a, 1 << 16);
    a[12345] ^= 1;
    report(h0 != h1 && nvme_checksum(a, 1 << 16) == h0, "nvme_checksum_sees_one_flipped_bit", "");
    free(a);
    return failures ? 1 : 0;
}
