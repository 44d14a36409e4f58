/*
 * zero/comm_mpi.h: what every MPI-using part below needs first: MPI_CHECK, the clock of every
 * timed wait, and how the ranks end: zero_ranks_stop (a normal end, or every rank agreeing to
 * exit) and zero_abort_all_ranks (one rank stops the job). Part of the ZeRO engine (the map is in
 * zero.cuh); the ranks start in zero/cluster/process.h.
 */
#ifndef ZERO_COMM_MPI_H
#define ZERO_COMM_MPI_H
#ifndef ZERO_CUH
#error "zero/comm_mpi.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <signal.h>

#define MPI_CHECK(call)                                                                              \
    do {                                                                                             \
        int mpi_status_ = (call);                                                                    \
        if (mpi_status_ != MPI_SUCCESS) {                                                            \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                     \
            int mpi_len_ = 0;                                                                        \
            MPI_Error_string(mpi_status_, mpi_msg_, &mpi_len_);                                      \
            fprintf(stderr, "error: MPI call %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, mpi_msg_); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
        }                                                                                            \
    } while (0)

static double zero_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ---- clean-ups run when the ranks end ----
// Registered by the part that set up what each undoes, so this file, which comes first, names
// none of them: at a stop the run lock (zero/cluster/run_lock.h) and the progress thread
// (zero/progress_cpu.h); at an abort, since MPI_Abort runs no atexit handler, the offload file
// (zero/cluster/faults.h) and the GPU build's communicators (zero/gpu/comm_gpu.cuh).

typedef void (*ZeroCleanup)(void);
typedef struct { ZeroCleanup fn[8]; int count; } ZeroCleanups;
static ZeroCleanups zero_stop_cleanups, zero_abort_cleanups;

static void zero_cleanup_add(ZeroCleanups* list, ZeroCleanup fn) { // a function registered again keeps its place
    for (int i = 0; i < list->count; i++) if (list->fn[i] == fn) return;
    if (list->count == 8) { fprintf(stderr, "error: internal: more than 8 clean-ups registered\n"); exit(1); }
    list->fn[list->count++] = fn;
}
// zero_ranks_stop runs fn, the last registered first (the progress thread, started by the
// engine, stops before the run lock it runs under is released).
static void zero_at_stop(ZeroCleanup fn) { zero_cleanup_add(&zero_stop_cleanups, fn); }
// zero_abort_all_ranks runs fn before MPI_Abort, in the order registered (the device
// communicators, registered as the ranks start, before the offload file).
static void zero_at_abort(ZeroCleanup fn) { zero_cleanup_add(&zero_abort_cleanups, fn); }

// ---- how the ranks end ----

// Every rank ends here at a normal end, or after all agreed to exit (zero/cluster/handshake.h's
// zero_startup_agree); the caller then exits. Without MPI_Init (test programs) no MPI call.
static void zero_ranks_stop(void) {
    for (int i = zero_stop_cleanups.count - 1; i >= 0; i--) zero_stop_cleanups.fn[i]();
    // From here on a SIGTERM (the launcher ending ranks still finalizing after another exited)
    // has nothing to diagnose: the default action, not zero/cluster/faults.h's line.
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Finalize();
}

// Stop every rank now (after the caller printed why). Does not return.
static void zero_abort_all_ranks(int code) {
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < zero_abort_cleanups.count; i++) zero_abort_cleanups.fn[i]();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

#endif // ZERO_COMM_MPI_H
