/*
 * test_fault.h: test hooks shared by the CPU and GPU trainers (tests/t_30_zero_*.sh run them on
 * the CPU build; not for users), read from the environment variable ZERO_TEST_FAULT:
 *   "stall:R@S"  rank R stops responding at the start of step S (a hung rank);
 *   "exit:R@S"   rank R exits at once, status 3, without MPI_Finalize (a crashed rank);
 *   "stop@S"     every rank leaves the training loop at step S, after that step's checkpoint
 *                (a preempted job, for resume tests);
 *   "startstall:R" rank R stops responding right after MPI starts, before the handshake (a rank
 *                that never arrives);
 *   "launchstop:R" rank R (the launcher's rank variable) stops itself with SIGSTOP right after
 *                launch, before MPI_Init (a rank stalled at start-up: the start-up watchdog);
 *   "slowsave:N" a checkpoint written on a signal (train/signal_checkpoint.h) holds each of its
 *                files, complete, N seconds under its temporary name before the rename (a slow
 *                disk: the window a second signal must land in, tests/t_30_zero_5_signal.sh).
 * Host C, header-only, libc and common/atomic_file.h only.
 */
#ifndef TEST_FAULT_H
#define TEST_FAULT_H

#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/atomic_file.h"

typedef struct { char kind[8]; int rank, step, seconds; } TestFault;

static TestFault test_fault_from_env(void) {
    TestFault f = {"", -1, -1, 0};
    const char* s = getenv("ZERO_TEST_FAULT");
    if (s == NULL || *s == '\0') return f;
    if (sscanf(s, "stall:%d@%d", &f.rank, &f.step) == 2) strcpy(f.kind, "stall");
    else if (sscanf(s, "exit:%d@%d", &f.rank, &f.step) == 2) strcpy(f.kind, "exit");
    else if (sscanf(s, "stop@%d", &f.step) == 1) strcpy(f.kind, "stop");
    else if (sscanf(s, "startstall:%d", &f.rank) == 1) strcpy(f.kind, "start");
    else if (sscanf(s, "launchstop:%d", &f.rank) == 1) strcpy(f.kind, "launch");
    else if (sscanf(s, "slowsave:%d", &f.seconds) == 1 && f.seconds > 0) strcpy(f.kind, "slow");
    else { fprintf(stderr, "error: ZERO_TEST_FAULT=%s: unknown; expected stall:R@S, exit:R@S, stop@S, startstall:R, launchstop:R or slowsave:N\n", s); exit(1); }
    return f;
}

// Called before MPI starts: "launchstop:R" stops rank R (OMPI_COMM_WORLD_RANK, PMIX_RANK or
// SLURM_PROCID) with SIGSTOP, as a stalled process would be.
static void test_fault_before_mpi(const TestFault* f) {
    if (strcmp(f->kind, "launch") != 0) return;
    const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (int k = 0; k < 3; k++) {
        const char* v = getenv(names[k]);
        if (v == NULL) continue;
        if (atoi(v) != f->rank) return;
        fprintf(stderr, "test fault: rank %d stops itself (SIGSTOP) before MPI_Init\n", f->rank);
        raise(SIGSTOP);
        return;
    }
}

// Called once the ranks have started, before the handshake: "startstall:R" hangs rank R.
static void test_fault_at_startup(const TestFault* f, int rank) {
    if (strcmp(f->kind, "start") != 0 || rank != f->rank) return;
    fprintf(stderr, "test fault: rank %d stalls before the handshake\n", rank);
    for (;;) { struct timespec ts = {1, 0}; nanosleep(&ts, NULL); }
}

// Called at the top of each step, after val/sample/checkpoint: returns 1 if the loop must stop.
static int test_fault_at_step(const TestFault* f, int step, int rank) {
    if (f->step != step) return 0;
    if (strcmp(f->kind, "stall") == 0 && rank == f->rank) {
        fprintf(stderr, "test fault: rank %d stalls at step %d\n", rank, step);
        for (;;) { struct timespec ts = {1, 0}; nanosleep(&ts, NULL); }
    }
    if (strcmp(f->kind, "exit") == 0 && rank == f->rank) {
        fprintf(stderr, "test fault: rank %d exits at step %d\n", rank, step);
        _exit(3);
    }
    if (strcmp(f->kind, "stop") == 0) {
        if (rank == 0) printf("test fault: stopping at step %d\n", step);
        return 1;
    }
    return 0;
}

// Called before a checkpoint on a signal is written: "slowsave:N" holds each of its files N s.
static void test_fault_before_signal_checkpoint(const TestFault* f) {
    if (strcmp(f->kind, "slow") == 0) atomic_file_hold_s = (unsigned)f->seconds;
}

#endif // TEST_FAULT_H
