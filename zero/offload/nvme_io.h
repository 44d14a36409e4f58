/*
 * zero/offload/nvme_io.h: the asynchronous file I/O under ZeRO-Infinity's NVMe placement (zero/offload/offload.h):
 * reads and writes of whole file regions, submitted without blocking and waited on when the data
 * is needed. Part of the ZeRO engine (the map is in zero.cuh); host C, both builds.
 *
 * Two backends, one interface (nvme_submit, nvme_poll, nvme_wait):
 *   io_uring (Linux 5.1+, through liburing; Axboe 2019, "Efficient IO with io_uring"): requests go
 *     into a submission ring, completions come back on a completion ring; no thread, one syscall
 *     per batch. The default where the build has liburing (make finds /usr/include/liburing.h).
 *   worker threads doing pread/pwrite: the fallback where io_uring is missing or refused (some
 *     container sandboxes block its syscalls), and a second code path the tests hold it against.
 * dev/bench/nvme_bench.sh measures both against the disk's sequential bandwidth (fio).
 * Files are opened with O_DIRECT (no page cache: offloaded state really leaves RAM), so buffers,
 * offsets and sizes are multiples of NVME_ALIGN; where the filesystem refuses O_DIRECT (tmpfs)
 * the file is opened buffered and the caller is told.
 *
 * Errors are never silent: a request ends DONE or FAILED with the errno (a short transfer is
 * resubmitted for the rest; a read that returns 0 bytes before the end is NVME_ESHORT: the file
 * was truncated). The caller turns a failure into one error line naming the file.
 * Test hook (tests only): ZERO_TEST_NVME_FAULT=enospc@BYTES fails every write once BYTES bytes
 * have been written in total, as a filesystem that filled up mid-run would.
 */
#ifndef ZERO_NVME_IO_H
#define ZERO_NVME_IO_H
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifndef O_DIRECT // glibc names it only under _GNU_SOURCE; its arch-specific value is always there
#define O_DIRECT __O_DIRECT
#endif
#ifndef ZERO_HAVE_LIBURING
#define ZERO_HAVE_LIBURING 0
#endif
#if ZERO_HAVE_LIBURING
#include <liburing.h>
#endif

#define NVME_ALIGN 4096          // O_DIRECT alignment of buffers, offsets and sizes (bytes)
#define NVME_ESHORT 1000         // "errno" of a read that hit the end of the file
#define NVME_THREADS 2           // worker threads of the fallback backend
#define NVME_QUEUE 64            // requests in flight at most

typedef enum { NVME_BACKEND_URING, NVME_BACKEND_THREADS } NvmeBackend;
static const char* const nvme_backend_names[] = {"io_uring", "threads"};
typedef enum { NVME_IDLE, NVME_QUEUED, NVME_INFLIGHT, NVME_DONE, NVME_FAILED } NvmeState;
typedef enum { NVME_READ, NVME_WRITE } NvmeOp;

// One read or write of `bytes` at `offset` of fd from/into buf. Owned by the caller; must stay
// alive (with its buffer) until nvme_wait returns for it.
typedef struct NvmeRequest {
    NvmeOp op;
    int fd;
    void* buf;
    size_t bytes, done;   // requested, transferred so far
    uint64_t offset;
    volatile int state;   // NvmeState
    int error;            // errno when FAILED
    struct NvmeRequest* next; // the threads backend's queue
} NvmeRequest;

typedef struct {
    NvmeBackend backend;
#if ZERO_HAVE_LIBURING
    struct io_uring ring;
#endif
    int inflight;
    // threads backend: a queue of requests, a lock and two condition variables
    pthread_t threads[NVME_THREADS];
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    NvmeRequest *head, *tail;
    int stopping;
    // accounting (bytes completed; bytes submitted, which do not depend on timing) and the test hook
    long long bytes_read, bytes_written, bytes_read_submitted, bytes_written_submitted;
    long long fault_enospc_after; // -1: off
} NvmeIO;

// ---- the transfer itself, shared by both backends ----

// A write the test hook turns into ENOSPC (the whole request: as a full filesystem would).
static int nvme_fault_hits(NvmeIO* io, NvmeRequest* r) {
    return r->op == NVME_WRITE && io->fault_enospc_after >= 0 && io->bytes_written + (long long)r->bytes > io->fault_enospc_after;
}

// Account a transfer result: returns 1 when the request is finished (DONE or FAILED), 0 when the
// rest must be submitted again (a short transfer).
static int nvme_account(NvmeIO* io, NvmeRequest* r, long long result) {
    if (result < 0) { r->error = (int)-result; r->state = NVME_FAILED; return 1; }
    if (result == 0) { r->error = r->op == NVME_READ ? NVME_ESHORT : ENOSPC; r->state = NVME_FAILED; return 1; }
    r->done += (size_t)result;
    if (r->done < r->bytes) return 0;
    if (r->op == NVME_READ) io->bytes_read += (long long)r->bytes;
    else io->bytes_written += (long long)r->bytes;
    r->state = NVME_DONE;
    return 1;
}

// ---- threads backend ----

static void* nvme_worker(void* arg) {
    NvmeIO* io = (NvmeIO*)arg;
    for (;;) {
        pthread_mutex_lock(&io->lock);
        while (io->head == NULL && !io->stopping) pthread_cond_wait(&io->work, &io->lock);
        if (io->head == NULL) { pthread_mutex_unlock(&io->lock); return NULL; }
        NvmeRequest* r = io->head;
        io->head = r->next;
        if (io->head == NULL) io->tail = NULL;
        r->state = NVME_INFLIGHT;
        int fault = nvme_fault_hits(io, r);
        pthread_mutex_unlock(&io->lock);
        long long result = 0;
        int finished = 0;
        while (!finished) {
            char* p = (char*)r->buf + r->done;
            size_t left = r->bytes - r->done;
            off_t at = (off_t)(r->offset + r->done);
            if (fault) result = -ENOSPC;
            else {
                ssize_t n = r->op == NVME_READ ? pread(r->fd, p, left, at) : pwrite(r->fd, p, left, at);
                result = n < 0 ? -(long long)errno : (long long)n;
                if (n < 0 && errno == EINTR) continue;
            }
            pthread_mutex_lock(&io->lock);
            finished = nvme_account(io, r, result);
            if (finished) { io->inflight--; pthread_cond_broadcast(&io->done); }
            pthread_mutex_unlock(&io->lock);
        }
    }
}

// ---- io_uring backend ----

#if ZERO_HAVE_LIBURING
static void nvme_uring_push(NvmeIO* io, NvmeRequest* r) {
    struct io_uring_sqe* sqe = io_uring_get_sqe(&io->ring);
    if (sqe == NULL) { io_uring_submit(&io->ring); sqe = io_uring_get_sqe(&io->ring); }
    char* p = (char*)r->buf + r->done;
    unsigned left = (unsigned)(r->bytes - r->done);
    if (r->op == NVME_READ) io_uring_prep_read(sqe, r->fd, p, left, r->offset + r->done);
    else io_uring_prep_write(sqe, r->fd, p, left, r->offset + r->done);
    io_uring_sqe_set_data(sqe, r);
    r->state = NVME_INFLIGHT;
}

// Handle one completion; wait for it if `block`. Returns 1 if one was handled.
static int nvme_uring_reap(NvmeIO* io, int block) {
    struct io_uring_cqe* cqe = NULL;
    int rc = block ? io_uring_wait_cqe(&io->ring, &cqe) : io_uring_peek_cqe(&io->ring, &cqe);
    if (rc == -EINTR || rc == -EAGAIN || cqe == NULL) return 0;
    if (rc < 0) { fprintf(stderr, "error: io_uring: waiting for a completion failed: %s\n", strerror(-rc)); exit(1); }
    NvmeRequest* r = (NvmeRequest*)io_uring_cqe_get_data(cqe);
    long long result = cqe->res;
    io_uring_cqe_seen(&io->ring, cqe);
    if (nvme_account(io, r, result)) io->inflight--;
    else { nvme_uring_push(io, r); io_uring_submit(&io->ring); } // the rest of a short transfer
    return 1;
}
#endif

// ---- interface ----

/*
 * Start the I/O engine: `prefer` is the backend to try first (io_uring falls back to threads if
 * the build lacks liburing or the kernel refuses the ring). Returns the backend that runs.
 */
static NvmeBackend nvme_io_init(NvmeIO* io, NvmeBackend prefer) {
    memset(io, 0, sizeof(*io));
    io->fault_enospc_after = -1;
    const char* fault = getenv("ZERO_TEST_NVME_FAULT");
    if (fault != NULL && sscanf(fault, "enospc@%lld", &io->fault_enospc_after) != 1) {
        fprintf(stderr, "error: ZERO_TEST_NVME_FAULT=%s: unknown; expected enospc@BYTES\n", fault);
        exit(1);
    }
    io->backend = NVME_BACKEND_THREADS;
#if ZERO_HAVE_LIBURING
    if (prefer == NVME_BACKEND_URING && io_uring_queue_init(NVME_QUEUE, &io->ring, 0) == 0) io->backend = NVME_BACKEND_URING;
#else
    (void)prefer;
#endif
    if (io->backend == NVME_BACKEND_THREADS) {
        pthread_mutex_init(&io->lock, NULL);
        pthread_cond_init(&io->work, NULL);
        pthread_cond_init(&io->done, NULL);
        for (int i = 0; i < NVME_THREADS; i++) pthread_create(&io->threads[i], NULL, nvme_worker, io);
    }
    return io->backend;
}

// Submit a read or write (buf, offset and bytes aligned to NVME_ALIGN for O_DIRECT files).
static void nvme_submit(NvmeIO* io, NvmeRequest* r, NvmeOp op, int fd, void* buf, size_t bytes, uint64_t offset) {
    r->op = op; r->fd = fd; r->buf = buf; r->bytes = bytes; r->done = 0; r->offset = offset; r->error = 0; r->next = NULL;
    r->state = NVME_QUEUED;
    if (op == NVME_READ) io->bytes_read_submitted += (long long)bytes;
    else io->bytes_written_submitted += (long long)bytes;
#if ZERO_HAVE_LIBURING
    if (io->backend == NVME_BACKEND_URING) {
        while (io->inflight >= NVME_QUEUE) nvme_uring_reap(io, 1);
        io->inflight++;
        if (nvme_fault_hits(io, r)) { r->error = ENOSPC; r->state = NVME_FAILED; io->inflight--; return; }
        nvme_uring_push(io, r);
        io_uring_submit(&io->ring);
        return;
    }
#endif
    pthread_mutex_lock(&io->lock);
    io->inflight++;
    if (io->tail) io->tail->next = r; else io->head = r;
    io->tail = r;
    pthread_cond_signal(&io->work);
    pthread_mutex_unlock(&io->lock);
}

// Reap what has completed, without blocking (io_uring: completions are only handled here and in
// nvme_wait; threads: they complete on their own).
static void nvme_poll(NvmeIO* io) {
#if ZERO_HAVE_LIBURING
    if (io->backend == NVME_BACKEND_URING) while (io->inflight > 0 && nvme_uring_reap(io, 0)) {}
#else
    (void)io;
#endif
}

// Is the request finished (DONE or FAILED)? Never blocks.
static int nvme_finished(NvmeIO* io, NvmeRequest* r) {
    nvme_poll(io);
    return r->state == NVME_DONE || r->state == NVME_FAILED || r->state == NVME_IDLE;
}

// Wait for the request; returns 0 when it completed, else its errno (NVME_ESHORT: end of file).
static int nvme_wait(NvmeIO* io, NvmeRequest* r) {
    if (r->state == NVME_IDLE) return 0;
#if ZERO_HAVE_LIBURING
    if (io->backend == NVME_BACKEND_URING) {
        while (r->state != NVME_DONE && r->state != NVME_FAILED) nvme_uring_reap(io, 1);
    } else
#endif
    {
        pthread_mutex_lock(&io->lock);
        while (r->state != NVME_DONE && r->state != NVME_FAILED) pthread_cond_wait(&io->done, &io->lock);
        pthread_mutex_unlock(&io->lock);
    }
    int error = r->state == NVME_FAILED ? r->error : 0;
    r->state = NVME_IDLE;
    return error;
}

static const char* nvme_strerror(int error) { return error == NVME_ESHORT ? "unexpected end of file" : strerror(error); }

// Stop the engine (every request must have been waited on).
static void nvme_io_free(NvmeIO* io) {
#if ZERO_HAVE_LIBURING
    if (io->backend == NVME_BACKEND_URING) { io_uring_queue_exit(&io->ring); return; }
#endif
    pthread_mutex_lock(&io->lock);
    io->stopping = 1;
    pthread_cond_broadcast(&io->work);
    pthread_mutex_unlock(&io->lock);
    for (int i = 0; i < NVME_THREADS; i++) pthread_join(io->threads[i], NULL);
    pthread_mutex_destroy(&io->lock);
    pthread_cond_destroy(&io->work);
    pthread_cond_destroy(&io->done);
}

/*
 * Open (create) a scratch file for direct I/O. Returns the fd, or -1 with errno; *direct says
 * whether O_DIRECT was granted (tmpfs and a few others refuse it: then buffered I/O).
 */
static int nvme_open(const char* path, int* direct) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    return fd;
}

// A buffer of at least `bytes` bytes aligned for O_DIRECT, zeroed; exits on failure.
static void* nvme_alloc(size_t bytes, const char* what) {
    void* p = NULL;
    size_t rounded = (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    if (rounded == 0) rounded = NVME_ALIGN;
    if (posix_memalign(&p, NVME_ALIGN, rounded) != 0) {
        fprintf(stderr, "error: out of host memory allocating %s (%zu bytes)\n", what, rounded);
        exit(1);
    }
    memset(p, 0, rounded);
    return p;
}

static size_t nvme_round(size_t bytes) { return (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN; }

/*
 * A 64-bit checksum of n bytes (n a multiple of 32): four independent multiply-xorshift lanes over
 * 8-byte words, then folded. Not cryptographic: it only has to notice that a region the engine
 * wrote is not what it reads back (a file changed under a running job), at memory speed.
 */
static uint64_t nvme_checksum(const void* data, size_t n) {
    const uint64_t* w = (const uint64_t*)data;
    uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
    size_t words = n / 8;
    for (size_t i = 0; i + 4 <= words; i += 4)
        for (int k = 0; k < 4; k++) { h[k] ^= w[i + k]; h[k] *= 0xFF51AFD7ED558CCDull; h[k] ^= h[k] >> 29; }
    uint64_t out = (uint64_t)n;
    for (int k = 0; k < 4; k++) { out ^= h[k]; out *= 0xC4CEB9FE1A85EC53ull; out ^= out >> 32; }
    return out;
}

#endif // ZERO_NVME_IO_H
