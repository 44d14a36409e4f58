/*
 * test_adamw.c: the vectorized CPU AdamW (cpu/adamw.h adamw_update: AVX-512 / AVX2 lanes over
 * OpenMP blocks) against the scalar reference adamw_update_scalar, on random slices of odd
 * lengths and misaligned starts (tails, block edges), with and without weight decay and clipping,
 * over several steps t (the bias corrections). Each path this CPU runs is checked on its own
 * (ADAMW_PATH caps the dispatch; a path the CPU lacks prints SKIP).
 * Tolerance: 0 ulps (bit-identical) on every p, m, v after 5 steps. The reference spells out its
 * fused multiply-adds (fmaf) exactly where the vector paths (and the GPU kernel) fuse, every other
 * operation rounded on its own in the same order, so nothing is left to the compiler's
 * contraction (-ffp-contract=fast). Before that (the scalar loop contracted as gcc chose) the
 * paths differed by up to 1 ulp, which is what this check now catches.
 * Prints PASS/FAIL/SKIP lines; exits 1 on a failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/adamw.h"
#include "common/rng.h"

static int failures = 0;

// Distance in units in the last place between two finite floats of the same sign region.
static double ulps(float a, float b) {
    if (a == b) return 0.0;
    float scale = fmaxf(fabsf(a), fabsf(b));
    return fabs((double)a - (double)b) / (double)(nextafterf(scale, INFINITY) - scale);
}

// Run 5 steps of `path` (via the dispatcher) and the reference on the same data; return max ulps.
static double compare(size_t n, size_t misalign, float wd, float grad_scale, uint64_t seed) {
    size_t total = n + misalign;
    float* buf[8];
    for (int k = 0; k < 8; k++) buf[k] = (float*)malloc(total * sizeof(float));
    Rng rng;
    rng_seed(&rng, seed);
    for (size_t i = 0; i < total; i++) {
        buf[0][i] = buf[4][i] = rng_normal(&rng);            // params
        buf[2][i] = buf[6][i] = 0.01f * rng_normal(&rng);    // m
        float x = 1e-3f * rng_normal(&rng);
        buf[3][i] = buf[7][i] = x * x;                        // v >= 0
    }
    double worst = 0.0;
    for (int t = 1; t <= 5; t++) {
        for (size_t i = 0; i < total; i++) buf[1][i] = buf[5][i] = (i % 97 == 0 ? 1e-9f : 1e-2f) * rng_normal(&rng); // grads, some tiny
        float* p = buf[0] + misalign; float* g = buf[1] + misalign; float* m = buf[2] + misalign; float* v = buf[3] + misalign;
        float* rp = buf[4] + misalign; float* rg = buf[5] + misalign; float* rm = buf[6] + misalign; float* rv = buf[7] + misalign;
        adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, grad_scale, t);
        adamw_update_scalar(rp, rg, rm, rv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, grad_scale, t);
    }
    for (size_t i = 0; i < n; i++) {
        double d = fmax(ulps(buf[0][misalign + i], buf[4][misalign + i]),
                        fmax(ulps(buf[2][misalign + i], buf[6][misalign + i]), ulps(buf[3][misalign + i], buf[7][misalign + i])));
        if (!(d <= worst)) worst = d; // NaN counts as worst
    }
    for (int k = 0; k < 8; k++) free(buf[k]);
    return worst;
}

int main(void) {
    // The path under test is fixed by ADAMW_PATH before the first call (adamw_path decides once),
    // so the shell runs this program once per path: ADAMW_PATH=avx2 build/test_adamw, etc.
    const char* want = getenv("ADAMW_PATH");
    AdamWPath path = adamw_path();
    if (want != NULL && strcmp(adamw_path_names[path], want) != 0) {
        printf("SKIP adamw_%s_matches_scalar_reference: this CPU does not run %s (best: %s)\n", want, want, adamw_path_names[path]);
        return 0;
    }
    size_t sizes[] = {1, 7, 15, 17, 1000, ADAMW_BLOCK - 1, ADAMW_BLOCK + 13, 3 * ADAMW_BLOCK + 5, 1000003};
    double worst = 0.0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (size_t misalign = 0; misalign < 3; misalign += 2)
            for (int variant = 0; variant < 3; variant++) {
                float wd = variant == 1 ? 0.1f : 0.0f, grad_scale = variant == 2 ? 0.37f : 1.0f;
                double d = compare(sizes[s], misalign, wd, grad_scale, 1000 + s * 7 + misalign * 3 + variant);
                if (!(d <= worst)) worst = d;
            }
    int ok = worst == 0.0;
    printf("%s adamw_%s_matches_scalar_reference: max %.1f ulps over p, m, v after 5 steps (sizes 1..1000003, misaligned, wd, clipping); tolerance 0 (bit-identical)\n",
           ok ? "PASS" : "FAIL", adamw_path_names[path], worst);
    if (!ok) failures++;
    return failures ? 1 : 0;
}
