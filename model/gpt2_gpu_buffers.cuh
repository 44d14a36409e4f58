/*
 * model/gpt2_gpu_buffers.cuh: the GPU model's memory, apart from its forward and backward
 * (model/gpt2_gpu.cuh, which includes this file after the kernels): pointers to a layer's
 * tensors in a unit, the activations and backward scratch on the device (one allocation, carved),
 * the pinned micro-batch staging slots, the loss accumulators, the GPT2 struct, gpt2_build (the
 * parameters into the engine, unit by unit) and gpt2_free. The planner restates the buffer table
 * (gpt2_activation_sizes) for the GPU layout: plan/plan_gpt2.c.
 * Shapes: B micro-batch, T sequence length, C channels, NH heads, L layers, Vp padded vocab.
 * Errors: out of GPU or host memory, or T above the model's max_seq_len, end the process with
 * one line; a failed CUDA call exits through CUDA_CHECK (common/cuda_utils.cuh).
 */
#ifndef MODEL_GPT2_GPU_BUFFERS_CUH
#define MODEL_GPT2_GPU_BUFFERS_CUH
#ifndef TRAIN_MODEL_SOURCE_H
#error "model/gpt2_gpu_buffers.cuh is part of model/gpt2_gpu.cuh; include that, after zero.cuh and train/model_source.h"
#endif

// Allocations that end the process with one line naming the buffer when memory runs out.
static void* device_alloc(size_t bytes, size_t* counter, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 16);
    if (err != cudaSuccess) {
        fprintf(stderr, "error: out of GPU memory allocating %s (%.1f MiB): %s; expected a smaller -b/-t or model\n",
                what, bytes / 1048576.0, cudaGetErrorString(err));
        exit(1);
    }
    if (counter) *counter += bytes;
    return p;
}

static void* host_alloc(size_t bytes, const char* what) {
    void* p = calloc(bytes > 0 ? bytes : 1, 1);
    if (p == NULL) {
        fprintf(stderr, "error: out of host memory allocating %s (%zu bytes)\n", what, bytes);
        exit(1);
    }
    return p;
}

// ----------------------------------------------------------------------------------------------
// The model

// Pointers to one layer's tensors inside a bf16 unit (full buffer or a gathered working copy).
typedef struct {
    bf16 *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    bf16 *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensorsGPU;

static LayerTensorsGPU layer_tensors_gpu(const ParamLayout* layout, int layer, bf16* unit_base) {
    const ParamTensor* t = &layout->tensors[param_tensor_index(layout, P_LN1W, layer)];
    LayerTensorsGPU lt;
    bf16** slots[NUM_LAYER_KINDS] = {&lt.ln1w, &lt.ln1b, &lt.qkvw, &lt.qkvb, &lt.attprojw, &lt.attprojb,
                                     &lt.ln2w, &lt.ln2b, &lt.fcw, &lt.fcb, &lt.fcprojw, &lt.fcprojb};
    for (int k = 0; k < NUM_LAYER_KINDS; k++) *slots[k] = unit_base + t[k].unit_offset;
    return lt;
}

// Activations forward keeps for backward (bf16 unless noted), sized for (B, T).
typedef struct {
    bf16* encoded;    // (B,T,C)
    bf16* ln1;        // (L,B,T,C)
    float* ln1_mean;  // (L,B,T) fp32
    float* ln1_rstd;  // (L,B,T) fp32
    bf16* qkv;        // (L,B,T,3C)
    bf16* atty;       // (L,B,T,C)
    float* att_lse;   // (L,B,NH,T) fp32: attention logsumexp per query row (no T x T matrix)
    bf16* attproj;    // (L,B,T,C)
    bf16* residual2;  // (L,B,T,C)
    bf16* ln2;        // (L,B,T,C)
    float* ln2_mean;  // (L,B,T) fp32
    float* ln2_rstd;  // (L,B,T) fp32
    bf16* fch;        // (L,B,T,4C)
    bf16* fch_gelu;   // (L,B,T,4C)
    bf16* fcproj;     // (L,B,T,C)
    bf16* residual3;  // (L,B,T,C)
    bf16* lnf;        // (B,T,C)
    float* lnf_mean;  // (B,T) fp32
    float* lnf_rstd;  // (B,T) fp32
    bf16* logits;     // (B,T,R): one vocab chunk's logits (R = the largest chunk's rows); dlogits in backward
    float* row_max;   // (B,T) fp32: online softmax over the chunks, each row's running max,
    float* row_sum;   // (B,T) fp32: its sum of exp(logit - row_max),
    float* target_logit; // (B,T) fp32: and the target's logit (kernels/classifier.cuh)
    float* losses;    // (B,T) fp32
    bf16* wpe;        // (T,C): wpe's first T rows, kept while the encoder walks wte's chunks
    bf16* logits_last; // (B,Vp): sampling, each row's last position
} ActivationsGPU;

// Backward scratch, reused layer by layer.
typedef struct {
    bf16* dresidual;      // (B,T,C) gradient of the residual stream at the current depth
    bf16* dln;            // (B,T,C)
    bf16* datty;          // (B,T,C)
    bf16* dqkv;           // (B,T,3C)
    bf16* dfch;           // (B,T,4C), also the GELU input gradient (in place)
    float* reduce;        // fp32 partial sums of the dbias/dweight column reductions
    float* attention_scratch; // attention_scratch_floats(B,T,C,NH) fp32 (kernels/attention.cuh)
} BackwardScratchGPU;

/*
 * A micro-batch on its way to the GPU, double-buffered: forward k fills pinned host slot k % 2
 * (tokens, targets and the encoder backward's token grouping, made on the host while the GPU
 * runs the previous micro-step), one copy on the copy stream moves it to device slot k % 2, and
 * the compute stream waits for that copy only. The host refills a pinned slot once its copy is
 * done (two forwards later: long finished); the copy overwrites a device slot once the
 * micro-step that read it (its backward) is done.
 * Slot layout, ints, for a call with BT = B*T: inputs (BT) | targets (BT) | the encoder plan:
 * tokens (BT) | starts (BT+1) | positions (BT); see kernels/encoder.cuh.
 */
#define BATCH_SLOTS 2
#define BATCH_SLOT_INTS(BT) (5 * (size_t)(BT) + 1)
typedef struct {
    int* host[BATCH_SLOTS];           // pinned
    int* device[BATCH_SLOTS];
    int num_buckets[BATCH_SLOTS];     // distinct tokens of the slot's micro-batch
    cudaEvent_t copied[BATCH_SLOTS];  // copy stream: the slot's host-to-device copy is done
    cudaEvent_t consumed[BATCH_SLOTS]; // compute stream: the last kernel reading the device slot
    cudaStream_t copy_stream;
    int* bucket_counts;               // host scratch of the grouping (Vp ints)
    int slot;                         // the slot of the last forward
} BatchStaging;

// The loss accumulators on the device: one per step slot (zero/engine.h's ZERO_STEP_SLOTS, the
// step's results are read one step later) and one for evaluation (val loss, tests).
#define LOSS_EVAL_SLOT ZERO_STEP_SLOTS

typedef struct {
    GPT2Config config;
    ParamLayout layout;
    ZeroEngine zero;
    int B, T; // activation capacity
    ActivationsGPU acts;
    BackwardScratchGPU scratch;
    void* act_memory;
    size_t act_bytes;
    BatchStaging batch;
    float* loss_sum_device; // ZERO_STEP_SLOTS + 1 accumulated mean losses (fp32), one per slot
    float* loss_host;       // pinned copies of the step slots' losses
    int loss_slot;          // where forward adds its loss (gpt2_take_loss reads it)
    float* logits_host;     // Vp floats, for sampling
    bf16* logits_staging;   // Vp bf16, host
    size_t wte_rows_max;    // R: rows of the largest wte vocab chunk
    float dloss_scale;      // of the last forward: backward turns the recomputed logits into dlogits with it
    int* chunk_bucket;      // (K+1) host: the encoder plan's buckets of chunk k are [chunk_bucket[k], chunk_bucket[k+1])
    OpTimer timer;          // -ot: the per-kernel table (common/op_timer.cuh); off unless asked for
} GPT2;

// The op family running from here on the compute stream, for the per-kernel table (-ot).
#define OP_MARK(model, family) op_timer_mark(&(model)->timer, family)

static void* carve(char** cursor, size_t bytes) {
    void* p = *cursor;
    *cursor += (bytes + 255) / 256 * 256; // 256-byte aligned: cuBLASLt's preferred alignment
    return p;
}

// Bytes of each activation and scratch buffer for (B, T), in the order gpt2_alloc_activations
// carves them (each 256-byte aligned there); returns their count. The logits are one vocab
// chunk's, B x T x R (R = wte_chunk_rows_max: the LM head walks wte's chunks, never holding all
// B x T x Vp), and sampling's B x Vp.
#define GPT2_ACTIVATION_BUFFERS 33
static int gpt2_activation_sizes(const ParamLayout* layout, int B, int T, size_t bytes[GPT2_ACTIVATION_BUFFERS]) {
    const GPT2Config* c = &layout->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, h = sizeof(bf16), f = sizeof(float), R = wte_chunk_rows_max(layout);
    size_t reduce_floats = layernorm_backward_scratch_floats((int)C);
    size_t matmul_floats = matmul_backward_scratch_floats(4 * (int)C);
    if (matmul_floats > reduce_floats) reduce_floats = matmul_floats;
    size_t b[GPT2_ACTIVATION_BUFFERS] = {
        BT * C * h, L * BT * C * h, L * BT * f, L * BT * f, L * BT * 3 * C * h, L * BT * C * h, L * B * NH * T * f,
        L * BT * C * h, L * BT * C * h, L * BT * C * h, L * BT * f, L * BT * f, L * BT * 4 * C * h, L * BT * 4 * C * h,
        L * BT * C * h, L * BT * C * h, BT * C * h, BT * f, BT * f, BT * R * h, BT * f, BT * f, BT * f, BT * f,
        (size_t)T * C * h, (size_t)B * Vp * h,
        BT * C * h, BT * C * h, BT * C * h, BT * 3 * C * h, BT * 4 * C * h, reduce_floats * f,
        attention_scratch_floats(B, T, (int)C, (int)NH) * f,
    };
    memcpy(bytes, b, sizeof(b));
    return GPT2_ACTIVATION_BUFFERS;
}

static void gpt2_alloc_activations(GPT2* model, int B, int T) {
    const GPT2Config* c = &model->config;
    size_t Vp = c->padded_vocab_size, BT = (size_t)B * T;
    void** slots[GPT2_ACTIVATION_BUFFERS] = {
        (void**)&model->acts.encoded, (void**)&model->acts.ln1, (void**)&model->acts.ln1_mean, (void**)&model->acts.ln1_rstd,
        (void**)&model->acts.qkv, (void**)&model->acts.atty, (void**)&model->acts.att_lse, (void**)&model->acts.attproj,
        (void**)&model->acts.residual2, (void**)&model->acts.ln2, (void**)&model->acts.ln2_mean, (void**)&model->acts.ln2_rstd,
        (void**)&model->acts.fch, (void**)&model->acts.fch_gelu, (void**)&model->acts.fcproj, (void**)&model->acts.residual3,
        (void**)&model->acts.lnf, (void**)&model->acts.lnf_mean, (void**)&model->acts.lnf_rstd, (void**)&model->acts.logits,
        (void**)&model->acts.row_max, (void**)&model->acts.row_sum, (void**)&model->acts.target_logit,
        (void**)&model->acts.losses, (void**)&model->acts.wpe, (void**)&model->acts.logits_last,
        (void**)&model->scratch.dresidual, (void**)&model->scratch.dln,
        (void**)&model->scratch.datty, (void**)&model->scratch.dqkv, (void**)&model->scratch.dfch,
        (void**)&model->scratch.reduce, (void**)&model->scratch.attention_scratch,
    };
    model->wte_rows_max = wte_chunk_rows_max(&model->layout);
    size_t bytes[GPT2_ACTIVATION_BUFFERS], total = 0;
    int n = gpt2_activation_sizes(&model->layout, B, T, bytes);
    for (int i = 0; i < n; i++) total += (bytes[i] + 255) / 256 * 256;
    model->act_bytes = 0;
    model->act_memory = device_alloc(total, &model->act_bytes, "activations");
    char* cursor = (char*)model->act_memory;
    for (int i = 0; i < n; i++) *slots[i] = carve(&cursor, bytes[i]);

    BatchStaging* st = &model->batch;
    for (int k = 0; k < BATCH_SLOTS; k++) {
        st->device[k] = (int*)device_alloc(BATCH_SLOT_INTS(BT) * sizeof(int), &model->act_bytes, "micro-batch (tokens, targets, encoder plan)");
        CUDA_CHECK(cudaMallocHost((void**)&st->host[k], BATCH_SLOT_INTS(BT) * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->copied[k], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->consumed[k], cudaEventDisableTiming));
        st->num_buckets[k] = 0;
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&st->copy_stream, cudaStreamNonBlocking));
    st->bucket_counts = (int*)host_alloc(Vp * sizeof(int), "encoder plan");
    st->slot = 0;
    model->loss_sum_device = (float*)device_alloc((LOSS_EVAL_SLOT + 1) * sizeof(float), &model->act_bytes, "loss");
    CUDA_CHECK(cudaMemset(model->loss_sum_device, 0, (LOSS_EVAL_SLOT + 1) * sizeof(float)));
    CUDA_CHECK(cudaMallocHost((void**)&model->loss_host, ZERO_STEP_SLOTS * sizeof(float)));
    model->loss_slot = LOSS_EVAL_SLOT;
    memset(&model->timer, 0, sizeof(model->timer)); // off (main turns it on for -ot)
    model->logits_host = (float*)host_alloc(Vp * sizeof(float), "logits");
    model->logits_staging = (bf16*)host_alloc(Vp * sizeof(bf16), "logits");
    model->chunk_bucket = (int*)host_alloc((size_t)(model->layout.num_wte_units + 1) * sizeof(int), "encoder plan");
    zero_reserve_kept_rows(&model->zero, BT, c->channels); // stages 2-3: the encoder's rows of wte's gradient
    model->B = B;
    model->T = T;
}

/*
 * Build the model for `init` (an llm.c model file or a depth descriptor dN) with B x T
 * activations on this rank's GPU. Parameters are initialized (or read) on the host, fp32, exactly
 * as the CPU build does, then handed to the engine (fp32 master, bf16 params).
 */
static void gpt2_build(GPT2* model, const char* init, int B, int T, uint64_t seed, int rank, int world_size,
                       const ZeroOffloadArgs* offload) {
    // A depth, a model file, or the resume checkpoint (read by rank 0 and broadcast): train/model_source.h.
    int from_file = model_source_config_for(init, T, &model->config);
    const GPT2Config* c = &model->config;
    if (c->channels % 64 != 0 || c->padded_vocab_size % 8 != 0) {
        fprintf(stderr, "error: %s: C=%d, Vp=%d unsupported by the GPU kernels; expected C a multiple of 64 and Vp of 8\n",
                init, c->channels, c->padded_vocab_size);
        exit(1);
    }
    attention_check_head_size(c->channels, c->num_heads);
    param_layout_build(&model->layout, &model->config, world_size, ZERO_ALIGN);
    zero_init_placed(&model->zero, &model->layout, rank, world_size, offload); // offload NULL: all on the device
    // Unit by unit, as the CPU model: the engine keeps this rank's fp32 master weights, bf16 parameters.
    model_source_params_to_engine(&model->zero, &model->layout, init, from_file, seed);
    gpt2_alloc_activations(model, B, T);
    // The set-up's memsets ran on the legacy stream, which the engine's non-blocking streams do
    // not order against: finish them before the first kernel.
    CUDA_CHECK(cudaDeviceSynchronize());
}

static void gpt2_free(GPT2* model) {
    zero_free(&model->zero);
    param_layout_free(&model->layout);
    CUDA_CHECK(cudaFree(model->act_memory));
    BatchStaging* st = &model->batch;
    for (int k = 0; k < BATCH_SLOTS; k++) {
        CUDA_CHECK(cudaFree(st->device[k]));
        CUDA_CHECK(cudaFreeHost(st->host[k]));
        CUDA_CHECK(cudaEventDestroy(st->copied[k]));
        CUDA_CHECK(cudaEventDestroy(st->consumed[k]));
    }
    CUDA_CHECK(cudaStreamDestroy(st->copy_stream));
    free(st->bucket_counts);
    CUDA_CHECK(cudaFree(model->loss_sum_device));
    CUDA_CHECK(cudaFreeHost(model->loss_host));
    free(model->logits_host); free(model->logits_staging); free(model->chunk_bucket);
}

#endif // MODEL_GPT2_GPU_BUFFERS_CUH
