/*
 * encoder.h: token + position embedding, CPU (fp32). Twin of kernels/encoder.cuh.
 * forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]      out (B,T,C), wte (Vp,C), wpe (maxT,C)
 * backward: dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]   (accumulates)
 */
#ifndef CPU_ENCODER_H
#define CPU_ENCODER_H

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

#endif
