/*
 * test_attention_cudnn_steps.c: the decisions of the cuDNN attention path without cuDNN or a GPU
 * (kernels/attention_cudnn_steps.h, which kernels/attention_cudnn.cpp runs its graph building
 * through): which shapes use cuDNN (not sampling's B = 1, not T < 64), and that a failure at each
 * graph-building step (validate, build_operation_graph, create_execution_plans, check_support,
 * build_plans, workspace), forced by ATTENTION_CUDNN_FAIL or returned by the step, stops the
 * steps there and yields one fallback line naming the graph and the step. What this does not
 * run: cuDNN itself (the frontend calls behind each step); dev/gpu_check.sh runs those.
 * Prints PASS/FAIL lines; exits 1 on a failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../kernels/attention_cudnn_steps.h"

static int failures = 0;
static void report(int ok, const char* name, const char* detail) {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    if (!ok) failures++;
}

// A fake graph: records which steps ran; step `fail_at` returns an error (-1: none).
typedef struct { int ran[ATTENTION_CUDNN_NUM_STEPS]; int fail_at; } FakeGraph;
static int fake_step(void* ctx, int step, char* why, size_t cap) {
    FakeGraph* g = (FakeGraph*)ctx;
    g->ran[step]++;
    if (step == g->fail_at) { snprintf(why, cap, "fake cuDNN refusal at %s", attention_cudnn_step_names[step]); return 1; }
    return 0;
}

// Steps 0..upto-1 ran once each, none after.
static int ran_exactly_before(const FakeGraph* g, int upto) {
    for (int s = 0; s < ATTENTION_CUDNN_NUM_STEPS; s++)
        if (g->ran[s] != (s < upto ? 1 : 0)) return 0;
    return 1;
}

int main(void) {
    char detail[512], why[256];
    // Shapes: sampling (B = 1, T = 1..64) and T < 64 never use cuDNN; B > 1 with T >= 64 does.
    int sampling_uses = 0;
    for (int T = 1; T <= 1024; T++) sampling_uses += attention_cudnn_shape_wanted(1, T);
    report(sampling_uses == 0, "attention_cudnn_sampling_b1_uses_flash", "");
    report(!attention_cudnn_shape_wanted(8, 63) && !attention_cudnn_shape_wanted(8, 1), "attention_cudnn_t_below_64_uses_flash", "");
    report(attention_cudnn_shape_wanted(2, 64) && attention_cudnn_shape_wanted(8, 1024), "attention_cudnn_training_shapes_use_cudnn", "");

    // No failure: every step runs once.
    unsetenv("ATTENTION_CUDNN_FAIL");
    FakeGraph g = {{0}, -1};
    int step = attention_cudnn_run_steps(fake_step, &g, why, sizeof(why));
    report(step == -1 && ran_exactly_before(&g, ATTENTION_CUDNN_NUM_STEPS), "attention_cudnn_all_steps_run", "");

    for (int s = 0; s < ATTENTION_CUDNN_NUM_STEPS; s++) {
        const char* name = attention_cudnn_step_names[s];
        char test[96];
        // Forced by the environment: that step does not run, the earlier ones did, none after.
        setenv("ATTENTION_CUDNN_FAIL", name, 1);
        FakeGraph f = {{0}, -1};
        step = attention_cudnn_run_steps(fake_step, &f, why, sizeof(why));
        snprintf(test, sizeof(test), "attention_cudnn_forced_%s_falls_back", name);
        snprintf(detail, sizeof(detail), "returned %d (%s)", step, step >= 0 ? why : "none");
        report(step == s && ran_exactly_before(&f, s) && strstr(why, "ATTENTION_CUDNN_FAIL") != NULL, test, detail);
        // Refused by (fake) cuDNN: stops there with its reason, the step ran, none after.
        unsetenv("ATTENTION_CUDNN_FAIL");
        FakeGraph r = {{0}, s};
        step = attention_cudnn_run_steps(fake_step, &r, why, sizeof(why));
        snprintf(test, sizeof(test), "attention_cudnn_refused_%s_falls_back", name);
        report(step == s && ran_exactly_before(&r, s + 1) && strstr(why, "fake cuDNN refusal") != NULL, test, "");
        // The fallback line: one line, naming graph, step and the flash kernels.
        FILE* tmp = tmpfile();
        attention_cudnn_report_fallback(tmp, "forward B 8 T 1024 NH 12 HS 64", s, why);
        rewind(tmp);
        char line[1024] = "", extra[8];
        int got = fgets(line, sizeof(line), tmp) != NULL, more = fgets(extra, sizeof(extra), tmp) != NULL;
        fclose(tmp);
        snprintf(test, sizeof(test), "attention_cudnn_%s_fallback_is_one_line", name);
        report(got && !more && strstr(line, "forward B 8 T 1024") && strstr(line, name) && strstr(line, "flash"), test, "");
    }

    // An unknown step name: one error line, exit 1 (a typo must not silently test nothing).
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        setenv("ATTENTION_CUDNN_FAIL", "valdiate", 1);
        FakeGraph u = {{0}, -1};
        attention_cudnn_run_steps(fake_step, &u, why, sizeof(why));
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    report(WIFEXITED(status) && WEXITSTATUS(status) == 1, "attention_cudnn_unknown_step_name_is_an_error", "");
    return failures ? 1 : 0;
}
