/*
 * measure.h: what this CPU does per second, for the planner's cpu machine (plan/plan_machine.h):
 *   - the sgemm rate (FLOP/s) of one step's GEMMs at the model's shapes: every layer GEMM
 *     (qkv C->3C, attproj C->C, fc C->4C, fcproj 4C->C) and the LM head as the trainer runs it, one
 *     vocab chunk (C->R, R = the largest chunk's rows) counted Vp/R times, forward and
 *     backward, N = B*T rows (at most 1024), through the trainer's own matmul_forward / matmul_backward_ex
 *     (cpu/matmul.h) on the trainer's OpenMP threads; after a warm-up round, the best of at least 3
 *     rounds and 0.2 s (a chunk's GEMM lasts milliseconds: one slow round must not set the rate);
 *   - the memory bandwidth (bytes/s) of a streaming y = y + a*x over 64 MiB arrays (12 bytes
 *     an element), the rate of the element-wise ops and the optimizer; the best of a few rounds;
 *   - both again as one rank gets them while R ranks share this CPU (measure_rank_rates): R
 *     processes at once, as mpirun starts them, each timing one round under the full sharing.
 * About 2 s for d4 at B*T = 1024 on 2 idle cores (the LM head dominates). Host C (fp32).
 */
#ifndef CPU_MEASURE_H
#define CPU_MEASURE_H
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cpu/matmul.h"

static float* measure_buffer(size_t n) {
    float* p = (float*)malloc((n > 0 ? n : 1) * sizeof(float));
    if (p == NULL) { fprintf(stderr, "error: out of host memory measuring this CPU (%zu floats)\n", n); exit(1); }
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

// The step's GEMM shapes (K, OC): one layer's four, then the LM head; buffers for the largest.
typedef struct {
    int N, L, shapes[5][2];
    double head_scale; // Vp / R: the LM head is that many chunk GEMMs
    float *in, *out, *w, *dw, *din;
} MeasureGemms;

static void measure_gemms_alloc(MeasureGemms* g, int N, int C, int Vp, int R, int L) {
    if (R <= 0 || R > Vp) R = Vp;
    const int shapes[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, R}};
    memcpy(g->shapes, shapes, sizeof(shapes));
    g->N = N;
    g->L = L;
    g->head_scale = (double)Vp / R;
    Vp = R;
    size_t in_n = (size_t)N * 4 * C, out_n = (size_t)N * (Vp > 4 * C ? Vp : 4 * C), w_n = (size_t)C * (Vp > 4 * C ? Vp : 4 * C);
    g->in = measure_buffer(in_n); g->out = measure_buffer(out_n); g->w = measure_buffer(w_n); g->dw = measure_buffer(w_n);
    g->din = measure_buffer(in_n);
}

static void measure_gemms_free(MeasureGemms* g) { free(g->in); free(g->out); free(g->w); free(g->dw); free(g->din); }

// Forward and backward of shape s once; returns the seconds.
static double measure_gemm(MeasureGemms* g, int s) {
    int K = g->shapes[s][0], OC = g->shapes[s][1];
    double t0 = omp_get_wtime();
    matmul_forward(g->out, g->in, g->w, NULL, g->N, K, OC);
    matmul_backward_ex(g->din, g->dw, NULL, g->out, g->in, g->w, g->N, K, OC, 0);
    return omp_get_wtime() - t0;
}

// FLOP/s of the step's mix from each shape's seconds: L times one layer's four GEMMs, Vp/R times
// one LM-head chunk's (d4: 3/4 of the FLOPs at B x T = 128).
static double measure_gemm_mix(const MeasureGemms* g, const double seconds[5]) {
    double layer_flops = 0.0, layer_s = 0.0;
    for (int s = 0; s < 4; s++) { layer_flops += 6.0 * g->N * g->shapes[s][0] * (double)g->shapes[s][1]; layer_s += seconds[s]; }
    double head_flops = 6.0 * g->N * (double)g->shapes[4][0] * g->shapes[4][1];
    return (g->L * layer_flops + g->head_scale * head_flops) / (g->L * layer_s + g->head_scale * seconds[4]);
}

// FLOP/s of the step's GEMMs (L layers of 4, plus the LM head in chunks of R rows) at N rows, C
// channels, Vp vocab.
static double measure_sgemm_flops(int N, int C, int Vp, int R, int L) {
    MeasureGemms g;
    measure_gemms_alloc(&g, N, C, Vp, R, L);
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int s = 0; s < 5; s++) measure_gemm(&g, s); // warm-up: the thread pool, the BLAS's buffers, first touch
    // Rounds of milliseconds each (the LM head measured one vocab chunk at a time): the best of at
    // least 3 and 0.2 s of them, so one slow round (a wake-up, a page fault) does not set the rate.
    double t_end = omp_get_wtime() + 0.2;
    for (int round = 0; round < 3 || (round < 100 && omp_get_wtime() < t_end); round++)
        for (int s = 0; s < 5; s++) {
            double t = measure_gemm(&g, s);
            if (t < best[s]) best[s] = t;
        }
    double flops = measure_gemm_mix(&g, best);
    measure_gemms_free(&g);
    return flops;
}

// One pass of y = y + a*x over n floats; returns the seconds.
static double measure_stream(float* y, const float* x, size_t n) {
    double t0 = omp_get_wtime();
    #pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) y[i] += 0.5f * x[i];
    return omp_get_wtime() - t0;
}

// Bytes/s of y = y + a*x streamed over n = 16M floats per array.
static double measure_memory_bandwidth(void) {
    size_t n = (size_t)16 << 20;
    float *x = measure_buffer(n), *y = measure_buffer(n);
    double best = 1e30;
    for (int round = 0; round < 4; round++) {
        double t = measure_stream(y, x, n);
        if (t < best) best = t;
    }
    volatile float sink = y[n / 2];
    (void)sink;
    free(x); free(y);
    return 12.0 * (double)n / best;
}

/*
 * What one rank computes per second while `ranks` ranks, each on `threads` OpenMP threads, share
 * this CPU: `ranks` processes at once (forked, as mpirun starts them), each timing rounds of the
 * step's GEMM mix for 0.2 s (at least one; their mean) and then 4 streaming passes over 32 MiB
 * arrays; a rank that finishes repeats its work until every rank has finished, so every timed
 * round ran under the full sharing (time slicing when ranks x threads exceed the cores, the shared
 * memory bus and caches, and whatever else runs on the machine now). The mean of the timed
 * rounds, not the best: a short best-of round catches a moment when a rank has a core to itself,
 * which the run's ranks do not get; 0.2 s of them spans many time slices. Beside each rank's GEMMs a thread loops as the progress thread does
 * (sleep poll_us, wake): *poll is how long a turn took, i.e. how often a rank's communication
 * moves while the ranks compute. Out: the ranks' mean and the slowest rank's rates (time slicing
 * is fair over long spans, not within one step, and a data-parallel step waits for its slowest
 * rank), the mean poll turn. Returns 0, or -1 (message printed) when a process could not be
 * started. Call it before this process has run an OpenMP region (a child forked from a process
 * with an OpenMP thread pool cannot start its own).
 */
typedef struct { double flops_mean, flops_min, bw_mean, bw_min, poll_s; } MeasureRankRates;

// The most processes measure_rank_rates runs at once (the caller refuses more: rates measured
// with fewer ranks than share the cores would be too fast).
#define MEASURE_MAX_RANKS 64

typedef struct {
    int started, finished[2];
    double flops[MEASURE_MAX_RANKS], bw[MEASURE_MAX_RANKS], poll[MEASURE_MAX_RANKS];
} MeasureShared;

// A progress thread's loop (zero/progress_cpu.h: sleep `poll_us`, then a moment of work) beside
// the rank's compute: how long one turn really takes when it must get a core back each time.
typedef struct { volatile int stop; int poll_us; long turns; double seconds; } MeasurePoller;

static void* measure_poller(void* arg) {
    MeasurePoller* p = (MeasurePoller*)arg;
    double t0 = omp_get_wtime();
    while (!p->stop) {
        struct timespec ts = {0, p->poll_us * 1000L};
        nanosleep(&ts, NULL);
        p->turns++;
    }
    p->seconds = omp_get_wtime() - t0;
    return NULL;
}

static void measure_wait_all(int* counter, int ranks) {
    while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < ranks) sched_yield();
}

static void measure_rank(MeasureShared* sh, int i, int ranks, int threads, int N, int C, int Vp, int R, int L, int poll_us) {
    omp_set_num_threads(threads);
    MeasureGemms g;
    measure_gemms_alloc(&g, N, C, Vp, R, L);
    size_t n = (size_t)8 << 20;
    float *x = measure_buffer(n), *y = measure_buffer(n);
    measure_gemm(&g, 1); // the BLAS's first call (its buffers), untimed
    __atomic_add_fetch(&sh->started, 1, __ATOMIC_ACQ_REL);
    measure_wait_all(&sh->started, ranks);
    MeasurePoller poller = {0, poll_us, 0, 0.0};
    pthread_t poller_id;
    int polling = poll_us > 0 && pthread_create(&poller_id, NULL, measure_poller, &poller) == 0;
    // Rounds for at least 0.2 s, all timed (the mean under the sharing, not a lucky best one)
    double seconds[5] = {0}, t_end = omp_get_wtime() + 0.2;
    int rounds = 0;
    for (; rounds < 1 || (rounds < 100 && omp_get_wtime() < t_end); rounds++)
        for (int s = 0; s < 5; s++) seconds[s] += measure_gemm(&g, s);
    for (int s = 0; s < 5; s++) seconds[s] /= rounds; // one round's mean seconds
    sh->flops[i] = measure_gemm_mix(&g, seconds);
    if (polling) {
        poller.stop = 1;
        pthread_join(poller_id, NULL);
        sh->poll[i] = poller.turns > 0 ? poller.seconds / poller.turns : 0.0;
    }
    __atomic_add_fetch(&sh->finished[0], 1, __ATOMIC_ACQ_REL);
    for (int s = 0; __atomic_load_n(&sh->finished[0], __ATOMIC_ACQUIRE) < ranks; s = (s + 1) % 5) measure_gemm(&g, s);
    double t = 0.0;
    for (int pass = 0; pass < 4; pass++) t += measure_stream(y, x, n);
    sh->bw[i] = 4 * 12.0 * (double)n / t;
    __atomic_add_fetch(&sh->finished[1], 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&sh->finished[1], __ATOMIC_ACQUIRE) < ranks) measure_stream(y, x, n);
    measure_gemms_free(&g);
    free(x); free(y);
}

static int measure_rank_rates(int ranks, int threads, int N, int C, int Vp, int R, int L, int poll_us, MeasureRankRates* out) {
    if (ranks < 1) ranks = 1;
    if (ranks > MEASURE_MAX_RANKS) ranks = MEASURE_MAX_RANKS;
    MeasureShared* sh = (MeasureShared*)mmap(NULL, sizeof(MeasureShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { fprintf(stderr, "error: --plan cpu: no shared memory to measure %d ranks at once\n", ranks); return -1; }
    memset(sh, 0, sizeof(*sh));
    fflush(stdout);
    fflush(stderr);
    pid_t pids[MEASURE_MAX_RANKS];
    int started = 0, failed = 0;
    for (; started < ranks; started++) {
        pids[started] = fork();
        if (pids[started] < 0) break;
        if (pids[started] == 0) { measure_rank(sh, started, ranks, threads, N, C, Vp, R, L, poll_us); _exit(0); }
    }
    if (started < ranks) { // the ones started wait for all: release them, then report
        __atomic_store_n(&sh->started, ranks, __ATOMIC_RELEASE);
        __atomic_store_n(&sh->finished[0], ranks, __ATOMIC_RELEASE);
        __atomic_store_n(&sh->finished[1], ranks, __ATOMIC_RELEASE);
        failed = 1;
    }
    for (int i = 0; i < started; i++) {
        int status = 0;
        if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    }
    memset(out, 0, sizeof(*out));
    out->flops_min = out->bw_min = 1e300;
    for (int i = 0; i < ranks; i++) {
        out->flops_mean += sh->flops[i] / ranks;
        out->bw_mean += sh->bw[i] / ranks;
        out->poll_s += sh->poll[i] / ranks;
        if (sh->flops[i] < out->flops_min) out->flops_min = sh->flops[i];
        if (sh->bw[i] < out->bw_min) out->bw_min = sh->bw[i];
    }
    munmap(sh, sizeof(*sh));
    if (failed) fprintf(stderr, "error: --plan cpu: could not run %d measuring processes at once; expected fork to work\n", ranks);
    return failed ? -1 : 0;
}

#endif // CPU_MEASURE_H
