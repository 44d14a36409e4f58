/*
 * train/plan_exec.h: --plan in a trainer (train_gpt2, train_gpt2cu, their per-stage and emulated
 * builds) is a thin call: the process becomes ./plan_gpt2 with the same arguments (execv), so
 * `./train_gpt2 --plan h100 ...` and `./plan_gpt2 --plan h100 ...` print the same plan. The
 * planner is its own binary (plan/plan_gpt2.c; why: plan/plan.h); a trainer compiles none of its
 * set-up or measurements. Host C, no engine state: called first thing in main().
 *
 * Where plan_gpt2 is looked for: $PLAN_GPT2 when set, else beside this binary, then one and two
 * folders up (build/train_gpt2_z0 and build/emu/train_gpt2cu_z3 find the repository's
 * ./plan_gpt2). Not found or not runnable: one error line, exit 1.
 */
#ifndef TRAIN_PLAN_EXEC_H
#define TRAIN_PLAN_EXEC_H
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// If argv holds --plan, replace this process by plan_gpt2 with the same arguments; returns only
// when there is no --plan.
static void plan_exec_if_asked(int argc, char** argv) {
    int asked = 0;
    for (int i = 1; i < argc; i++) if (strcmp(argv[i], "--plan") == 0) asked = 1;
    if (!asked) return;
    char tried[3][PATH_MAX + 32];
    int n = 0;
    const char* env = getenv("PLAN_GPT2");
    if (env != NULL && env[0] != '\0') snprintf(tried[n++], sizeof(tried[0]), "%s", env);
    else {
        char self[PATH_MAX];
        ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (len <= 0) snprintf(self, sizeof(self), "%s", argv[0]); else self[len] = '\0';
        char* slash = strrchr(self, '/');
        if (slash == NULL) snprintf(self, sizeof(self), "."); else *slash = '\0';
        snprintf(tried[n++], sizeof(tried[0]), "%s/plan_gpt2", self);
        snprintf(tried[n++], sizeof(tried[0]), "%s/../plan_gpt2", self);
        snprintf(tried[n++], sizeof(tried[0]), "%s/../../plan_gpt2", self);
    }
    for (int i = 0; i < n; i++) {
        if (access(tried[i], X_OK) != 0) continue;
        fflush(stdout);
        argv[0] = tried[i];
        execv(tried[i], argv);
        fprintf(stderr, "error: --plan: cannot run %s (%s); expected the planner binary (make plan_gpt2)\n", tried[i], strerror(errno));
        exit(1);
    }
    fprintf(stderr, "error: --plan: the planner is its own binary and %s is not there; expected `make plan_gpt2` "
            "(or PLAN_GPT2=path)\n", tried[0]);
    exit(1);
}

#endif // TRAIN_PLAN_EXEC_H
