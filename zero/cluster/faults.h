/*
 * zero/cluster/faults.h: what a rank says when the job ends under it, and whether the launcher can end
 * it at all after a lost host. Part of the ZeRO engine (the map is in zero.cuh).
 *
 * When one rank stops the job (a -wt timeout: MPI_Abort) or Open MPI loses a host, the launcher
 * kills every other rank with SIGTERM (then SIGKILL). zero_faults_install makes each rank print
 * one line first: rank, host, step and the collective it was waiting for, and how long, so
 * every rank's diagnosis reaches the user, not only the first one's. zero_waiting (zero/cluster/cluster.h,
 * set by every timed wait) says what the rank waits for; the handler only formats what is there
 * (async-signal-safe: write(2), no stdio).
 *
 * A lost host (cable, switch, power): Open MPI 4.1's mpirun notices only through TCP keepalive
 * on its daemon connections (oob_tcp_keepalive_time + intvl x probes, default 300 + 20 x 9 s),
 * and only while the connection is idle: once a rank's -wt abort has made mpirun send the kill
 * order to the lost host, the connection holds unacknowledged data, keepalive stops, and TCP
 * retransmits for about 15 minutes (tcp_retries2) with mpirun waiting and the cut-off host's
 * daemon orphaned. So keepalive must notice the loss before -wt runs out: mpirun then ends the
 * job by itself (every rank here gets the SIGTERM above) and the cut-off daemon, which notices
 * too, kills its own ranks. zero_faults_check_launcher prints a note at start-up when a job
 * spans several hosts and keepalive would notice later than -wt (README, "Many nodes").
 */
#ifndef ZERO_FAULTS_H
#define ZERO_FAULTS_H
#ifndef ZERO_CUH
#error "zero/cluster/faults.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <signal.h>
#include <unistd.h>
#include "common/atomic_file.h" // a checkpoint file being written when the job ends: removed too

// A file of this rank that must not outlive the job (the NVMe offload file, zero/offload/offload.h, which
// can be as large as the optimizer state): removed by zero_abort_all_ranks before MPI_Abort, by
// the signal line below, and at exit; a normal end removes it itself first. "" when none.
static char zero_fault_remove_path[4400];

static void zero_faults_remove_files(void) {
    if (zero_fault_remove_path[0] != '\0') unlink(zero_fault_remove_path);
    atomic_file_remove_unfinished();
    zero_fault_remove_path[0] = '\0';
}

// Remove path (NULL: forget it) when the job ends under this rank, whichever way (but SIGKILL).
static void zero_faults_remove_at_end(const char* path) {
    static int registered = 0;
    if (path == NULL) { zero_fault_remove_path[0] = '\0'; return; }
    snprintf(zero_fault_remove_path, sizeof(zero_fault_remove_path), "%s", path);
    if (!registered) {
        atexit(zero_faults_remove_files);
        zero_at_abort(zero_faults_remove_files); // MPI_Abort runs no atexit handler (zero/comm_mpi.h)
    }
    registered = 1;
}

// Append text / a non-negative integer / seconds with one decimal to buf (signal-safe).
static size_t zero_sig_text(char* buf, size_t at, size_t cap, const char* text) {
    while (text != NULL && *text && at + 1 < cap) buf[at++] = *text++;
    return at;
}
static size_t zero_sig_int(char* buf, size_t at, size_t cap, long long v) {
    char digits[24];
    int n = 0;
    if (v < 0) { at = zero_sig_text(buf, at, cap, "-"); v = -v; }
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v > 0 && n < 23);
    while (n > 0 && at + 1 < cap) buf[at++] = digits[--n];
    return at;
}

static void zero_fault_signal(int sig) {
    char line[512];
    size_t at = 0, cap = sizeof(line);
    at = zero_sig_text(line, at, cap, "error: rank ");
    at = zero_sig_int(line, at, cap, zero_cluster.rank);
    at = zero_sig_text(line, at, cap, " (");
    at = zero_sig_text(line, at, cap, zero_cluster.host);
    at = zero_sig_text(line, at, cap, "): stopped by ");
    at = zero_sig_text(line, at, cap, sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal");
    if (zero_waiting.kind != NULL) {
        double waited = zero_clock() - zero_waiting.since;
        if (zero_waiting.step > 0) {
            at = zero_sig_text(line, at, cap, " at step ");
            at = zero_sig_int(line, at, cap, zero_waiting.step);
        }
        at = zero_sig_text(line, at, cap, " while waiting ");
        at = zero_sig_int(line, at, cap, (long long)waited);
        at = zero_sig_text(line, at, cap, ".");
        at = zero_sig_int(line, at, cap, (long long)(waited * 10) % 10);
        at = zero_sig_text(line, at, cap, " s for ");
        at = zero_sig_text(line, at, cap, zero_waiting.kind);
        at = zero_sig_text(line, at, cap, " of ");
        at = zero_sig_text(line, at, cap, zero_waiting.what);
        if (zero_waiting.unit >= 0) {
            at = zero_sig_text(line, at, cap, ", unit ");
            at = zero_sig_int(line, at, cap, zero_waiting.unit);
        }
    }
    at = zero_sig_text(line, at, cap, "; expected the job to go on: the launcher ended it (another rank failed, a host was lost, "
                                      "or it was interrupted)\n");
    ssize_t ignored = write(STDERR_FILENO, line, at);
    (void)ignored;
    if (zero_fault_remove_path[0] != '\0') unlink(zero_fault_remove_path); // async-signal-safe
    atomic_file_remove_unfinished();                                          // so is this
    _exit(1);
}

// After MPI started (so that its handlers, if any, are already in place): SIGTERM and SIGINT
// print this rank's line and exit 1.
static void zero_faults_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = zero_fault_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

// Open MPI's keepalive setting (mpirun passes --mca values to the ranks as OMPI_MCA_*), or its default.
static int zero_faults_mca_int(const char* name, int fallback) {
    const char* v = getenv(name);
    return v != NULL && *v ? atoi(v) : fallback;
}

// Rank 0, once the hosts are known: a note when a lost host would leave mpirun waiting (header).
static void zero_faults_check_launcher(float timeout_s) {
    if (zero_cluster.rank != 0 || zero_cluster.num_hosts < 2 || getenv("OMPI_COMM_WORLD_SIZE") == NULL) return;
    int time = zero_faults_mca_int("OMPI_MCA_oob_tcp_keepalive_time", 300);
    int intvl = zero_faults_mca_int("OMPI_MCA_oob_tcp_keepalive_intvl", 20);
    int probes = zero_faults_mca_int("OMPI_MCA_oob_tcp_keepalive_probes", 9);
    int detect = time <= 0 ? -1 : time + intvl * probes;
    if (detect >= 0 && detect < timeout_s) return;
    char when[160];
    if (detect < 0) snprintf(when, sizeof(when), "never (oob_tcp_keepalive_time %d: keepalive off)", time);
    else snprintf(when, sizeof(when), "after %d s (oob_tcp_keepalive_time %d + intvl %d x probes %d), not before -wt", detect, time, intvl, probes);
    printf("note: %d hosts and -wt %g s, but Open MPI notices a lost host %s, so after a network partition mpirun "
           "would hang; add --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 "
           "(README, \"Many nodes\")\n", zero_cluster.num_hosts, timeout_s, when);
}

#endif // ZERO_FAULTS_H
