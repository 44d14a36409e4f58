/*
 * test_zero_layout.c: the ZeRO shard layout (common/gpt2_config.h padding, zero.cuh ownership
 * and formulas) checked against independent arithmetic, for several model configs (GPT-2 depths
 * and an odd one whose sizes divide by nothing), world sizes 1..8 (3, 5, 7 divide nothing) and
 * alignments 1 and ZERO_ALIGN. Pure functions: no MPI call is made.
 * Prints "PASS <name>" or "FAIL <name>: <why>" per check; exits 1 if any check failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero.cuh"

static int failures = 0;
static char why[512];

static void report(int ok, const char* name) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

#define REQUIRE(cond, ...) do { if (!(cond)) { snprintf(why, sizeof(why), __VA_ARGS__); return 0; } } while (0)

// Units: padded to a multiple of N*align, minimal padding, back to back, shards = padded/N.
static int check_padding(const ParamLayout* L, int N, int align) {
    size_t offset = 0, total_numel = 0;
    for (int u = 0; u < L->num_units; u++) {
        const ParamUnit* pu = &L->units[u];
        size_t q = (size_t)N * align;
        REQUIRE(pu->offset == offset, "unit %d offset %zu, expected %zu", u, pu->offset, offset);
        REQUIRE(pu->padded_numel % q == 0, "unit %d padded %zu not a multiple of %zu", u, pu->padded_numel, q);
        REQUIRE(pu->padded_numel >= pu->numel && pu->padded_numel - pu->numel < q, "unit %d padding %zu not minimal (< %zu)", u, pu->padded_numel - pu->numel, q);
        REQUIRE(pu->shard_numel * (size_t)N == pu->padded_numel && pu->shard_numel % (size_t)align == 0, "unit %d shard %zu", u, pu->shard_numel);
        size_t tensors = 0;
        for (int i = 0; i < pu->num_tensors; i++) tensors += L->tensors[pu->first_tensor + i].numel;
        REQUIRE(tensors == pu->numel, "unit %d tensors sum %zu != numel %zu", u, tensors, pu->numel);
        offset += pu->padded_numel;
        total_numel += pu->numel;
    }
    REQUIRE(L->padded_numel == offset && L->shard_numel * (size_t)N == offset, "flat buffer %zu / shard %zu", L->padded_numel, L->shard_numel);
    REQUIRE(total_numel == L->num_parameters, "units hold %zu elements, config has %zu", total_numel, L->num_parameters);
    return 1;
}

// Ownership: for every stage and buffer, the ranks' slices of a unit are disjoint, cover the
// padded unit, sit where the stored buffer keeps them, and are aligned.
static int check_ownership(const ParamLayout* L, int N, int align) {
    for (int stage = 0; stage <= 3; stage++) {
        for (int b = 0; b < ZERO_NUM_BUFS; b++) {
            if (b == ZERO_BUF_MASTER) continue; // none in the fp32 CPU build (checked below)
            size_t stored = zero_buffer_numel(L, stage, (ZeroBuffer)b, 0);
            int sharded = zero_buffer_sharded(stage, (ZeroBuffer)b);
            REQUIRE(stored == (sharded ? L->padded_numel / N : L->padded_numel), "stage %d %s stores %zu", stage, zero_buffer_names[b], stored);
            size_t shard_running = 0;
            for (int u = 0; u < L->num_units; u++) {
                const ParamUnit* pu = &L->units[u];
                for (int r = 0; r < N; r++) {
                    size_t off = zero_owned_offset(L, stage, (ZeroBuffer)b, r, u);
                    size_t expected = sharded ? shard_running : pu->offset + (size_t)r * pu->shard_numel;
                    REQUIRE(off == expected, "stage %d %s rank %d unit %d offset %zu, expected %zu", stage, zero_buffer_names[b], r, u, off, expected);
                    REQUIRE(off % (size_t)align == 0, "stage %d %s rank %d unit %d offset %zu unaligned", stage, zero_buffer_names[b], r, u, off);
                    REQUIRE(off + pu->shard_numel <= stored, "slice past the end of the stored buffer");
                }
                shard_running += pu->shard_numel;
            }
        }
        REQUIRE(zero_buffer_numel(L, stage, ZERO_BUF_MASTER, 0) == 0, "the CPU build stores master weights");
        size_t master = zero_buffer_numel(L, stage, ZERO_BUF_MASTER, 1);
        REQUIRE(master == (stage >= 1 ? L->padded_numel / N : L->padded_numel), "GPU master weights: stage %d stores %zu", stage, master);
    }
    return 1;
}

// AdamW's per-tensor pieces (zero_tensor_overlap) over every rank's slice cover each real
// element of each unit exactly once, and no padding element.
static int check_adam_coverage(const ParamLayout* L, int N) {
    for (int u = 0; u < L->num_units; u++) {
        const ParamUnit* pu = &L->units[u];
        unsigned char* seen = (unsigned char*)calloc(pu->padded_numel, 1);
        for (int r = 0; r < N; r++) {
            size_t begin = (size_t)r * pu->shard_numel, end = begin + pu->shard_numel;
            for (int i = 0; i < pu->num_tensors; i++) {
                const ParamTensor* t = &L->tensors[pu->first_tensor + i];
                size_t first, len = zero_tensor_overlap(t, begin, end, &first);
                if (len == 0) continue;
                if (first < begin || first + len > end || first < t->unit_offset || first + len > t->unit_offset + t->numel) {
                    free(seen);
                    REQUIRE(0, "unit %d rank %d tensor %d piece [%zu, %zu) outside slice or tensor", u, r, i, first, first + len);
                }
                for (size_t j = first; j < first + len; j++) seen[j]++;
            }
        }
        for (size_t j = 0; j < pu->padded_numel; j++) {
            int want = j < pu->numel ? 1 : 0;
            int times = seen[j];
            if (times != want) { free(seen); REQUIRE(0, "unit %d element %zu updated %d times, expected %d", u, j, times, want); }
        }
        free(seen);
    }
    return 1;
}

// Bytes for params + grads + m + v from the stored sizes equal docs/design.md "Memory per rank", computed here
// from Ψ directly; elements sent, summed collective by collective over the schedule, equal the
// closed forms 2Ψ(N-1)/N (stages 0-2, A = 1) and 3Ψ(N-1)/N (stage 3), and with A micro-steps
// stage 2's (A+1)Ψ(N-1)/N and stage 3's 3AΨ(N-1)/N.
static int check_formulas(const ParamLayout* L, int N) {
    size_t psi = L->padded_numel;
    for (int stage = 0; stage <= 3; stage++) {
        size_t bytes = 4 * (zero_buffer_numel(L, stage, ZERO_BUF_PARAMS, 0) + zero_buffer_numel(L, stage, ZERO_BUF_GRADS, 0) +
                            zero_buffer_numel(L, stage, ZERO_BUF_ADAM_M, 0) + zero_buffer_numel(L, stage, ZERO_BUF_ADAM_V, 0));
        size_t literal = stage == 0 ? 16 * psi : stage == 1 ? 8 * psi + 8 * psi / N : stage == 2 ? 4 * psi + 12 * psi / N : 16 * psi / N;
        REQUIRE(bytes == literal && zero_state_bytes_formula(stage, psi, N) == literal, "stage %d bytes %zu, formula %zu, literal %zu",
                stage, bytes, zero_state_bytes_formula(stage, psi, N), literal);
        // The GPU build (zero/gpu/engine_gpu.cuh): bf16 params, one micro-step's bf16 gradients at
        // stages 0, 1 (Ψ; stages 2, 3 write working units instead), their fp32 accumulation as
        // zero_buffer_numel says (full or shard), fp32 master weights, m and v; docs/design.md "Memory per rank"
        // 2Ψ+(2+4)Ψ+12Ψ rows (issue 13: fp32 gradient accumulation).
        size_t grads_bf16 = stage <= 1 ? psi : 0;
        size_t mixed = 2 * (zero_buffer_numel(L, stage, ZERO_BUF_PARAMS, 1) + grads_bf16) +
                       4 * (zero_buffer_numel(L, stage, ZERO_BUF_GRADS, 1) + zero_buffer_numel(L, stage, ZERO_BUF_MASTER, 1) +
                            zero_buffer_numel(L, stage, ZERO_BUF_ADAM_M, 1) + zero_buffer_numel(L, stage, ZERO_BUF_ADAM_V, 1));
        size_t mixed_literal = stage == 0 ? 20 * psi : stage == 1 ? 8 * psi + 12 * psi / N : stage == 2 ? 2 * psi + 16 * psi / N : 18 * psi / N;
        REQUIRE(mixed == mixed_literal && zero_state_bytes_formula_mixed(stage, psi, N) == mixed_literal,
                "stage %d mixed-precision bytes %zu, formula %zu, literal %zu", stage, mixed, zero_state_bytes_formula_mixed(stage, psi, N), mixed_literal);
        // E: the units holding the tied wte, reduce-scattered a second time (encoder's part) at
        // stages 2-3 and gathered a third time (LM head backward) at stage 3.
        unsigned char* is_wte = (unsigned char*)calloc((size_t)L->num_units, 1);
        for (int u = 0; u < L->num_units; u++)
            for (int i = 0; i < L->units[u].num_tensors; i++) if (L->tensors[L->units[u].first_tensor + i].kind == P_WTE) is_wte[u] = 1;
        size_t e = 0;
        for (int u = 0; u < L->num_units; u++) if (is_wte[u]) e += L->units[u].padded_numel;
        REQUIRE(e == zero_embedding_numel(L), "E %zu, zero_embedding_numel %zu", e, zero_embedding_numel(L));
        for (int A = 1; A <= 3; A++) {
            long long counted = 0;
            for (int u = 0; u < L->num_units; u++) {
                size_t n = L->units[u].padded_numel;
                if (stage == 0) counted += zero_ring_all_reduce_elements(n, N);
                if (stage == 1) counted += zero_ring_reduce_scatter_elements(n, N) + zero_ring_all_gather_elements(n, N);
                if (stage == 2) counted += A * (is_wte[u] ? 2 : 1) * zero_ring_reduce_scatter_elements(n, N) + zero_ring_all_gather_elements(n, N);
                if (stage == 3) counted += A * ((is_wte[u] ? 3 : 2) * zero_ring_all_gather_elements(n, N) + (is_wte[u] ? 2 : 1) * zero_ring_reduce_scatter_elements(n, N));
            }
            long long per = (long long)(psi / N) * (N - 1), e_per = (long long)(e / N) * (N - 1);
            long long literal_sent = stage <= 1 ? 2 * per : stage == 2 ? (A + 1) * per + A * e_per : 3LL * A * per + 2LL * A * e_per;
            if (A == 1) REQUIRE(literal_sent == (stage == 3 ? 3 : 2) * (long long)psi * (N - 1) / N + (stage == 3 ? 2 : stage == 2 ? 1 : 0) * (long long)e * (N - 1) / N,
                                "DESIGN closed form");
            REQUIRE(counted == literal_sent && zero_elements_sent_formula(stage, psi, N, A, e, 0) == literal_sent,
                    "stage %d A %d: counted %lld, formula %lld, literal %lld", stage, A, counted, zero_elements_sent_formula(stage, psi, N, A, e, 0), literal_sent);
        }
        free(is_wte);
        size_t largest = 0; // every working unit is the largest unit's size, wte's chunks included
        for (int u = 0; u < L->num_units; u++) if (L->units[u].padded_numel > largest) largest = L->units[u].padded_numel;
        size_t set = 3 * largest;
        REQUIRE(zero_working_numel(L, stage) == (stage == 2 ? set : stage == 3 ? 2 * set : 0), "stage %d working units", stage);
        // ... and stays within a small multiple of a layer unit: wte's chunks are no larger than
        // a layer unit, unit 0 (a chunk and wpe) at most maxT + 64 rows more.
        size_t layer = L->units[UNIT_LAYER(0)].padded_numel, slack = (size_t)(L->config.max_seq_len + 64) * L->config.channels;
        REQUIRE(largest <= layer + slack + (size_t)N * L->align, "largest unit %zu vs layer %zu", largest, layer);
    }
    return 1;
}

int main(void) {
    GPT2Config configs[4];
    const char* names[4] = {"d1", "d2", "d6", "odd"};
    gpt2_config_from_descriptor("d1", &configs[0]);
    gpt2_config_from_descriptor("d2", &configs[1]);
    gpt2_config_from_descriptor("d6", &configs[2]);
    // Odd sizes: C = 40, 5 heads, 3 layers, V = 1001 (Vp 1024), maxT = 37: unit sizes are
    // 16840 (wte's first 384 rows and wpe), 19720, 80 and 12800 (wte's other two vocab chunks):
    // none divides by 3 or 7, the first three not by 64.
    configs[3] = (GPT2Config){.max_seq_len = 37, .vocab_size = 1001, .padded_vocab_size = 1024, .num_layers = 3, .num_heads = 5, .channels = 40};
    int aligns[2] = {1, ZERO_ALIGN};
    for (int c = 0; c < 4; c++) {
        int ok_pad = 1, ok_own = 1, ok_adam = 1, ok_formula = 1;
        char first_why[512] = "";
        for (int N = 1; N <= 8; N++) {
            for (int a = 0; a < 2; a++) {
                ParamLayout L;
                param_layout_build(&L, &configs[c], N, aligns[a]);
                int p = check_padding(&L, N, aligns[a]);
                if (!p && ok_pad) snprintf(first_why, sizeof(first_why), "N=%d align=%d: %.400s", N, aligns[a], why);
                ok_pad &= p;
                int o = check_ownership(&L, N, aligns[a]);
                if (!o && ok_own) snprintf(first_why, sizeof(first_why), "N=%d align=%d: %.400s", N, aligns[a], why);
                ok_own &= o;
                if (c != 2 || N <= 4) { // d6 is large; a few N suffice for coverage
                    int ad = check_adam_coverage(&L, N);
                    if (!ad && ok_adam) snprintf(first_why, sizeof(first_why), "N=%d align=%d: %.400s", N, aligns[a], why);
                    ok_adam &= ad;
                }
                int f = check_formulas(&L, N);
                if (!f && ok_formula) snprintf(first_why, sizeof(first_why), "N=%d align=%d: %.400s", N, aligns[a], why);
                ok_formula &= f;
                param_layout_free(&L);
            }
        }
        char name[128];
        snprintf(why, sizeof(why), "%.500s", first_why);
        snprintf(name, sizeof(name), "zero_units_padded_minimally_%s_np1to8", names[c]); report(ok_pad, name);
        snprintf(name, sizeof(name), "zero_owned_slices_disjoint_aligned_%s_np1to8", names[c]); report(ok_own, name);
        snprintf(name, sizeof(name), "zero_adamw_pieces_cover_each_element_once_%s", names[c]); report(ok_adam, name);
        snprintf(name, sizeof(name), "zero_bytes_and_elements_sent_match_design_formulas_%s", names[c]); report(ok_formula, name);
    }
    // A concrete case worked by hand: the odd config at N = 3, align 64 (q = 192). A layer unit
    // is 12*40^2 + 13*40 = 19720 elements = 493 rows of C = 40, so a wte chunk is 448 rows (7
    // blocks of 64); unit 0 keeps 448 - 37 = 411 -> 384 rows beside wpe: 384*40 + 37*40 = 16840
    // elements, padded to 16896 (88 * 192). The other 640 rows: ceil(640/448) = 2 chunks of 320
    // rows (12800 elements, padded to 12864), units L+2 and L+3 = 5 and 6. Rank 2's slice of unit
    // 0 starts at 2 * 5632 = 11264 in a full buffer and at 0 in a shard buffer.
    {
        ParamLayout L;
        param_layout_build(&L, &configs[3], 3, ZERO_ALIGN);
        int ok = L.num_wte_units == 3 && L.num_units == 7 && L.units[0].numel == 16840 && L.units[0].padded_numel == 16896 &&
                 L.units[0].shard_numel == 5632 && L.units[5].numel == 12800 && L.units[6].numel == 12800 &&
                 L.units[6].padded_numel == 12864 && L.tensors[wte_piece_index(&L, 2)].row0 == 704 &&
                 zero_owned_offset(&L, 0, ZERO_BUF_PARAMS, 2, 0) == 11264 && zero_owned_offset(&L, 3, ZERO_BUF_PARAMS, 2, 0) == 0 &&
                 zero_owned_offset(&L, 3, ZERO_BUF_PARAMS, 2, 1) == 5632;
        snprintf(why, sizeof(why), "K %d, unit 0: numel %zu padded %zu shard %zu, unit 6 numel %zu", L.num_wte_units, L.units[0].numel,
                 L.units[0].padded_numel, L.units[0].shard_numel, L.units[6].numel);
        report(ok, "zero_odd_config_np3_worked_example");
        param_layout_free(&L);
    }
    return failures ? 1 : 0;
}
