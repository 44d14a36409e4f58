/*
 * zero/cluster/cluster.h: who this rank is in the job across hosts: rank, world size, its host and every
 * rank's host (after zero_handshake, zero/cluster/handshake.h), its local rank and whether it is the
 * first rank of its host; error lines name ranks as "rank R (host)" from it. And what the rank
 * waits for right now (zero_waiting), for the diagnosis a signal prints (zero/cluster/faults.h).
 * Plain data, no MPI call. Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_CLUSTER_H
#define ZERO_CLUSTER_H
#ifndef ZERO_CUH
#error "zero/cluster/cluster.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <unistd.h>

#define ZERO_HOST_CHARS 64

typedef struct {
    int rank, world_size;
    float timeout_s;                  // -wt
    char host[ZERO_HOST_CHARS];       // gethostname
    char (*hosts)[ZERO_HOST_CHARS];   // every rank's, filled by zero_handshake
    int local_rank, local_size;       // among the ranks on this host
    int num_hosts;
    int host_leader;                  // the lowest rank on its host
    int ring_edges_leaving_host;      // ring r -> r+1 edges from this host to another (zero/comm_ring.h)
    uint64_t run_id;                  // the run: made by rank 0 at start, kept by a resume; in checkpoints
    LauncherView launcher;            // what the launcher's environment said before MPI started
} ZeroCluster;
static ZeroCluster zero_cluster = {0, 1, 300.0f, "?", NULL, 0, 1, 1, 1, 0, 0, {-1, -1, -1, NULL, NULL, NULL}};

// The host of rank r, once the handshake has told it ("?" before).
static const char* zero_rank_host(int r) {
    if (r == zero_cluster.rank) return zero_cluster.host;
    return zero_cluster.hosts != NULL && r >= 0 && r < zero_cluster.world_size ? zero_cluster.hosts[r] : "?";
}

// Called by zero_ranks_start once MPI has started: rank, world size, hostname.
static void zero_cluster_set_rank(int rank, int world_size) {
    zero_cluster.rank = rank;
    zero_cluster.world_size = world_size;
    if (gethostname(zero_cluster.host, sizeof(zero_cluster.host)) != 0) snprintf(zero_cluster.host, sizeof(zero_cluster.host), "?");
    zero_cluster.host[ZERO_HOST_CHARS - 1] = '\0';
}

// What this rank waits for now (kind NULL: nothing): set around every timed wait.
static volatile struct {
    const char* kind;
    const char* what;
    int unit, step;
    double since; // zero_clock() at the start
} zero_waiting;

static void zero_waiting_begin(const char* kind, const char* what, int unit, int step, double now) {
    zero_waiting.what = what;
    zero_waiting.unit = unit;
    zero_waiting.step = step;
    zero_waiting.since = now;
    zero_waiting.kind = kind; // last: the handler reads the rest only when kind is set
}
static void zero_waiting_end(void) { zero_waiting.kind = NULL; }

#endif // ZERO_CLUSTER_H
