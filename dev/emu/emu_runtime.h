/*
 * emu_runtime.h: the CUDA runtime API functions the project calls, for the CPU emulation
 * (emu.h includes it; see emu.h for the model). Signatures are those of cuda_runtime_api.h,
 * which stays the declaration: a mismatch is a compile error, not a silent divergence.
 *   - Device memory is host memory from emu::guarded_alloc (poisoned with 0xff, fenced).
 *   - Copies and memsets check that the device side lies inside one cudaMalloc buffer and fail
 *     with cudaErrorInvalidValue otherwise (the real runtime may corrupt memory silently).
 *   - Stream order: a collective (nccl_emu.h), an asynchronous copy to the host and one from
 *     pinned (cudaMallocHost) memory are queued and complete only when something orders after
 *     them (an event wait, a stream or device sync); kernels, other copies and memsets run when
 *     issued, unless their stream has such work in flight: then they queue behind it.
 *     So a consumer that skips its wait on a collective, or on work queued behind one, reads
 *     the data from before. EMU_LAZY=1 queues every operation on a created stream. An event holds the host time of its record and its stream position.
 *     EMU_STRICT_EVENTS=1: cudaEventElapsedTime answers cudaErrorNotReady for an event the host
 *     has not seen complete (waited for it or for a later event on its stream), as a GPU may.
 *   - EMU_DEVICE_COUNT devices (default 1), each reported as an sm_90 part with 132 SMs and 141 GB (the H200 the project
 *     targets), so size and launch heuristics take their GPU branches.
 */
#ifndef EMU_RUNTIME_H
#define EMU_RUNTIME_H

#include <memory>

// Work that completes after it is issued: only a collective (nccl_emu.h) is queued this way;
// every kernel, copy and memset runs when issued. progress(block) finishes the op (block) or
// tries to (returns whether it is done).
struct EmuPendingOp {
    unsigned long seq;
    std::function<bool(bool)> progress;
    const void* out; // what it writes when it completes
    size_t out_bytes;
};

struct CUstream_st {
    unsigned flags;
    unsigned long issued = 0; // operations issued on this stream so far
    unsigned long records = 0;   // events recorded on it so far (EMU_STRICT_EVENTS)
    unsigned long host_seen = 0; // the host knows records 1..host_seen are complete
    std::deque<EmuPendingOp> pending;
};

struct CUevent_st {
    unsigned flags;
    bool recorded;
    double seconds;             // host monotonic time of the last record
    cudaStream_t stream = NULL; // where it was last recorded
    unsigned long seq = 0;      // that stream's issue count then: done once ops 1..seq are
    unsigned long rec = 0;      // its record number on that stream (EMU_STRICT_EVENTS)
};

namespace emu {
static size_t device_bytes_in_use = 0;

// Stream order. An operation on a stream first completes what is pending on that stream (a
// stream runs in order), then runs. The legacy default stream (NULL, and the blocking
// cudaMemcpy/cudaMemset) also completes the pending work of streams created without
// cudaStreamNonBlocking, as CUDA's implicit synchronization does; not that of non-blocking
// streams, so a host read that skipped its event wait sees the data before the collective.
static std::vector<cudaStream_t>& streams(void) {
    static std::vector<cudaStream_t> all;
    return all;
}

// Completes (block) or tries to complete the stream's pending ops numbered <= upto, in order.
static bool stream_progress(cudaStream_t s, unsigned long upto, bool block) {
    while (s != NULL && !s->pending.empty() && s->pending.front().seq <= upto) {
        if (!s->pending.front().progress(block)) return false;
        s->pending.pop_front();
    }
    return true;
}

static void stream_drain(cudaStream_t s) { stream_progress(s, ~0ul, true); }

static void legacy_stream_sync(void) {
    for (cudaStream_t s : streams())
        if (!(s->flags & cudaStreamNonBlocking)) stream_drain(s);
}

// Everything issued on s before now is done (the start of any operation on s).
static void stream_settle(cudaStream_t s) {
    if (s == NULL) legacy_stream_sync();
    else stream_drain(s);
}

// Before an operation that runs now on stream s, whatever is in flight there (cuBLASLt).
static void stream_issue(cudaStream_t s) {
    stream_settle(s);
    if (s != NULL) s->issued++;
}

// Before a collective on s reads [in, in + bytes): the pending ops of s whose output it would
// read are done (the stream's order), the others may stay in flight (their outputs are not
// its input, so finishing them later changes nothing it reads).
static void stream_settle_for_input(cudaStream_t s, const void* in, size_t bytes) {
    if (s == NULL) { legacy_stream_sync(); return; }
    unsigned long upto = 0;
    for (const EmuPendingOp& op : s->pending)
        if (op.out == NULL || ((const char*)op.out < (const char*)in + bytes && (const char*)in < (const char*)op.out + op.out_bytes))
            upto = op.seq; // a queued kernel or copy (out NULL) may write anything
    stream_progress(s, upto, true);
}

// EMU_LAZY=1: kernels, copies and memsets on a created stream are always queued, and run only
// when something orders after them (an event wait or sync, a stream or device sync). A
// collective then reads its input before the kernels that produce it have run unless the comm
// stream waited for them: a missing wait of the comm stream on the compute stream shows.
static bool lazy_streams(void) {
    static int lazy = -1;
    if (lazy < 0) { const char* e = getenv("EMU_LAZY"); lazy = e != NULL && atoi(e) != 0; }
    return lazy != 0;
}

// An operation that would run now on s: if s still has work in flight it is queued behind it
// (runs when that completes; treated as writing anything) and true is returned; otherwise the
// caller runs it now (after the legacy-stream synchronization for s == NULL).
static bool stream_defer(cudaStream_t s, std::function<void()> run) {
    if (s == NULL) { legacy_stream_sync(); return false; }
    s->issued++;
    if (s->pending.empty() && !lazy_streams()) return false;
    s->pending.push_back(EmuPendingOp{s->issued, [run](bool) { run(); return true; }, NULL, ~(size_t)0 >> 1});
    return true;
}

// Queue an operation that completes later (a collective) and writes [out, out + out_bytes).
static void stream_enqueue(cudaStream_t s, std::function<bool(bool)> progress, const void* out, size_t out_bytes) {
    if (s == NULL) { legacy_stream_sync(); progress(true); return; }
    s->issued++;
    s->pending.push_back(EmuPendingOp{s->issued, std::move(progress), out, out_bytes});
}

// cudaMallocHost buffers: start -> bytes.
static std::map<uintptr_t, size_t>& pinned(void) {
    static std::map<uintptr_t, size_t> table;
    return table;
}

static bool is_pinned(const void* p, size_t bytes) {
    auto it = pinned().upper_bound((uintptr_t)p);
    if (it == pinned().begin()) return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second;
}

static void event_complete(cudaEvent_t e) {
    if (e->stream != NULL) stream_progress(e->stream, e->seq, true);
}

// EMU_STRICT_EVENTS=1: an event counts as complete for the host (cudaEventElapsedTime) only
// once the host has seen it complete: it, or an event recorded after it on the same stream,
// was synchronized or queried successfully, or the stream or device was synchronized. On a
// GPU an event recorded after the one the host waited for may still be pending (the device
// runs behind the host), and cudaEventElapsedTime on it returns cudaErrorNotReady; by default
// the emulation's events are complete once their work ran, which hides such a read.
static bool strict_events(void) {
    static int strict = -1;
    if (strict < 0) { const char* e = getenv("EMU_STRICT_EVENTS"); strict = e != NULL && atoi(e) != 0; }
    return strict != 0;
}

static void host_saw(cudaEvent_t e) {
    if (e->stream != NULL && e->rec > e->stream->host_seen) e->stream->host_seen = e->rec;
}

static bool host_knows_complete(cudaEvent_t e) {
    return !strict_events() || e->stream == NULL || e->rec <= e->stream->host_seen;
}
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

// The device side(s) of a copy of `kind` lie inside cudaMalloc buffers (Default and
// HostToHost: not checked).
static cudaError_t check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, const char* call) {
    bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    cudaError_t e = dst_device ? check_device_range(dst, count, call, "destination") : cudaSuccess;
    if (e == cudaSuccess && src_device) e = check_device_range(src, count, call, "source");
    return e;
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

// Like CUDA's, an implicit device synchronization: queued work may still write the buffer.
cudaError_t cudaFree(void* ptr) {
    if (ptr == NULL) return cudaSuccess;
    cudaDeviceSynchronize();
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
    if (*ptr == NULL) return cudaErrorMemoryAllocation;
    emu::pinned()[(uintptr_t)*ptr] = size;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
    cudaDeviceSynchronize();
    emu::pinned().erase((uintptr_t)ptr);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
    cudaError_t e = emu::check_copy(dst, src, count, kind, "cudaMemcpy");
    if (e != cudaSuccess) return e;
    emu::legacy_stream_sync();
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
    cudaError_t e = emu::check_copy(dst, src, count, kind, "cudaMemcpyAsync");
    if (e != cudaSuccess) return e;
    // An asynchronous copy that reads or writes pinned or any host memory (device to host, or
    // from pinned memory) completes late: when its stream is synchronized or waited on, so a
    // host that reads the destination, or changes a pinned source, before that is caught.
    bool late = stream != NULL && (kind == cudaMemcpyDeviceToHost || (kind == cudaMemcpyHostToDevice && emu::is_pinned(src, count)));
    if (late) {
        emu::stream_settle(stream);
        emu::stream_enqueue(stream, [dst, src, count](bool) { memmove(dst, src, count); return true; },
                            kind == cudaMemcpyDeviceToHost ? dst : NULL, count);
        return cudaSuccess;
    }
    if (kind == cudaMemcpyHostToDevice) { // pageable host memory is read at the call
        std::shared_ptr<std::vector<unsigned char>> copy = std::make_shared<std::vector<unsigned char>>(
            (const unsigned char*)src, (const unsigned char*)src + count);
        if (!emu::stream_defer(stream, [dst, copy]() { memcpy(dst, copy->data(), copy->size()); })) memmove(dst, src, count);
        return cudaSuccess;
    }
    if (!emu::stream_defer(stream, [dst, src, count]() { memmove(dst, src, count); })) memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
    cudaError_t e = emu::check_device_range(ptr, count, "cudaMemset", "destination");
    if (e != cudaSuccess) return e;
    emu::legacy_stream_sync();
    memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
    cudaError_t e = emu::check_device_range(ptr, count, "cudaMemsetAsync", "destination");
    if (e != cudaSuccess) return e;
    if (!emu::stream_defer(stream, [ptr, value, count]() { memset(ptr, value, count); })) memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    for (cudaStream_t s : emu::streams()) { emu::stream_drain(s); s->host_seen = s->records; }
    return cudaSuccess;
}

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

// EMU_DEVICE_COUNT (default 1): how many GPUs the node pretends to have, so that an NCCL build
// may put one rank on each (every process still computes on its own CPU memory).
static int emu_device_count(void) {
    const char* env = getenv("EMU_DEVICE_COUNT");
    int n = env != NULL ? atoi(env) : 1;
    return n >= 1 ? n : 1;
}
static int emu_current_device = 0;

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu_device_count()) return cudaErrorInvalidDevice;
    emu_current_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) { *device = emu_current_device; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* count) { *count = emu_device_count(); return cudaSuccess; }

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (device < 0 || device >= emu_device_count()) return cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)emu::kDynamicSmemMax; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
    if (device < 0 || device >= emu_device_count()) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "CPU emulation");
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
    *stream = new CUstream_st();
    (*stream)->flags = flags;
    emu::streams().push_back(*stream);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

// The stream's work still completes (CUDA semantics); the object is kept so events recorded
// on it stay valid.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    emu::stream_drain(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (stream == NULL) return cudaDeviceSynchronize();
    emu::stream_drain(stream);
    stream->host_seen = stream->records;
    return cudaSuccess;
}

// The waiting stream's later operations run when issued, so the event's work completes now.
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned int) {
    if (event == NULL) return cudaErrorInvalidResourceHandle;
    emu::event_complete(event);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    *event = new CUevent_st();
    (*event)->flags = flags;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (event == NULL) return cudaErrorInvalidResourceHandle;
    if (stream == NULL) emu::legacy_stream_sync();
    event->recorded = true;
    event->seconds = emu::now_seconds();
    event->stream = stream;
    event->seq = stream != NULL ? stream->issued : 0;
    event->rec = stream != NULL ? ++stream->records : 0;
    return cudaSuccess;
}

// Tries to complete the event's work without blocking (a collective whose peers have not all
// joined yet stays pending).
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (event == NULL) return cudaErrorInvalidResourceHandle;
    if (event->stream == NULL) return cudaSuccess;
    if (!emu::stream_progress(event->stream, event->seq, false)) return cudaErrorNotReady;
    emu::host_saw(event);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (event == NULL) return cudaErrorInvalidResourceHandle;
    emu::event_complete(event);
    emu::host_saw(event);
    return cudaSuccess;
}

// As documented: both events recorded, neither created with cudaEventDisableTiming.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (start == NULL || end == NULL) return cudaErrorInvalidResourceHandle;
    if ((start->flags | end->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
    if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
    if (!emu::host_knows_complete(start) || !emu::host_knows_complete(end)) return cudaErrorNotReady;
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
