/*
 * adamw.h: AdamW update over a contiguous slice, CPU (fp32). Twin of kernels/adamw.cuh.
 * For i < n: g = grads[i] * grad_scale (grad_scale folds in clipping);
 *   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
 *   params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params)
 * with mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t), t = step counting from 1.
 * Source: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Algorithm 2.
 * The caller passes weight_decay = 0 for the slices that are not 2-D weights.
 */
#ifndef CPU_ADAMW_H
#define CPU_ADAMW_H
#include <math.h>
#include <stddef.h>

static void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    float bias1 = 1.0f - powf(beta1, (float)t);
    float bias2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bias1, vhat = vi / bias2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
    }
}

// The gradient scale of a step: clipping as torch.nn.utils.clip_grad_norm_ computes it,
// min(1, grad_clip / (norm + 1e-6)) (grad_clip 0: none), times inv_world, where norm =
// sqrt(norm_sq_sum) * inv_world (norm_sq_sum: squared norm of the gradient summed over ranks).
// Twin of adamw_grad_scale_kernel (kernels/adamw.cuh).
static float adamw_grad_scale(double norm_sq_sum, float grad_clip, float inv_world) {
    float norm = (float)sqrt(norm_sq_sum * (double)inv_world * (double)inv_world);
    float coef = grad_clip > 0.0f ? grad_clip / (norm + 1e-6f) : 1.0f;
    return (coef < 1.0f ? coef : 1.0f) * inv_world;
}

#endif
