/*
 * encoder.h: token + position embedding, CPU (fp32). Twin of kernels/encoder.cuh.
 * forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]      out (B,T,C), wte (Vp,C), wpe (maxT,C)
 * backward: dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]   (accumulates)
 * The trainer runs them over wte's vocab chunks (common/gpt2_config.h), one chunk of rows
 * [row0, row0 + rows) at a time: *_positions for wpe, then *_chunk per chunk. Since a float sum
 * of two terms does not depend on their order, the chunked forward equals encoder_forward bit for
 * bit, and the chunked backward adds each row in the same (b, t) order as encoder_backward.
 */
#ifndef CPU_ENCODER_H
#define CPU_ENCODER_H
#include <string.h>

static void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* token_row = wte + (size_t)inp[b * T + t] * C;
            const float* pos_row = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = token_row[i] + pos_row[i];
        }
    }
}

static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    // dwpe: each t is owned by one thread, so parallel over t is race-free.
    #pragma omp parallel for
    for (int t = 0; t < T; t++) {
        float* dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            for (int i = 0; i < C; i++) dp[i] += d[i];
        }
    }
    // dwte: the same token can appear at many positions, so this scatter stays serial.
    for (int bt = 0; bt < B * T; bt++) {
        float* dw = dwte + (size_t)inp[bt] * C;
        const float* d = dout + (size_t)bt * C;
        for (int i = 0; i < C; i++) dw[i] += d[i];
    }
}

// out[b,t,:] = wpe[t,:]: every position starts from its embedding; the chunks add the tokens'.
static void encoder_forward_positions(float* out, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) memcpy(out + ((size_t)b * T + t) * C, wpe + (size_t)t * C, (size_t)C * sizeof(float));
}

// out[b,t,:] += wte_chunk[inp[b,t] - row0,:] for the tokens in [row0, row0 + rows); wte_chunk (rows, C).
static void encoder_forward_chunk(float* out, const int* inp, const float* wte_chunk, int row0, int rows, int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        int row = inp[bt] - row0;
        if (row < 0 || row >= rows) continue;
        float* o = out + (size_t)bt * C;
        const float* w = wte_chunk + (size_t)row * C;
        for (int i = 0; i < C; i++) o[i] += w[i];
    }
}

// dwpe[t,:] += sum over b of dout[b,t,:] (each t owned by one thread, b in order).
static void encoder_backward_positions(float* dwpe, const float* dout, int B, int T, int C) {
    #pragma omp parallel for
    for (int t = 0; t < T; t++) {
        float* dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            for (int i = 0; i < C; i++) dp[i] += d[i];
        }
    }
}

// dwte_chunk[inp[b,t] - row0,:] += dout[b,t,:] for the tokens in [row0, row0 + rows), serially in
// (b, t) order like encoder_backward (a token can repeat, and the order fixes the rounding).
static void encoder_backward_chunk(float* dwte_chunk, const float* dout, const int* inp, int row0, int rows, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        int row = inp[bt] - row0;
        if (row < 0 || row >= rows) continue;
        float* dw = dwte_chunk + (size_t)row * C;
        const float* d = dout + (size_t)bt * C;
        for (int i = 0; i < C; i++) dw[i] += d[i];
    }
}

#endif
