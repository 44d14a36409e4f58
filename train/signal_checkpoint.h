/*
 * train/signal_checkpoint.h: checkpoint on a signal, then exit 75 (EX_TEMPFAIL, sysexits.h:
 * "checkpointed on a signal: requeue me"), shared by train_gpt2.c and train_gpt2.cu.
 *
 * Schedulers end jobs with a signal and a grace period: Slurm's preemption, time limit and
 * `scontrol requeue` send SIGTERM and SIGKILL KillWait seconds later, or a chosen signal ahead of
 * time (`--signal=USR1@120`, Slurm sbatch/srun manual). The signals -sig names (default USR1,TERM;
 * -sig 0: none) only set a flag here; every rank finishes its current step, and at the top of
 * the next one all ranks agree (one all-reduce of an int per step, the max of each rank's flag)
 * whether any rank got one: the signal may reach only some ranks (mpirun forwards SIGUSR1 to
 * every rank; a user's kill reaches one). Then every rank writes the checkpoint of that step (the
 * same files as -n, each written to a temporary name and renamed: zero/checkpoint.h), rank 0
 * prints one line, and every rank exits 75. `-y 1` continues the same trajectory.
 *
 * A second signal during that (or SIGKILL) ends the rank at once, as zero/cluster/faults.h does
 * for SIGTERM: the checkpoint being written has no model file yet (which marks a complete one),
 * so resume takes the previous one, intact. A SIGTERM from this rank's parent under Open MPI
 * (mpirun or its daemon, which end the job that way after another rank failed, then SIGKILL 1 s
 * later: odls_base_sigkill_timeout) is that launcher's teardown, not a request: faults.h's line.
 */
#ifndef TRAIN_SIGNAL_CHECKPOINT_H
#define TRAIN_SIGNAL_CHECKPOINT_H
#ifndef ZERO_CUH
#error "include zero.cuh before train/signal_checkpoint.h"
#endif
#include <ctype.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SIGNAL_CHECKPOINT_EXIT 75

static const struct { const char* name; int number; } signal_checkpoint_names[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP},
};
#define SIGNAL_CHECKPOINT_KINDS (int)(sizeof(signal_checkpoint_names) / sizeof(signal_checkpoint_names[0]))

static volatile sig_atomic_t signal_checkpoint_pending; // the first signal's number; 0: none yet
static struct timespec signal_checkpoint_at;            // when it came (CLOCK_MONOTONIC)
static int signal_checkpoint_enabled;                    // any signal installed: the per-step agreement runs
static int signal_checkpoint_under_open_mpi;             // the parent is mpirun/orted (OMPI_COMM_WORLD_SIZE set)

/*
 * -sig: "0" (none), or a comma-separated list of USR1, USR2, TERM, INT, HUP (a "SIG" prefix and
 * lower case accepted) into mask bit k for signal_checkpoint_names[k]. Returns 0, or -1 when a
 * name is unknown.
 */
static int signal_checkpoint_parse(const char* text, int* mask) {
    *mask = 0;
    if (strcmp(text, "0") == 0) return 0;
    const char* p = text;
    while (*p) {
        char name[16];
        size_t n = 0;
        while (*p && *p != ',' && n + 1 < sizeof(name)) name[n++] = (char)toupper((unsigned char)*p++);
        name[n] = '\0';
        if (*p && *p != ',') return -1; // a name longer than any signal's
        const char* bare = strncmp(name, "SIG", 3) == 0 ? name + 3 : name;
        int found = -1;
        for (int k = 0; k < SIGNAL_CHECKPOINT_KINDS; k++)
            if (strcmp(bare, signal_checkpoint_names[k].name) == 0) found = k;
        if (found < 0) return -1;
        *mask |= 1 << found;
        if (*p == ',') p++;
    }
    return *mask ? 0 : -1;
}

static const char* signal_checkpoint_name(int sig) {
    for (int k = 0; k < SIGNAL_CHECKPOINT_KINDS; k++)
        if (signal_checkpoint_names[k].number == sig) return signal_checkpoint_names[k].name;
    return "?";
}

// Async-signal-safe: sets the flag on the first signal; a second one, or Open MPI's teardown
// SIGTERM (header), ends the rank with faults.h's line.
static void signal_checkpoint_handler(int sig, siginfo_t* info, void* context) {
    (void)context;
    int teardown = sig == SIGTERM && signal_checkpoint_under_open_mpi && info != NULL && info->si_pid == getppid();
    if (signal_checkpoint_pending != 0 || teardown) zero_fault_signal(sig);
    clock_gettime(CLOCK_MONOTONIC, &signal_checkpoint_at);
    signal_checkpoint_pending = sig;
}

// After MPI started and faults.h installed its handlers (the handshake): the -sig signals
// checkpoint instead (mask from signal_checkpoint_parse).
static void signal_checkpoint_install(int mask) {
    signal_checkpoint_under_open_mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = signal_checkpoint_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < SIGNAL_CHECKPOINT_KINDS; k++)
        if (mask & (1 << k)) { sigaction(signal_checkpoint_names[k].number, &sa, NULL); signal_checkpoint_enabled = 1; }
}

/*
 * Every rank, at the top of each step after the first of this run: did any rank get a -sig
 * signal? All-reduce (max) of one int: each rank's signal number or 0. Returns that signal's
 * number (the largest, if several), or 0. No collective when -sig 0.
 */
static int signal_checkpoint_due(ZeroEngine* z) {
    if (!signal_checkpoint_enabled) return 0;
    int lowest, highest;
    zero_all_reduce_min_max_int(z, (int)signal_checkpoint_pending, &lowest, &highest, "the checkpoint-on-signal agreement");
    return highest;
}

/*
 * After the checkpoint of `step` was written (dir NULL: no -o, none written): rank 0 prints one
 * line (the signal, the step, the files and their bytes, seconds since its own signal when it got
 * one); returns the exit status: 75, or 1 without -o.
 */
static int signal_checkpoint_finish(ZeroEngine* z, int sig, const char* dir, int step, double write_s) {
    if (z->rank != 0) return dir ? SIGNAL_CHECKPOINT_EXIT : 1;
    if (dir == NULL) {
        fprintf(stderr, "error: SIG%s after step %d: no checkpoint written, as there is no -o; expected -o DIR (and -y 1 on "
                "the requeued run) to continue after a signal\n", signal_checkpoint_name(sig), step);
        return 1;
    }
    char path[4300];
    struct stat st;
    model_checkpoint_path(path, sizeof(path), dir, step);
    long long model_bytes = stat(path, &st) == 0 ? (long long)st.st_size : 0;
    long long state_bytes = (long long)sizeof(int64_t) * ZERO_STATE_HEADER_INTS + 2LL * (long long)z->layout->shard_numel * (long long)sizeof(float);
    long long total = model_bytes + (long long)z->world_size * state_bytes;
    char since[64] = "";
    if (signal_checkpoint_pending != 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        snprintf(since, sizeof(since), ", %.2f s after rank 0's signal",
                 (double)(now.tv_sec - signal_checkpoint_at.tv_sec) + 1e-9 * (double)(now.tv_nsec - signal_checkpoint_at.tv_nsec));
    }
    printf("checkpointed on a signal: SIG%s, step %d in %s (model file + %d state file%s, %lld bytes, written in %.2f s%s); "
           "exit %d: requeue with -y 1\n", signal_checkpoint_name(sig), step, dir, z->world_size, z->world_size > 1 ? "s" : "",
           total, write_s, since, SIGNAL_CHECKPOINT_EXIT);
    fflush(stdout);
    return SIGNAL_CHECKPOINT_EXIT;
}

#endif // TRAIN_SIGNAL_CHECKPOINT_H
