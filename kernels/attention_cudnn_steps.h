/*
 * attention_cudnn_steps.h: when cuDNN's fused attention is used and what happens when building
 * its graph fails, without cuDNN itself (plain C, so a host test can run it where there is no
 * GPU or cuDNN: tests/test_attention_cudnn_steps.c). kernels/attention_cudnn.cpp runs its graph
 * building through attention_cudnn_run_steps.
 *   - attention_cudnn_shape_wanted(B, T): cuDNN only for training-sized calls: B > 1 and T >= 64.
 *     Sampling (B = 1, T = 1..64 growing one token at a time) would build one cuDNN graph per T
 *     for a few microseconds of work each; short sequences gain nothing either. The project's
 *     flash kernels take those.
 *   - The graph-building steps, in order (cuDNN frontend 1.x graph API, "Graph API" and
 *     "Scaled Dot Product Attention"): validate, build_operation_graph, create_execution_plans,
 *     check_support, build_plans, workspace (get_workspace_size and its allocation). Any of them
 *     may fail (an unsupported shape, layout, cuDNN version or GPU; no memory for the workspace):
 *     the caller then prints one line and uses the project's attention for that shape.
 *   - ATTENTION_CUDNN_FAIL=<step name> in the environment makes that step fail as if cuDNN had
 *     refused it (tests: every fallback path without a cuDNN that fails).
 */
#ifndef KERNELS_ATTENTION_CUDNN_STEPS_H
#define KERNELS_ATTENTION_CUDNN_STEPS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    ATTENTION_CUDNN_VALIDATE,
    ATTENTION_CUDNN_BUILD_OPERATION_GRAPH,
    ATTENTION_CUDNN_CREATE_EXECUTION_PLANS,
    ATTENTION_CUDNN_CHECK_SUPPORT,
    ATTENTION_CUDNN_BUILD_PLANS,
    ATTENTION_CUDNN_WORKSPACE,
    ATTENTION_CUDNN_NUM_STEPS
};

static const char* const attention_cudnn_step_names[ATTENTION_CUDNN_NUM_STEPS] = {
    "validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans", "workspace"};

// B > 1 and T >= 64: cuDNN; otherwise the project's kernels (see above).
static inline int attention_cudnn_shape_wanted(int B, int T) { return B > 1 && T >= 64; }

// The step ATTENTION_CUDNN_FAIL names (-1: none). An unknown name is an error line and exit 1.
static inline int attention_cudnn_forced_failure(void) {
    const char* e = getenv("ATTENTION_CUDNN_FAIL");
    if (e == NULL || e[0] == '\0') return -1;
    for (int s = 0; s < ATTENTION_CUDNN_NUM_STEPS; s++)
        if (strcmp(e, attention_cudnn_step_names[s]) == 0) return s;
    fprintf(stderr, "error: ATTENTION_CUDNN_FAIL=%s; expected one of validate, build_operation_graph, create_execution_plans, "
            "check_support, build_plans, workspace\n", e);
    exit(1);
}

// One step: returns 0 on success, else non-zero with a message (at most `cap` bytes) in `why`.
typedef int (*AttentionCudnnStep)(void* ctx, int step, char* why, size_t cap);

/*
 * Runs steps 0..ATTENTION_CUDNN_NUM_STEPS-1 in order until one fails (or is forced to). Returns
 * -1 when all succeeded, else the failing step, with `why` filled in; the steps after it do not
 * run. `what` names the graph ("forward B 8 T 1024 NH 12 HS 64") for the caller's line.
 */
static inline int attention_cudnn_run_steps(AttentionCudnnStep run, void* ctx, char* why, size_t cap) {
    int forced = attention_cudnn_forced_failure();
    for (int s = 0; s < ATTENTION_CUDNN_NUM_STEPS; s++) {
        if (s == forced) {
            snprintf(why, cap, "forced by ATTENTION_CUDNN_FAIL=%s", attention_cudnn_step_names[s]);
            return s;
        }
        if (run(ctx, s, why, cap) != 0) return s;
    }
    return -1;
}

// The one line of a fallback (stderr): which graph, which step, cuDNN's reason, what runs instead.
static inline void attention_cudnn_report_fallback(FILE* out, const char* what, int step, const char* why) {
    fprintf(out, "attention (cuDNN): %s: %s failed (%s); using the project's flash attention for this shape\n", what,
            attention_cudnn_step_names[step], why);
}

#endif // KERNELS_ATTENTION_CUDNN_STEPS_H
