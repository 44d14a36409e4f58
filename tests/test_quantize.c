/*
 * test_quantize.c: blockwise int8/int4 quantization (cpu/quantize.h), the codes ZeRO++ sends.
 * Prints "PASS <name>" or "FAIL <name>: <why>" per check, "INFO" lines with measurements;
 * exits 1 if any check failed.
 *
 * Checks, for bits 8 and 4, block sizes 32, 64 and 2048, and lengths that end in a partial block
 * (odd ones for int4):
 *   error_bound   every element |x - dequant(x)| <= s_b/2 + 2^-21 absmax_b, s_b = absmax_b/qmax
 *                 of its own block (rounding to the nearest code moves it by at most half a step;
 *                 the 2^-21 absmax_b covers the fp32 roundings of x*qmax/absmax and q*s_b, a few
 *                 ulps of absmax_b). Blocks get magnitudes 10^-3..10^3 in turn, so an element
 *                 scaled with a neighbour's scale breaks the bound by orders of magnitude; and the
 *                 bound must be nearly reached (worst error > 0.9 s_b/2 over the vector), so it is
 *                 the quantizer's rounding that is measured, not a loose tolerance.
 *   exact_on_grid values k 2^-e (k integer in [-qmax, qmax], one of them ±qmax, e per block)
 *                 are on the code grid (s_b = 2^-e exactly): every element comes back bit-exact,
 *                 the first and last of each block and the partial last block included.
 *   zero_blocks   an all-zero block between non-zero ones: scale 0, codes 0, output exactly 0.
 *   int4_packing  lengths 1, 3, 33, 65, 1001: (n+1)/2 bytes written and not one more (a canary
 *                 byte after them), element 2j in the low nibble and 2j+1 in the high one (each
 *                 nibble decoded by hand against the code of its own element), an odd length's
 *                 last high nibble 0.
 *   accumulate    dequantize with accumulate = 1 adds q s to what is there: out = base + q s
 *                 within one fp32 rounding (the compiler may fuse the multiply-add).
 * INFO: relative RMS error of int8 and int4 over block sizes on GPT-2-like weights (normal,
 * std 0.02, with 0.1% outliers of 10 std), and the bytes per element sent, for the default
 * block size (zero/zeropp/zeropp.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/quantize.h"

static int failures = 0;

static void report(int ok, const char* name, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform01(void) { // xorshift64* (Vigna 2016), in (0, 1)
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (((rng_state * 0x2545F4914F6CDD1DULL) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double normal01(void) { return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }

static float block_absmax(const float* x, size_t lo, size_t hi) {
    float a = 0.0f;
    for (size_t i = lo; i < hi; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    return a;
}

static void check_error_bound(int bits, int block, size_t n) {
    float* x = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float)), *s = malloc(quant_num_blocks(n, block) * sizeof(float));
    uint8_t* q = malloc(quant_code_bytes(n, bits));
    for (size_t i = 0; i < n; i++) x[i] = (float)((uniform01() * 2.0 - 1.0) * pow(10.0, (double)((i / block) % 7) - 3.0));
    quantize_blocks(q, s, x, n, bits, block);
    dequantize_blocks(d, q, s, n, bits, block, 0);
    const float qmax = (float)quant_qmax(bits);
    double worst_ratio = 0.0; // max |err| / (s_b/2)
    size_t bad = n;
    for (size_t b = 0; b < quant_num_blocks(n, block) && bad == n; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float absmax = block_absmax(x, lo, hi), sb = absmax / qmax;
        if (s[b] != sb) { bad = lo; break; }
        for (size_t i = lo; i < hi; i++) {
            double err = fabs((double)x[i] - (double)d[i]);
            if (err > sb / 2.0 + absmax * 0x1p-21) { bad = i; break; }
            if (sb > 0 && err / (sb / 2.0) > worst_ratio) worst_ratio = err / (sb / 2.0);
        }
    }
    char name[96], why[256];
    snprintf(name, sizeof(name), "quantize_int%d_block%d_n%zu_error_within_half_scale", bits, block, n);
    if (bad < n) snprintf(why, sizeof(why), "element %zu: x %.9g dequantized %.9g, block scale %.9g (stored %.9g)", bad, x[bad], d[bad],
                          block_absmax(x, bad / block * block, bad / block * block + block < n ? bad / block * block + block : n) / qmax, s[bad / block]);
    else snprintf(why, sizeof(why), "worst error %.3f of half a scale step; expected > 0.9 (the bound nearly reached)", worst_ratio);
    report(bad == n && worst_ratio > 0.9, name, why);
    free(x); free(d); free(s); free(q);
}

static void check_exact_on_grid(int bits, int block, size_t n) {
    float* x = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float)), *s = malloc(quant_num_blocks(n, block) * sizeof(float));
    uint8_t* q = malloc(quant_code_bytes(n, bits));
    int qmax = quant_qmax(bits);
    for (size_t b = 0; b < quant_num_blocks(n, block); b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float step = ldexpf(1.0f, (int)(b % 9) - 12); // 2^-12 .. 2^-4, a different one per block
        for (size_t i = lo; i < hi; i++) x[i] = (float)((int)(uniform01() * (2 * qmax + 1)) - qmax) * step;
        x[lo] = (float)qmax * step;                   // the block's first element is its absmax ...
        x[hi - 1] = -(float)qmax * step;              // ... and so is its last
    }
    quantize_blocks(q, s, x, n, bits, block);
    dequantize_blocks(d, q, s, n, bits, block, 0);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) if (d[i] != x[i]) bad = i;
    char name[96], why[160];
    snprintf(name, sizeof(name), "quantize_int%d_block%d_n%zu_exact_on_code_grid", bits, block, n);
    snprintf(why, sizeof(why), "element %zu (block %zu, offset %zu): %.9g came back as %.9g", bad, bad / block, bad % block,
             bad < n ? x[bad] : 0.0f, bad < n ? d[bad] : 0.0f);
    report(bad == n, name, why);
    free(x); free(d); free(s); free(q);
}

static void check_zero_blocks(int bits, int block) {
    size_t n = 5 * (size_t)block + 6; // blocks 1 and 3 zero, a partial last block
    float* x = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float)), s[8];
    uint8_t* q = malloc(quant_code_bytes(n, bits));
    for (size_t i = 0; i < n; i++) x[i] = (i / block == 1 || i / block == 3) ? 0.0f : (float)(normal01() * 0.02);
    for (size_t i = 0; i < n; i++) d[i] = NAN; // nothing may be left unwritten
    quantize_blocks(q, s, x, n, bits, block);
    dequantize_blocks(d, q, s, n, bits, block, 0);
    int ok = s[1] == 0.0f && s[3] == 0.0f;
    for (size_t i = block; i < 2 * (size_t)block; i++) ok &= d[i] == 0.0f && d[i + 2 * block] == 0.0f;
    size_t zb = quant_code_bytes((size_t)block, bits); // block is even: each zero block owns whole bytes
    for (size_t k = 0; k < zb; k++) ok &= q[zb + k] == 0 && q[3 * zb + k] == 0;
    for (size_t i = 0; i < n; i++) ok &= !isnan(d[i]);
    char name[96];
    snprintf(name, sizeof(name), "quantize_int%d_block%d_zero_blocks_exact", bits, block);
    report(ok, name, "a zero block's scale, codes or output is not exactly 0, or an output was not written");
    free(x); free(d); free(q);
}

static void check_int4_packing(size_t n) {
    const int block = 32;
    float* x = malloc(n * sizeof(float)), *s = malloc(quant_num_blocks(n, block) * sizeof(float));
    size_t bytes = quant_code_bytes(n, 4);
    uint8_t* q = malloc(bytes + 1);
    memset(q, 0xA5, bytes + 1);
    // Codes chosen per element (k 2^-8 with k = ((i * 5) % 15) - 7, and ±7 at each block start so
    // every block's scale is 2^-8): element i must come out as code k_i.
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 5) % 15) - 7) * 0x1p-8f;
    for (size_t lo = 0; lo < n; lo += block) x[lo] = (lo / block) % 2 ? -7.0f * 0x1p-8f : 7.0f * 0x1p-8f;
    quantize_blocks(q, s, x, n, 4, block);
    int ok = q[bytes] == 0xA5; // canary: nothing past (n+1)/2 bytes
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        int expect = (int)lrintf(x[i] * 0x1p8f);
        unsigned nibble = i % 2 == 0 ? q[i / 2] & 0xF : q[i / 2] >> 4;
        int got = nibble >= 8 ? (int)nibble - 16 : (int)nibble;
        if (got != expect) bad = i;
    }
    if (n % 2 == 1 && (q[n / 2] >> 4) != 0) ok = 0;
    char name[64], why[160];
    snprintf(name, sizeof(name), "quantize_int4_packing_n%zu", n);
    snprintf(why, sizeof(why), "%s", bad < n ? "an element's nibble holds the wrong code (expected element 2j low, 2j+1 high)"
                                             : "wrote past (n+1)/2 bytes, or an odd length's last high nibble is not 0");
    report(ok && bad == n, name, why);
    free(x); free(s); free(q);
}

static void check_accumulate(int bits, int block, size_t n) {
    float* x = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float)), *acc = malloc(n * sizeof(float)), *base = malloc(n * sizeof(float));
    float* s = malloc(quant_num_blocks(n, block) * sizeof(float));
    uint8_t* q = malloc(quant_code_bytes(n, bits));
    for (size_t i = 0; i < n; i++) { x[i] = (float)normal01(); base[i] = acc[i] = (float)normal01(); }
    quantize_blocks(q, s, x, n, bits, block);
    dequantize_blocks(d, q, s, n, bits, block, 0);
    dequantize_blocks(acc, q, s, n, bits, block, 1);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= fabs((double)acc[i] - ((double)base[i] + d[i])) <= 0x1p-23 * (fabs(base[i]) + fabs(d[i]));
    char name[80];
    snprintf(name, sizeof(name), "dequantize_int%d_block%d_accumulate_adds", bits, block);
    report(ok, name, "out != base + q s within one fp32 rounding");
    free(x); free(d); free(acc); free(base); free(s); free(q);
}

// INFO: error of each format over block sizes on GPT-2-like weights (what qwZ gathers).
static void measure_error_vs_block(void) {
    size_t n = 1 << 20;
    float* x = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float)), *s = malloc(n / 32 * sizeof(float));
    uint8_t* q = malloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (float)(normal01() * 0.02 * (uniform01() < 0.001 ? 10.0 : 1.0));
    double sum_sq = 0.0;
    for (size_t i = 0; i < n; i++) sum_sq += (double)x[i] * x[i];
    for (int bits = 8; bits >= 4; bits -= 4) {
        printf("INFO int%d relative RMS error by block size (normal std 0.02, 0.1%% outliers x10):", bits);
        for (int block = 32; block <= 65536; block *= 2) {
            quantize_blocks(q, s, x, n, bits, block);
            dequantize_blocks(d, q, s, n, bits, block, 0);
            double e = 0.0;
            for (size_t i = 0; i < n; i++) e += ((double)x[i] - d[i]) * ((double)x[i] - d[i]);
            printf(" %d: %.2e (%.3f B/elem)", block, sqrt(e / sum_sq), bits / 8.0 + 4.0 / block);
        }
        printf("\n");
    }
    free(x); free(d); free(s); free(q);
}

int main(void) {
    const int blocks[] = {32, 64, 2048};
    for (int bits = 8; bits >= 4; bits -= 4) {
        for (int k = 0; k < 3; k++) {
            int b = blocks[k];
            size_t n = 7 * (size_t)b + (bits == 4 ? 13 : 10); // a partial last block (odd for int4)
            check_error_bound(bits, b, n);
            check_exact_on_grid(bits, b, n);
            check_zero_blocks(bits, b);
            check_accumulate(bits, b, n);
        }
    }
    const size_t lengths[] = {1, 3, 33, 65, 1001};
    for (int k = 0; k < 5; k++) check_int4_packing(lengths[k]);
    report(quant_block_valid(32) && quant_block_valid(2048) && quant_block_valid(65536) && !quant_block_valid(0) &&
               !quant_block_valid(48) && !quant_block_valid(16) && !quant_block_valid(65568) && !quant_block_valid(-32),
           "quantize_block_sizes_accepted_and_refused", "quant_block_valid disagrees with: multiples of 32 in [32, 65536]");
    measure_error_vs_block();
    return failures ? 1 : 0;
}
