/*
 * zero/accounting.h: what a rank allocates and sends, printed beside the formulas of docs/design.md "Stages"
 * (zero/layout.h) at start-up. Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ACCOUNTING_H
#define ZERO_ACCOUNTING_H
#ifndef ZERO_CUH
#error "zero/accounting.h is part of the ZeRO engine; include zero.cuh"
#endif

// Print what this rank allocates and sends beside the formulas of docs/design.md "Stages" (rank 0 calls it): the
// fp32 rows on the CPU, the mixed-precision rows (bf16 + fp32 master and m, v) on the GPU.
static void zero_print_accounting(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ParamLayout* layout = z->layout;
    size_t psi = layout->padded_numel;
    int N = z->world_size;
    size_t state = z->bytes_params + z->bytes_grads + z->bytes_optimizer;
    size_t formula = ZERO_HAS_MASTER ? zero_state_bytes_formula_mixed(ZERO_STAGE, psi, N) : zero_state_bytes_formula(ZERO_STAGE, psi, N);
    const char* formula_text = ZERO_HAS_MASTER ? zero_state_bytes_formula_mixed_text[ZERO_STAGE] : zero_state_bytes_formula_text[ZERO_STAGE];
    long long sent = zero_elements_sent_formula(ZERO_STAGE, psi, N, grad_accum_steps, zero_embedding_numel(layout), zero_hook_tied_block_numel(z));
    fprintf(out, "zero: stage %d | world size %d | Ψ = %zu padded parameters (%zu real; units padded to multiples of %d x %d)\n",
            ZERO_STAGE, N, psi, layout->num_parameters, N, layout->align);
    fprintf(out, "zero: bytes per rank: params %zu + grads %zu + optimizer %zu = %zu; formula %s = %zu (%s) | working units %zu | ring receive buffer %zu\n",
            z->bytes_params, z->bytes_grads, z->bytes_optimizer, state, formula_text, formula,
            state == formula ? "equal" : "DIFFERENT", z->bytes_working, z->bytes_ring);
    zero_print_cluster(out);
    fprintf(out, "zero: elements sent per rank per step (ring count, A = %d micro-steps, E = %zu in %d wte units): formula %s = %lld (%.1f MiB %s); counted on each step line\n",
            grad_accum_steps, zero_embedding_numel(layout), layout->num_wte_units, zero_elements_sent_text(ZERO_STAGE, zero_hook_tied_block_numel(z)), sent,
            sent * (double)sizeof(ZeroFloat) / 1048576.0, ZERO_HAS_MASTER ? "bf16" : "fp32");
    zero_hook_offload_print_accounting(z, grad_accum_steps, out); // -zo, -zp: RAM, NVMe (and the GPU's copies) beside their formulas
}

#endif // ZERO_ACCOUNTING_H
