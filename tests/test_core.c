/*
 * test_core.c: unit tests for the host code shared by both builds: the parameter table and unit
 * layout (offsets, padding, the llm.c file permutation), GPT-2 init, the learning-rate schedule
 * and the model-file round trip (fp32 and bf16). Prints one PASS/FAIL line per check.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include "common/model_file.h"
#include "common/gpt2_config.h"
#include "common/init.h"
#include "common/schedule.h"

static int failures = 0;
#define CHECK(name, cond)                                   \
    do {                                                    \
        if (cond) printf("PASS %s\n", name);                \
        else { printf("FAIL %s: %s\n", name, #cond); failures++; } \
    } while (0)

// GPT-2 124M as llm.c counts it (wte padded to Vp = 50304 rows): Vp*C + maxT*C + L*(12C^2+13C) + 2C.
static void test_parameter_count(void) {
    GPT2Config cfg = {0};
    CHECK("descriptor_d12_known", gpt2_config_from_descriptor("d12", &cfg) == 0);
    CHECK("descriptor_d5_unknown", gpt2_config_from_descriptor("d5", &cfg) != 0);
    gpt2_config_from_descriptor("d12", &cfg);
    ParamLayout layout;
    param_layout_build(&layout, &cfg, 1, 1);
    CHECK("d12_has_124475904_parameters", layout.num_parameters == 124475904);
    CHECK("d12_padded_vocab_50304", cfg.padded_vocab_size == 50304);
    // wte in vocab chunks (common/gpt2_config.h), worked by hand for d12: a layer unit holds
    // 7087872 / 768 = 9229 rows -> 9216 (whole 64-row blocks); unit 0 keeps 9216 - 1024 = 8192
    // rows beside wpe; the other 42112 rows need ceil(42112 / 9216) = 5 chunks, balanced to
    // ceil(42112 / 5) = 8423 -> 8448 rows, the last 42112 - 4 * 8448 = 8320.
    CHECK("d12_units_are_L_plus_1_plus_6_wte_chunks", layout.num_units == 19 && layout.num_wte_units == 6);
    int chunks_ok = layout.tensors[wte_piece_index(&layout, 0)].shape[0] == 8192 && layout.tensors[wte_piece_index(&layout, 0)].unit == 0;
    for (int k = 1; k < 6; k++) {
        const ParamTensor* t = &layout.tensors[wte_piece_index(&layout, k)];
        chunks_ok &= t->kind == P_WTE && t->unit == wte_unit(&layout, k) && wte_unit(&layout, k) == 13 + k &&
                     t->row0 == 8192 + (size_t)(k - 1) * 8448 && t->shape[0] == (k < 5 ? 8448u : 8320u) && t->unit_offset == 0;
    }
    CHECK("d12_wte_vocab_chunks_by_hand", chunks_ok);
    param_layout_free(&layout);
    param_layout_build_chunked(&layout, &cfg, 1, 1, (size_t)cfg.padded_vocab_size);
    CHECK("wte_in_one_unit_when_asked", layout.num_units == 14 && layout.num_wte_units == 1 &&
                                        layout.units[0].numel == (50304u + 1024u) * 768u);
    param_layout_free(&layout);
    gpt2_config_from_descriptor("d48", &cfg);
    param_layout_build(&layout, &cfg, 1, 1);
    CHECK("d48_has_about_1558M_parameters", layout.num_parameters > 1550000000 && layout.num_parameters < 1570000000);
    param_layout_free(&layout);
}

// Every unit padded to a multiple of world_size*align, units and tensors contiguous, the file
// offsets a permutation of [0, num_parameters), for N that divide nothing (3) and odd aligns.
static void test_layout_invariants(void) {
    const char* descriptors[] = {"d1", "d2", "d6"};
    int worlds[] = {1, 2, 3, 4, 7};
    int aligns[] = {1, 3, 64};
    int ok_pad = 1, ok_contig = 1, ok_shard = 1, ok_perm = 1, ok_sum = 1;
    for (int d = 0; d < 3; d++) for (int w = 0; w < 5; w++) for (int a = 0; a < 3; a++) {
        GPT2Config cfg = {0};
        gpt2_config_from_descriptor(descriptors[d], &cfg);
        ParamLayout L;
        param_layout_build(&L, &cfg, worlds[w], aligns[a]);
        size_t mult = (size_t)worlds[w] * aligns[a], expect_offset = 0, total = 0;
        for (int u = 0; u < L.num_units; u++) {
            ParamUnit* un = &L.units[u];
            if (un->offset != expect_offset || un->offset % mult != 0) ok_contig = 0;
            if (un->padded_numel % mult != 0 || un->padded_numel < un->numel || un->padded_numel - un->numel >= mult) ok_pad = 0;
            if (un->shard_numel * (size_t)worlds[w] != un->padded_numel || un->shard_numel % aligns[a] != 0) ok_shard = 0;
            size_t in_unit = 0;
            for (int i = 0; i < un->num_tensors; i++) {
                ParamTensor* t = &L.tensors[un->first_tensor + i];
                if (t->unit != u || t->unit_offset != in_unit || t->offset != un->offset + in_unit) ok_contig = 0;
                in_unit += t->numel;
            }
            if (in_unit != un->numel) ok_contig = 0;
            expect_offset += un->padded_numel;
            total += un->numel;
        }
        if (total != L.num_parameters || expect_offset != L.padded_numel) ok_sum = 0;
        // File offsets: each element of [0, num_parameters) covered exactly once.
        unsigned char* seen = (unsigned char*)calloc(L.num_parameters, 1);
        for (int t = 0; t < L.num_tensors; t++)
            for (size_t j = 0; j < L.tensors[t].numel; j++) {
                size_t k = L.tensors[t].file_offset + j;
                if (k >= L.num_parameters || seen[k]) ok_perm = 0;
                else seen[k] = 1;
            }
        free(seen);
        param_layout_free(&L);
    }
    CHECK("layout_units_contiguous_and_aligned", ok_contig);
    CHECK("layout_units_padded_to_world_times_align", ok_pad);
    CHECK("layout_shards_split_units_evenly", ok_shard);
    CHECK("layout_counts_every_parameter_once", ok_sum);
    CHECK("layout_file_offsets_are_a_permutation", ok_perm);
}

// The llm.c file order for d2: wte, wpe, ln1w[0], ln1w[1], ln1b[0], ... (kind-major).
static void test_file_order(void) {
    GPT2Config cfg = {0};
    gpt2_config_from_descriptor("d2", &cfg);
    ParamLayout L;
    param_layout_build(&L, &cfg, 1, 1);
    size_t C = 128, Vp = 50304, maxT = 1024;
    const ParamTensor* ln1w1 = &L.tensors[param_tensor_index(&L, P_LN1W, 1)];
    const ParamTensor* ln1b0 = &L.tensors[param_tensor_index(&L, P_LN1B, 0)];
    const ParamTensor* qkvw1 = &L.tensors[param_tensor_index(&L, P_QKVW, 1)];
    CHECK("file_offset_ln1w_layer1", ln1w1->file_offset == Vp * C + maxT * C + C);
    CHECK("file_offset_ln1b_layer0", ln1b0->file_offset == Vp * C + maxT * C + 2 * C);
    CHECK("file_offset_qkvw_layer1", qkvw1->file_offset == Vp * C + maxT * C + 4 * C + 3 * C * C);
    CHECK("tensor_index_roundtrip", L.tensors[param_tensor_index(&L, P_FCW, 1)].kind == P_FCW &&
                                    L.tensors[param_tensor_index(&L, P_FCW, 1)].layer == 1);
    float base[1];
    LayerTensors lt = layer_tensors(&L, 1, base);
    CHECK("layer_tensors_points_at_unit_offsets", lt.fcw == base + L.tensors[param_tensor_index(&L, P_FCW, 1)].unit_offset);
    param_layout_free(&L);
}

// Init: std 0.02 weights, scaled residual projections, zero padded vocab rows, and identical
// values whatever the world size (per-tensor streams), which ZeRO stage 3 relies on.
static void test_init(void) {
    GPT2Config cfg = {0};
    gpt2_config_from_descriptor("d2", &cfg);
    ParamLayout L1, L3;
    param_layout_build(&L1, &cfg, 1, 64);
    param_layout_build(&L3, &cfg, 3, 64);
    int same = 1;
    for (int u = 0; u < L1.num_units; u++) {
        float* a = (float*)malloc(L1.units[u].padded_numel * sizeof(float));
        float* b = (float*)malloc(L3.units[u].padded_numel * sizeof(float));
        gpt2_init_unit(&L1, u, a, 42);
        gpt2_init_unit(&L3, u, b, 42);
        if (memcmp(a, b, L1.units[u].numel * sizeof(float)) != 0) same = 0;
        if (u == UNIT_LAYER(0)) {
            LayerTensors p = layer_tensors(&L1, 0, a);
            CHECK("init_layernorm_weight_one_bias_zero", p.ln1w[0] == 1.0f && p.ln1b[0] == 0.0f && p.qkvb[0] == 0.0f);
            double s = 0; size_t n = (size_t)cfg.channels * cfg.channels;
            for (size_t j = 0; j < n; j++) s += (double)p.attprojw[j] * p.attprojw[j];
            double expect = 0.02 / sqrt(2.0 * cfg.num_layers);
            // 16384 samples: relative std error of the sample std ~ 1/sqrt(2n) = 0.55%; allow 3%.
            CHECK("init_residual_projection_scaled", fabs(sqrt(s / n) - expect) < 0.03 * expect);
        }
        free(a); free(b);
    }
    CHECK("init_independent_of_world_size", same);
    // wte, gathered from its vocab chunks into one (Vp, C) array, equals the init of the layout
    // that keeps wte in one unit (one stream; a chunk skips ahead), and has std 0.02, padded rows 0.
    size_t C = (size_t)cfg.channels, V = (size_t)cfg.vocab_size, Vp = (size_t)cfg.padded_vocab_size;
    float* wte = (float*)calloc(Vp * C, sizeof(float));
    for (int k = 0; k < L1.num_wte_units; k++) {
        const ParamTensor* t = &L1.tensors[wte_piece_index(&L1, k)];
        float* a = (float*)malloc(L1.units[t->unit].padded_numel * sizeof(float));
        gpt2_init_unit(&L1, t->unit, a, 42);
        memcpy(wte + t->row0 * C, a + t->unit_offset, t->numel * sizeof(float));
        free(a);
    }
    ParamLayout one;
    param_layout_build_chunked(&one, &cfg, 1, 64, Vp);
    float* whole = (float*)malloc(one.units[0].padded_numel * sizeof(float));
    gpt2_init_unit(&one, 0, whole, 42);
    CHECK("init_wte_independent_of_vocab_chunking", L1.num_wte_units > 1 && memcmp(wte, whole, Vp * C * sizeof(float)) == 0);
    double s = 0;
    for (size_t j = 0; j < V * C; j++) s += (double)wte[j] * wte[j];
    // 6.4M samples: the sample std is within 1e-3 relative of 0.02 with overwhelming probability.
    CHECK("init_wte_std_0.02", fabs(sqrt(s / (V * C)) - 0.02) < 2e-4);
    int pad_zero = 1;
    for (size_t j = V * C; j < Vp * C; j++) if (wte[j] != 0.0f) pad_zero = 0;
    CHECK("init_padded_vocab_rows_zero", pad_zero);
    free(wte); free(whole);
    param_layout_free(&one);
    param_layout_free(&L1);
    param_layout_free(&L3);
}

static void test_schedule(void) {
    LRSchedule s = {LR_COSINE, 1.0f, 10, 110, 0.1f};
    CHECK("warmup_first_step", fabsf(lr_at_step(&s, 0) - 0.1f) < 1e-7f);
    CHECK("warmup_last_step_reaches_peak", fabsf(lr_at_step(&s, 9) - 1.0f) < 1e-7f);
    CHECK("cosine_starts_at_peak", fabsf(lr_at_step(&s, 10) - 1.0f) < 1e-6f);
    CHECK("cosine_midpoint_is_mean", fabsf(lr_at_step(&s, 60) - 0.55f) < 1e-6f);
    CHECK("cosine_ends_at_final_fraction", fabsf(lr_at_step(&s, 110) - 0.1f) < 1e-6f);
    s.kind = LR_LINEAR;
    CHECK("linear_quarter_point", fabsf(lr_at_step(&s, 35) - (1.0f - 0.25f * 0.9f)) < 1e-6f);
    s.kind = LR_CONSTANT;
    CHECK("constant_after_warmup", lr_at_step(&s, 100) == 1.0f);
    LRKind k;
    CHECK("schedule_names", lr_kind_from_name("cosine", &k) == 0 && lr_kind_from_name("wsd", &k) != 0);
}

static uint16_t float_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); // round to nearest even
}

// Write a model file and read it back: fp32 bit-exact; a bf16 (version 5) copy within bf16 rounding.
static void test_checkpoint_roundtrip(void) {
    GPT2Config cfg = {0};
    gpt2_config_from_descriptor("d1", &cfg);
    ParamLayout L;
    param_layout_build(&L, &cfg, 2, 64); // padding must not leak into the file
    float* a = (float*)calloc(L.padded_numel, sizeof(float));
    float* b = (float*)calloc(L.padded_numel, sizeof(float));
    for (int u = 0; u < L.num_units; u++) gpt2_init_unit(&L, u, a + L.units[u].offset, 7);
    char path[256];
    snprintf(path, sizeof(path), "/tmp/test_core_%d.bin", (int)getpid());
    model_file_write(path, &L, a, 0x123456789abcdefull, 7);
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK("checkpoint_no_temp_file_left", access(tmp, F_OK) != 0);
    FILE* f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK("checkpoint_file_size_is_header_plus_params", size == (long)(1024 + L.num_parameters * 4));
    GPT2Config back;
    int version;
    model_file_read_header(path, &back, &version);
    CHECK("checkpoint_header_roundtrip", version == 3 && back.channels == cfg.channels && back.num_layers == cfg.num_layers &&
                                         back.padded_vocab_size == cfg.padded_vocab_size && back.vocab_size == cfg.vocab_size);
    model_file_read_params(path, &L, b, -1);
    CHECK("checkpoint_fp32_roundtrip_bit_exact", memcmp(a, b, L.padded_numel * sizeof(float)) == 0);
    // Single-unit read (what a ZeRO-3 rank does) gives the same unit.
    float* unit = (float*)calloc(L.units[1].padded_numel, sizeof(float));
    model_file_read_params(path, &L, unit, 1);
    CHECK("checkpoint_single_unit_read", memcmp(unit, a + L.units[1].offset, L.units[1].padded_numel * sizeof(float)) == 0);
    free(unit);
    // bf16 version 5: same header with version 5, 2 bytes per parameter in file order.
    char path16[300];
    snprintf(path16, sizeof(path16), "%s.bf16", path);
    FILE* in = fopen(path, "rb");
    FILE* out = fopen(path16, "wb");
    int header[256];
    fread(header, 4, 256, in);
    header[1] = 5;
    fwrite(header, 4, 256, out);
    float x;
    while (fread(&x, 4, 1, in) == 1) { uint16_t h = float_to_bf16_bits(x); fwrite(&h, 2, 1, out); }
    fclose(in);
    fclose(out);
    model_file_read_params(path16, &L, b, -1);
    double worst = 0.0;
    for (size_t i = 0; i < L.padded_numel; i++) {
        double rel = fabs((double)a[i] - b[i]) / (fabs(a[i]) > 1e-30 ? fabs(a[i]) : 1.0);
        if (rel > worst) worst = rel;
    }
    // bf16 keeps 8 significant bits (7 stored + 1 implicit): round-to-nearest error <= 2^-8 relative.
    CHECK("checkpoint_bf16_read_within_rounding", worst <= 1.0 / 256.0);
    remove(path);
    remove(path16);
    free(a);
    free(b);
    param_layout_free(&L);
}

int main(void) {
    test_parameter_count();
    test_layout_invariants();
    test_file_order();
    test_init();
    test_schedule();
    test_checkpoint_roundtrip();
    return failures == 0 ? 0 : 1;
}
