/*
 * quant_grad_blocks.c: how coarse qgZ's gradient codes are on real gradients, by block size
 * (not a test; it chose ZERO_PP_DEFAULT_GRAD_BLOCK in zero/zeropp/zeropp.h, -qbg). Trains a model on
 * one rank (stage 0, fp32, AdamW lr 1e-3 with 20 warmup steps, as dev/bench/zeropp_convergence.sh)
 * on a token shard and, at the listed steps, quantizes that step's micro-batch gradient the way
 * qgZ's first all-to-all does (cpu/quantize.h): every unit cut into N = 4 chunks (one a rank),
 * each chunk blockwise from its own start. For int8 and int4 and blocks 32..2048 it prints
 *   rms     relative RMS error of the whole gradient, sqrt(sum (g - q(g))^2 / sum g^2);
 *   unit    the median over units of each unit's own relative RMS error (small units, such as
 *           LayerNorm's, count as much as wte's chunks);
 *   zeroed  the share of non-zero gradients whose code is 0: below half a step of their block's
 *           scale (AdamW divides by sqrt(v), so a small gradient that rounds to 0 is a lost
 *           update, not a small error);
 *   B/elem  bytes per element on the wire incl. the fp32 scale of each block: bits/8 + 4/block.
 * Each value is averaged over the listed steps. The wte vocab chunks' gradient here is the sum
 * of its LM-head and encoder parts (qgZ reduces the two separately: zero/zeropp/zeropp.h).
 *
 * usage: build/quant_grad_blocks [dN (d2)] [B (4)] [T (64)] [steps (1,50,150)] [shard]
 */
#define TESTING
#include "train_gpt2.c"

#define QGB_CHUNKS 4 // ranks of the convergence runs
static const int qgb_blocks[] = {32, 64, 128, 256, 512, 1024, 2048};
#define QGB_NUM_BLOCKS (int)(sizeof(qgb_blocks) / sizeof(qgb_blocks[0]))

static int compare_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/*
 * One format (bits, block) on the gradient g (the layout's units, chunked as above): adds the
 * whole-vector rms, the median unit's rms and the zeroed share into out[0..2].
 */
static void measure(const ParamLayout* layout, const float* g, int bits, int block, double* out) {
    size_t max_chunk = 0;
    for (int u = 0; u < layout->num_units; u++) {
        size_t S = (layout->units[u].padded_numel + QGB_CHUNKS - 1) / QGB_CHUNKS;
        if (S > max_chunk) max_chunk = S;
    }
    uint8_t* codes = (uint8_t*)malloc(quant_code_bytes(max_chunk, bits));
    float* scales = (float*)malloc(quant_num_blocks(max_chunk, block) * sizeof(float));
    float* back = (float*)malloc(max_chunk * sizeof(float));
    double* unit_rms = (double*)malloc((size_t)layout->num_units * sizeof(double));
    double err2 = 0.0, sum2 = 0.0, nonzero = 0.0, zeroed = 0.0;
    int units = 0;
    for (int u = 0; u < layout->num_units; u++) {
        const ParamUnit* pu = &layout->units[u];
        size_t P = pu->padded_numel, S = (P + QGB_CHUNKS - 1) / QGB_CHUNKS;
        double ue = 0.0, us = 0.0;
        for (size_t lo = 0; lo < P; lo += S) {
            size_t n = lo + S < P ? S : P - lo;
            const float* x = g + pu->offset + lo;
            quantize_blocks(codes, scales, x, n, bits, block);
            dequantize_blocks(back, codes, scales, n, bits, block, 0);
            for (size_t i = 0; i < n; i++) {
                double d = (double)x[i] - (double)back[i];
                ue += d * d;
                us += (double)x[i] * x[i];
                if (x[i] != 0.0f) { nonzero += 1.0; zeroed += back[i] == 0.0f; }
            }
        }
        err2 += ue; sum2 += us;
        if (us > 0.0) unit_rms[units++] = sqrt(ue / us);
    }
    qsort(unit_rms, (size_t)units, sizeof(double), compare_double);
    out[0] += sum2 > 0.0 ? sqrt(err2 / sum2) : 0.0;
    out[1] += units > 0 ? (units % 2 ? unit_rms[units / 2] : 0.5 * (unit_rms[units / 2 - 1] + unit_rms[units / 2])) : 0.0;
    out[2] += nonzero > 0.0 ? zeroed / nonzero : 0.0;
    free(codes); free(scales); free(back); free(unit_rms);
}

int main(int argc, char** argv) {
    const char* depth = argc > 1 ? argv[1] : "d2";
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 64;
    const char* step_list = argc > 4 ? argv[4] : "1,50,150";
    const char* shard = argc > 5 ? argv[5] : "data/tinyshakespeare/tiny_shakespeare_train.bin";
    int at[16], num_at = 0;
    for (const char* p = step_list; *p && num_at < 16; p++) {
        at[num_at++] = atoi(p);
        while (p[1] && p[1] != ',') p++;
        if (p[1] == ',') p++;
    }
    GPT2Config probe;
    if (gpt2_config_from_descriptor(depth, &probe) != 0 || B < 1 || T < 1 || num_at == 0 || at[0] < 1) {
        fprintf(stderr, "error: arguments: expected [dN] [B] [T] [steps, from 1, comma-separated] [shard]\n");
        return 1;
    }
    for (int k = 1; k < num_at; k++)
        if (at[k] <= at[k - 1]) { fprintf(stderr, "error: steps %s: expected increasing steps\n", step_list); return 1; }
    DataLoader loader;
    dataloader_init(&loader, shard, (size_t)B, (size_t)T, 0, 1);
    GPT2 model;
    gpt2_build(&model, depth, B, T, 0, 0, 1, NULL);
    AdamWConfig opt = {0.9f, 0.95f, 1e-8f, 0.0f, 1.0f}; // the trainer's defaults (-c 0, -cl 1)
    LRSchedule schedule = {LR_COSINE, 1e-3f, 20, at[num_at - 1], 1.0f};
    double acc[2][QGB_NUM_BLOCKS][3] = {{{0}}};
    for (int step = 0, next = 0; next < num_at; step++) {
        zero_grads_zero(&model.zero);
        dataloader_next_batch(&loader);
        gpt2_forward(&model, loader.inputs, loader.targets, B, T);
        gpt2_backward(&model, loader.targets, B, T, 1.0f / (float)(B * T), 1);
        if (step + 1 == at[next]) {
            printf("step %d: loss %.4f\n", step + 1, model.mean_loss);
            for (int f = 0; f < 2; f++)
                for (int k = 0; k < QGB_NUM_BLOCKS; k++) measure(&model.layout, model.zero.grads, f == 0 ? 8 : 4, qgb_blocks[k], acc[f][k]);
            next++;
        }
        zero_optimizer_step(&model.zero, &opt, lr_at_step(&schedule, step), step + 1);
    }
    printf("qgZ gradient codes on %s, B %d x T %d, %d chunks a unit, mean over steps %s:\n", depth, B, T, QGB_CHUNKS, step_list);
    printf("%5s | %-32s | %-32s\n", "block", "int8: rms / unit / zeroed / B/elem", "int4: rms / unit / zeroed / B/elem");
    for (int k = 0; k < QGB_NUM_BLOCKS; k++) {
        printf("%5d", qgb_blocks[k]);
        for (int f = 0; f < 2; f++) {
            const double* a = acc[f][k];
            printf(" | %5.2f%% / %5.2f%% / %5.2f%% / %.4f", 100.0 * a[0] / num_at, 100.0 * a[1] / num_at, 100.0 * a[2] / num_at,
                   (f == 0 ? 1.0 : 0.5) + 4.0 / qgb_blocks[k]);
        }
        printf("\n");
    }
    gpt2_free(&model);
    dataloader_free(&loader);
    return 0;
}
