/*
 * train_gpt2.c: the fp32 CPU reference trainer for GPT-2 (C, OpenBLAS, OpenMP).
 *
 * The model is GPT-2 exactly (Radford et al. 2019): learned position embeddings, pre-LayerNorm
 * blocks of causal multi-head attention and a GELU MLP with residuals, a final LayerNorm and an
 * LM head tied to wte, over a vocabulary padded from V to Vp (padded logits ignored).
 * Parameters, gradients and optimizer state live in one flat buffer owned by the ZeRO engine
 * (zero.cuh), laid out by unit (common/gpt2_config.h). Forward asks the engine for each unit's
 * parameters; backward tells it when each unit's gradients are final, which is where the
 * engine issues that unit's collective.
 *
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * test_gpt2.c includes this file with TESTING defined to reuse everything but main().
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <omp.h>

#include "common/args.h"
#include "common/checkpoint.h"
#include "common/dataloader.h"
#include "common/gpt2_config.h"
#include "common/init.h"
#include "common/logger.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/tokenizer.h"
#include "cpu/attention.h"
#include "cpu/classifier.h"
#include "cpu/encoder.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/residual.h"
#include "zero.cuh"

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
    float* logits;    // (B,T,Vp); overwritten by dlogits in the fused classifier
    float* losses;    // (B,T)
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
    float mean_loss;   // of the last forward with targets
} GPT2;

static float* carve(float** cursor, size_t n) { float* p = *cursor; *cursor += n; return p; }

static void gpt2_alloc_activations(GPT2* model, int B, int T) {
    const GPT2Config* c = &model->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    size_t sizes[] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C, L * B * NH * (size_t)T * T,
        L * BT * C, L * BT * C, L * BT * C, L * BT, L * BT, L * BT * 4 * C, L * BT * 4 * C, L * BT * C,
        L * BT * C, BT * C, BT, BT, BT * Vp, BT,
        BT * C, BT * C, BT * C, BT * 3 * C, BT * 4 * C, BT * 4 * C,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) total += sizes[i];
    model->act_memory = (float*)zero_calloc(total, sizeof(float), "activations");
    model->act_bytes = total * sizeof(float);
    float* cur = model->act_memory;
    Activations* a = &model->acts;
    float** slots[] = {&a->encoded, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                       &a->attproj, &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
                       &a->fcproj, &a->residual3, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->losses,
                       &model->scratch.dresidual, &model->scratch.dln, &model->scratch.datty,
                       &model->scratch.dqkv, &model->scratch.dfch, &model->scratch.dfch_gelu};
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) *slots[i] = carve(&cur, sizes[i]);
    model->inputs = (int*)zero_calloc(BT, sizeof(int), "inputs");
    model->B = B;
    model->T = T;
}

/*
 * Build the model for `init` (an llm.c model file or a depth descriptor dN), B x T activations,
 * and world_size ranks. Parameters are initialized (or loaded) unit by unit and handed to the
 * engine, so no rank ever needs more than one unit of scratch beyond what its stage keeps.
 */
static void gpt2_build(GPT2* model, const char* init, int B, int T, uint64_t seed, int rank, int world_size) {
    int from_file = gpt2_config_from_descriptor(init, &model->config) != 0;
    if (from_file) {
        if (init[0] == 'd' && init[1] >= '0' && init[1] <= '9' && strchr(init, '.') == NULL && strchr(init, '/') == NULL) {
            fprintf(stderr, "error: -e %s: unknown depth descriptor; expected d1, d2, d3, d4, d6, d12, d24, d36, d48 or a model file\n", init);
            exit(1);
        }
        int version;
        model_file_read_header(init, &model->config, &version);
    }
    if (T > model->config.max_seq_len) {
        fprintf(stderr, "error: -t %d: longer than the model's max sequence length; expected T <= %d\n", T, model->config.max_seq_len);
        exit(1);
    }
    param_layout_build(&model->layout, &model->config, world_size, ZERO_ALIGN);
    zero_init(&model->zero, &model->layout, rank, world_size);
    float* full = (float*)zero_calloc(model->layout.padded_numel, sizeof(float), "initial parameters");
    if (from_file) {
        model_file_read_params(init, &model->layout, full, -1);
    } else {
        for (int u = 0; u < model->layout.num_units; u++)
            gpt2_init_unit(&model->layout, u, full + model->layout.units[u].offset, seed);
    }
    zero_set_full_params(&model->zero, full);
    free(full);
    gpt2_alloc_activations(model, B, T);
}

static void gpt2_free(GPT2* model) {
    zero_free(&model->zero);
    param_layout_free(&model->layout);
    free(model->act_memory);
    free(model->inputs);
}

// ----------------------------------------------------------------------------
// Forward and backward

/*
 * Forward over inputs (B,T) (B <= capacity, T <= capacity). With targets (B,T), computes the
 * per-position losses and their mean (model->mean_loss); with targets == NULL, computes only the
 * logits of the last position of each row (for sampling), into logits row b.
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

    float* emb = zero_params_unit(z, UNIT_EMBEDDING);
    encoder_forward(a->encoded, inputs, emb, emb + wpe_offset, B, T, C);
    zero_params_unit_done(z, UNIT_EMBEDDING);

    for (int l = 0; l < L; l++) {
        LayerTensors p = layer_tensors(layout, l, zero_params_unit(z, UNIT_LAYER(l)));
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

    float* final_unit = zero_params_unit(z, UNIT_FINAL(c));
    float* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last_residual, final_unit, final_unit + C, BT, C);
    zero_params_unit_done(z, UNIT_FINAL(c));

    // LM head, tied to wte: the embedding unit is needed a second time (ZeRO-3 gathers it again).
    float* wte = zero_params_unit(z, UNIT_EMBEDDING);
    if (targets != NULL) {
        matmul_forward(a->logits, a->lnf, wte, NULL, BT, C, Vp);
        fused_classifier(a->logits, a->losses, targets, BT, V, Vp, 0.0f);
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += a->losses[i];
        model->mean_loss = (float)(sum / BT);
    } else {
        for (int b = 0; b < B; b++)
            matmul_forward(a->logits + (size_t)b * Vp, a->lnf + ((size_t)b * T + T - 1) * C, wte, NULL, 1, C, Vp);
        model->mean_loss = -1.0f;
    }
    zero_params_unit_done(z, UNIT_EMBEDDING);
}

/*
 * Backward of the last forward (which must have had targets), accumulating into the engine's
 * gradient buffers. dloss_scale = 1/(B*T*grad_accum_steps): the gradient of the mean loss over
 * the whole (per-rank) batch. Each unit is handed to the engine as soon as its gradients are
 * complete for this micro-step, in reverse order: final, layers L-1..0, embedding.
 */
static void gpt2_backward(GPT2* model, const int* targets, int B, int T, float dloss_scale, int last_micro_step) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    Activations* a = &model->acts;
    BackwardScratch* s = &model->scratch;
    ZeroEngine* z = &model->zero;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;

    // Classifier: recompute softmax from the logits and overwrite them with dlogits in place.
    fused_classifier(a->logits, a->losses, targets, BT, V, Vp, dloss_scale);

    float* wte = zero_params_unit(z, UNIT_EMBEDDING);
    float* demb = zero_grads_unit(z, UNIT_EMBEDDING);
    memset(s->dln, 0, (size_t)BT * C * sizeof(float));
    matmul_backward(s->dln, demb, NULL, a->logits, a->lnf, wte, BT, C, Vp); // LM-head part of dwte
    zero_params_unit_done(z, UNIT_EMBEDDING);

    float* final_unit = zero_params_unit(z, UNIT_FINAL(c));
    float* dfinal = zero_grads_unit(z, UNIT_FINAL(c));
    float* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    memset(s->dresidual, 0, (size_t)BT * C * sizeof(float));
    layernorm_backward(s->dresidual, dfinal, dfinal + C, s->dln, last_residual, final_unit, a->lnf_mean, a->lnf_rstd, BT, C);
    zero_params_unit_done(z, UNIT_FINAL(c));
    zero_grads_unit_ready(z, UNIT_FINAL(c), last_micro_step);

    for (int l = L - 1; l >= 0; l--) {
        LayerTensors p = layer_tensors(layout, l, zero_params_unit(z, UNIT_LAYER(l)));
        LayerTensors g = layer_tensors(layout, l, zero_grads_unit(z, UNIT_LAYER(l)));
        size_t o = (size_t)l * BT;
        float* resid_in = l == 0 ? a->encoded : a->residual3 + (o - BT) * C;
        // s->dresidual holds dL/d residual3[l]; the residual add passes it to both branches.
        memset(s->dfch_gelu, 0, (size_t)BT * 4 * C * sizeof(float));
        matmul_backward(s->dfch_gelu, g.fcprojw, g.fcprojb, s->dresidual, a->fch_gelu + o * 4 * C, p.fcprojw, BT, 4 * C, C);
        memset(s->dfch, 0, (size_t)BT * 4 * C * sizeof(float));
        gelu_backward(s->dfch, a->fch + o * 4 * C, s->dfch_gelu, (size_t)BT * 4 * C);
        memset(s->dln, 0, (size_t)BT * C * sizeof(float));
        matmul_backward(s->dln, g.fcw, g.fcb, s->dfch, a->ln2 + o * C, p.fcw, BT, C, 4 * C);
        layernorm_backward(s->dresidual, g.ln2w, g.ln2b, s->dln, a->residual2 + o * C, p.ln2w, a->ln2_mean + o, a->ln2_rstd + o, BT, C);
        // s->dresidual now holds dL/d residual2[l].
        memset(s->datty, 0, (size_t)BT * C * sizeof(float));
        matmul_backward(s->datty, g.attprojw, g.attprojb, s->dresidual, a->atty + o * C, p.attprojw, BT, C, C);
        memset(s->dqkv, 0, (size_t)BT * 3 * C * sizeof(float));
        attention_backward(s->dqkv, s->datty, a->qkv + o * 3 * C, a->att + o * NH * T, B, T, C, NH);
        memset(s->dln, 0, (size_t)BT * C * sizeof(float));
        matmul_backward(s->dln, g.qkvw, g.qkvb, s->dqkv, a->ln1 + o * C, p.qkvw, BT, C, 3 * C);
        layernorm_backward(s->dresidual, g.ln1w, g.ln1b, s->dln, resid_in, p.ln1w, a->ln1_mean + o, a->ln1_rstd + o, BT, C);
        // s->dresidual now holds dL/d resid_in, the input of layer l.
        zero_params_unit_done(z, UNIT_LAYER(l));
        zero_grads_unit_ready(z, UNIT_LAYER(l), last_micro_step);
    }

    encoder_backward(demb, demb + wpe_offset, s->dresidual, model->inputs, B, T, C);
    zero_grads_unit_ready(z, UNIT_EMBEDDING, last_micro_step);
}

// ----------------------------------------------------------------------------
// Sampling

// Sample an index from probabilities given as logits over the first V entries (temperature 1).
static int sample_from_logits(const float* logits, int V, float coin) {
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) if (logits[i] > maxval) maxval = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp(logits[i] - maxval);
    double cdf = 0.0, target = coin * sum;
    for (int i = 0; i < V; i++) {
        cdf += exp(logits[i] - maxval);
        if (target < cdf) return i;
    }
    return V - 1;
}

// Generate gen_tokens tokens after <|endoftext|> (every rank runs it: ZeRO-3 needs all ranks in
// the gathers); rank 0 prints the UTF-8 text.
static void gpt2_sample(GPT2* model, Tokenizer* tokenizer, int gen_tokens, uint64_t seed, int print) {
    int T = gen_tokens + 1 < model->T ? gen_tokens + 1 : model->T;
    int* tokens = (int*)zero_calloc((size_t)T, sizeof(int), "sample tokens");
    tokens[0] = 50256 < model->config.vocab_size ? 50256 : 0; // <|endoftext|> starts a document
    Rng rng;
    rng_seed(&rng, seed);
    for (int t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, t);
        tokens[t] = sample_from_logits(model->acts.logits, model->config.vocab_size, rng_uniform(&rng));
    }
    if (print) {
        char* text = (char*)zero_calloc((size_t)T * 64 + 1, 1, "sample text");
        if (tokenizer->init_ok) {
            tokenizer_decode_utf8(tokenizer, tokens + 1, T - 1, text, (size_t)T * 64 + 1);
            printf("sample:\n---\n%s\n---\n", text);
        } else {
            printf("sample (token ids, no tokenizer file):");
            for (int t = 1; t < T; t++) printf(" %d", tokens[t]);
            printf("\n");
        }
        free(text);
    }
    free(tokens);
}

// ----------------------------------------------------------------------------
// Training loop helpers

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; // ru_maxrss is in KiB on Linux
}

static float gpt2_val_loss(GPT2* model, DataLoader* val_loader, int val_steps) {
    dataloader_reset(val_loader);
    double sum = 0.0;
    for (int i = 0; i < val_steps; i++) {
        dataloader_next_batch(val_loader);
        gpt2_forward(model, val_loader->inputs, val_loader->targets, model->B, model->T);
        sum += model->mean_loss;
    }
    return (float)(sum / val_steps);
}

static void format_eta(char* buf, size_t cap, double seconds) {
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%dh%02dm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%dm%02ds", s / 60, s % 60);
    else snprintf(buf, cap, "%ds", s);
}

// The data scripts write gpt2_tokenizer.bin beside the shards: look in the train pattern's dir.
static const char* tokenizer_path_beside(const char* train_pattern) {
    static char path[4096];
    const char* slash = strrchr(train_pattern, '/');
    int dir_len = slash ? (int)(slash - train_pattern) : 1;
    snprintf(path, sizeof(path), "%.*s/gpt2_tokenizer.bin", dir_len, slash ? train_pattern : ".");
    return path;
}

#ifndef TESTING
int main(int argc, char** argv) {
    TrainArgs args;
    train_args_parse(&args, argc, argv);
    train_args_validate(&args);
    if (args.zero_stage != -1 && args.zero_stage != ZERO_STAGE) {
        fprintf(stderr, "error: -z %d: this binary was compiled for ZeRO stage %d; expected -z %d or a rebuild with make ZERO_STAGE=%d\n",
                args.zero_stage, ZERO_STAGE, ZERO_STAGE, args.zero_stage);
        return 1;
    }
    int rank = 0, world_size = 1;
    int B = args.B, T = args.T;

    // Batch: each micro-step every rank processes B*T tokens; accumulate up to -d tokens.
    int tokens_per_micro_step = B * T * world_size;
    int total_batch_tokens = args.total_batch_tokens == -1 ? tokens_per_micro_step : args.total_batch_tokens;
    if (total_batch_tokens % tokens_per_micro_step != 0) {
        fprintf(stderr, "error: -d %d: not a multiple of B*T*ranks = %d*%d*%d = %d; expected a multiple of %d\n",
                total_batch_tokens, B, T, world_size, tokens_per_micro_step, tokens_per_micro_step);
        return 1;
    }
    int grad_accum_steps = total_batch_tokens / tokens_per_micro_step;

    if (args.output_dir) output_dir_prepare(args.output_dir);
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_pattern, B, T, rank, world_size);
    int do_val = args.val_every > 0;
    if (do_val) dataloader_init(&val_loader, args.val_pattern, B, T, rank, world_size);

    GPT2 model;
    gpt2_build(&model, args.init, B, T, (uint64_t)args.seed, rank, world_size);
    const GPT2Config* cfg = &model.config;
    int max_steps = args.max_steps;
    if (max_steps == -1) max_steps = (int)(train_loader.num_tokens_total / (size_t)total_batch_tokens);
    if (max_steps < 1 && args.max_steps == -1) max_steps = 1;

    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, tokenizer_path_beside(args.train_pattern));

    Logger logger;
    logger_init(&logger, rank == 0 ? args.output_dir : NULL, 0);

    LRSchedule schedule = {LR_COSINE, args.learning_rate, args.warmup_steps, max_steps, args.final_lr_fraction};
    if (lr_kind_from_name(args.lr_schedule, &schedule.kind) != 0) {
        fprintf(stderr, "error: -k %s: unknown schedule; expected cosine, linear or constant\n", args.lr_schedule);
        return 1;
    }
    AdamWConfig opt = {0.9f, 0.95f, 1e-8f, args.weight_decay, args.grad_clip};

    if (rank == 0) {
        printf("GPT-2 CPU trainer | ZeRO stage %d | world size %d | threads %d\n", ZERO_STAGE, world_size, omp_get_max_threads());
        printf("model: %s | L %d | C %d | NH %d | V %d (Vp %d) | maxT %d | parameters %zu\n", args.init,
               cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size,
               cfg->max_seq_len, model.layout.num_parameters);
        printf("batch: B %d x T %d x %d ranks x %d accumulation steps = %d tokens | steps %d | lr %g (%s, warmup %d, final x%g)\n",
               B, T, world_size, grad_accum_steps, total_batch_tokens, max_steps, args.learning_rate,
               args.lr_schedule, args.warmup_steps, args.final_lr_fraction);
        printf("memory: params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations %.1f MiB\n",
               model.zero.bytes_params / 1048576.0, model.zero.bytes_grads / 1048576.0,
               model.zero.bytes_optimizer / 1048576.0, model.act_bytes / 1048576.0);
        printf("train: %zu tokens | val: %s\n", train_loader.num_tokens_total, do_val ? args.val_pattern : "off");
        logger_record(&logger, "config", "\"init\":\"%s\",\"L\":%d,\"C\":%d,\"NH\":%d,\"V\":%d,\"parameters\":%zu,"
                      "\"B\":%d,\"T\":%d,\"world_size\":%d,\"zero_stage\":%d,\"batch_tokens\":%d,\"max_steps\":%d,\"lr\":%g",
                      args.init, cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size,
                      model.layout.num_parameters, B, T, world_size, ZERO_STAGE, total_batch_tokens, max_steps, args.learning_rate);
    }

    double train_seconds = 0.0;
    long long tokens_seen = 0;
    int timed_steps = 0;
    float last_val_loss = NAN;
    for (int step = 0; step <= max_steps; step++) {
        int last_step = step == max_steps;
        if (do_val && (step % args.val_every == 0 || last_step)) {
            last_val_loss = gpt2_val_loss(&model, &val_loader, args.val_max_steps);
            if (rank == 0) printf("step %5d/%d | val loss %.6f\n", step, max_steps, last_val_loss);
            logger_record(&logger, "val", "\"step\":%d,\"loss\":%.6f,\"tokens\":%lld", step, last_val_loss, tokens_seen);
        }
        if (args.sample_every > 0 && (step % args.sample_every == 0 || last_step) && (step > 0 || last_step)) {
            gpt2_sample(&model, &tokenizer, args.gen_tokens, (uint64_t)args.seed + (uint64_t)step, rank == 0);
        }
        if (args.output_dir && args.checkpoint_every > 0 && step > 0 && (step % args.checkpoint_every == 0 || last_step)) {
            float* full = (float*)zero_calloc(model.layout.padded_numel, sizeof(float), "checkpoint buffer");
            zero_get_full_params(&model.zero, full);
            if (rank == 0) {
                char path[4200];
                snprintf(path, sizeof(path), "%s/model_%08d.bin", args.output_dir, step);
                model_file_write(path, &model.layout, full);
                printf("checkpoint: %s\n", path);
            }
            free(full);
        }
        if (last_step) break;

        double t0 = wall_seconds();
        zero_grads_zero(&model.zero);
        double loss_sum = 0.0;
        for (int micro_step = 0; micro_step < grad_accum_steps; micro_step++) {
            if (!args.overfit_single_batch || (step == 0 && micro_step == 0)) dataloader_next_batch(&train_loader);
            gpt2_forward(&model, train_loader.inputs, train_loader.targets, B, T);
            loss_sum += model.mean_loss;
            gpt2_backward(&model, train_loader.targets, B, T, 1.0f / ((float)B * T * grad_accum_steps),
                          micro_step == grad_accum_steps - 1);
        }
        float lr = lr_at_step(&schedule, step);
        float grad_norm = zero_optimizer_step(&model.zero, &opt, lr, step + 1);
        double seconds = wall_seconds() - t0;
        float train_loss = (float)(loss_sum / grad_accum_steps);
        tokens_seen += total_batch_tokens;
        if (step > 0) { train_seconds += seconds; timed_steps++; } // step 0 includes warm-up costs
        double tokens_per_s = total_batch_tokens / seconds;
        double mean_step = timed_steps > 0 ? train_seconds / timed_steps : seconds;
        char eta[32];
        format_eta(eta, sizeof(eta), mean_step * (max_steps - step - 1));
        if (rank == 0) {
            printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | eta %s\n",
                   step + 1, max_steps, train_loss, lr, grad_norm, seconds * 1000.0, tokens_per_s, eta);
            fflush(stdout);
        }
        logger_record(&logger, "train", "\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"ms\":%.3f,"
                      "\"tokens_per_s\":%.1f,\"tokens\":%lld,\"batch_tokens\":%d",
                      step + 1, train_loss, lr, grad_norm, seconds * 1000.0, tokens_per_s, tokens_seen, total_batch_tokens);
    }
    if (rank == 0) {
        if (timed_steps > 0)
            printf("done: mean step %.1f ms, %.0f tok/s over %d steps, peak memory %.1f MiB%s",
                   1000.0 * train_seconds / timed_steps, (double)total_batch_tokens * timed_steps / train_seconds,
                   timed_steps, peak_rss_mib(), do_val ? "" : "\n");
        if (do_val) printf(", final val loss %.6f\n", last_val_loss);
    }

    logger_close(&logger);
    tokenizer_free(&tokenizer);
    dataloader_free(&train_loader);
    if (do_val) dataloader_free(&val_loader);
    gpt2_free(&model);
    return 0;
}
#endif
