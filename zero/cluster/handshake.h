/*
 * zero/cluster/handshake.h: the job across hosts at start-up, before the engine exists, every wait
 * bounded by -wt. Part of the ZeRO engine (the map is in zero.cuh).
 *
 *   (zero_cluster, zero/cluster/cluster.h: this rank, its host, every rank's host once this has run)
 *   ZeroFingerprint       what must be the same on every rank, as "field\tvalue" lines: the build
 *                         (zero_fingerprint_add_build: ZeRO stage, collectives, dtype, version),
 *                         then the trainer's flags, model and data (train/train_setup.h)
 *   zero_handshake        every rank sends its host and fingerprint to rank 0 within -wt; rank 0
 *                         names a rank that never arrives (and aborts them all), or the first
 *                         rank whose fingerprint differs from its own, its host and the field
 *                         (every rank exits 1), and answers with every rank's host
 *   zero_startup_agree    one rank's error stops every rank, with that rank's one line
 *   zero_startup_bcast    bytes from rank 0 to every rank (the resume decision, a model)
 *   zero_startup_barrier  every rank waits for all
 * A wait past -wt prints one line (rank, host, what it waited for) and aborts every rank.
 * Messages use point-to-point tags below ZERO_RING_TAG_BASE (zero/comm_ring.h).
 */
#ifndef ZERO_HANDSHAKE_H
#define ZERO_HANDSHAKE_H
#ifndef ZERO_CUH
#error "zero/cluster/handshake.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <stdarg.h>
#include <unistd.h>

#define ZERO_FINGERPRINT_BYTES 8192
#define ZERO_HANDSHAKE_VERSION 1 // bump when the handshake's messages change
#define ZERO_TAG_HELLO 11
#define ZERO_TAG_VERDICT 12
#ifndef ZERO_SOURCE_HASH
#define ZERO_SOURCE_HASH "unknown" // the Makefile passes a hash of the sources it compiles
#endif

// ---- timed waits without an engine ----

// Test reqs[0..n) until all complete (each becomes MPI_REQUEST_NULL) or timeout_s passes:
// returns 1 when all completed, 0 on timeout (the ones still pending are not NULL).
static int zero_requests_wait_timed(MPI_Request* reqs, int n, double timeout_s) {
    double start = zero_clock();
    long spins = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int done = 0;
            MPI_CHECK(MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE));
            if (!done) pending++;
        }
        if (pending == 0) return 1;
        if (zero_clock() - start > timeout_s) return 0;
        if (++spins > 100) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

// A start-up wait past -wt: one line naming this rank, its host and what, then every rank stops.
static void zero_startup_timed_out(const char* what, double waited) {
    fprintf(stderr, "error: rank %d (%s): start-up: %s waited %.1f s, longer than -wt %g s; expected every rank to reach it "
            "(a rank died, is stuck or runs another build); aborting all ranks\n",
            zero_cluster.rank, zero_cluster.host, what, waited, zero_cluster.timeout_s);
    zero_abort_all_ranks(1);
}

static void zero_startup_wait(MPI_Request* req, const char* what) {
    double start = zero_clock();
    if (!zero_requests_wait_timed(req, 1, zero_cluster.timeout_s)) zero_startup_timed_out(what, zero_clock() - start);
}

static void zero_startup_barrier(const char* what) {
    if (zero_cluster.world_size == 1) return;
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    zero_startup_wait(&req, what);
}

// bytes of buf from rank 0 to every rank, in pieces of at most 1 GiB (MPI counts are int).
static void zero_startup_bcast(void* buf, size_t bytes, const char* what) {
    if (zero_cluster.world_size == 1) return;
    for (size_t at = 0; at < bytes || (bytes == 0 && at == 0); at += (size_t)1 << 30) {
        size_t n = bytes - at < ((size_t)1 << 30) ? bytes - at : (size_t)1 << 30;
        MPI_Request req;
        MPI_CHECK(MPI_Ibcast((char*)buf + at, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &req));
        zero_startup_wait(&req, what);
        if (bytes == 0) break;
    }
}

/*
 * Does every rank pass ok != 0? If not, the lowest failing rank prints its error line (err,
 * one line, newline added) and every rank stops with exit status 1 (MPI finalized: all of them
 * get here). Returns only when every rank is ok.
 */
static void zero_startup_agree(int ok, const char* err, const char* what) {
    int lowest = ok ? zero_cluster.world_size : zero_cluster.rank;
    if (zero_cluster.world_size > 1) {
        int mine = lowest;
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req));
        zero_startup_wait(&req, what);
    }
    if (lowest == zero_cluster.world_size) return;
    if (lowest == zero_cluster.rank) fprintf(stderr, "%s\n", err);
    fflush(stderr);
    zero_ranks_stop();
    exit(1);
}

// Rank 0 at start-up: where the ranks run and what the ring sends across hosts: each host sends
// (ring edges leaving it) x the per-rank count per step (zero/comm_ring.h).
static void zero_print_cluster(FILE* out) {
    const ZeroCluster* c = &zero_cluster;
    if (c->world_size == 1 || c->hosts == NULL) return;
    char line[4096];
    size_t at = (size_t)snprintf(line, sizeof(line), "zero: %d ranks on %d host%s (", c->world_size, c->num_hosts, c->num_hosts > 1 ? "s" : "");
    char edges[1024] = "";
    int listed = 0;
    for (int r = 0; r < c->world_size && at < sizeof(line) - 128; r++) {
        int first = r == 0 || strcmp(c->hosts[r - 1], c->hosts[r]) != 0;
        if (!first) continue;
        int last = r, leaving = 0;
        while (last + 1 < c->world_size && strcmp(c->hosts[last + 1], c->hosts[r]) == 0) last++;
        for (int i = 0; i < c->world_size; i++)
            if (strcmp(c->hosts[i], c->hosts[r]) == 0 && strcmp(c->hosts[(i + 1) % c->world_size], c->hosts[r]) != 0) leaving++;
        if (listed++ >= 16) { at += (size_t)snprintf(line + at, sizeof(line) - at, ", ..."); break; }
        if (last > r) at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%s: ranks %d-%d", listed > 1 ? ", " : "", c->hosts[r], r, last);
        else at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%s: rank %d", listed > 1 ? ", " : "", c->hosts[r], r);
        if (strlen(edges) < sizeof(edges) - 80)
            snprintf(edges + strlen(edges), sizeof(edges) - strlen(edges), "%s%s %d", listed > 1 ? ", " : "", c->hosts[r], leaving);
    }
    fprintf(out, "%s); ring edges leaving each host: %s (each sends that many times the per-rank count per step)\n", line, edges);
}

// ---- the fingerprint ----

typedef struct {
    char text[ZERO_FINGERPRINT_BYTES]; // "field\tvalue\n" lines, NUL-terminated
    size_t len;
} ZeroFingerprint;

// Add one field; a value longer than 1000 characters is cut (still compared as cut).
static void zero_fingerprint_add(ZeroFingerprint* fp, const char* field, const char* fmt, ...) {
    char value[1001];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    for (char* c = value; *c; c++) if (*c == '\n' || *c == '\t') *c = ' ';
    int wrote = snprintf(fp->text + fp->len, sizeof(fp->text) - fp->len, "%s\t%s\n", field, value);
    if (wrote > 0) fp->len += (size_t)wrote < sizeof(fp->text) - fp->len ? (size_t)wrote : sizeof(fp->text) - fp->len - 1;
}

// What the binary was built as: ZeRO stage, collective backend, dtype, sources.
static void zero_fingerprint_add_build(ZeroFingerprint* fp) {
    zero_fingerprint_add(fp, "ZeRO stage", "%d", ZERO_STAGE);
#if ZERO_GPU_BUILD
    zero_fingerprint_add(fp, "build", "GPU (%s)", ZERO_COMM_MPI ? "host-staged MPI" : "NCCL");
    zero_fingerprint_add(fp, "dtype", "bf16 parameters and gradients, fp32 master weights");
#else
    zero_fingerprint_add(fp, "build", "CPU (MPI, %s%s)", ZERO_RING ? "ring collectives" : "MPI's collectives",
                         ZERO_EXT ? "" : ", the core alone: ZERO_EXT=none");
    zero_fingerprint_add(fp, "dtype", "fp32");
#endif
    zero_fingerprint_add(fp, "version", "handshake %d, sources %s", ZERO_HANDSHAKE_VERSION, ZERO_SOURCE_HASH);
}

// Field k (from 0) of fp: its name and value (pointers into scratch copies); 0 past the end.
static int zero_fingerprint_field(const char* text, int k, char* name, size_t name_cap, char* value, size_t value_cap) {
    const char* line = text;
    for (int i = 0; i < k && line != NULL; i++) {
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    if (line == NULL || *line == '\0') return 0;
    const char* tab = strchr(line, '\t');
    const char* end = strchr(line, '\n');
    if (tab == NULL || end == NULL || tab > end) return 0;
    snprintf(name, name_cap, "%.*s", (int)(tab - line), line);
    snprintf(value, value_cap, "%.*s", (int)(end - tab - 1), tab + 1);
    return 1;
}

// The first field (from 0) where a and b differ, or -1 when they are equal.
static int zero_fingerprint_first_difference(const char* a, const char* b) {
    for (int k = 0;; k++) {
        char na[128], va[1024], nb[128], vb[1024];
        int ha = zero_fingerprint_field(a, k, na, sizeof(na), va, sizeof(va));
        int hb = zero_fingerprint_field(b, k, nb, sizeof(nb), vb, sizeof(vb));
        if (!ha && !hb) return -1;
        if (ha != hb || strcmp(na, nb) != 0 || strcmp(va, vb) != 0) return k;
    }
}

// ---- the handshake ----

// From every rank's host: local rank and size, hosts, host leader, ring edges leaving the host.
static void zero_cluster_from_hosts(void) {
    ZeroCluster* c = &zero_cluster;
    int N = c->world_size, r = c->rank;
    c->local_rank = 0;
    c->local_size = 0;
    c->num_hosts = 0;
    c->ring_edges_leaving_host = 0;
    for (int i = 0; i < N; i++) {
        int first = 1;
        for (int j = 0; j < i; j++) if (strcmp(c->hosts[j], c->hosts[i]) == 0) { first = 0; break; }
        c->num_hosts += first;
        if (strcmp(c->hosts[i], c->host) == 0) {
            if (i < r) c->local_rank++;
            c->local_size++;
            if (N > 1 && strcmp(c->hosts[(i + 1) % N], c->host) != 0) c->ring_edges_leaving_host++;
        }
    }
    c->host_leader = c->local_rank == 0;
}

/*
 * Every rank reaches this first, right after MPI starts. Ranks 1.. send their host and
 * fingerprint to rank 0 and wait for its answer; rank 0 waits for all of them (-wt), compares
 * each with its own and answers: 0 and every rank's host, or 1 (every rank exits 1 after rank 0
 * printed the first difference). Fills zero_cluster.hosts and the per-host fields.
 */
static void zero_handshake(const ZeroFingerprint* mine) {
    ZeroCluster* c = &zero_cluster;
    int N = c->world_size;
    c->hosts = (char(*)[ZERO_HOST_CHARS])zero_calloc((size_t)N, ZERO_HOST_CHARS, "host names");
    memcpy(c->hosts[c->rank], c->host, ZERO_HOST_CHARS);
    if (N == 1) { zero_cluster_from_hosts(); return; }
    // The message: host, then the fingerprint text (fixed size: one receive per rank).
    size_t msg_bytes = ZERO_HOST_CHARS + ZERO_FINGERPRINT_BYTES;
    size_t verdict_bytes = sizeof(int) + (size_t)N * ZERO_HOST_CHARS;
    char* verdict = (char*)zero_calloc(verdict_bytes, 1, "handshake answer");
    int status = 0;
    if (c->rank != 0) {
        char* msg = (char*)zero_calloc(msg_bytes, 1, "handshake message");
        memcpy(msg, c->host, ZERO_HOST_CHARS);
        memcpy(msg + ZERO_HOST_CHARS, mine->text, mine->len);
        MPI_Request reqs[2];
        MPI_CHECK(MPI_Isend(msg, (int)msg_bytes, MPI_BYTE, 0, ZERO_TAG_HELLO, MPI_COMM_WORLD, &reqs[0]));
        MPI_CHECK(MPI_Irecv(verdict, (int)verdict_bytes, MPI_BYTE, 0, ZERO_TAG_VERDICT, MPI_COMM_WORLD, &reqs[1]));
        // A little longer than rank 0's own wait, so that a missing third rank is named by rank 0.
        if (!zero_requests_wait_timed(reqs, 2, c->timeout_s + 5.0)) {
            fprintf(stderr, "error: rank %d (%s): start-up: rank 0 did not answer the handshake within -wt %g s; "
                    "expected rank 0 to start and reach it (its host down or slow, or another build there); aborting all ranks\n",
                    c->rank, c->host, c->timeout_s);
            zero_abort_all_ranks(1);
        }
        free(msg);
        memcpy(&status, verdict, sizeof(int));
    } else {
        char* all = (char*)zero_calloc((size_t)N, msg_bytes, "handshake messages");
        MPI_Request* reqs = (MPI_Request*)zero_calloc((size_t)N, sizeof(MPI_Request), "handshake requests");
        reqs[0] = MPI_REQUEST_NULL;
        for (int r = 1; r < N; r++)
            MPI_CHECK(MPI_Irecv(all + (size_t)r * msg_bytes, (int)msg_bytes, MPI_BYTE, r, ZERO_TAG_HELLO, MPI_COMM_WORLD, &reqs[r]));
        if (!zero_requests_wait_timed(reqs, N, c->timeout_s)) {
            char missing[512] = "";
            int count = 0;
            for (int r = 1; r < N; r++) {
                if (reqs[r] == MPI_REQUEST_NULL) continue;
                if (count++ < 8) snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%d", count > 1 ? ", " : "", r);
            }
            fprintf(stderr, "error: rank 0 (%s): start-up: rank%s %s%s did not arrive within -wt %g s (%d of %d ranks did); "
                    "expected every rank to start and reach the handshake (a host down, a stalled process, or a binary without it); "
                    "aborting all ranks\n", c->host, count > 1 ? "s" : "", missing, count > 8 ? ", ..." : "",
                    c->timeout_s, N - count, N);
            zero_abort_all_ranks(1);
        }
        for (int r = 1; r < N; r++) {
            char* msg = all + (size_t)r * msg_bytes;
            msg[ZERO_HOST_CHARS - 1] = '\0';
            msg[msg_bytes - 1] = '\0';
            memcpy(c->hosts[r], msg, ZERO_HOST_CHARS); // NUL-terminated above
        }
        // The first rank whose fingerprint differs from rank 0's, and its first differing field.
        for (int r = 1; r < N && status == 0; r++) {
            const char* theirs = all + (size_t)r * msg_bytes + ZERO_HOST_CHARS;
            int k = zero_fingerprint_first_difference(mine->text, theirs);
            if (k < 0) continue;
            char name0[128] = "?", value0[1024] = "(none)", name_r[128] = "?", value_r[1024] = "(none)";
            zero_fingerprint_field(mine->text, k, name0, sizeof(name0), value0, sizeof(value0));
            zero_fingerprint_field(theirs, k, name_r, sizeof(name_r), value_r, sizeof(value_r));
            fprintf(stderr, "error: rank %d (%s): %s is '%s' there but '%s' on rank 0 (%s); expected every rank to run the same "
                    "build with the same flags, model and data (the first difference of the first differing rank)\n",
                    r, c->hosts[r], strcmp(name_r, name0) == 0 ? name0 : name_r, value_r, value0, c->host);
            status = 1;
        }
        memcpy(verdict, &status, sizeof(int));
        for (int r = 0; r < N; r++) memcpy(verdict + sizeof(int) + (size_t)r * ZERO_HOST_CHARS, c->hosts[r], ZERO_HOST_CHARS);
        for (int r = 1; r < N; r++)
            MPI_CHECK(MPI_Isend(verdict, (int)verdict_bytes, MPI_BYTE, r, ZERO_TAG_VERDICT, MPI_COMM_WORLD, &reqs[r]));
        if (!zero_requests_wait_timed(reqs, N, c->timeout_s)) zero_startup_timed_out("sending the handshake answer", c->timeout_s);
        free(reqs);
        free(all);
    }
    if (status != 0) {
        fflush(stderr);
        zero_ranks_stop();
        exit(1);
    }
    for (int r = 0; r < N; r++) {
        memcpy(c->hosts[r], verdict + sizeof(int) + (size_t)r * ZERO_HOST_CHARS, ZERO_HOST_CHARS);
        c->hosts[r][ZERO_HOST_CHARS - 1] = '\0';
    }
    free(verdict);
    zero_cluster_from_hosts();
}

#endif // ZERO_HANDSHAKE_H
