/*
 * common/flops.h: training FLOPs per token, MFU's numerator, in one place for the GPU trainer's
 * step lines (train_gpt2.cu) and the planner's MFU column (plan/plan.h). Host C, header-only.
 */
#ifndef COMMON_FLOPS_H
#define COMMON_FLOPS_H
#include <stddef.h>

// Training FLOPs per token as llm.c counts them (gpt2_estimate_mfu), for a model of
// num_parameters parameters (with the padded vocabulary's wte rows), L layers of C channels, at
// sequence length T: 6N for the weights (forward 2N, backward 4N) plus 6 L C T for attention's
// score and value products (Chowdhery et al. 2022, "PaLM", Appendix B's 12 L C T, halved for the
// causal mask), so the MFU figures compare with llm.c's.
static inline double gpt2_flops_per_token(size_t num_parameters, int L, int C, int T) {
    return 6.0 * (double)num_parameters + 6.0 * L * (double)C * T;
}

#endif // COMMON_FLOPS_H
