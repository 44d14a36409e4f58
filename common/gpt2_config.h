/*
 * gpt2_config.h: GPT-2 model configuration, depth descriptors, and the flat parameter
 * buffer's layout (tensor table + units). Host C shared by the CPU and CUDA builds.
 *
 * Flat buffer (docs/design.md "The flat buffer and its units"): all parameters live in one
 * contiguous buffer laid out by *unit*:
 *   unit 0          embedding: wte rows [0, R0) (R0, C), wpe (maxT, C)
 *   unit 1 + l      layer l:   ln1w (C), ln1b (C), qkvw (3C, C), qkvb (3C), attprojw (C, C),
 *                              attprojb (C), ln2w (C), ln2b (C), fcw (4C, C), fcb (4C),
 *                              fcprojw (C, 4C), fcprojb (C)
 *   unit L + 1      final:     lnfw (C), lnfb (C)
 *   unit L + 1 + k  wte vocab chunk k = 1 .. K-1: wte rows [R0 + (k-1) R, ...) (R, C), the last
 *                   one the remainder up to Vp
 * The tied wte (Vp x C, 65% of the parameters at d6) is split by vocab rows into K units no
 * larger than about a layer unit (param_layout_wte_rows), so that ZeRO-3 gathers it, and stages
 * 2-3 reduce-scatter its gradient, chunk by chunk like any layer, and no working buffer ever holds
 * all of it. The encoder and the LM head visit the chunks in vocab order (wte_unit(layout, k)).
 * The chunks beyond the first sit after the final unit so that the other units keep their
 * indices (UNIT_LAYER, UNIT_FINAL) whatever K is; K = 1 is the one-unit embedding [wte, wpe].
 * Each unit is padded at its end so its length divides by world_size * align elements; rank r
 * owns the r-th contiguous slice of every unit. Inside a unit the tensor offsets do not depend
 * on world_size, so the model code addresses a unit the same way whether it lives in the full
 * buffer or in a gathered working buffer (ZeRO stage 3).
 *
 * llm.c's model files store the same 16 tensor kinds in "kind-major" order
 * (wte, wpe, all L ln1w, all L ln1b, ..., lnfw, lnfb); checkpoint.h permutes between the two.
 */
#ifndef GPT2_CONFIG_H
#define GPT2_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int max_seq_len;       // maxT, 1024 for GPT-2
    int vocab_size;        // V, 50257 for GPT-2
    int padded_vocab_size; // Vp, V rounded up to a multiple of 128 (padded logits are ignored)
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// The 16 parameter tensor kinds, in llm.c's file order.
enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB,
    NUM_PARAM_KINDS
};
#define NUM_LAYER_KINDS 12 // P_LN1W .. P_FCPROJB, one tensor per layer each

static const char* const param_kind_names[NUM_PARAM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

static inline int round_up_int(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }
static inline size_t round_up_size(size_t x, size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

/*
 * Parse a depth descriptor "dN" into a fresh GPT-2 config (V = 50257, Vp = 50304, maxT = 1024).
 * GPT-2 family: d12 (C=768, NH=12, 124M), d24 (1024, 16, 350M), d36 (1280, 20, 774M),
 * d48 (1600, 25, 1558M); also d6 (384, 6) and small test depths d1..d4 (C = 64*depth, NH = depth).
 * Returns 0 on success, -1 for an unknown descriptor (the caller prints the error line).
 */
static inline int gpt2_config_from_descriptor(const char* descriptor, GPT2Config* cfg) {
    static const struct { const char* name; int L, C, NH; } table[] = {
        {"d1", 1, 64, 1},     {"d2", 2, 128, 2},    {"d3", 3, 192, 3},    {"d4", 4, 256, 4},
        {"d6", 6, 384, 6},    {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20},
        {"d48", 48, 1600, 25},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(descriptor, table[i].name) == 0) {
            cfg->max_seq_len = 1024;
            cfg->vocab_size = 50257;
            cfg->padded_vocab_size = round_up_int(50257, 128);
            cfg->num_layers = table[i].L;
            cfg->channels = table[i].C;
            cfg->num_heads = table[i].NH;
            return 0;
        }
    }
    return -1;
}

// Shape of tensor kind k (row-major, PyTorch-style (out, in) for weights); returns ndim.
static inline int param_kind_shape(const GPT2Config* cfg, int kind, size_t shape[2]) {
    size_t C = cfg->channels, Vp = cfg->padded_vocab_size, maxT = cfg->max_seq_len;
    switch (kind) {
    case P_WTE: shape[0] = Vp; shape[1] = C; return 2;
    case P_WPE: shape[0] = maxT; shape[1] = C; return 2;
    case P_QKVW: shape[0] = 3 * C; shape[1] = C; return 2;
    case P_QKVB: shape[0] = 3 * C; shape[1] = 1; return 1;
    case P_ATTPROJW: shape[0] = C; shape[1] = C; return 2;
    case P_FCW: shape[0] = 4 * C; shape[1] = C; return 2;
    case P_FCB: shape[0] = 4 * C; shape[1] = 1; return 1;
    case P_FCPROJW: shape[0] = C; shape[1] = 4 * C; return 2;
    default: shape[0] = C; shape[1] = 1; return 1; // layernorm weights/biases, attprojb, fcprojb
    }
}

// One parameter tensor in the flat buffer.
typedef struct {
    int kind;           // P_*
    int layer;          // layer index for per-layer kinds, -1 otherwise
    int unit;           // which unit holds it
    int ndim;           // 1 or 2; 2-D tensors get weight decay
    size_t shape[2];
    size_t numel;       // elements
    size_t offset;      // elements from the start of the flat buffer
    size_t unit_offset; // elements from the start of its unit
    size_t file_offset; // elements from the start of the parameters in an llm.c model file
    size_t row0;        // first row of its kind's tensor it holds: wte's vocab chunks; 0 otherwise
} ParamTensor;

// One unit: a contiguous, padded group of tensors; the bucket for collectives.
typedef struct {
    size_t offset;       // elements from the start of the flat buffer (multiple of world_size*align)
    size_t numel;        // real elements
    size_t padded_numel; // numel rounded up to a multiple of world_size * align
    size_t shard_numel;  // padded_numel / world_size: each rank's slice
    int first_tensor;    // index into ParamLayout.tensors
    int num_tensors;
} ParamUnit;

typedef struct {
    GPT2Config config;
    int world_size;        // ranks the padding was computed for
    int align;             // elements; each shard slice is a multiple of this
    int num_units;         // L + 1 + K
    int num_tensors;       // 2 + 12 L + 2 + (K - 1)
    int num_wte_units;     // K: wte's vocab chunks (unit 0's rows, then units L+2 .. L+K)
    ParamUnit* units;
    ParamTensor* tensors;  // in flat-buffer (unit) order
    size_t num_parameters; // real parameters (what llm.c counts), elements
    size_t padded_numel;   // whole flat buffer with padding, elements
    size_t shard_numel;    // padded_numel / world_size
} ParamLayout;

#define UNIT_EMBEDDING 0
#define UNIT_LAYER(l) (1 + (l))
#define UNIT_FINAL(cfg) (1 + (cfg)->num_layers)
#define WTE_ROW_BLOCK 64 // wte chunks are whole blocks of 64 rows

// The unit holding wte's vocab chunk k (0 <= k < K), and that chunk's wte piece in the tensor table.
static inline int wte_unit(const ParamLayout* layout, int k) { return k == 0 ? UNIT_EMBEDDING : layout->config.num_layers + 1 + k; }
static inline int wte_piece_index(const ParamLayout* layout, int k) { return k == 0 ? 0 : 4 + NUM_LAYER_KINDS * layout->config.num_layers + (k - 1); }

// R: the rows of wte's largest vocab chunk (the LM head's logits are B x T x R at a time).
static inline size_t wte_chunk_rows_max(const ParamLayout* layout) {
    size_t R = 0;
    for (int k = 0; k < layout->num_wte_units; k++)
        if (layout->tensors[wte_piece_index(layout, k)].shape[0] > R) R = layout->tensors[wte_piece_index(layout, k)].shape[0];
    return R;
}

/*
 * Rows of wte per vocab chunk for a config: *rows_first for unit 0 (which also holds wpe), *rows
 * for each later chunk (the last takes the remainder); returns K. A chunk is as large as a layer
 * unit (12C^2 + 13C elements) allows, in whole blocks of WTE_ROW_BLOCK rows, and unit 0 keeps at
 * least one block beside wpe; the later chunks are balanced. max_rows > 0 caps a chunk's rows
 * (max_rows >= Vp: K = 1, the whole wte in unit 0). A function of the config alone, never of the
 * world size, so checkpoints convert between world sizes and stages.
 */
static inline int param_layout_wte_rows(const GPT2Config* cfg, size_t max_rows, size_t* rows_first, size_t* rows) {
    size_t C = (size_t)cfg->channels, Vp = (size_t)cfg->padded_vocab_size, maxT = (size_t)cfg->max_seq_len;
    size_t layer = 12 * C * C + 13 * C;
    size_t per = layer / C / WTE_ROW_BLOCK * WTE_ROW_BLOCK;
    if (per < WTE_ROW_BLOCK) per = WTE_ROW_BLOCK;
    if (max_rows > 0 && per > max_rows) per = max_rows;
    size_t first = per > maxT + WTE_ROW_BLOCK ? (per - maxT) / WTE_ROW_BLOCK * WTE_ROW_BLOCK : WTE_ROW_BLOCK;
    if (max_rows >= Vp) first = Vp;
    if (first >= Vp) { *rows_first = Vp; *rows = 0; return 1; }
    size_t rest = Vp - first, chunks = (rest + per - 1) / per;
    size_t balanced = round_up_size((rest + chunks - 1) / chunks, WTE_ROW_BLOCK);
    *rows_first = first;
    *rows = balanced;
    return 1 + (int)((rest + balanced - 1) / balanced);
}

/*
 * Build the layout for a config and world_size ranks with per-rank slices that are multiples
 * of align elements, wte split into vocab chunks of at most wte_max_rows rows (0: the default
 * of param_layout_wte_rows; >= Vp: one embedding unit). Pure function; free with param_layout_free.
 */
static inline void param_layout_build_chunked(ParamLayout* layout, const GPT2Config* cfg, int world_size, int align, size_t wte_max_rows) {
    int L = cfg->num_layers;
    size_t wte_rows_first, wte_rows;
    int K = param_layout_wte_rows(cfg, wte_max_rows, &wte_rows_first, &wte_rows);
    layout->config = *cfg;
    layout->world_size = world_size;
    layout->align = align;
    layout->num_wte_units = K;
    layout->num_units = L + 1 + K;
    layout->num_tensors = 2 + NUM_LAYER_KINDS * L + 2 + (K - 1);
    layout->units = (ParamUnit*)calloc((size_t)layout->num_units, sizeof(ParamUnit));
    layout->tensors = (ParamTensor*)calloc((size_t)layout->num_tensors, sizeof(ParamTensor));
    if (!layout->units || !layout->tensors) { fprintf(stderr, "error: out of host memory for the parameter table\n"); exit(1); }

    // llm.c file offsets: kind-major order, each per-layer kind stored as L consecutive tensors.
    size_t kind_file_offset[NUM_PARAM_KINDS], kind_numel[NUM_PARAM_KINDS];
    size_t running = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        size_t shape[2];
        param_kind_shape(cfg, k, shape);
        kind_numel[k] = shape[0] * shape[1];
        kind_file_offset[k] = running;
        int copies = (k >= P_LN1W && k <= P_FCPROJB) ? L : 1;
        running += kind_numel[k] * (size_t)copies;
    }
    layout->num_parameters = running;

    size_t slice_multiple = (size_t)world_size * (size_t)align;
    size_t offset = 0;
    int t = 0;
    size_t C = (size_t)cfg->channels, Vp = (size_t)cfg->padded_vocab_size;
    for (int u = 0; u < layout->num_units; u++) {
        int first_kind, last_kind, layer;
        size_t wte_row0 = 0, wte_nrows = 0; // the wte rows this unit holds
        if (u == UNIT_EMBEDDING) { first_kind = P_WTE; last_kind = P_WPE; layer = -1; wte_nrows = wte_rows_first; }
        else if (u == UNIT_FINAL(cfg)) { first_kind = P_LNFW; last_kind = P_LNFB; layer = -1; }
        else if (u > UNIT_FINAL(cfg)) {
            first_kind = last_kind = P_WTE; layer = -1;
            wte_row0 = wte_rows_first + (size_t)(u - UNIT_FINAL(cfg) - 1) * wte_rows;
            wte_nrows = wte_row0 + wte_rows < Vp ? wte_rows : Vp - wte_row0;
        }
        else { first_kind = P_LN1W; last_kind = P_FCPROJB; layer = u - 1; }
        ParamUnit* unit = &layout->units[u];
        unit->offset = offset;
        unit->first_tensor = t;
        size_t in_unit = 0;
        for (int k = first_kind; k <= last_kind; k++, t++) {
            ParamTensor* pt = &layout->tensors[t];
            pt->kind = k;
            pt->layer = layer;
            pt->unit = u;
            pt->ndim = param_kind_shape(cfg, k, pt->shape);
            pt->numel = kind_numel[k];
            pt->row0 = 0;
            if (k == P_WTE) { // one vocab chunk of wte: rows [row0, row0 + shape[0])
                pt->shape[0] = wte_nrows;
                pt->numel = wte_nrows * C;
                pt->row0 = wte_row0;
            }
            pt->offset = offset + in_unit;
            pt->unit_offset = in_unit;
            pt->file_offset = kind_file_offset[k] + (layer >= 0 ? (size_t)layer * kind_numel[k] : 0) + pt->row0 * C;
            in_unit += pt->numel;
        }
        unit->num_tensors = t - unit->first_tensor;
        unit->numel = in_unit;
        unit->padded_numel = round_up_size(in_unit, slice_multiple);
        unit->shard_numel = unit->padded_numel / (size_t)world_size;
        offset += unit->padded_numel;
    }
    layout->padded_numel = offset;
    layout->shard_numel = offset / (size_t)world_size;
}

static inline void param_layout_build(ParamLayout* layout, const GPT2Config* cfg, int world_size, int align) {
    param_layout_build_chunked(layout, cfg, world_size, align, 0);
}

static inline void param_layout_free(ParamLayout* layout) {
    free(layout->units);
    free(layout->tensors);
    layout->units = NULL;
    layout->tensors = NULL;
}

// Index into layout->tensors of (kind, layer); layer is ignored for non-layer kinds. For P_WTE:
// its first vocab chunk (wte_piece_index for the others).
static inline int param_tensor_index(const ParamLayout* layout, int kind, int layer) {
    int L = layout->config.num_layers;
    if (kind == P_WTE) return 0;
    if (kind == P_WPE) return 1;
    if (kind == P_LNFW) return 2 + NUM_LAYER_KINDS * L;
    if (kind == P_LNFB) return 3 + NUM_LAYER_KINDS * L;
    return 2 + layer * NUM_LAYER_KINDS + (kind - P_LN1W);
}

// Pointers to one layer's tensors, given the start of that layer's unit (full buffer or a
// gathered working copy). Works for parameters and gradients alike (same layout).
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensors;

static inline LayerTensors layer_tensors(const ParamLayout* layout, int layer, float* unit_base) {
    const ParamTensor* t = &layout->tensors[param_tensor_index(layout, P_LN1W, layer)];
    LayerTensors lt;
    float** slots[NUM_LAYER_KINDS] = {&lt.ln1w, &lt.ln1b, &lt.qkvw, &lt.qkvb, &lt.attprojw, &lt.attprojb,
                                      &lt.ln2w, &lt.ln2b, &lt.fcw, &lt.fcb, &lt.fcprojw, &lt.fcprojb};
    for (int k = 0; k < NUM_LAYER_KINDS; k++) *slots[k] = unit_base + t[k].unit_offset;
    return lt;
}

// Print the (name, shape, offset) table, one line per tensor kind (per-layer kinds for layer 0).
static inline void param_layout_print(const ParamLayout* layout, FILE* out) {
    fprintf(out, "%-10s %-6s %-14s %12s %12s\n", "tensor", "unit", "shape", "numel", "offset");
    for (int t = 0; t < layout->num_tensors; t++) {
        const ParamTensor* pt = &layout->tensors[t];
        if (pt->layer > 0) continue;
        char shape[64];
        if (pt->ndim == 2) snprintf(shape, sizeof(shape), "(%zu, %zu)", pt->shape[0], pt->shape[1]);
        else snprintf(shape, sizeof(shape), "(%zu)", pt->shape[0]);
        fprintf(out, "%-10s %-6d %-14s %12zu %12zu\n", param_kind_names[pt->kind], pt->unit, shape, pt->numel, pt->offset);
    }
    fprintf(out, "units: %d, parameters: %zu, flat buffer with padding: %zu elements\n",
            layout->num_units, layout->num_parameters, layout->padded_numel);
}

#endif // GPT2_CONFIG_H
