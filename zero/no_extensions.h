/*
 * zero/no_extensions.h: the lesson build only (make train_gpt2|train_gpt2cu ZERO_EXT=none, -DZERO_EXT=0),
 * where zero.cuh includes it instead of the offload, ZeRO++, trace and tied-rows folders. The engine's
 * hooks are empty there (zero/hooks.h); here is what trainers and models call of those extensions, under
 * the extensions' own names: their flags give one error line, the rest does nothing.
 */
#ifndef ZERO_NO_EXTENSIONS_H
#define ZERO_NO_EXTENSIONS_H
#ifndef ZERO_CUH
#error "zero/no_extensions.h is part of the ZeRO engine; include zero.cuh"
#endif
#if ZERO_EXT
#error "zero/no_extensions.h is the lesson build's (ZERO_EXT=0) only"
#endif

// The one line each extension's flag gets in this build.
#define ZERO_NO_EXT_FMT "error: %s: this build has no %s (built with make ZERO_EXT=none, the core alone); expected %s, or the default build (ZERO_EXT=all)"

// ---- offload and NVMe (-zo, -zp, -zd): only "none" is accepted ----
static int zero_placement_parse(const char* s, int* placement) { *placement = strcmp(s, "none") != 0; return 0; }
static int zero_offload_check_args(const ZeroOffloadArgs* a, int stage, char* err, size_t cap) {
    const char* flag = a->optimizer ? "-zo" : a->params ? "-zp" : a->dir ? "-zd" : NULL;
    if (flag) snprintf(err, cap, ZERO_NO_EXT_FMT, flag, "offload or NVMe placement", flag[2] == 'd' ? "no -zd" : "-zo none -zp none");
    return flag ? -1 : 0;
}
static const char* zero_offload_step_text(const ZeroEngine* z, char* buf, size_t cap) { buf[0] = '\0'; return buf; }
static const char* zero_offload_step_fields(const ZeroEngine* z, char* buf, size_t cap) { buf[0] = '\0'; return buf; }
static const char* zero_offload_config_fields(const ZeroEngine* z, int grad_accum_steps, char* buf, size_t cap) {
    snprintf(buf, cap, "\"offload_optimizer\":\"none\",\"offload_params\":\"none\","); return buf; // as the default build logs
}

// ---- ZeRO++ (-qw, -qg, -hp): off ----
static int zero_pp_check_flags(int qw, int qg, int qg_bits, int hp, int block, int stage, int gpu_build, char* err, size_t cap) {
    const char* flag = qw ? "-qw" : qg ? "-qg" : hp != 1 ? "-hp" : NULL;
    if (flag) snprintf(err, cap, ZERO_NO_EXT_FMT, flag, "ZeRO++", "-qw 0 -qg 0 -hp 1");
    return flag != NULL;
}
static int zero_pp_check_grad_block(int grad_block, char* err, size_t cap) { return 0; }
static int zero_pp_check_offload(int qw, int hp, const ZeroOffloadArgs* offload, int gpu_build, char* err, size_t cap) { return 0; }
static int zero_pp_check_group(int hp, int world_size, char* err, size_t cap) { return 0; }
static int zero_pp_on(const ZeroEngine* z) { return 0; }
static void zero_pp_setup(ZeroEngine* z, int qw, int qg, int qg_bits, int hp, int block, int grad_block) {}
static void zero_pp_pass(ZeroEngine* z, int backward) {}
static void zero_pp_print_setup(const ZeroEngine* z, int grad_accum_steps, FILE* out) {}
static const char* zero_pp_config_fields(const ZeroEngine* z, int grad_accum_steps, char* buf, size_t cap) { buf[0] = '\0'; return buf; }
static void zero_pp_step_bytes(const ZeroEngine* z, long long* within, long long* across) { *within = *across = 0; }
static void zero_pp_formula_split(const ZeroEngine* z, int grad_accum_steps, long long* within, long long* across) { *within = *across = 0; }

// ---- trace (-tr): no timeline ----
typedef enum { ZERO_TRACE_FORWARD, ZERO_TRACE_BACKWARD, ZERO_TRACE_OPTIMIZER } ZeroTracePhase;
static inline int zero_trace_lm_head(int k) { return -2 - k; }
static void zero_trace_check_steps(const char* path, const char* steps, int first_step, int last_step, int start_step, int max_steps) {
    char err[512];
    snprintf(err, sizeof(err), ZERO_NO_EXT_FMT, "-tr", "trace", "no -tr");
    zero_startup_agree(path == NULL, err, "checking the traced steps"); // with -tr every rank stops, the lowest says why
}
static void zero_trace_open(ZeroEngine* z, const char* path, int first_step, int last_step, int grad_accum_steps) {}
static void zero_trace_compute(ZeroEngine* z, ZeroTracePhase phase, int unit) {}
static void zero_trace_step_end(ZeroEngine* z) {}
static void zero_trace_close(ZeroEngine* z, int grad_accum_steps) {}

#endif // ZERO_NO_EXTENSIONS_H
