/*
 * model/gpt2_gpu.cuh: GPT-2 on the GPU: forward and backward, making the ZeRO engine's calls;
 * its device buffers, gpt2_build and gpt2_free are model/gpt2_gpu_buffers.cuh, included below. Included by train_gpt2.cu (the GPU
 * trainer) after zero.cuh and train/model_source.h, which it uses.
 *
 * The same model as model/gpt2_cpu.h; what differs is where the numbers live: bf16 parameters,
 * gradients and activations on the GPU, fp32 accumulation inside every kernel (the fp32 master
 * weights and AdamW m, v are the engine's). Kernels are kernels/ (one op family per file); their
 * CPU twins in cpu/ are the reference.
 *
 * ZeRO (compile-time ZERO_STAGE, docs/design.md "Stages"): the model makes the CPU model's calls
 * in the same places (zero_params_unit / _prefetch / _unit_done in forward and backward,
 * zero_grads_unit / _ready in backward); under nvcc the engine's model-facing functions are
 * zero/gpu/engine_gpu.cuh's, which run the kernels' side on z->gpu.compute and one collective per
 * unit on z->gpu.comm, started behind an event as backward finishes the unit. Every call here is
 * asynchronous on the compute stream; the host waits only where it reads a number back.
 *
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * Errors: out of GPU or host memory, or T above the model's max_seq_len, end the process with
 * one line; a failed CUDA call exits through CUDA_CHECK (common/cuda_utils.cuh).
 */
#ifndef MODEL_GPT2_GPU_CUH
#define MODEL_GPT2_GPU_CUH
#ifndef TRAIN_MODEL_SOURCE_H
#error "include zero.cuh and train/model_source.h before model/gpt2_gpu.cuh"
#endif

#include "common/cuda_utils.cuh"
#include "common/op_timer.cuh"
#include "kernels/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"
#include "model/gpt2_gpu_buffers.cuh" // device buffers, the GPT2 struct, gpt2_build, gpt2_free

// ----------------------------------------------------------------------------------------------
// Forward and backward

/*
 * The micro-batch into the next staging slot (BatchStaging, model/gpt2_gpu_buffers.cuh): host tokens (and targets, and
 * with a backward to follow the encoder plan) into its pinned buffer, one copy on the copy
 * stream, and the compute stream waits for that copy. Returns the slot's device buffer.
 */
static int* gpt2_stage_batch(GPT2* model, const int* inputs, const int* targets, int BT, int with_plan) {
    BatchStaging* st = &model->batch;
    int k = st->slot = (st->slot + 1) % BATCH_SLOTS;
    int* host = st->host[k];
    // Its previous copy (two forwards ago) has finished, so the pinned buffer may be rewritten.
    CUDA_CHECK(cudaEventSynchronize(st->copied[k]));
    memcpy(host, inputs, (size_t)BT * sizeof(int));
    size_t ints = BT;
    if (targets != NULL) { memcpy(host + BT, targets, (size_t)BT * sizeof(int)); ints = 2 * (size_t)BT; }
    if (with_plan) { // the encoder backward's token grouping, on the host while the GPU runs
        int* plan = host + 2 * (size_t)BT;
        st->num_buckets[k] = encoder_backward_plan(plan, plan + BT, plan + 2 * (size_t)BT + 1, st->bucket_counts, inputs, BT,
                                                   model->config.padded_vocab_size);
        ints = BATCH_SLOT_INTS(BT);
    }
    CUDA_CHECK(cudaStreamWaitEvent(st->copy_stream, st->consumed[k], 0)); // the micro-step that read it is done
    CUDA_CHECK(cudaMemcpyAsync(st->device[k], host, ints * sizeof(int), cudaMemcpyHostToDevice, st->copy_stream));
    CUDA_CHECK(cudaEventRecord(st->copied[k], st->copy_stream));
    CUDA_CHECK(cudaStreamWaitEvent(model->zero.gpu.compute, st->copied[k], 0));
    return st->device[k];
}

/*
 * Forward over host inputs (B,T). With targets: losses, their mean added to the device loss
 * accumulator of model->loss_slot times loss_weight (read it with gpt2_take_loss), and if
 * dloss_scale != 0 the logits are replaced by dloss/dlogits in the same pass (the fused
 * classifier), ready for gpt2_backward. With targets == NULL (sampling): only the logits of each
 * row's last position, into logits row b. Asynchronous on the compute stream: the host returns
 * without waiting (inputs and targets are staged through pinned memory, gpt2_stage_batch).
 */
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T, float dloss_scale,
                         float loss_weight) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    ActivationsGPU* a = &model->acts;
    ZeroEngine* z = &model->zero;
    cudaStream_t stream = z->gpu.compute;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;

    int backward_follows = targets != NULL && dloss_scale != 0.0f;
    OP_MARK(model, OP_OTHER); // the wait for the micro-batch's copy
    int* inputs_device = gpt2_stage_batch(model, inputs, targets, BT, backward_follows);
    int* targets_device = inputs_device + BT;
    if (backward_follows) { // the plan's tokens ascend: each vocab chunk's are a run of buckets
        const BatchStaging* st = &model->batch;
        const int* tokens = st->host[st->slot] + 2 * (size_t)BT;
        for (int k = 0, b = 0; k <= layout->num_wte_units; k++) {
            int row0 = k < layout->num_wte_units ? (int)layout->tensors[wte_piece_index(layout, k)].row0 : Vp;
            while (b < st->num_buckets[st->slot] && tokens[b] < row0) b++;
            model->chunk_bucket[k] = b;
        }
        model->dloss_scale = dloss_scale;
    }

    // Each unit: ask the engine for its parameters, and let it prefetch the next one meanwhile
    // (ZeRO-3 all-gathers on the comm stream; a no-op at stages 0-2). The encoder walks wte's
    // vocab chunks; the first unit also holds wpe, whose T rows are copied aside for the others.
    int K = layout->num_wte_units;
    zero_pp_pass(z, 0); // ZeRO++: the gathers below serve forward (qwZ)
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        zero_trace_compute(z, ZERO_TRACE_FORWARD, wte_unit(layout, k)); // -tr: each unit's span (zero/trace/trace.h)
        OP_MARK(model, OP_ENGINE);
        bf16* emb = zero_params_unit(z, wte_unit(layout, k));
        zero_params_prefetch(z, k + 1 < K ? wte_unit(layout, k + 1) : UNIT_LAYER(0));
        OP_MARK(model, OP_ENCODER);
        if (k == 0) CUDA_CHECK(cudaMemcpyAsync(a->wpe, emb + wpe_offset, (size_t)T * C * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
        encoder_forward_chunk_cuda(a->encoded, inputs_device, emb, a->wpe, (int)piece->row0, (int)piece->shape[0], B, T, C, stream);
        OP_MARK(model, OP_ENGINE);
        zero_params_unit_done(z, wte_unit(layout, k));
    }

    for (int l = 0; l < L; l++) {
        zero_trace_compute(z, ZERO_TRACE_FORWARD, UNIT_LAYER(l));
        OP_MARK(model, OP_ENGINE);
        LayerTensorsGPU p = layer_tensors_gpu(layout, l, zero_params_unit(z, UNIT_LAYER(l)));
        zero_params_prefetch(z, l + 1 < L ? UNIT_LAYER(l + 1) : UNIT_FINAL(c));
        size_t o = (size_t)l * BT, prev = o - BT; // prev: layer l-1's rows (l > 0)
        bf16* resid_in = l == 0 ? a->encoded : a->residual3 + prev * C;
        // Each residual add is fused into the LayerNorm that reads it (kernels/layernorm.cuh):
        // here residual3[l-1] = residual2[l-1] + fcproj[l-1], the previous layer's last add.
        OP_MARK(model, OP_LAYERNORM_FWD);
        if (l == 0) layernorm_forward_cuda(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, p.ln1w, p.ln1b, BT, C, stream);
        else residual_layernorm_forward_cuda(resid_in, a->ln1 + o * C, a->ln1_mean + o, a->ln1_rstd + o, a->residual2 + prev * C,
                                             a->fcproj + prev * C, p.ln1w, p.ln1b, BT, C, stream);
        OP_MARK(model, OP_MATMUL_FWD);
        matmul_forward_cuda(a->qkv + o * 3 * C, a->ln1 + o * C, p.qkvw, p.qkvb, BT, C, 3 * C, stream);
        OP_MARK(model, OP_ATTENTION_FWD);
        attention_forward_cuda(a->atty + o * C, a->att_lse + o * NH, a->qkv + o * 3 * C, B, T, C, NH, stream);
        OP_MARK(model, OP_MATMUL_FWD);
        matmul_forward_cuda(a->attproj + o * C, a->atty + o * C, p.attprojw, p.attprojb, BT, C, C, stream);
        OP_MARK(model, OP_LAYERNORM_FWD);
        residual_layernorm_forward_cuda(a->residual2 + o * C, a->ln2 + o * C, a->ln2_mean + o, a->ln2_rstd + o, resid_in,
                                        a->attproj + o * C, p.ln2w, p.ln2b, BT, C, stream);
        // fc with its bias and the GELU in one GEMM (GELU_AUX_BIAS epilogue): fch keeps the GELU input
        OP_MARK(model, OP_MATMUL_FWD);
        matmul_forward_gelu_cuda(a->fch_gelu + o * 4 * C, a->fch + o * 4 * C, a->ln2 + o * C, p.fcw, p.fcb, BT, C, 4 * C, stream);
        matmul_forward_cuda(a->fcproj + o * C, a->fch_gelu + o * 4 * C, p.fcprojw, p.fcprojb, BT, 4 * C, C, stream);
        OP_MARK(model, OP_ENGINE);
        zero_params_unit_done(z, UNIT_LAYER(l));
    }

    zero_trace_compute(z, ZERO_TRACE_FORWARD, UNIT_FINAL(c));
    bf16* final_unit = zero_params_unit(z, UNIT_FINAL(c));
    zero_params_prefetch(z, wte_unit(layout, 0)); // for the LM head
    OP_MARK(model, OP_LAYERNORM_FWD);
    size_t last = (size_t)(L - 1) * BT;
    bf16* last_residual = a->residual3 + last * C; // = residual2 + fcproj of the last layer, fused into lnf
    residual_layernorm_forward_cuda(last_residual, a->lnf, a->lnf_mean, a->lnf_rstd, a->residual2 + last * C,
                                    a->fcproj + last * C, final_unit, final_unit + C, BT, C, stream);
    OP_MARK(model, OP_ENGINE);
    zero_params_unit_done(z, UNIT_FINAL(c));

    // LM head, tied to wte, one vocab chunk at a time (ZeRO-3 gathers each chunk again): the
    // chunk's logits (BT, rows) go into each row's online softmax statistics, so the (BT, Vp)
    // logits never exist at once; backward recomputes them chunk by chunk.
    if (targets != NULL) classifier_stats_init_cuda(a->row_max, a->row_sum, a->target_logit, BT, stream);
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        int row0 = (int)piece->row0, rows = (int)piece->shape[0];
        zero_trace_compute(z, ZERO_TRACE_FORWARD, zero_trace_lm_head(k));
        OP_MARK(model, OP_ENGINE);
        bf16* wte = zero_params_unit(z, wte_unit(layout, k));
        if (k + 1 == K && backward_follows) zero_pp_pass(z, 1); // ZeRO++: this prefetch serves backward's LM head
        zero_params_prefetch(z, k + 1 < K ? wte_unit(layout, k + 1) : backward_follows ? wte_unit(layout, 0) : -1);
        OP_MARK(model, OP_LM_HEAD_FWD);
        if (targets != NULL) {
            matmul_forward_cuda(a->logits, a->lnf, wte, NULL, BT, C, rows, stream);
            OP_MARK(model, OP_CLASSIFIER);
            classifier_forward_chunk_cuda(a->logits, a->row_max, a->row_sum, a->target_logit, targets_device, BT, row0, rows, V,
                                          stream);
        } else {
            for (int b = 0; b < B; b++) { // sampling: each row's last position, into its row of logits_last
                matmul_forward_cuda(a->logits + (size_t)b * rows, a->lnf + ((size_t)b * T + T - 1) * C, wte, NULL, 1, C, rows, stream);
                CUDA_CHECK(cudaMemcpyAsync(a->logits_last + (size_t)b * Vp + row0, a->logits + (size_t)b * rows, (size_t)rows * sizeof(bf16),
                                           cudaMemcpyDeviceToDevice, stream));
            }
        }
        OP_MARK(model, OP_ENGINE);
        zero_params_unit_done(z, wte_unit(layout, k));
    }
    if (targets != NULL) {
        OP_MARK(model, OP_CLASSIFIER);
        classifier_losses_cuda(a->losses, a->row_max, a->row_sum, a->target_logit, BT, stream);
        losses_sum_cuda(model->loss_sum_device + model->loss_slot, a->losses, BT, loss_weight / BT, stream);
    }
    // A forward that produced its classifier statistics for backward (dloss_scale != 0) is
    // followed by backward, which reads the micro-batch's slot again (targets, encoder plan).
    if (!backward_follows) {
        CUDA_CHECK(cudaEventRecord(model->batch.consumed[model->batch.slot], stream)); // no backward reads the slot
    }
}

#ifdef TESTING
// The full logits (B,T,Vp) of the last forward's final LayerNorm output into host memory, chunk
// by chunk (for tests; training never holds them). Every rank calls it (ZeRO-3 gathers).
static void gpt2_full_logits(GPT2* model, float* out, int B, int T) {
    const ParamLayout* layout = &model->layout;
    int C = model->config.channels, Vp = model->config.padded_vocab_size, BT = B * T;
    bf16* host = (bf16*)host_alloc((size_t)BT * model->wte_rows_max * sizeof(bf16), "test logits");
    for (int k = 0; k < layout->num_wte_units; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        int rows = (int)piece->shape[0];
        bf16* wte = zero_params_unit(&model->zero, wte_unit(layout, k));
        matmul_forward_cuda(model->acts.logits, model->acts.lnf, wte, NULL, BT, C, rows, model->zero.gpu.compute);
        zero_params_unit_done(&model->zero, wte_unit(layout, k));
        zero_device_synchronize(&model->zero, "test logits");
        CUDA_CHECK(cudaMemcpy(host, model->acts.logits, (size_t)BT * rows * sizeof(bf16), cudaMemcpyDeviceToHost));
        for (int bt = 0; bt < BT; bt++)
            for (int r = 0; r < rows; r++) out[(size_t)bt * Vp + piece->row0 + r] = __bfloat162float(host[(size_t)bt * rows + r]);
    }
    free(host);
}
#endif

// The loss accumulated since the last call (mean over what was added), then reset. Host sync
// (timed by the engine: a stuck collective ends in the -wt diagnosis, not a hang).
// The loss is made on the compute stream, so the host waits for that stream only: the
// parameter all-gathers an optimizer step leaves on the comm stream (stages 1, 2) keep running
// under the next forward, which waits for them unit by unit (zero_params_unit).
static float gpt2_take_loss(GPT2* model) {
    float loss;
    float* sum = model->loss_sum_device + model->loss_slot;
    zero_stream_synchronize(&model->zero, model->zero.gpu.compute, "loss");
    CUDA_CHECK(cudaMemcpyAsync(&loss, sum, sizeof(float), cudaMemcpyDeviceToHost, model->zero.gpu.compute));
    CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(float), model->zero.gpu.compute));
    CUDA_CHECK(cudaStreamSynchronize(model->zero.gpu.compute));
    return loss;
}

/*
 * Backward of the last forward, which must have had targets and a nonzero dloss_scale (its
 * logits now hold dlogits), accumulating into the engine's gradients. Each unit is handed to
 * the engine as soon as its gradients are complete for this micro-step, in reverse order
 * (final, layers L-1..0, embedding): that call is where the unit's collective starts.
 */
static void gpt2_backward(GPT2* model, int B, int T, int last_micro_step) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads;
    int BT = B * T;
    ActivationsGPU* a = &model->acts;
    BackwardScratchGPU* s = &model->scratch;
    ZeroEngine* z = &model->zero;
    cudaStream_t stream = z->gpu.compute;
    const ParamLayout* layout = &model->layout;
    size_t wpe_offset = layout->tensors[param_tensor_index(layout, P_WPE, -1)].unit_offset;

    // LM head, one vocab chunk at a time: recompute the chunk's logits, turn them into dlogits
    // with forward's softmax statistics, dlnf = (+=) dlogits wte_k and dwte_k += dlogits^T lnf.
    // The engine reduces dwte_k's LM-head part at once except the rows of this micro-batch's
    // tokens (the encoder plan's buckets of the chunk), which the encoder adds to at the end.
    int K = layout->num_wte_units, V = c->vocab_size;
    BatchStaging* st = &model->batch;
    int* targets_device = st->device[st->slot] + BT;
    int* plan = st->device[st->slot] + 2 * (size_t)BT; // tokens | starts | positions
    zero_pp_pass(z, 1); // ZeRO++: the gathers from here on serve backward (forward switched before its last prefetch)
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        int row0 = (int)piece->row0, rows = (int)piece->shape[0];
        zero_trace_compute(z, ZERO_TRACE_BACKWARD, zero_trace_lm_head(k));
        OP_MARK(model, OP_ENGINE);
        bf16* wte = zero_params_unit(z, wte_unit(layout, k));
        zero_params_prefetch(z, k + 1 < K ? wte_unit(layout, k + 1) : UNIT_FINAL(c));
        bf16* dwte = zero_grads_unit(z, wte_unit(layout, k));
        OP_MARK(model, OP_LM_HEAD_BWD);
        matmul_forward_cuda(a->logits, a->lnf, wte, NULL, BT, C, rows, stream);
        OP_MARK(model, OP_CLASSIFIER);
        classifier_backward_chunk_cuda(a->logits, a->row_max, a->row_sum, targets_device, BT, row0, rows, V, model->dloss_scale,
                                       stream);
        OP_MARK(model, OP_LM_HEAD_BWD);
        matmul_backward_cuda(s->dln, dwte, NULL, s->reduce, a->logits, a->lnf, wte, BT, C, rows, k > 0, stream);
        OP_MARK(model, OP_ENGINE);
        zero_params_unit_done(z, wte_unit(layout, k));
        int first = model->chunk_bucket[k];
        zero_grads_unit_partly_ready(z, wte_unit(layout, k), plan + first, model->chunk_bucket[k + 1] - first, row0, C);
    }

    zero_trace_compute(z, ZERO_TRACE_BACKWARD, UNIT_FINAL(c));
    bf16* final_unit = zero_params_unit(z, UNIT_FINAL(c));
    zero_params_prefetch(z, UNIT_LAYER(L - 1));
    bf16* dfinal = zero_grads_unit(z, UNIT_FINAL(c));
    bf16* last_residual = a->residual3 + (size_t)(L - 1) * BT * C;
    OP_MARK(model, OP_LAYERNORM_BWD);
    CUDA_CHECK(cudaMemsetAsync(s->dresidual, 0, (size_t)BT * C * sizeof(bf16), stream));
    layernorm_backward_cuda(s->dresidual, dfinal, dfinal + C, s->reduce, s->dln, last_residual, final_unit, a->lnf_mean,
                            a->lnf_rstd, BT, C, stream);
    OP_MARK(model, OP_ENGINE);
    zero_params_unit_done(z, UNIT_FINAL(c));
    zero_grads_unit_ready(z, UNIT_FINAL(c), last_micro_step);

    for (int l = L - 1; l >= 0; l--) {
        zero_trace_compute(z, ZERO_TRACE_BACKWARD, UNIT_LAYER(l));
        LayerTensorsGPU p = layer_tensors_gpu(layout, l, zero_params_unit(z, UNIT_LAYER(l)));
        if (l > 0) zero_params_prefetch(z, UNIT_LAYER(l - 1));
        LayerTensorsGPU g = layer_tensors_gpu(layout, l, zero_grads_unit(z, UNIT_LAYER(l)));
        size_t o = (size_t)l * BT;
        bf16* resid_in = l == 0 ? a->encoded : a->residual3 + (o - BT) * C;
        // s->dresidual holds dL/d residual3[l]; the residual add passes it to both branches.
        // fcproj: its weight and bias gradients (BGRADB epilogue), then its input gradient
        // through the GELU in one GEMM (DGELU_BGRAD: dfch, and the fc bias gradient from it).
        OP_MARK(model, OP_MATMUL_BWD);
        matmul_backward_cuda(NULL, g.fcprojw, g.fcprojb, s->reduce, s->dresidual, a->fch_gelu + o * 4 * C, p.fcprojw,
                             BT, 4 * C, C, 0, stream);
        matmul_backward_dgelu_cuda(s->dfch, g.fcb, s->reduce, s->dresidual, p.fcprojw, a->fch + o * 4 * C, BT, 4 * C, C, stream);
        matmul_backward_cuda(s->dln, g.fcw, NULL, s->reduce, s->dfch, a->ln2 + o * C, p.fcw, BT, C, 4 * C, 0, stream);
        OP_MARK(model, OP_LAYERNORM_BWD);
        layernorm_backward_cuda(s->dresidual, g.ln2w, g.ln2b, s->reduce, s->dln, a->residual2 + o * C, p.ln2w,
                                a->ln2_mean + o, a->ln2_rstd + o, BT, C, stream);
        // s->dresidual now holds dL/d residual2[l].
        OP_MARK(model, OP_MATMUL_BWD);
        matmul_backward_cuda(s->datty, g.attprojw, g.attprojb, s->reduce, s->dresidual, a->atty + o * C, p.attprojw,
                             BT, C, C, 0, stream);
        OP_MARK(model, OP_ATTENTION_BWD);
        attention_backward_cuda(s->dqkv, s->attention_scratch, s->datty, a->qkv + o * 3 * C, a->atty + o * C,
                                a->att_lse + o * NH, B, T, C, NH, stream);
        OP_MARK(model, OP_MATMUL_BWD);
        matmul_backward_cuda(s->dln, g.qkvw, g.qkvb, s->reduce, s->dqkv, a->ln1 + o * C, p.qkvw, BT, C, 3 * C, 0, stream);
        OP_MARK(model, OP_LAYERNORM_BWD);
        layernorm_backward_cuda(s->dresidual, g.ln1w, g.ln1b, s->reduce, s->dln, resid_in, p.ln1w, a->ln1_mean + o,
                                a->ln1_rstd + o, BT, C, stream);
        // s->dresidual now holds dL/d resid_in, the input of layer l.
        OP_MARK(model, OP_ENGINE);
        zero_params_unit_done(z, UNIT_LAYER(l));
        zero_grads_unit_ready(z, UNIT_LAYER(l), last_micro_step);
    }

    // Encoder, chunk by chunk: each wte unit's gradient now gets its second part, wpe's with the
    // first; then the unit's collective starts (both contributions of the tied weight are in).
    for (int k = 0; k < K; k++) {
        const ParamTensor* piece = &layout->tensors[wte_piece_index(layout, k)];
        zero_trace_compute(z, ZERO_TRACE_BACKWARD, wte_unit(layout, k));
        bf16* demb = zero_grads_unit(z, wte_unit(layout, k));
        OP_MARK(model, OP_ENCODER);
        if (k == 0) encoder_backward_wpe_cuda(demb + wpe_offset, s->dresidual, B, T, C, stream);
        int first = model->chunk_bucket[k];
        encoder_backward_chunk_cuda(demb, s->dresidual, plan + BT, plan, plan + 2 * BT + 1, first, model->chunk_bucket[k + 1] - first,
                                    (int)piece->row0, C, stream);
        if (k == K - 1) CUDA_CHECK(cudaEventRecord(st->consumed[st->slot], stream)); // the last read of this micro-batch's device slot
        OP_MARK(model, OP_ENGINE);
        zero_grads_unit_ready(z, wte_unit(layout, k), last_micro_step);
    }
}

#endif // MODEL_GPT2_GPU_CUH
