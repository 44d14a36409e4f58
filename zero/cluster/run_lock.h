/*
 * zero/cluster/run_lock.h: one output dir, one run. Part of the ZeRO engine (the map is in zero.cuh).
 *
 * Two runs writing one -o at once would mix their checkpoints and logs, so each run holds locks
 * in -o for its whole life: rank 0 holds DIR/.lock, and the first rank of every host holds
 * DIR/.lock.<host>. With a shared -o a second run meets the first one's DIR/.lock; with node-
 * local dirs (the same path, another disk on each host) it meets DIR/.lock.<host> on any host
 * the two share. A lock is flock(2) on that file: the kernel releases it however the process
 * ends (exit, crash, SIGKILL), so a dead run never blocks the next one. The file says who holds
 * it (pid, host, rank, start time) and is emptied at a normal exit: a non-empty file whose lock
 * is free was left by a run that died, which the next run names in a note as it takes over.
 * (On NFS, flock is carried by the server's byte-range locks; a crashed client's lock lasts
 * until its lease ends.)
 */
#ifndef ZERO_RUN_LOCK_H
#define ZERO_RUN_LOCK_H
#ifndef ZERO_CUH
#error "zero/cluster/run_lock.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>

static int zero_run_lock_fds[2] = {-1, -1}; // DIR/.lock (rank 0), DIR/.lock.<host> (host leader)

// At a normal exit: empty the lock files (the kernel drops the locks themselves at any exit).
static void zero_run_lock_release(void) {
    for (int i = 0; i < 2; i++) {
        if (zero_run_lock_fds[i] < 0) continue;
        if (ftruncate(zero_run_lock_fds[i], 0) != 0) { /* nothing to do: the lock goes with the fd */ }
        close(zero_run_lock_fds[i]);
        zero_run_lock_fds[i] = -1;
    }
}

/*
 * Take the lock file `path` for this run; 0 on success. When another live process holds it,
 * -1 with one error line in err (who holds it). A stale holder (file not empty, lock free) is
 * named in *note (empty otherwise).
 */
static int zero_run_lock_take(int slot, const char* path, const char* dir, char* err, size_t err_cap, char* note, size_t note_cap) {
    note[0] = '\0';
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, err_cap, "error: rank %d (%s): -o %s: cannot create the lock file %s (%s); expected a writable directory",
                 zero_cluster.rank, zero_cluster.host, dir, path, strerror(errno));
        return -1;
    }
    char holder[256] = "";
    ssize_t got = pread(fd, holder, sizeof(holder) - 1, 0);
    holder[got > 0 ? got : 0] = '\0';
    char* newline = strchr(holder, '\n');
    if (newline) *newline = '\0';
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, err_cap, "error: rank %d (%s): -o %s: in use by another run (%s; lock %s); expected one run per output dir: "
                 "wait for that run to end, or choose another -o", zero_cluster.rank, zero_cluster.host, dir,
                 holder[0] ? holder : "holder unknown", path);
        close(fd);
        return -1;
    }
    if (holder[0]) snprintf(note, note_cap, "note: -o %s: taking over %s, left by a run that ended without releasing it (%s)", dir, path, holder);
    char mine[256], when[64];
    time_t now = time(NULL);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
    int n = snprintf(mine, sizeof(mine), "pid %d on %s, rank %d, started %s\n", (int)getpid(), zero_cluster.host,
                     zero_cluster.rank, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, mine, (size_t)n, 0) != n) { /* the lock holds without its label */ }
    zero_run_lock_fds[slot] = fd;
    return 0;
}

/*
 * Every rank calls this once -o exists on its host (after zero_handshake): rank 0 takes
 * DIR/.lock, each host's first rank DIR/.lock.<host>. Any rank failing stops every rank with
 * its one line (exit 1); notes of stale locks are printed by whoever took them over.
 */
static void zero_run_lock(const char* dir) {
    char path[4300], err[4800] = "", note[4800] = "";
    int ok = 1;
    if (zero_cluster.rank == 0) {
        snprintf(path, sizeof(path), "%s/.lock", dir);
        if (zero_run_lock_take(0, path, dir, err, sizeof(err), note, sizeof(note)) != 0) ok = 0;
        else if (note[0]) printf("%s\n", note);
    }
    if (ok && zero_cluster.host_leader) {
        snprintf(path, sizeof(path), "%s/.lock.%s", dir, zero_cluster.host);
        if (zero_run_lock_take(1, path, dir, err, sizeof(err), note, sizeof(note)) != 0) ok = 0;
        else if (note[0]) printf("%s\n", note);
    }
    fflush(stdout);
    atexit(zero_run_lock_release);
    zero_at_stop(zero_run_lock_release); // zero_ranks_stop releases it too (zero/comm_mpi.h)
    zero_startup_agree(ok, err, "the output dir's lock");
}

#endif // ZERO_RUN_LOCK_H
