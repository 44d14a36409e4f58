/*
 * zero/gpu/no_extensions_gpu.cuh: the GPU part of zero/no_extensions.h (the lesson build only,
 * make train_gpt2cu ZERO_EXT=none; zero.cuh includes it beside that file, and in the CPU build it is
 * empty): what the GPU trainer calls of the GPU offload (zero/offload/offload_gpu.cuh; its flags are
 * refused by no_extensions.h's zero_offload_check_args) and the trace points of zero/gpu/comm_gpu.cuh
 * (zero/trace/trace_hooks.h), doing nothing.
 */
#ifndef ZERO_NO_EXTENSIONS_GPU_CUH
#define ZERO_NO_EXTENSIONS_GPU_CUH
#ifndef ZERO_NO_EXTENSIONS_H
#error "zero/gpu/no_extensions_gpu.cuh is part of the lesson build; include zero.cuh"
#endif
#if ZERO_GPU_BUILD

// ---- offload (-zo, -zp): never on ----
static int zero_offload_gpu_check_args(const ZeroOffloadArgs* a, char* err, size_t cap) { return 0; }
static int zero_offload_gpu_host_optimizer(const ZeroEngine* z) { return 0; }

// ---- trace (-tr): nothing recorded on the streams ----
static int zero_trace_device_collective_begin(ZeroEngine* z) { return -1; }
static void zero_trace_device_collective_end(ZeroEngine* z, int begin_ev, ZeroOpKind kind, int unit, long long elements,
                                             const char* what) {}
static void zero_trace_device_wait_label(int op_kind, int unit) {}
static int zero_trace_device_wait_begin(ZeroEngine* z) { return -1; }
static void zero_trace_device_wait_end(ZeroEngine* z, int begin_ev) {}

#endif // ZERO_GPU_BUILD
#endif // ZERO_NO_EXTENSIONS_GPU_CUH
