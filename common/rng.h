/*
 * rng.h: small deterministic random number generator (SplitMix64 seeding + xorshift64*),
 * uniform floats and Box-Muller normals. Used for initialization and sampling, so a run is
 * reproducible from its seed on any machine. Source: Vigna 2016, "An experimental exploration
 * of Marsaglia's xorshift generators, scrambled" (xorshift64*); Steele et al. 2014 (SplitMix64).
 */
#ifndef COMMON_RNG_H
#define COMMON_RNG_H
#include <math.h>
#include <stdint.h>

typedef struct { uint64_t state; } Rng;

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline void rng_seed(Rng* rng, uint64_t seed) {
    rng->state = splitmix64(seed);
    if (rng->state == 0) rng->state = 1; // xorshift must not start at 0
}

static inline uint64_t rng_next(Rng* rng) {
    uint64_t x = rng->state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    rng->state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

// Uniform in [0, 1) with 24 random bits.
static inline float rng_uniform(Rng* rng) { return (float)(rng_next(rng) >> 40) / 16777216.0f; }

// Standard normal via Box-Muller (one of the pair is used; simplicity over speed).
static inline float rng_normal(Rng* rng) {
    double u1 = ((double)(rng_next(rng) >> 11) + 1.0) / 9007199254740993.0; // (0, 1]
    double u2 = (double)(rng_next(rng) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
