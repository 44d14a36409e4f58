/*
 * adamw_bench.c: the CPU AdamW (cpu/adamw.h) in parameters/s and bytes/s beside the machine's
 * memory bandwidth, measured in the same run by a STREAM-style triad a = b + s c on the same
 * OpenMP threads (McCalpin, "STREAM: Sustainable Memory Bandwidth in High Performance Computers").
 * Bytes counted as STREAM counts them: triad 12 bytes per element (two reads, one write; the
 * write-allocate read is not counted), AdamW 28 bytes per parameter (p, g, m, v read; p, m, v
 * written; in place, so no write-allocate traffic). Arrays are far larger than the caches.
 * Beside the triad, `inplace4` is AdamW's own traffic with no arithmetic to speak of (p, m, v
 * read and written in place, g read: the same 28 bytes per element, the same streams): the
 * memory-bandwidth bound of any AdamW on this machine, fused or not.
 * Prints one JSON line per measurement (best of `reps` passes after one warm-up pass), for
 * dev/bench/adamw_bench.sh, which interleaves it with PyTorch's AdamW.
 * Usage: build/adamw_bench [n_params (default 2^24)] [reps (default 10)]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu/adamw.h"

static double now(void) { return omp_get_wtime(); }

static float* array(size_t n, float value) {
    float* p = NULL;
    if (posix_memalign((void**)&p, 64, n * sizeof(float)) != 0) { fprintf(stderr, "error: out of memory (%zu floats)\n", n); exit(1); }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = value; // first touch on the thread that will use it
    return p;
}

static void triad(float* a, const float* b, const float* c, float s, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

// AdamW's memory traffic alone: three arrays updated in place and one read (28 bytes per element).
static void inplace4(float* p, const float* g, float* m, float* v, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { float x = g[i]; p[i] += x; m[i] += x; v[i] += x; }
}

int main(int argc, char** argv) {
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : (size_t)1 << 24;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    int threads = omp_get_max_threads();
    float *a = array(n, 0.0f), *b = array(n, 1.0f), *c = array(n, 2.0f);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        triad(a, b, c, 3.0f, n);
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    printf("{\"kernel\":\"triad\",\"threads\":%d,\"n\":%zu,\"seconds\":%.6g,\"bytes_per_s\":%.6g}\n", threads, n, best, 12.0 * n / best);
    free(a); free(b); free(c);
    float *p = array(n, 0.5f), *g = array(n, 1e-3f), *m = array(n, 0.0f), *v = array(n, 0.0f);
    best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
        inplace4(p, g, m, v, n);
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    printf("{\"kernel\":\"inplace4\",\"threads\":%d,\"n\":%zu,\"seconds\":%.6g,\"bytes_per_s\":%.6g}\n", threads, n, best, 28.0 * n / best);
    for (size_t i = 0; i < n; i++) { p[i] = 0.5f; m[i] = 0.0f; v[i] = 0.0f; } // AdamW starts from the same state as before
    const char* paths[2] = {"vectorized", "scalar"};
    for (int k = 0; k < 2; k++) {
        best = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t0 = now();
            if (k == 0) adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, r + 1);
            else {
                // The reference loop, split over the same threads as the vectorized one.
                #pragma omp parallel
                {
                    int tid = omp_get_thread_num(), nt = omp_get_num_threads();
                    size_t lo = n * (size_t)tid / (size_t)nt, hi = n * (size_t)(tid + 1) / (size_t)nt;
                    adamw_update_scalar(p + lo, g + lo, m + lo, v + lo, hi - lo, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, r + 1);
                }
            }
            double t = now() - t0;
            if (r > 0 && t < best) best = t;
        }
        printf("{\"kernel\":\"adamw_%s\",\"path\":\"%s\",\"threads\":%d,\"n\":%zu,\"seconds\":%.6g,\"params_per_s\":%.6g,\"bytes_per_s\":%.6g}\n",
               paths[k], k == 0 ? adamw_path_names[adamw_path()] : "scalar", threads, n, best, n / best, 28.0 * n / best);
    }
    free(p); free(g); free(m); free(v);
    return 0;
}
