/*
 * init.h: GPT-2 initialization of one unit of the flat parameter buffer, fp32.
 * Weights ~ N(0, 0.02); the two residual projections (attprojw, fcprojw) ~ N(0, 0.02/sqrt(2L))
 * (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", sec. 2.3);
 * biases 0; LayerNorm weights 1, biases 0; the padded rows V..Vp-1 of wte are 0.
 * Every tensor draws from its own stream seeded by (seed, llm.c file offset), so a unit can be
 * initialized alone (ZeRO stage 3 ranks never hold the full model) with identical values, however
 * wte is split into vocab chunks.
 */
#ifndef COMMON_INIT_H
#define COMMON_INIT_H
#include <math.h>
#include "common/gpt2_config.h"
#include "common/rng.h"

// Fill unit u (unit_buf points at its first element, padded_numel elements) with GPT-2 init.
static void gpt2_init_unit(const ParamLayout* layout, int u, float* unit_buf, uint64_t seed) {
    const ParamUnit* unit = &layout->units[u];
    const GPT2Config* cfg = &layout->config;
    memset(unit_buf, 0, unit->padded_numel * sizeof(float));
    float residual_std = 0.02f / sqrtf(2.0f * cfg->num_layers);
    for (int i = 0; i < unit->num_tensors; i++) {
        const ParamTensor* t = &layout->tensors[unit->first_tensor + i];
        float* p = unit_buf + t->unit_offset;
        Rng rng;
        rng_seed(&rng, seed * 0x100000001B3ull + t->file_offset);
        switch (t->kind) {
        case P_LN1W: case P_LN2W: case P_LNFW:
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
            break;
        case P_WTE: { // one vocab chunk: rows [row0, row0 + shape[0]); the padded rows V..Vp-1 stay 0
            // wte draws from one stream over all its rows (seeded at its first row): a chunk skips
            // the draws of the rows before it (2 per value), so every chunking draws the same values.
            size_t C = (size_t)cfg->channels, V = (size_t)cfg->vocab_size;
            rng_seed(&rng, seed * 0x100000001B3ull + t->file_offset - t->row0 * C);
            for (size_t j = 0; j < 2 * t->row0 * C; j++) rng_next(&rng);
            size_t rows = t->row0 >= V ? 0 : V - t->row0 < t->shape[0] ? V - t->row0 : t->shape[0];
            for (size_t j = 0; j < rows * C; j++) p[j] = 0.02f * rng_normal(&rng);
            break;
        }
        case P_WPE: case P_QKVW: case P_FCW:
            for (size_t j = 0; j < t->numel; j++) p[j] = 0.02f * rng_normal(&rng);
            break;
        case P_ATTPROJW: case P_FCPROJW:
            for (size_t j = 0; j < t->numel; j++) p[j] = residual_std * rng_normal(&rng);
            break;
        default: // biases
            break;
        }
    }
}

#endif
