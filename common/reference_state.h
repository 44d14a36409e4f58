/*
 * reference_state.h: loads the PyTorch reference state written by dev/make_reference.py
 * (dev/reference/gpt2_ref_state.bin), which test_gpt2 and test_gpt2cu compare against.
 * Header-only host C. The matching initial weights are dev/reference/gpt2_ref_model.bin
 * (llm.c model-file format, fp32).
 *
 * File format (little-endian; all counts in elements; full description in dev/reference/FORMAT.md):
 *   header, 256 x int32:
 *     [0] magic 20241107      [1] version 1        [2] B            [3] T
 *     [4] V                   [5] Vp               [6] L            [7] NH
 *     [8] C                   [9] maxT             [10] num_steps   [11] num_parameters
 *     [12] seed               [13..31] 0
 *     [32..39] float32 bit patterns: lr, beta1, beta2, eps, weight_decay, grad_clip,
 *              clip_eps (clip coefficient min(1, grad_clip / (norm + clip_eps))), layernorm_eps
 *     [40..255] 0
 *   body, in this order:
 *     inputs           B*T int32, tokens in [0, V)
 *     targets          B*T int32, tokens in [0, V)
 *     logits           B*T*V float32, (B, T, V): only the real vocabulary columns
 *     loss             1 float32, mean cross-entropy over all B*T positions
 *     grads            num_parameters float32: d loss / d params at the initial weights, llm.c
 *                      tensor order and shapes as in the model file (wte rows V..Vp-1 are 0)
 *     step_losses      num_steps float32: loss before update s (step_losses[0] == loss)
 *     step_grad_norms  num_steps float32: global grad norm before clipping, same steps
 *     final_params     num_parameters float32: parameters after num_steps AdamW updates, llm.c order
 *   num_parameters = Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C; the file has no bytes after this.
 */
#ifndef REFERENCE_STATE_H
#define REFERENCE_STATE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFERENCE_STATE_MAGIC 20241107
#define REFERENCE_STATE_VERSION 1
#define REFERENCE_STATE_HEADER_INTS 256
#define REFERENCE_STATE_FLOAT_SLOT 32 // first header slot holding float32 hyperparameters

typedef struct {
    int B, T, num_steps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int* inputs;            // (B, T)
    int* targets;           // (B, T)
    float* logits;          // (B, T, V)
    float loss;
    float* grads;           // llm.c order, num_parameters
    float* step_losses;     // num_steps
    float* step_grad_norms; // num_steps, before clipping
    float* final_params;    // llm.c order, num_parameters
    size_t num_parameters;
    int V, Vp, L, NH, C, maxT;
    int seed;               // weights from seed, tokens from seed + 1 (see dev/make_reference.py)
    float clip_eps;         // clip coefficient min(1, grad_clip / (norm + clip_eps))
    float layernorm_eps;
} ReferenceState;

// Parameter count of a GPT-2 with this config (llm.c's count: wte padded to Vp rows).
static size_t reference_state_count_parameters(size_t Vp, size_t maxT, size_t L, size_t C) {
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
}

// Reads count items of size bytes or exits with the one-line error naming the section.
static void reference_state_read(void* dst, size_t size, size_t count, FILE* f, const char* filename,
                                 const char* section) {
    if (fread(dst, size, count, f) != count) {
        fprintf(stderr, "error: %s: file ends inside %s; expected %zu bytes there (file truncated?)\n",
                filename, section, size * count);
        exit(1);
    }
}

static void* reference_state_alloc(size_t bytes, const char* filename) {
    void* p = malloc(bytes > 0 ? bytes : 1);
    if (!p) {
        fprintf(stderr, "error: %s: cannot allocate %zu bytes of host memory; expected a smaller state\n",
                filename, bytes);
        exit(1);
    }
    return p;
}

/*
 * Load the whole reference state from filename into rs (arrays malloc'ed; free with
 * reference_state_free). Checks magic, version, config sanity, parameter count, token range
 * and the exact file size; on any problem prints one line
 * `error: <file>: <what>; expected <what>` and exits with status 1.
 */
static void reference_state_load(ReferenceState* rs, const char* filename) {
    memset(rs, 0, sizeof(*rs));
    FILE* f = fopen(filename, "rb");
    if (!f) {
        fprintf(stderr, "error: %s: cannot open; expected the reference state (python dev/make_reference.py)\n",
                filename);
        exit(1);
    }
    int32_t header[REFERENCE_STATE_HEADER_INTS];
    reference_state_read(header, sizeof(int32_t), REFERENCE_STATE_HEADER_INTS, f, filename, "the header");
    if (header[0] != REFERENCE_STATE_MAGIC) {
        fprintf(stderr, "error: %s: bad magic %d; expected %d (a reference state from dev/make_reference.py)\n",
                filename, header[0], REFERENCE_STATE_MAGIC);
        exit(1);
    }
    if (header[1] != REFERENCE_STATE_VERSION) {
        fprintf(stderr, "error: %s: unsupported version %d; expected %d\n", filename, header[1],
                REFERENCE_STATE_VERSION);
        exit(1);
    }
    rs->B = header[2]; rs->T = header[3]; rs->V = header[4]; rs->Vp = header[5];
    rs->L = header[6]; rs->NH = header[7]; rs->C = header[8]; rs->maxT = header[9];
    rs->num_steps = header[10];
    rs->seed = header[12];
    // Bounds keep every product below in range of size_t and int indexing.
    int sane = rs->B > 0 && rs->B <= 65536 && rs->T > 0 && rs->T <= rs->maxT && rs->maxT <= 65536 &&
               rs->V > 0 && rs->V <= rs->Vp && rs->Vp <= (1 << 24) && rs->L > 0 && rs->L <= 1024 &&
               rs->NH > 0 && rs->C > 0 && rs->C <= 65536 && rs->C % rs->NH == 0 &&
               rs->num_steps >= 0 && rs->num_steps <= 1000000;
    if (!sane) {
        fprintf(stderr, "error: %s: inconsistent config B=%d T=%d maxT=%d V=%d Vp=%d L=%d NH=%d C=%d steps=%d; "
                "expected positive sizes with T <= maxT, V <= Vp, NH dividing C\n", filename, rs->B, rs->T,
                rs->maxT, rs->V, rs->Vp, rs->L, rs->NH, rs->C, rs->num_steps);
        exit(1);
    }
    rs->num_parameters = reference_state_count_parameters((size_t)rs->Vp, (size_t)rs->maxT, (size_t)rs->L,
                                                          (size_t)rs->C);
    if ((size_t)(uint32_t)header[11] != rs->num_parameters) {
        fprintf(stderr, "error: %s: header says %d parameters; expected %zu for its config\n", filename,
                header[11], rs->num_parameters);
        exit(1);
    }
    float hyper[8];
    memcpy(hyper, &header[REFERENCE_STATE_FLOAT_SLOT], sizeof(hyper));
    rs->lr = hyper[0]; rs->beta1 = hyper[1]; rs->beta2 = hyper[2]; rs->eps = hyper[3];
    rs->weight_decay = hyper[4]; rs->grad_clip = hyper[5]; rs->clip_eps = hyper[6]; rs->layernorm_eps = hyper[7];

    size_t BT = (size_t)rs->B * (size_t)rs->T, S = (size_t)rs->num_steps, P = rs->num_parameters;
    size_t expected_bytes = sizeof(header) + sizeof(int32_t) * 2 * BT +
                            sizeof(float) * (BT * (size_t)rs->V + 1 + P + 2 * S + P);
    rs->inputs = (int*)reference_state_alloc(BT * sizeof(int), filename);
    rs->targets = (int*)reference_state_alloc(BT * sizeof(int), filename);
    rs->logits = (float*)reference_state_alloc(BT * (size_t)rs->V * sizeof(float), filename);
    rs->grads = (float*)reference_state_alloc(P * sizeof(float), filename);
    rs->step_losses = (float*)reference_state_alloc(S * sizeof(float), filename);
    rs->step_grad_norms = (float*)reference_state_alloc(S * sizeof(float), filename);
    rs->final_params = (float*)reference_state_alloc(P * sizeof(float), filename);
    reference_state_read(rs->inputs, sizeof(int), BT, f, filename, "inputs");
    reference_state_read(rs->targets, sizeof(int), BT, f, filename, "targets");
    reference_state_read(rs->logits, sizeof(float), BT * (size_t)rs->V, f, filename, "logits");
    reference_state_read(&rs->loss, sizeof(float), 1, f, filename, "loss");
    reference_state_read(rs->grads, sizeof(float), P, f, filename, "grads");
    reference_state_read(rs->step_losses, sizeof(float), S, f, filename, "step_losses");
    reference_state_read(rs->step_grad_norms, sizeof(float), S, f, filename, "step_grad_norms");
    reference_state_read(rs->final_params, sizeof(float), P, f, filename, "final_params");
    if (fgetc(f) != EOF) {
        fprintf(stderr, "error: %s: extra bytes after final_params; expected exactly %zu bytes for its header\n",
                filename, expected_bytes);
        exit(1);
    }
    fclose(f);
    for (size_t i = 0; i < BT; i++) {
        if (rs->inputs[i] < 0 || rs->inputs[i] >= rs->V || rs->targets[i] < 0 || rs->targets[i] >= rs->V) {
            fprintf(stderr, "error: %s: token %zu out of range (input %d, target %d); expected [0, %d)\n",
                    filename, i, rs->inputs[i], rs->targets[i], rs->V);
            exit(1);
        }
    }
}

static void reference_state_free(ReferenceState* rs) {
    free(rs->inputs);
    free(rs->targets);
    free(rs->logits);
    free(rs->grads);
    free(rs->step_losses);
    free(rs->step_grad_norms);
    free(rs->final_params);
    memset(rs, 0, sizeof(*rs));
}

#endif // REFERENCE_STATE_H
