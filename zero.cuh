/*
 * zero.cuh: the data-parallel engine. It owns the flat parameter buffer, the gradients and the
 * optimizer state, and is the only place collectives are issued. The model asks it for a
 * unit's parameters before using them and tells it when a unit's gradients are final.
 *
 * Current state: single process, ZeRO stage 0 (full params, grads, Adam m/v on one rank).
 * The multi-rank MPI schedule for stages 0-3 (see DESIGN.md "Stages") plugs in behind the same
 * functions: zero_params_unit / zero_params_unit_done (stage 3 all-gather, prefetch, free),
 * zero_grads_unit_ready (all-reduce or reduce-scatter as backward finishes each unit),
 * zero_optimizer_step (wait, global norm from owned slices, AdamW on owned slice, all-gather).
 *
 * Compiles as plain C (CPU build) and under nvcc; CUDA-only parts go inside #ifdef __CUDACC__.
 */
#ifndef ZERO_CUH
#define ZERO_CUH
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/gpt2_config.h"
#include "cpu/adamw.h"
#include "cpu/global_norm.h"

#ifndef ZERO_STAGE
#define ZERO_STAGE 0
#endif

// Per-rank slices are multiples of this many elements (256 bytes of fp32), so every shard
// starts aligned for SIMD on the CPU and for vectorized bf16 loads on the GPU.
#define ZERO_ALIGN 64

typedef struct {
    float beta1, beta2, eps, weight_decay, grad_clip;
} AdamWConfig;

typedef struct {
    const ParamLayout* layout;
    int rank, world_size;
    float* params; // full flat buffer (padded_numel)
    float* grads;  // full flat buffer
    float* m;      // Adam first moment
    float* v;      // Adam second moment
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_working;
} ZeroEngine;

static void* zero_calloc(size_t n, size_t elem, const char* what) {
    void* p = calloc(n, elem);
    if (p == NULL) {
        fprintf(stderr, "error: out of host memory allocating %s (%zu bytes)\n", what, n * elem);
        exit(1);
    }
    return p;
}

static void zero_init(ZeroEngine* z, const ParamLayout* layout, int rank, int world_size) {
    z->layout = layout;
    z->rank = rank;
    z->world_size = world_size;
    size_t n = layout->padded_numel;
    z->params = (float*)zero_calloc(n, sizeof(float), "parameters");
    z->grads = (float*)zero_calloc(n, sizeof(float), "gradients");
    z->m = (float*)zero_calloc(n, sizeof(float), "Adam m");
    z->v = (float*)zero_calloc(n, sizeof(float), "Adam v");
    z->bytes_params = n * sizeof(float);
    z->bytes_grads = n * sizeof(float);
    z->bytes_optimizer = 2 * n * sizeof(float);
    z->bytes_working = 0;
}

static void zero_free(ZeroEngine* z) {
    free(z->params); free(z->grads); free(z->m); free(z->v);
}

// The unit's full parameters (padded_numel elements), valid until zero_params_unit_done.
static float* zero_params_unit(ZeroEngine* z, int unit) { return z->params + z->layout->units[unit].offset; }
static void zero_params_unit_done(ZeroEngine* z, int unit) { (void)z; (void)unit; }

// The unit's full gradient buffer, which backward accumulates into.
static float* zero_grads_unit(ZeroEngine* z, int unit) { return z->grads + z->layout->units[unit].offset; }

// Backward has finished this unit for this micro-step; last_micro_step says whether its
// gradients are now final for the optimizer step.
static void zero_grads_unit_ready(ZeroEngine* z, int unit, int last_micro_step) { (void)z; (void)unit; (void)last_micro_step; }

static void zero_grads_zero(ZeroEngine* z) { memset(z->grads, 0, z->layout->padded_numel * sizeof(float)); }

// Set all parameters from a full flat buffer (init or loaded checkpoint); each rank keeps its part.
static void zero_set_full_params(ZeroEngine* z, const float* full) {
    memcpy(z->params, full, z->layout->padded_numel * sizeof(float));
}

// Gather the full parameters into `full` (padded_numel elements) for a checkpoint.
static void zero_get_full_params(ZeroEngine* z, float* full) {
    memcpy(full, z->params, z->layout->padded_numel * sizeof(float));
}

/*
 * Optimizer step t (from 1) with learning rate lr: global gradient norm, clip coefficient,
 * AdamW with weight decay on 2-D tensors only. Returns the norm before clipping.
 */
static float zero_optimizer_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t) {
    const ParamLayout* layout = z->layout;
    double norm_sq = norm_squared(z->grads, layout->padded_numel);
    float norm = (float)sqrt(norm_sq);
    // Clip coefficient as torch.nn.utils.clip_grad_norm_ computes it: max_norm / (norm + 1e-6), capped at 1.
    float clip_coef = opt->grad_clip > 0.0f ? opt->grad_clip / (norm + 1e-6f) : 1.0f;
    float grad_scale = clip_coef < 1.0f ? clip_coef : 1.0f;
    for (int i = 0; i < layout->num_tensors; i++) {
        const ParamTensor* pt = &layout->tensors[i];
        float wd = pt->ndim == 2 ? opt->weight_decay : 0.0f;
        adamw_update(z->params + pt->offset, z->grads + pt->offset, z->m + pt->offset, z->v + pt->offset,
                     pt->numel, lr, opt->beta1, opt->beta2, opt->eps, wd, grad_scale, t);
    }
    return norm;
}

#endif // ZERO_CUH
