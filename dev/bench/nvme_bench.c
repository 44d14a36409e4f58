/*
 * nvme_bench.c: bytes/s of the offload I/O engine (zero/offload/nvme_io.h), each backend, writing then
 * reading a file sequentially in requests of `request` bytes with `depth` of them in flight, as
 * the optimizer's stream of pieces does (three staging slots: about two requests in flight per
 * region). O_DIRECT, so the page cache does not count. One JSON line per (backend, pass);
 * dev/bench/nvme_bench.sh puts them beside fio's sequential bandwidth on the same file system.
 * Passes: write (a new file, fallocated as zero/offload/offload.h does: unwritten extents), rewrite (the
 * same blocks again, as every later step writes back), read. sync_seconds: the closing fdatasync.
 * Usage: build/nvme_bench DIR [file MiB (default 1024)] [request KiB (default 4096)] [depth (default 2)]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "zero/offload/nvme_io.h"

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [file_mib] [request_kib] [depth]\n", argv[0]); return 2; }
    size_t file = (size_t)(argc > 2 ? atoll(argv[2]) : 1024) << 20;
    size_t request = (size_t)(argc > 3 ? atoll(argv[3]) : 4096) << 10;
    int depth = argc > 4 ? atoi(argv[4]) : 2;
    if (depth < 1 || depth > 16 || request % NVME_ALIGN || file % request) { fprintf(stderr, "error: bad sizes\n"); return 2; }
    char* buf[16];
    NvmeRequest req[16];
    for (int i = 0; i < depth; i++) { buf[i] = (char*)nvme_alloc(request, "bench"); memset(buf[i], i + 1, request); }
    for (int backend = 0; backend < 2; backend++) {
        NvmeIO io;
        if ((int)nvme_io_init(&io, (NvmeBackend)backend) != backend) { nvme_io_free(&io); continue; }
        char path[4200];
        snprintf(path, sizeof(path), "%s/nvme_bench_%d.bin", argv[1], (int)getpid());
        int direct, fd = nvme_open(path, &direct);
        if (fd < 0 || posix_fallocate(fd, 0, (off_t)file) != 0) { fprintf(stderr, "error: %s: cannot create %zu bytes\n", path, file); return 1; }
        static const char* const op_names[] = {"write", "rewrite", "read"};
        for (int op = 0; op < 3; op++) { // write the new file, write it again (blocks now written), read back
            size_t count = file / request;
            double t0 = omp_get_wtime();
            for (size_t k = 0; k < count; k++) {
                int slot = (int)(k % (size_t)depth);
                if (k >= (size_t)depth && nvme_wait(&io, &req[slot]) != 0) { fprintf(stderr, "error: I/O failed\n"); return 1; }
                nvme_submit(&io, &req[slot], op < 2 ? NVME_WRITE : NVME_READ, fd, buf[slot], request, (uint64_t)(k * request));
            }
            for (int i = 0; i < depth && (size_t)i < count; i++) if (nvme_wait(&io, &req[i]) != 0) { fprintf(stderr, "error: I/O failed\n"); return 1; }
            double t_io = omp_get_wtime() - t0;
            if (op < 2) fdatasync(fd);
            double t = omp_get_wtime() - t0;
            printf("{\"backend\":\"%s\",\"op\":\"%s\",\"direct\":%d,\"file_bytes\":%zu,\"request_bytes\":%zu,\"depth\":%d,\"seconds\":%.6g,\"sync_seconds\":%.6g,\"bytes_per_s\":%.6g}\n",
                   nvme_backend_names[backend], op_names[op], direct, file, request, depth, t, t - t_io, file / t);
            fflush(stdout);
        }
        close(fd);
        unlink(path);
        nvme_io_free(&io);
    }
    return 0;
}
