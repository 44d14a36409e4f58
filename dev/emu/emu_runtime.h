/*
 * emu_runtime.h: the CUDA runtime API functions the project calls, for the CPU emulation
 * (emu.h includes it; see emu.h for the model). Signatures are those of cuda_runtime_api.h,
 * which stays the declaration: a mismatch is a compile error, not a silent divergence.
 *   - Device memory is host memory from emu::guarded_alloc (poisoned with 0xff, fenced).
 *   - Copies and memsets check that the device side lies inside one cudaMalloc buffer and fail
 *     with cudaErrorInvalidValue otherwise (the real runtime may corrupt memory silently).
 *   - Everything is synchronous: a stream is a name, an event holds the host time of its record.
 *   - One device, reported as an sm_90 part with 132 SMs and 141 GB (the H200 the project
 *     targets), so size and launch heuristics take their GPU branches.
 */
#ifndef EMU_RUNTIME_H
#define EMU_RUNTIME_H

struct CUstream_st {
    unsigned flags;
};

struct CUevent_st {
    unsigned flags;
    bool recorded;
    double seconds; // host monotonic time of the last record
};

namespace emu {
static size_t device_bytes_in_use = 0;
static const size_t kDeviceBytes = (size_t)141 << 30;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Device ranges must lie inside one allocation; host ranges are not checked.
static cudaError_t check_device_range(const void* p, size_t bytes, const char* call, const char* which) {
    if (bytes == 0) return cudaSuccess;
    if (find_allocation(p, bytes, NULL) == NULL) {
        fprintf(stderr, "emu: %s: %s range [%p, +%zu bytes) is not inside one cudaMalloc buffer\n", call, which, p, bytes);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
} // namespace emu

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
    emu::install_handlers();
    if (ptr == NULL) return cudaErrorInvalidValue;
    if (emu::device_bytes_in_use + size > emu::kDeviceBytes) return cudaErrorMemoryAllocation;
    *ptr = emu::guarded_alloc(size, 0xff);
    if (*ptr == NULL) return cudaErrorMemoryAllocation;
    emu::device_bytes_in_use += size;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (ptr == NULL) return cudaSuccess;
    auto& table = emu::allocations();
    auto it = table.find((uintptr_t)ptr);
    if (it == table.end()) {
        fprintf(stderr, "emu: cudaFree(%p): not a pointer cudaMalloc returned\n", ptr);
        return cudaErrorInvalidValue;
    }
    emu::device_bytes_in_use -= it->second.bytes;
    munmap(it->second.base, it->second.map_bytes);
    table.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
    if (ptr == NULL) return cudaErrorInvalidValue;
    *ptr = aligned_alloc(256, (size + 255) / 256 * 256 + 256);
    return *ptr != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* ptr) {
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
    cudaError_t e = cudaSuccess;
    bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) dst_device = src_device = false;
    if (dst_device) e = emu::check_device_range(dst, count, "cudaMemcpy", "destination");
    if (e == cudaSuccess && src_device) e = emu::check_device_range(src, count, "cudaMemcpy", "source");
    if (e != cudaSuccess) return e;
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
    cudaError_t e = emu::check_device_range(ptr, count, "cudaMemset", "destination");
    if (e != cudaSuccess) return e;
    memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) { return cudaMemset(ptr, value, count); }

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu::state.last_error;
    emu::state.last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return emu::state.last_error; }

const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (CPU emulation)";
    case cudaErrorMemoryAllocation: return "out of memory (CPU emulation)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (CPU emulation)";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDevice: return "invalid device ordinal (CPU emulation)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (CPU emulation)";
    default: return "unknown error (CPU emulation)";
    }
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > emu::kDynamicSmemMax) return cudaErrorInvalidValue;
        emu::max_dynamic_smem()[func] = value;
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* count) { *count = 1; return cudaSuccess; }

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)emu::kDynamicSmemMax; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "CPU emulation (reports sm_90)");
    prop->totalGlobalMem = emu::kDeviceBytes;
    prop->multiProcessorCount = 132;
    prop->major = 9;
    prop->minor = 0;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlock = emu::kDynamicSmemDefault;
    prop->sharedMemPerBlockOptin = emu::kDynamicSmemMax;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *total = emu::kDeviceBytes;
    *free_bytes = emu::kDeviceBytes - emu::device_bytes_in_use;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    *stream = new CUstream_st{flags};
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned int) {
    return event != NULL ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    *event = new CUevent_st{flags, false, 0.0};
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
    if (event == NULL) return cudaErrorInvalidResourceHandle;
    event->recorded = true;
    event->seconds = emu::now_seconds();
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return event != NULL ? cudaSuccess : cudaErrorInvalidResourceHandle; }
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }

// As documented: both events recorded, neither created with cudaEventDisableTiming.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (start == NULL || end == NULL) return cudaErrorInvalidResourceHandle;
    if ((start->flags | end->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
    if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
    *ms = (float)((end->seconds - start->seconds) * 1e3);
    return cudaSuccess;
}

} // extern "C"

// cuda_runtime.h's typed overload exists only under nvcc: the kernel's own function type here.
template <typename... Params>
static inline cudaError_t cudaFuncSetAttribute(void (*func)(Params...), enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)func, attr, value);
}

#endif // EMU_RUNTIME_H
