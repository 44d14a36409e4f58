/*
 * zero/cluster/startup_watchdog.h: a bound on the start-up waits that happen inside a library,
 * where the engine's timed waits (-wt, zero/comm.h and zero/cluster/handshake.h) cannot
 * reach: MPI_Init (it returns only once every rank of the job has called it, so one rank that did
 * not start or is stopped holds every other in it) and, in the GPU build, NCCL's communicator
 * init (ncclCommInitRank waits for every rank too). Part of the ZeRO engine (the map is in zero.cuh).
 *
 * Armed with -wt seconds before the call (-wt is parsed before MPI starts), disarmed after it.
 * When it fires, a real-time interval timer's SIGALRM (setitimer(2)) prints one prepared line
 * naming this rank (from the launcher's variables, zero/cluster/launcher.h: MPI has not said it
 * yet), its host and what it waited for, with write(2) (async-signal-safe), and exits 1; the
 * launcher then ends the other ranks.
 */
#ifndef ZERO_STARTUP_WATCHDOG_H
#define ZERO_STARTUP_WATCHDOG_H
#ifndef ZERO_CUH
#error "zero/cluster/startup_watchdog.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

static char zero_watchdog_line[1024]; // prepared when armed: the handler only writes it
static size_t zero_watchdog_length;

static void zero_watchdog_fire(int sig) {
    (void)sig;
    ssize_t ignored = write(STDERR_FILENO, zero_watchdog_line, zero_watchdog_length);
    (void)ignored;
    _exit(1);
}

/*
 * Arm: if `what` has not completed within seconds (> 0), this rank prints "error: rank R (HOST):
 * <what> did not complete within -wt <seconds> s: <cause>; expected ..." and exits 1.
 */
static void zero_startup_watchdog_arm(const char* what, float seconds, const char* cause) {
    if (!(seconds > 0.0f)) return;
    char host[256] = "?";
    if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    char rank[32] = "?";
    int r = launcher_rank(NULL);
    if (r >= 0) snprintf(rank, sizeof(rank), "%d", r);
    int n = snprintf(zero_watchdog_line, sizeof(zero_watchdog_line),
                     "error: rank %s (%s): %s did not complete within -wt %g s: %s; expected every rank to start and reach it "
                     "within -wt (check that each host runs its ranks; a larger -wt for a slow start)\n", rank, host, what, seconds, cause);
    zero_watchdog_length = n < 0 ? 0 : (size_t)n < sizeof(zero_watchdog_line) ? (size_t)n : sizeof(zero_watchdog_line) - 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = zero_watchdog_fire;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval timer;
    memset(&timer, 0, sizeof(timer));
    timer.it_value.tv_sec = (time_t)seconds;
    timer.it_value.tv_usec = (suseconds_t)((seconds - (float)(time_t)seconds) * 1e6f);
    if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) timer.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &timer, NULL);
}

// Disarm: the call completed.
static void zero_startup_watchdog_disarm(void) {
    struct itimerval off;
    memset(&off, 0, sizeof(off));
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_DFL);
}

#endif // ZERO_STARTUP_WATCHDOG_H
