/*
 * GPT-2 token decoding for printing samples (host C, header-only). Decode only: encoding
 * happens offline in the data/ scripts, which also write the tokenizer file read here.
 *
 * Tokenizer file format (llm.c's), little-endian:
 *   header  256 x int32: [0] 20240328 magic, [1] 2 version, [2] vocab size V, [3] end-of-text
 *           token id, rest unused
 *   body    for each token id 0..V-1: uint8 length n (1..255), then the token's n raw bytes
 * GPT-2's BPE works on bytes, so one token may hold only part of a UTF-8 character (an emoji
 * can span several tokens); tokenizer_decode_utf8 joins tokens first and then repairs the
 * result, so printed samples are always valid UTF-8.
 *
 * A missing file is not fatal (a run can train without printing text): one warning line, and
 * the tokenizer is marked unusable (init_ok = 0). A file that exists but is malformed is a user
 * error: one line `error: <file>: <what>; expected <what>`, exit 1.
 */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_HEADER_INTS 256
#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2

typedef struct {
    uint32_t vocab_size;       // V
    uint32_t eot_token;        // <|endoftext|> id (50256 for GPT-2)
    char* token_bytes;         // all tokens' bytes, each followed by a NUL (for decode)
    size_t* token_offsets;     // V + 1 offsets into token_bytes; token i has length
                               // token_offsets[i+1] - token_offsets[i] - 1
    int init_ok;               // 1 when loaded; 0 when the file was missing
} Tokenizer;

static void tokenizer_fail(const char* filename, const char* what, const char* expected) {
    fprintf(stderr, "error: %s: %s; expected %s\n", filename, what, expected);
    exit(1);
}

// Load the decode table from filename. Missing/unopenable file: warning, init_ok = 0.
static void tokenizer_init(Tokenizer* tokenizer, const char* filename) {
    memset(tokenizer, 0, sizeof(*tokenizer));
    FILE* file = fopen(filename, "rb");
    if (file == NULL) {
        fprintf(stderr, "warning: %s: cannot open tokenizer file; samples will print token ids "
                        "(make it with data/tinyshakespeare.py or data/prepare.py)\n", filename);
        return;
    }
    int32_t header[TOKENIZER_HEADER_INTS];
    size_t header_ints = fread(header, sizeof(int32_t), TOKENIZER_HEADER_INTS, file);
    if (ferror(file)) {  // e.g. the path is a directory
        char reason[96];
        snprintf(reason, sizeof(reason), "cannot read (%s)", strerror(errno));
        tokenizer_fail(filename, reason, "a readable tokenizer file");
    }
    if (header_ints != TOKENIZER_HEADER_INTS) {
        tokenizer_fail(filename, "file shorter than the tokenizer header",
                       "a 1024-byte header (256 x int32) then the token table");
    }
    char what[128];
    if (header[0] != TOKENIZER_MAGIC) {
        snprintf(what, sizeof(what), "bad magic number %d", header[0]);
        tokenizer_fail(filename, what,
                       "20240328 (an llm.c tokenizer file, as data/prepare.py writes)");
    }
    if (header[1] != TOKENIZER_VERSION) {
        snprintf(what, sizeof(what), "unsupported tokenizer version %d", header[1]);
        tokenizer_fail(filename, what, "version 2 (with the end-of-text id in the header)");
    }
    if (header[2] <= 0 || header[2] > (1 << 24) || header[3] < 0 || header[3] >= header[2]) {
        snprintf(what, sizeof(what), "vocab size %d, end-of-text id %d", header[2], header[3]);
        tokenizer_fail(filename, what, "1 <= vocab size <= 2^24 and 0 <= end-of-text id < vocab");
    }
    uint32_t vocab_size = (uint32_t)header[2];
    // Each token takes 1 length byte + at most 255 bytes: read the body whole, then walk it.
    size_t body_capacity = (size_t)vocab_size * 256;
    unsigned char* body = (unsigned char*)malloc(body_capacity + 1);
    size_t* offsets = (size_t*)malloc((vocab_size + 1) * sizeof(size_t));
    if (body == NULL || offsets == NULL) {
        tokenizer_fail(filename, "out of memory for the token table", "a smaller vocabulary");
    }
    // +1 so that a file longer than any valid body is seen as having trailing bytes.
    size_t body_bytes = fread(body, 1, body_capacity + 1, file);
    fclose(file);
    // Repack in place: length byte i becomes token i's terminating NUL, which shifts every
    // token left by one byte, so "[n]bytes[n]bytes..." becomes "bytes\0bytes\0...".
    size_t read_at = 0, write_at = 0;
    for (uint32_t i = 0; i < vocab_size; i++) {
        if (read_at >= body_bytes) {
            snprintf(what, sizeof(what), "file ends at token %u of %u (truncated)", i, vocab_size);
            tokenizer_fail(filename, what, "a length byte and the bytes of every token");
        }
        size_t length = body[read_at];
        if (length == 0) {
            snprintf(what, sizeof(what), "token %u has length 0", i);
            tokenizer_fail(filename, what, "token lengths 1..255");
        }
        if (read_at + 1 + length > body_bytes) {
            snprintf(what, sizeof(what), "file ends inside token %u (truncated)", i);
            tokenizer_fail(filename, what, "a length byte and the bytes of every token");
        }
        offsets[i] = write_at;
        memmove(body + write_at, body + read_at + 1, length);
        write_at += length;
        body[write_at++] = '\0';
        read_at += 1 + length;
    }
    offsets[vocab_size] = write_at;
    if (read_at != body_bytes) {
        tokenizer_fail(filename, "trailing bytes after the last token",
                       "exactly vocab-size tokens after the header");
    }
    // Give back the unused part of the worst-case buffer (~12.8 MB for GPT-2, ~0.3 MB used).
    unsigned char* shrunk = (unsigned char*)realloc(body, write_at);
    if (shrunk != NULL) body = shrunk;
    tokenizer->vocab_size = vocab_size;
    tokenizer->eot_token = (uint32_t)header[3];
    tokenizer->token_bytes = (char*)body;
    tokenizer->token_offsets = offsets;
    tokenizer->init_ok = 1;
}

// The raw bytes of one token as a NUL-terminated string (may be part of a UTF-8 character).
// NULL when the tokenizer is unusable or token_id >= vocab size.
static const char* tokenizer_decode(Tokenizer* tokenizer, uint32_t token_id) {
    if (!tokenizer->init_ok || token_id >= tokenizer->vocab_size) {
        return NULL;
    }
    return tokenizer->token_bytes + tokenizer->token_offsets[token_id];
}

// Length of the well-formed UTF-8 character at s[0..n), or 0 if s starts with an ill-formed
// sequence; then *bad_length is the length of its maximal ill-formed prefix (>= 1), the unit
// that becomes one U+FFFD. Well-formed = Unicode 15 Table 3-7: no overlong forms, no
// surrogates (U+D800..DFFF), nothing above U+10FFFF.
static size_t tokenizer_utf8_char_length(const unsigned char* s, size_t n, size_t* bad_length) {
    unsigned char c = s[0];
    size_t length;
    unsigned char second_low = 0x80, second_high = 0xBF;  // allowed range of the 2nd byte
    if (c < 0x80) return 1;
    else if (c >= 0xC2 && c <= 0xDF) length = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        length = 3;
        if (c == 0xE0) second_low = 0xA0;            // overlong
        if (c == 0xED) second_high = 0x9F;           // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        length = 4;
        if (c == 0xF0) second_low = 0x90;            // overlong
        if (c == 0xF4) second_high = 0x8F;           // above U+10FFFF
    } else {
        *bad_length = 1;                             // 0x80..0xC1, 0xF5..0xFF never start one
        return 0;
    }
    for (size_t i = 1; i < length; i++) {
        unsigned char low = (i == 1) ? second_low : 0x80, high = (i == 1) ? second_high : 0xBF;
        if (i >= n || s[i] < low || s[i] > high) {
            *bad_length = i;
            return 0;
        }
    }
    return length;
}

// Decode n tokens into out (capacity cap bytes, always NUL-terminated when cap >= 1) as valid
// UTF-8: the tokens' bytes are joined, then each maximal ill-formed subsequence (W3C/Unicode
// "substitution of maximal subparts") becomes U+FFFD (EF BF BD). Token ids outside the
// vocabulary also become U+FFFD. Output stops at the last whole character that fits.
// Returns the bytes written, excluding the NUL; 0 (and out = "") when the tokenizer is unusable.
static size_t tokenizer_decode_utf8(Tokenizer* tokenizer, const int* tokens, int n, char* out,
                                    size_t cap) {
    static const unsigned char replacement[3] = {0xEF, 0xBF, 0xBD};
    if (cap == 0) return 0;
    out[0] = '\0';
    if (!tokenizer->init_ok || n <= 0) return 0;
    // Join the raw bytes first: a character split across tokens must be seen whole.
    size_t joined_bytes = 0;
    for (int i = 0; i < n; i++) {
        uint32_t id = (uint32_t)tokens[i];
        joined_bytes += (tokens[i] >= 0 && id < tokenizer->vocab_size)
            ? tokenizer->token_offsets[id + 1] - tokenizer->token_offsets[id] - 1
            : sizeof(replacement);
    }
    unsigned char* joined = (unsigned char*)malloc(joined_bytes);
    if (joined == NULL) return 0;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        uint32_t id = (uint32_t)tokens[i];
        if (tokens[i] >= 0 && id < tokenizer->vocab_size) {
            size_t length = tokenizer->token_offsets[id + 1] - tokenizer->token_offsets[id] - 1;
            memcpy(joined + at, tokenizer->token_bytes + tokenizer->token_offsets[id], length);
            at += length;
        } else {
            memcpy(joined + at, replacement, sizeof(replacement));
            at += sizeof(replacement);
        }
    }
    // Copy character by character, replacing ill-formed parts.
    size_t written = 0;
    for (size_t i = 0; i < joined_bytes;) {
        size_t bad_length = 0;
        size_t length = tokenizer_utf8_char_length(joined + i, joined_bytes - i, &bad_length);
        const unsigned char* source = length ? joined + i : replacement;
        size_t out_length = length ? length : sizeof(replacement);
        if (written + out_length + 1 > cap) break;
        memcpy(out + written, source, out_length);
        written += out_length;
        i += length ? length : bad_length;
    }
    out[written] = '\0';
    free(joined);
    return written;
}

static void tokenizer_free(Tokenizer* tokenizer) {
    free(tokenizer->token_bytes);
    free(tokenizer->token_offsets);
    memset(tokenizer, 0, sizeof(*tokenizer));
}

// The data scripts write gpt2_tokenizer.bin beside the shards: the train pattern's directory
// ("." when it has none) joined with that name; a static buffer, valid until the next call.
static const char* tokenizer_path_beside(const char* train_pattern) {
    static char path[4096];
    const char* slash = strrchr(train_pattern, '/');
    int dir_len = slash ? (int)(slash - train_pattern) : 1;
    snprintf(path, sizeof(path), "%.*s/gpt2_tokenizer.bin", dir_len, slash ? train_pattern : ".");
    return path;
}

#endif  // TOKENIZER_H
