/*
 * sampling.h: what both trainers' sampling shares once the logits are on the host: a token
 * drawn from softmax(logits) (temperature 1), and the sample printed as text (or as token ids
 * where no tokenizer file was found). The forward that produces the logits is each trainer's
 * (gpt2_sample in train_gpt2.c and train_gpt2.cu). Host C, header-only.
 */
#ifndef COMMON_SAMPLING_H
#define COMMON_SAMPLING_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "common/tokenizer.h"

// Index in [0, V) drawn from softmax(logits[0..V)) with a uniform coin in [0, 1): the first index
// whose cumulative probability exceeds the coin (the sum in double, from the largest logit down).
static int sample_from_logits(const float* logits, int V, float coin) {
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) if (logits[i] > maxval) maxval = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp(logits[i] - maxval);
    double cdf = 0.0, target = coin * sum;
    for (int i = 0; i < V; i++) {
        cdf += exp(logits[i] - maxval);
        if (target < cdf) return i;
    }
    return V - 1;
}

// Print n sampled tokens (UTF-8 text between "---" lines, or the ids without a tokenizer).
// Errors: out of memory ends the process with one line.
static void sample_print(Tokenizer* tokenizer, const int* tokens, int n) {
    size_t capacity = (size_t)(n + 1) * 64 + 1; // a GPT-2 token decodes to at most a few dozen bytes
    char* text = (char*)calloc(capacity, 1);
    if (text == NULL) { fprintf(stderr, "error: out of host memory for the sample text (%zu bytes)\n", capacity); exit(1); }
    if (tokenizer->init_ok) {
        tokenizer_decode_utf8(tokenizer, tokens, n, text, capacity);
        printf("sample:\n---\n%s\n---\n", text);
    } else {
        printf("sample (token ids, no tokenizer file):");
        for (int t = 0; t < n; t++) printf(" %d", tokens[t]);
        printf("\n");
    }
    free(text);
}

#endif // COMMON_SAMPLING_H
