/*
 * zero/progress_cpu.h: a progress thread for the CPU build's non-blocking collectives.
 * Part of the ZeRO engine (the map is in zero.cuh).
 *
 * Open MPI moves a non-blocking collective (libnbc's rounds, shared-memory and TCP fragments)
 * only while some thread is inside an MPI call. The model makes engine calls a few times per
 * unit, and a unit's backward is one long stretch of sgemms, so an all-reduce started at a unit's
 * end sat mostly idle until the optimizer waited for it (exposed). While any collective is in
 * flight, this thread calls MPI_Iprobe (for a tag nothing sends: it only drives MPI's progress
 * engine, never touches a request) every ZERO_PROGRESS_POLL_US microseconds, and sleeps when none
 * is. It needs MPI_THREAD_MULTIPLE; when MPI provides less, there is no thread and the engine's
 * MPI_Test calls at each engine call (zero_progress) are the only progress, as before.
 * Its effect on exposed comm wait: dev/bench/progress_bench.sh, the simulated cluster over a
 * rate-limited link with and without the thread (build/noprogress/, ZERO_PROGRESS_THREAD=0).
 */
#ifndef ZERO_PROGRESS_CPU_H
#define ZERO_PROGRESS_CPU_H
#ifndef ZERO_CUH
#error "zero/progress_cpu.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <pthread.h>

#ifndef ZERO_PROGRESS_THREAD
#define ZERO_PROGRESS_THREAD 1 // 0: no thread (build/noprogress/, only to measure what it hides)
#endif
#ifndef ZERO_PROGRESS_POLL_US
#define ZERO_PROGRESS_POLL_US 50 // between progress calls while a collective is in flight
#endif
#define ZERO_PROGRESS_TAG 32000  // no message is ever sent with it

static int zero_progress_in_flight; // collectives started and not yet waited for (atomic)
static int zero_progress_stop_flag;
static int zero_progress_running;
static pthread_t zero_progress_thread_id;

// zero_op_begin / zero_op_wait (zero/comm.h) count the collectives in flight.
static inline void zero_progress_note_begin(void) { __atomic_add_fetch(&zero_progress_in_flight, 1, __ATOMIC_RELAXED); }
static inline void zero_progress_note_end(void) { __atomic_sub_fetch(&zero_progress_in_flight, 1, __ATOMIC_RELAXED); }

static void* zero_progress_loop(void* arg) {
    (void)arg;
    while (!__atomic_load_n(&zero_progress_stop_flag, __ATOMIC_RELAXED)) {
        int busy = __atomic_load_n(&zero_progress_in_flight, __ATOMIC_RELAXED) > 0;
        if (busy) {
            zero_ring_progress_background(); // the engine's rings post their next step (zero/comm_ring.h)
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, ZERO_PROGRESS_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        }
        // Poll often while something is in flight; otherwise wake rarely (1 ms) and cost nothing.
        struct timespec ts = {0, busy ? ZERO_PROGRESS_POLL_US * 1000L : 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void zero_progress_thread_stop(void) {
    if (!zero_progress_running) return;
    __atomic_store_n(&zero_progress_stop_flag, 1, __ATOMIC_RELAXED);
    pthread_join(zero_progress_thread_id, NULL);
    zero_progress_running = 0;
}

// Start the thread (world_size > 1, MPI_THREAD_MULTIPLE provided). Returns 1 when it runs.
static int zero_progress_thread_start(int world_size) {
    if (!ZERO_PROGRESS_THREAD || world_size == 1 || zero_progress_running) return zero_progress_running;
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) return 0;
    zero_progress_stop_flag = 0;
    if (pthread_create(&zero_progress_thread_id, NULL, zero_progress_loop, NULL) != 0) return 0;
    zero_progress_running = 1;
    zero_at_stop(zero_progress_thread_stop); // whichever way the ranks stop (zero/comm_mpi.h)
    return 1;
}

#endif // ZERO_PROGRESS_CPU_H
