/*
 * classifier.h: fused softmax + cross-entropy + logits gradient, CPU (fp32).
 * Twin of kernels/classifier.cuh.
 * logits (N,Vp), N = B*T rows; only the first V columns are real (padded columns are ignored
 * and get zero gradient). losses (N): -log softmax(logits)[target]. If dlogits_scale != 0, the
 * logits are overwritten in place with dloss/dlogits = (softmax - onehot(target)) * dlogits_scale
 * (the caller passes 1/(B*T*grad_accum_steps) for a mean loss), so no second (N,Vp) buffer exists.
 */
#ifndef CPU_CLASSIFIER_H
#define CPU_CLASSIFIER_H
#include <math.h>

static void fused_classifier(float* logits, float* losses, const int* targets, int N, int V, int Vp,
                             float dlogits_scale) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (size_t)n * Vp;
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++) if (row[i] > maxval) maxval = row[i];
        float sum = 0.0f;
        for (int i = 0; i < V; i++) sum += expf(row[i] - maxval);
        float log_sum = logf(sum);
        int target = targets[n];
        losses[n] = log_sum - (row[target] - maxval);
        if (dlogits_scale != 0.0f) {
            float inv_sum = 1.0f / sum;
            for (int i = 0; i < V; i++) row[i] = expf(row[i] - maxval) * inv_sum * dlogits_scale;
            row[target] -= dlogits_scale;
            for (int i = V; i < Vp; i++) row[i] = 0.0f;
        }
    }
}

/*
 * The same loss and gradient over vocab chunks, so that the (N,Vp) logits never exist at once
 * (the trainer's LM head: common/gpt2_config.h splits wte by vocab rows). Each chunk's logits
 * (N, cols) cover vocab columns [col0, col0 + cols); columns >= V are padding and ignored.
 * Forward folds every chunk into each row's running max and sum of exponentials, the online
 * softmax normalizer (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax",
 * Algorithm 3): max' = max(max, chunk max), sum' = sum e^(max - max') + sum_j e^(x_j - max'),
 * and picks up the target's logit; classifier_losses then gives -log softmax[target]
 * = log(sum) + max - x_target. Backward recomputes each chunk's logits (the caller) and turns them
 * into dlogits = (e^(x - max) / sum - onehot(target)) * dlogits_scale with the final statistics.
 */
static void classifier_stats_init(float* row_max, float* row_sum, float* target_logit, int N) {
    for (int n = 0; n < N; n++) { row_max[n] = -INFINITY; row_sum[n] = 0.0f; target_logit[n] = 0.0f; }
}

static void classifier_forward_chunk(const float* logits, float* row_max, float* row_sum, float* target_logit,
                                     const int* targets, int N, int col0, int cols, int V) {
    int real = V - col0 < cols ? V - col0 : cols; // columns of this chunk below V
    if (real <= 0) return;
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* row = logits + (size_t)n * cols;
        float chunk_max = -INFINITY;
        for (int i = 0; i < real; i++) if (row[i] > chunk_max) chunk_max = row[i];
        float new_max = chunk_max > row_max[n] ? chunk_max : row_max[n];
        float sum = 0.0f;
        for (int i = 0; i < real; i++) sum += expf(row[i] - new_max);
        row_sum[n] = row_sum[n] * expf(row_max[n] - new_max) + sum; // e^(-inf) = 0 on the first chunk
        row_max[n] = new_max;
        int t = targets[n] - col0;
        if (t >= 0 && t < real) target_logit[n] = row[t];
    }
}

static void classifier_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int N) {
    for (int n = 0; n < N; n++) losses[n] = logf(row_sum[n]) - (target_logit[n] - row_max[n]);
}

static void classifier_backward_chunk(float* logits, const float* row_max, const float* row_sum, const int* targets,
                                      int N, int col0, int cols, int V, float dlogits_scale) {
    int real = V - col0 < cols ? V - col0 : cols;
    if (real < 0) real = 0;
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (size_t)n * cols;
        float scale = dlogits_scale / row_sum[n];
        for (int i = 0; i < real; i++) row[i] = expf(row[i] - row_max[n]) * scale;
        for (int i = real; i < cols; i++) row[i] = 0.0f;
        int t = targets[n] - col0;
        if (t >= 0 && t < real) row[t] -= dlogits_scale;
    }
}

#endif
