/*
 * hellaswag.h: the HellaSwag eval file (written by data/hellaswag.py; llm.c's layout, so its
 * files load too), read whole into memory. Little-endian:
 *   header   256 x int32: [0] 20240522 magic, [1] 1 version, [2] number of examples N,
 *            [3] the longest example record in bytes
 *   records  uint16 words each: 65535, record size in bytes (these words included), example
 *            index, label (0..3), number of completions (4), context length n, n context tokens,
 *            then 4 times: completion length m, m tokens
 * hellaswag_load checks every field (a file cut short, a record whose size disagrees with its
 * lengths, a label out of range, a token >= the vocab) and returns -1 with one error line in err
 * naming the file and what was expected; the caller prints it (rank 0) and exits 1.
 */
#ifndef COMMON_HELLASWAG_H
#define COMMON_HELLASWAG_H
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HELLASWAG_MAGIC 20240522
#define HELLASWAG_VERSION 1
#define HELLASWAG_COMPLETIONS 4
#define HELLASWAG_START 65535

typedef struct {
    int index, label;
    int context_start, context_len;                       // into HellaSwagSet.tokens
    int completion_start[HELLASWAG_COMPLETIONS], completion_len[HELLASWAG_COMPLETIONS];
} HellaSwagExample;

typedef struct {
    int num_examples;
    HellaSwagExample* examples;
    int* tokens; // every example's context and completion tokens, as int32 (the model's inputs)
} HellaSwagSet;

static void hellaswag_free(HellaSwagSet* hs) {
    free(hs->examples);
    free(hs->tokens);
    memset(hs, 0, sizeof(*hs));
}

// Read and check `path`; tokens must be < vocab_size. 0, or -1 with the error line in err.
static int hellaswag_load(HellaSwagSet* hs, const char* path, int vocab_size, char* err, size_t err_cap) {
    static const char expected[] = "a HellaSwag eval file written by data/hellaswag.py (llm.c's layout, magic 20240522, version 1)";
    memset(hs, 0, sizeof(*hs));
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_cap, "error: -hf %s: cannot open (%s); expected %s", path, strerror(errno), expected);
        return -1;
    }
    int32_t header[256];
    size_t got = fread(header, sizeof(int32_t), 256, f);
    long words_bytes = 0;
    uint16_t* words = NULL;
    if (got == 256 && fseek(f, 0, SEEK_END) == 0) {
        words_bytes = ftell(f) - (long)sizeof(header);
        words = (uint16_t*)malloc(words_bytes > 0 ? (size_t)words_bytes : 1);
        fseek(f, (long)sizeof(header), SEEK_SET);
        if (words_bytes > 0 && fread(words, 1, (size_t)words_bytes, f) != (size_t)words_bytes) words_bytes = -1;
    }
    fclose(f);
    int n = got == 256 ? header[2] : 0;
    if (got != 256 || header[0] != HELLASWAG_MAGIC || header[1] != HELLASWAG_VERSION || n < 1 || words_bytes < 0) {
        if (got != 256) snprintf(err, err_cap, "error: -hf %s: shorter than the 1024-byte header; expected %s", path, expected);
        else if (header[0] != HELLASWAG_MAGIC) snprintf(err, err_cap, "error: -hf %s: magic %d; expected %s", path, header[0], expected);
        else if (header[1] != HELLASWAG_VERSION) snprintf(err, err_cap, "error: -hf %s: version %d; expected %s", path, header[1], expected);
        else if (n < 1) snprintf(err, err_cap, "error: -hf %s: %d examples in the header; expected %s", path, n, expected);
        else snprintf(err, err_cap, "error: -hf %s: read failed; expected %s", path, expected);
        free(words);
        return -1;
    }
    long num_words = words_bytes / 2, pos = 0;
    hs->examples = (HellaSwagExample*)calloc((size_t)n, sizeof(HellaSwagExample));
    hs->tokens = (int*)malloc((size_t)(num_words > 0 ? num_words : 1) * sizeof(int));
    int num_tokens = 0;
    const char* problem = NULL;
    int e = 0;
    for (; e < n && problem == NULL; e++) {
        HellaSwagExample* ex = &hs->examples[e];
        long start = pos;
        if (pos + 6 > num_words) { problem = "the file ends inside its record"; break; }
        int size_bytes = words[pos + 1], completions = words[pos + 4], context_len = words[pos + 5];
        ex->index = words[pos + 2];
        ex->label = words[pos + 3];
        if (words[pos] != HELLASWAG_START) { problem = "no 65535 start word"; break; }
        if (completions != HELLASWAG_COMPLETIONS) { problem = "a completion count other than 4"; break; }
        if (ex->label >= HELLASWAG_COMPLETIONS) { problem = "its label is outside 0..3"; break; }
        if (context_len < 1) { problem = "its context is empty"; break; }
        pos += 6;
        long need = context_len;
        if (pos + need > num_words) { problem = "the file ends inside its record"; break; }
        ex->context_start = num_tokens;
        ex->context_len = context_len;
        for (long k = 0; k < need; k++) hs->tokens[num_tokens++] = words[pos + k];
        pos += need;
        for (int c = 0; c < HELLASWAG_COMPLETIONS && problem == NULL; c++) {
            if (pos + 1 > num_words) { problem = "the file ends inside its record"; break; }
            int m = words[pos++];
            if (m < 1) { problem = "a completion is empty"; break; }
            if (pos + m > num_words) { problem = "the file ends inside its record"; break; }
            ex->completion_start[c] = num_tokens;
            ex->completion_len[c] = m;
            for (int k = 0; k < m; k++) hs->tokens[num_tokens++] = words[pos + k];
            pos += m;
        }
        if (problem == NULL && 2 * (pos - start) != size_bytes) problem = "its record size disagrees with its lengths";
    }
    if (problem == NULL && pos != num_words) {
        snprintf(err, err_cap, "error: -hf %s: %ld bytes after the header's %d examples; expected %s", path, 2 * (num_words - pos), n, expected);
        problem = "";
    } else if (problem != NULL) {
        snprintf(err, err_cap, "error: -hf %s: example %d (byte %ld): %s; expected %s", path, e, 1024 + 2 * pos, problem, expected);
    }
    for (int k = 0; problem == NULL && k < num_tokens; k++)
        if (hs->tokens[k] >= vocab_size) {
            snprintf(err, err_cap, "error: -hf %s: token %d >= the model's vocab %d; expected %s", path, hs->tokens[k], vocab_size, expected);
            problem = "";
        }
    free(words);
    if (problem != NULL) {
        hellaswag_free(hs);
        return -1;
    }
    hs->num_examples = n;
    return 0;
}
#endif
