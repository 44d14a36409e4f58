/*
 * model/gpt2_cpu.h: GPT-2 in fp32 on the CPU: its activations, its construction (gpt2_build),
 * forward and backward, making the ZeRO engine's calls. Included by train_gpt2.c (the CPU
 * trainer) after zero.cuh and train/model_source.h, which it uses.
 *
 * The model is GPT-2 exactly (Radford et al. 2019): learned position embeddings, pre-LayerNorm
 * blocks of causal multi-head attention and a GELU MLP with residuals, a final LayerNorm and an
 * LM head tied to wte, over a vocabulary padded from V to Vp (padded logits ignored).
 * Parameters, gradients and optimizer state live in one flat buffer owned by the ZeRO engine
 * (zero.cuh), laid out by unit (common/gpt2_config.h). Forward asks the engine for each unit's
 * parameters (zero_params_unit, zero_params_prefetch, zero_params_unit_done); backward tells it
 * when each unit's gradients are final (zero_grads_unit_ready), which is where the engine issues
 * that unit's collective. The ops are cpu/ (one op family per file, forward and backward side by
 * side); the GPU model (model/gpt2_gpu.cuh) makes the same calls in the same places.
 * Next: zero/engine_cpu.h (what each call does; zero_grads_unit_ready starts the collective), then
 * train_gpt2.c's gpt2_train_step (the micro-steps, zero_optimizer_step: zero/optimizer_cpu.h).
 *
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * Errors: out of memory or T above the model's max_seq_len end the process with one line.
 */
#ifndef MODEL_GPT2_CPU_H
#define MODEL_GPT2_CPU_H
#ifndef TRAIN_MODEL_SOURCE_H
#error "include zero.cuh and train/model_source.h before model/gpt2_cpu.h"
#endif

#include "cpu/attention.h"
#include "cpu/classifier.h"
#include "cpu/encoder.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/residual.h"

// ----------------------------------------------------------------------------
// Activations: everything forward keeps for backward, sized for (B, T).

typedef struct {
    float* encoded;   // (B,T,C)
    float* ln1;       // (L,B,T,C)
    float* ln1_mean;  // (L,B,T)
    float* ln1_rstd;  // (L,B,T)
    float* qkv;       // (L,B,T,3C)
    float* atty;      // (L,B,T,C)
    float* att;       // (L,B,NH,T,T) softmax probabilities
    float* attproj;   // (L,B,T,C)
    float* residual2; // (L,B,T,C)
    float* ln2;       // (L,B,T,C)
    float* ln2_mean;  // (L,B,T)
    float* ln2_rstd;  // (L,B,T)
    float* fch;       // (L,B,T,4C)
    float* fch_gelu;  // (L,B,T,4C)
    float* fcproj;    // (L,B,T,C)
    float* residual3; // (L,B,T,C)
    float* lnf;       // (B,T,C)
    float* lnf_mean;  // (B,T)
    float* lnf_rstd;  // (B,T)
    float* logits;    // (B,T,R) one vocab chunk's logits (R = the largest chunk's rows); dlogits in backward
    float* row_max;   // (B,T) online softmax over the chunks: running max of each row's logits,
    float* row_sum;   // (B,T) the sum of exp(logit - row_max),
    float* target_logit; // (B,T) and the target's logit (cpu/classifier.h)
    float* losses;    // (B,T)
    float* logits_last; // (B,Vp) sampling: the logits of each row's last position
} Activations;

// Backward scratch, reused layer by layer (only one layer's activation grads live at a time).
typedef struct {
    float* dresidual; // (B,T,C) gradient of the residual stream at the current depth
    float* dln;       // (B,T,C) gradient of a LayerNorm output
    float* datty;     // (B,T,C)
    float* dqkv;      // (B,T,3C)
    float* dfch;      // (B,T,4C)
    float* dfch_gelu; // (B,T,4C)
} BackwardScratch;

typedef struct {
    GPT2Config config;
    ParamLayout layout;
    ZeroEngine zero;
    int B, T;          // activation capacity
    Activations acts;
    BackwardScratch scratch;
    float* act_memory;
    size_t act_bytes;
    int* inputs;       // (B,T) copy of the last forward's inputs, for encoder backward
    int* token_rows;   // (B,T) scratch: the distinct tokens of a micro-batch, sorted (wte rows the encoder touches)
    size_t wte_rows_max; // R: rows of the largest wte vocab chunk
    float mean_loss;   // of the last forward with targets
    int backward_follows; // set by the training step: ZeRO-3 prefetches wte's first chunk for backward
} GPT2;

static float* carve(float** cursor, size_t n) { float* p = *cursor; *cursor += n; return p; }

// Floats of each activation and scratch buffer for (B, T), in the order gpt2_alloc_activations
// carves them; returns their count. The planner's activation bytes are their sum (plan/plan_gpt2.c).
// The logits are one vocab chunk's, B x T x R (R = wte_chunk_rows_max: the LM head walks wte's
// chunks, never holding all B x T x Vp), and sampling's B x Vp.
#define GPT2_ACTIVATION_BUFFERS 31
static int gpt2_activation_sizes(const ParamLayout* layout, int B, int T, size_t sizes[GPT2_ACTIVATION_BUFFERS]) {
    const GPT2Config* c = &layout->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, R = wte_chunk_rows_max(layout);
    size_t s[GPT2_ACTIVATION_BUFFERS] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C, L * B * NH * (size_t)T * T,
        L * BT * C, L * BT * C, L * BT * C, L * BT, L * BT, L * BT * 4 * C, L * BT * 4 * C, L * BT * C,
        L * BT * C, BT * C, BT, BT, BT * R, BT, BT, BT, BT, (size_t)B * Vp,
        BT * C, BT * C, BT * C, BT * 3 * C, BT * 4 * C, BT * 4 * C,
    };
    memcpy(sizes, s, sizeof(s));
    return GPT2_ACTIVATION_BUFFERS;
}

static void gpt2_alloc_activations(GPT2* model, int B, int T) {
    size_t sizes[GPT2_ACTIVATION_BUFFERS], BT = (size_t)B * T;
    int n = gpt2_activation_sizes(&model->layout, B, T, sizes);
    model->wte_rows_max = wte_chunk_rows_max(&model->layout);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    model->act_memory = (float*)zero_calloc(total, sizeof(float), "activations");
    model->act_bytes = total * sizeof(float);
    float* cur = model->act_memory;
    Activations* a = &model->acts;
    float** slots[] = {&a->encoded, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                       &a->attproj, &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
                       &a->fcproj, &a->residual3, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->row_max,
                       &a->row_sum, &a->target_logit, &a->losses, &a->logits_last,
                       &model->scratch.dresidual, &model->scratch.dln, &model->scratch.datty,
                       &model->scratch.dqkv, &model->scratch.dfch, &model->scratch.dfch_gelu};
    for (int i = 0; i < n; i++) *slots[i] = carve(&cur, sizes[i]);
    model->inputs = (int*)zero_calloc(BT, sizeof(int), "inputs");
    model->token_rows = (int*)zero_calloc(BT, sizeof(int), "token rows");
    zero_reserve_kept_rows(&model->zero, BT, T, model->config.channels); // the encoder's rows of wte's gradient (and wpe's T)
    model->B = B;
    model->T = T;
}

/*
 * Build the model for `init` (an llm.c model file or a depth descriptor dN), B x T activations,
 * and world_size ranks, its state placed as `offload` says (NULL: in RAM). Parameters are initialized (or loaded) unit by unit and handed to the
 * engine, so no rank ever needs more than one unit of scratch beyond what its stage keeps.
 */
static void gpt2_build(GPT2* model, const char* init, int B, int T, uint64_t seed, int rank, int world_size,
                       const ZeroOffloadArgs* offload) {
    // A depth, a model file, or the resume checkpoint (read by rank 0 and broadcast): train/model_source.h.
    int from_file = model_source_config_for(init, T, &model->config);
    param_layout_build(&model->layout, &model->config, world_size, ZERO_ALIGN);
    zero_init_placed(&model->zero, &model->layout, rank, world_size, offload); // offload NULL: all in RAM
    model_source_params_to_engine(&model->zero, &model->layout, init, from_file, seed); // unit by unit
    model->backward_follows = 0;
    gpt2_alloc_activations(model, B, T);
}

static void gpt2_free(GPT2* model) {
    zero_free(&model->zero);
    param_layout_free(&model->layout);
    free(model->act_memory);
    free(model->inputs);
    free(model->token_rows);
}

// ----------------------------------------------------------------------------
// Forward and backward

/*
 * Forward over inputs (B,T) (B <= capacity, T <= capacity). With targets (B,T), computes the
 * per-position losses and their mean (model->mean_loss); with targets == NULL, computes only the
 * logits of the last position of each row (for sampling), into logits_last row b (B, Vp).
 */
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    Activations* a = &model->acts;
    ZeroEngine* z = &model->zero;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;
    memcpy(model->inputs, inputs, (size_t)BT * sizeof(int));
    zero_pp_pass(z, 0); // ZeRO++: the gathers below serve forward

    // Each unit: ask the engine for its parameters, and let it prefetch the next one meanwhile
    // (ZeRO-3 all-gathers; a no-op at stages 0-2). The encoder walks wte's vocab chunks: the
    // first unit brings wpe, from which every position starts, and each chunk adds its tokens' rows.
    int K = layout->num_wte_units;
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        zero_trace_compute(z, ZERO_TRACE_FORWARD, wte_unit(layout, k)); // -tr: each unit's span (zero/trace/trace.h)
        float* emb = zero_params_unit(z, wte_unit(layout, k));
        zero_params_prefetch(z, k + 1 < K ? wte_unit(layout, k + 1) : UNIT_LAYER(0));
        if (k == 0) encoder_forward_positions(a->encoded, emb + wpe_offset, B, T, C);
        encoder_forward_chunk(a->encoded, inputs, emb, (int)piece->row0, (int)piece->shape[0], B, T, C);
        zero_params_unit_done(z, wte_unit(layout, k));
    }

    for (int l = 0; l < L; l++) {
        zero_trace_compute(z, ZERO_TRACE_FORWARD, UNIT_LAYER(l));
        LayerTensors p = layer_tensors(layout, l, zero_params_unit(z, UNIT_LAYER(l)));
        zero_params_prefetch(z, l + 1 < L ? UNIT_LAYER(l + 1) : UNIT_FINAL(c));
        size_t o = (size_t)l * BT;
        float* resid_in = l == 0 ? a->encoded : a->residual3 + (o - BT) * C;
        layernorm_forward(a->ln1 + o * C, a->ln1_mean + o, a->ln1_rstd + o, resid_in, p.ln1w, p.ln1b, BT, C);
        matmul_forward(a->qkv + o * 3 * C, a->ln1 + o * C, p.qkvw, p.qkvb, BT, C, 3 * C);
        attention_forward(a->atty + o * C, a->att + o * NH * T, a->qkv + o * 3 * C, B, T, C, NH);
        matmul_forward(a->attproj + o * C, a->atty + o * C, p.attprojw, p.attprojb, BT, C, C);
        residual_forward(a->residual2 + o * C, resid_in, a->attproj + o * C, (size_t)BT * C);
        layernorm_forward(a->ln2 + o * C, a->ln2_mean + o, a->ln2_rstd + o, a->residual2 + o * C, p.ln2w, p.ln2b, BT, C);
        matmul_forward(a->fch + o * 4 * C, a->ln2 + o * C, p.fcw, p.fcb, BT, C, 4 * C);
        gelu_forward(a->fch_gelu + o * 4 * C, a->fch + o * 4 * C, (size_t)BT * 4 * C);
        matmul_forward(a->fcproj + o * C, a->fch_gelu + o * 4 * C, p.fcprojw, p.fcprojb, BT, 4 * C, C);
        residual_forward(a->residual3 + o * C, a->residual2 + o * C, a->fcproj + o * C, (size_t)BT * C);
        zero_params_unit_done(z, UNIT_LAYER(l));
    }

    zero_trace_compute(z, ZERO_TRACE_FORWARD, UNIT_FINAL(c));
    float* final_unit = zero_params_unit(z, UNIT_FINAL(c));
    zero_params_prefetch(z, wte_unit(layout, 0)); // for the LM head
    float* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last_residual, final_unit, final_unit + C, BT, C);
    zero_params_unit_done(z, UNIT_FINAL(c));

    // LM head, tied to wte, one vocab chunk at a time (ZeRO-3 gathers each chunk again): the
    // chunk's logits (BT, rows) go into each row's online softmax statistics, so the (BT, Vp)
    // logits never exist at once; backward recomputes them chunk by chunk.
    if (targets != NULL) classifier_stats_init(a->row_max, a->row_sum, a->target_logit, BT);
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        int row0 = (int)piece->row0, rows = (int)piece->shape[0];
        zero_trace_compute(z, ZERO_TRACE_FORWARD, zero_trace_lm_head(k));
        float* wte = zero_params_unit(z, wte_unit(layout, k));
        int next = k + 1 < K ? wte_unit(layout, k + 1) : targets != NULL && model->backward_follows ? wte_unit(layout, 0) : -1;
        if (k + 1 == K && next >= 0) zero_pp_pass(z, 1); // ZeRO++: this prefetch serves backward's LM head
        zero_params_prefetch(z, next);
        if (targets != NULL) {
            matmul_forward(a->logits, a->lnf, wte, NULL, BT, C, rows);
            classifier_forward_chunk(a->logits, a->row_max, a->row_sum, a->target_logit, targets, BT, row0, rows, V);
        } else {
            for (int b = 0; b < B; b++) { // sampling: each row's last position only
                matmul_forward(a->logits, a->lnf + ((size_t)b * T + T - 1) * C, wte, NULL, 1, C, rows);
                memcpy(a->logits_last + (size_t)b * Vp + row0, a->logits, (size_t)rows * sizeof(float));
            }
        }
        zero_params_unit_done(z, wte_unit(layout, k));
    }
    if (targets != NULL) {
        classifier_losses(a->losses, a->row_max, a->row_sum, a->target_logit, BT);
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += a->losses[i];
        model->mean_loss = (float)(sum / BT);
    } else {
        model->mean_loss = -1.0f;
    }
}

// The full logits (B,T,Vp) of the last forward's final LayerNorm output, chunk by chunk (for
// tests; training never holds them). Every rank calls it (ZeRO-3 gathers each chunk).
static void gpt2_full_logits(GPT2* model, float* out, int B, int T) {
    const ParamLayout* layout = &model->layout;
    int C = model->config.channels, Vp = model->config.padded_vocab_size, BT = B * T;
    for (int k = 0; k < layout->num_wte_units; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        int rows = (int)piece->shape[0];
        float* wte = zero_params_unit(&model->zero, wte_unit(layout, k));
        matmul_forward(model->acts.logits, model->acts.lnf, wte, NULL, BT, C, rows);
        for (int bt = 0; bt < BT; bt++)
            memcpy(out + (size_t)bt * Vp + piece->row0, model->acts.logits + (size_t)bt * rows, (size_t)rows * sizeof(float));
        zero_params_unit_done(&model->zero, wte_unit(layout, k));
    }
}

// The distinct tokens of inputs (n of them), sorted, into rows; returns how many.
static int compare_ints(const void* a, const void* b) { int x = *(const int*)a, y = *(const int*)b; return (x > y) - (x < y); }
static int distinct_tokens(int* rows, const int* inputs, int n) {
    memcpy(rows, inputs, (size_t)n * sizeof(int));
    qsort(rows, (size_t)n, sizeof(int), compare_ints);
    int count = 0;
    for (int i = 0; i < n; i++) if (count == 0 || rows[i] != rows[count - 1]) rows[count++] = rows[i];
    return count;
}

/*
 * Backward of the last forward (which must have had targets), accumulating into the engine's
 * gradient buffers. dloss_scale = 1/(B*T*grad_accum_steps): the gradient of the mean loss over
 * the whole (per-rank) batch. Each unit is handed to the engine as soon as its gradients are
 * complete for this micro-step, in reverse order: final, layers L-1..0, embedding.
 */
static void gpt2_backward(GPT2* model, const int* targets, int B, int T, float dloss_scale, int last_micro_step) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size;
    int BT = B * T;
    Activations* a = &model->acts;
    BackwardScratch* s = &model->scratch;
    ZeroEngine* z = &model->zero;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;

    // LM head, one vocab chunk at a time: recompute the chunk's logits, turn them into dlogits
    // with forward's softmax statistics, dlnf += dlogits wte_k and dwte_k += dlogits^T lnf. The
    // engine reduces dwte_k's LM-head part at once except the rows of this micro-batch's tokens,
    // which the encoder adds to at the end (zero_grads_unit_partly_ready; stages 0, 1 on the last
    // micro-step start the chunk's reduction here too, zero/tied_rows/tied_rows_cpu.h).
    int K = layout->num_wte_units;
    int num_tokens = distinct_tokens(model->token_rows, model->inputs, BT), token = 0;
    zero_pp_pass(z, 1); // ZeRO++: the gathers from here on serve backward (forward switched before its last prefetch)
    model->backward_follows = 0;
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        int row0 = (int)piece->row0, rows = (int)piece->shape[0];
        zero_trace_compute(z, ZERO_TRACE_BACKWARD, zero_trace_lm_head(k));
        float* wte = zero_params_unit(z, wte_unit(layout, k));
        zero_params_prefetch(z, k + 1 < K ? wte_unit(layout, k + 1) : UNIT_FINAL(c));
        float* dwte = zero_grads_unit(z, wte_unit(layout, k));
        matmul_forward(a->logits, a->lnf, wte, NULL, BT, C, rows);
        classifier_backward_chunk(a->logits, a->row_max, a->row_sum, targets, BT, row0, rows, V, dloss_scale);
        matmul_backward_ex(s->dln, dwte, NULL, a->logits, a->lnf, wte, BT, C, rows, k > 0); // the first chunk writes dlnf
        zero_params_unit_done(z, wte_unit(layout, k));
        int first = token; // this chunk's tokens, as rows inside the chunk
        while (token < num_tokens && model->token_rows[token] < row0 + rows) model->token_rows[token++] -= row0;
        zero_grads_unit_partly_ready(z, wte_unit(layout, k), model->token_rows + first, token - first, C, last_micro_step);
    }

    zero_trace_compute(z, ZERO_TRACE_BACKWARD, UNIT_FINAL(c));
    float* final_unit = zero_params_unit(z, UNIT_FINAL(c));
    zero_params_prefetch(z, UNIT_LAYER(L - 1));
    float* dfinal = zero_grads_unit(z, UNIT_FINAL(c));
    float* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    memset(s->dresidual, 0, (size_t)BT * C * sizeof(float));
    layernorm_backward(s->dresidual, dfinal, dfinal + C, s->dln, last_residual, final_unit, a->lnf_mean, a->lnf_rstd, BT, C);
    zero_params_unit_done(z, UNIT_FINAL(c));
    zero_grads_unit_ready(z, UNIT_FINAL(c), last_micro_step);

    for (int l = L - 1; l >= 0; l--) {
        zero_trace_compute(z, ZERO_TRACE_BACKWARD, UNIT_LAYER(l));
        LayerTensors p = layer_tensors(layout, l, zero_params_unit(z, UNIT_LAYER(l)));
        if (l > 0) zero_params_prefetch(z, UNIT_LAYER(l - 1));
        LayerTensors g = layer_tensors(layout, l, zero_grads_unit(z, UNIT_LAYER(l)));
        size_t o = (size_t)l * BT;
        float* resid_in = l == 0 ? a->encoded : a->residual3 + (o - BT) * C;
        // s->dresidual holds dL/d residual3[l]; the residual add passes it to both branches.
        // Each scratch buffer is overwritten by the op that produces it (no zeroing);
        // layernorm_backward adds its input gradient into s->dresidual (the residual path).
        matmul_backward_ex(s->dfch_gelu, g.fcprojw, g.fcprojb, s->dresidual, a->fch_gelu + o * 4 * C, p.fcprojw, BT, 4 * C, C, 0);
        gelu_backward(s->dfch, a->fch + o * 4 * C, s->dfch_gelu, (size_t)BT * 4 * C);
        matmul_backward_ex(s->dln, g.fcw, g.fcb, s->dfch, a->ln2 + o * C, p.fcw, BT, C, 4 * C, 0);
        layernorm_backward(s->dresidual, g.ln2w, g.ln2b, s->dln, a->residual2 + o * C, p.ln2w, a->ln2_mean + o, a->ln2_rstd + o, BT, C);
        // s->dresidual now holds dL/d residual2[l].
        matmul_backward_ex(s->datty, g.attprojw, g.attprojb, s->dresidual, a->atty + o * C, p.attprojw, BT, C, C, 0);
        attention_backward(s->dqkv, s->datty, a->qkv + o * 3 * C, a->att + o * NH * T, B, T, C, NH);
        matmul_backward_ex(s->dln, g.qkvw, g.qkvb, s->dqkv, a->ln1 + o * C, p.qkvw, BT, C, 3 * C, 0);
        layernorm_backward(s->dresidual, g.ln1w, g.ln1b, s->dln, resid_in, p.ln1w, a->ln1_mean + o, a->ln1_rstd + o, BT, C);
        // s->dresidual now holds dL/d resid_in, the input of layer l.
        zero_params_unit_done(z, UNIT_LAYER(l));
        zero_grads_unit_ready(z, UNIT_LAYER(l), last_micro_step);
    }

    // Encoder, chunk by chunk: each wte unit's gradient now gets its second part, wpe's with the
    // first; then the unit's collective starts (both contributions of the tied weight are in).
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        zero_trace_compute(z, ZERO_TRACE_BACKWARD, wte_unit(layout, k));
        float* demb = zero_grads_unit(z, wte_unit(layout, k));
        if (k == 0) encoder_backward_positions(demb + wpe_offset, s->dresidual, B, T, C);
        encoder_backward_chunk(demb, s->dresidual, model->inputs, (int)piece->row0, (int)piece->shape[0], B, T, C);
        zero_grads_unit_ready(z, wte_unit(layout, k), last_micro_step);
    }
}

#endif // MODEL_GPT2_CPU_H
