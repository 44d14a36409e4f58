/*
 * hash.h: the FNV-1a 64-bit hash (Fowler, Noll, Vo) over 32-bit words, used for the model file's
 * checksum (common/model_file.h), the engine's replica check and the state's fingerprint.
 * Host code, no dependencies.
 */
#ifndef COMMON_HASH_H
#define COMMON_HASH_H
#include <stddef.h>
#include <stdint.h>

// 64-bit FNV-1a over n 32-bit words of x (any 4-byte element type read as raw bits), continuing
// from h (FNV1A64_INIT to start).
static uint64_t fnv1a64_words(const float* x, size_t n, uint64_t h) {
    const uint32_t* w = (const uint32_t*)x;
    for (size_t i = 0; i < n; i++) { h ^= w[i]; h *= 0x100000001B3ull; }
    return h;
}
#define FNV1A64_INIT 0xCBF29CE484222325ull

#endif // COMMON_HASH_H
