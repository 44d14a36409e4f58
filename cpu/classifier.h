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

#endif
