/*
 * emu.h: a CPU emulation of the CUDA execution model, so that the GPU build's kernels and host
 * code run (slowly, single-threaded) on a machine without a GPU, in CI. It is a test tool, not
 * a second backend: nothing it computes is a GPU measurement.
 *
 * How a program is built (see emu.mk): dev/emu/rewrite.py copies the sources into build/emu/src
 * and rewrites the two constructs plain C++ cannot parse (`kernel<<<grid, block, smem,
 * stream>>>(args)` and `extern __shared__ T name[]`); g++ then compiles the copy with
 * `-include dev/emu/emu.h -DCUDA_EMULATION`, the real CUDA headers for types and declarations,
 * and without libcudart: this file defines the runtime functions the project calls.
 *
 * What is modelled (CUDA C++ Programming Guide, "Programming Model" and "Thread Hierarchy"):
 *   - Every CUDA thread of a block is a fiber (ucontext, own 256 KiB stack with a guard page).
 *     Blocks run one after another, in a random order, each with its shared memory (static and
 *     dynamic) poisoned. Fibers switch only at barriers, so a thread runs as far ahead of
 *     the others as the program lets it: a read of shared memory that another thread writes
 *     without a barrier in between sees the old (garbage) value, which is how a missing
 *     __syncthreads/__syncwarp shows up as a wrong result. Warps run one at a time, each until
 *     all its lanes wait at a __syncthreads (or returned), so a warp also runs ahead of the
 *     others through warp-level collectives. Warps, and a warp's lanes, are resumed in
 *     pseudo-random orders (seed EMU_SEED, default 1).
 *   - __syncthreads: all threads of the block, at the same call site; reaching one after some
 *     threads returned, or threads meeting at different calls, is reported (the Programming
 *     Guide's rule for conditional __syncthreads; newer GPUs may tolerate it, older ones hang).
 *     __syncwarp and __shfl_xor_sync (full mask only): the lanes of the warp that have not
 *     returned; a shuffle reading a lane that returned or does not exist gets poison (0xff
 *     bytes), as its value is undefined on the GPU.
 *   - mma.sync (m16n8k16 bf16), ldmatrix and cp.async with commit/wait groups, as kernels/ptx.cuh
 *     uses them: emu_ptx.h (documented fragment layouts element by element; a cp.async
 *     destination is poison until its wait_group; all 32 lanes at the same instruction).
 *   - WMMA (nvcuda::wmma, bf16 16x16x16, fp32 accumulate): fragments hold the whole tile per
 *     thread; load/store check the documented 256-bit pointer and ldm alignment; a store writes
 *     only the calling lane's share of the elements, so reading the tile back without __syncwarp
 *     sees stale data, as it may on the GPU.
 *   - Launch checks: block <= 1024 threads, grid y/z <= 65535, dynamic shared memory > 48 KiB
 *     only after cudaFuncSetAttribute(MaxDynamicSharedMemorySize), <= 227 KiB (sm_90).
 *   - Memory: cudaMalloc buffers are filled with 0xff bytes (NaN as bf16 and fp32: reading
 *     memory nobody wrote poisons the result) and fenced: inaccessible pages a page or less
 *     before and under 256 bytes after them stop an access there with the kernel, block and
 *     thread named; the poisoned slack in between is checked after every kernel (a write there
 *     stops with the kernel named; a read there reads poison).
 *     Dynamic shared memory is poisoned for every block and fenced: a guard page at its size
 *     rounded up to 128 bytes, and a check after each block that nothing was written between
 *     the size the launch asked for and that page.
 *   - Streams and events (emu_runtime.h): kernels, copies and memsets run when issued; NCCL
 *     collectives (nccl_emu.h, over MPI) read their input when issued and write their output
 *     only when something orders after them, so a missing wait on a collective shows up as
 *     stale data. With EMU_LAZY=1 every kernel, copy and memset on a created stream is queued
 *     too, until something orders after it: then a collective issued before the kernel
 *     producing its input ran (a missing wait of the comm stream on the compute stream) reads
 *     stale input. Run both modes: each sees one direction of a missing stream wait.
 * Not modelled: warp divergence timing, atomics contention, texture/constant memory, masks other
 * than full, WMMA's warp-wide checks (each lane's call is checked on its own), the static
 * shared-memory size in the launch limit. Blind spots: a __syncthreads inside a helper called
 * from two places counts as one call site; a host that polls cudaEventQuery completes a
 * collective as soon as MPI has (as a GPU may), so a missing device wait after such a poll can
 * go unseen; a collective issued before the kernel producing its input ran (kernels run early).
 *
 * Defines non-inline functions: include it in exactly one translation unit per program.
 */
#ifndef EMU_H
#define EMU_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#ifndef CUDA_EMULATION
#define CUDA_EMULATION 1
#endif

namespace emu {

// ----------------------------------------------------------------------------------------------
// Fibers: one per CUDA thread of the running block.

struct Thread {
    ucontext_t context; // the fiber's start (makecontext); entered once with setcontext
    jmp_buf resume;     // where the fiber continues after a yield
    bool started;
    uint3 idx;               // threadIdx
    int warp, lane;          // linear id / 32, % 32
    unsigned long warp_phase;  // warp-synchronous calls made
    bool done;
};

struct Warp {
    uint64_t slots[2][32]; // shuffle exchange, double-buffered by phase parity
    int lanes;             // lanes that exist (the last warp of an odd-sized block has fewer)
    int live;              // lanes not yet returned
    int waiting;           // lanes arrived at the current warp barrier
    unsigned long released; // warp barriers completed
};

struct State {
    const char* kernel = NULL; // name of the running kernel, NULL on the host
    dim3 grid, block;
    uint3 block_idx;
    std::vector<Thread> threads;
    std::vector<Warp> warps;
    Thread* current = NULL;
    jmp_buf scheduler;
    int live = 0, waiting = 0;  // block barrier: live threads, arrived threads
    const char* barrier_file = ""; // call site of the barrier being gathered
    int barrier_line = 0;
    unsigned long released = 0; // block barriers completed
    bool progress = false;
    const std::function<void()>* body = NULL;
    unsigned char* dynamic_smem = NULL;
    size_t dynamic_smem_span = 0; // launch's dynamic shared memory, rounded up to 128 bytes
    uint64_t rng = 1;
    // fiber stacks: one mapping, kStackBytes per thread with an inaccessible guard page below each
    unsigned char* stacks = NULL;
    size_t stacks_threads = 0;
    cudaError_t last_error = cudaSuccess;
    unsigned long blocks_run = 0;          // blocks started so far (emu_ptx.h resets per-block state by it)
    void (*thread_exit_check)(void) = NULL; // run as each fiber returns (emu_ptx.h: no cp.async pending)
};

static State state;
static const size_t kStackBytes = 256 << 10;
static const size_t kPage = 4096;
static const size_t kDynamicSmemMax = 227 << 10; // sm_90 opt-in maximum per block (232448 bytes)
static const size_t kDynamicSmemDefault = 48 << 10;

[[noreturn]] static void fail(const char* fmt, const char* detail) {
    fflush(stdout);
    if (state.kernel != NULL && state.current != NULL)
        fprintf(stderr, "emu: error in kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", state.kernel,
                state.block_idx.x, state.block_idx.y, state.block_idx.z, state.current->idx.x, state.current->idx.y,
                state.current->idx.z);
    else
        fprintf(stderr, "emu: error: ");
    fprintf(stderr, fmt, detail);
    fprintf(stderr, "\n");
    _exit(3);
}

static uint64_t next_random(void) { // xorshift64* (Vigna 2016)
    state.rng ^= state.rng >> 12;
    state.rng ^= state.rng << 25;
    state.rng ^= state.rng >> 27;
    return state.rng * 0x2545f4914f6cdd1dull;
}

// Fiber switches use _setjmp/_longjmp (no signal-mask system call, unlike swapcontext); only
// the first entry into a fiber goes through setcontext.
static void yield(void) {
    if (_setjmp(state.current->resume) == 0) _longjmp(state.scheduler, 1);
}

static void fiber_entry(void) {
    (*state.body)();
    if (state.thread_exit_check != NULL) state.thread_exit_check();
    Thread* t = state.current;
    t->done = true;
    state.progress = true;
    Warp& w = state.warps[t->warp];
    w.live--; // exited lanes may be named in a warp op's mask (they are skipped)
    if (w.waiting > 0 && w.waiting == w.live) { w.waiting = 0; w.released++; }
    state.live--;
    if (state.waiting > 0) fail("%s", "a thread of the block returned while others wait in __syncthreads (undefined behaviour)");
    _longjmp(state.scheduler, 1); // never returns: the fiber's stack is dropped
}

// __syncthreads: every thread of the block must arrive, at the same call (file:line). The
// Programming Guide allows __syncthreads in conditional code only when the condition is the
// same across the block, so arriving after some threads returned, or two threads meeting at
// different __syncthreads calls, is reported instead of being matched up as newer GPUs may do.
static void block_barrier(const char* file, int line) {
    size_t n = state.threads.size();
    if ((size_t)state.live != n) fail("%s", "__syncthreads reached after a thread of the block returned (undefined behaviour)");
    if (state.waiting == 0) { state.barrier_file = file; state.barrier_line = line; }
    else if (state.barrier_line != line || strcmp(state.barrier_file, file) != 0) {
        char detail[512];
        snprintf(detail, sizeof(detail), "threads meet at different __syncthreads calls: %s:%d and %s:%d", file, line,
                 state.barrier_file, state.barrier_line);
        fail("%s", detail);
    }
    unsigned long target = state.released + 1;
    state.progress = true;
    if (++state.waiting == state.live) { state.waiting = 0; state.released++; }
    while (state.released < target) yield();
}

// Warp barrier behind __syncwarp and the shuffles, full mask: every lane of the warp that has
// not returned takes part (the Programming Guide: "all non-exited threads named in mask");
// lanes that returned, or do not exist in a last partial warp, are skipped.
static void warp_barrier(unsigned mask, const char* what) {
    Thread* t = state.current;
    Warp& w = state.warps[t->warp];
    if (mask != 0xffffffffu) fail("%s with a mask other than 0xffffffff is not modelled", what);
    unsigned long target = w.released + 1;
    t->warp_phase++;
    state.progress = true;
    if (++w.waiting == w.live) { w.waiting = 0; w.released++; }
    while (w.released < target) yield();
}

// ----------------------------------------------------------------------------------------------
// Memory: guarded allocations.

struct Allocation {
    unsigned char* base; // start of the mapping (a guard page)
    size_t map_bytes;
    size_t bytes; // what the caller asked for
    bool host;    // cudaMallocHost (pinned host memory), not device memory
};

static std::map<uintptr_t, Allocation>& allocations(void) {
    static std::map<uintptr_t, Allocation> table;
    return table;
}

// [lo guard page][data pages, buffer ends on the last 256-byte boundary before][hi guard page]
static void* guarded_alloc(size_t bytes, unsigned char fill) {
    size_t rounded = (bytes + 255) / 256 * 256;
    if (rounded == 0) rounded = 256;
    size_t data_pages = (rounded + kPage - 1) / kPage;
    size_t map_bytes = (data_pages + 2) * kPage;
    void* m = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    unsigned char* base = (unsigned char*)m;
    mprotect(base, kPage, PROT_NONE);
    mprotect(base + (data_pages + 1) * kPage, kPage, PROT_NONE);
    unsigned char* p = base + (data_pages + 1) * kPage - rounded;
    // Poison the whole data area: the buffer (fill) and the slack before and after it (0xff),
    // which check_allocation_fences expects unchanged after every kernel.
    memset(base + kPage, 0xff, data_pages * kPage);
    memset(p, fill, bytes);
    allocations()[(uintptr_t)p] = Allocation{base, map_bytes, bytes, false};
    return p;
}

// The allocation holding [p, p + bytes), or NULL.
static const Allocation* find_allocation(const void* p, size_t bytes, uintptr_t* start) {
    auto& table = allocations();
    auto it = table.upper_bound((uintptr_t)p);
    if (it == table.begin()) return NULL;
    --it;
    if ((uintptr_t)p + bytes > it->first + it->second.bytes) return NULL;
    if (start != NULL) *start = it->first;
    return &it->second;
}

// The guard pages catch accesses a page or more outside a buffer; the slack between them and the
// buffer (up to a page before it, under 256 bytes after it) must still hold its poison after a
// kernel, else the kernel wrote outside the buffer.
static const unsigned char* first_unpoisoned(const unsigned char* a, const unsigned char* b) {
    for (; a < b; a++)
        if (*a != 0xff) return a;
    return NULL;
}

static void check_allocation_fences(const char* kernel) {
    for (auto& kv : allocations()) {
        const Allocation& al = kv.second;
        if (al.host) continue;
        const unsigned char* p = (const unsigned char*)kv.first;
        const unsigned char* before = first_unpoisoned(al.base + kPage, p);
        const unsigned char* after = first_unpoisoned(p + al.bytes, al.base + al.map_bytes - kPage);
        if (before == NULL && after == NULL) continue;
        char detail[300];
        if (before != NULL)
            snprintf(detail, sizeof(detail), "kernel %s wrote %zu bytes before the start of a %zu-byte cudaMalloc buffer",
                     kernel, (size_t)(p - before), al.bytes);
        else
            snprintf(detail, sizeof(detail), "kernel %s wrote %zu bytes past the end of a %zu-byte cudaMalloc buffer",
                     kernel, (size_t)(after - p - al.bytes), al.bytes);
        fail("%s", detail);
    }
}

static void segv_handler(int sig, siginfo_t* info, void*) {
    uintptr_t a = (uintptr_t)info->si_addr;
    char detail[256];
    snprintf(detail, sizeof(detail), "address %p", info->si_addr);
    for (auto& kv : allocations()) {
        const Allocation& al = kv.second;
        uintptr_t lo = (uintptr_t)al.base, hi = lo + al.map_bytes;
        if (a >= lo && a < hi) {
            if (a < kv.first)
                snprintf(detail, sizeof(detail), "address %p, %zu bytes before a %zu-byte cudaMalloc buffer",
                         info->si_addr, (size_t)(kv.first - a), al.bytes);
            else
                snprintf(detail, sizeof(detail), "address %p, %zu bytes past the end of a %zu-byte cudaMalloc buffer",
                         info->si_addr, (size_t)(a - kv.first - al.bytes), al.bytes);
        }
    }
    if (state.stacks != NULL && a >= (uintptr_t)state.stacks &&
        a < (uintptr_t)state.stacks + state.stacks_threads * (kStackBytes + kPage) &&
        (a - (uintptr_t)state.stacks) % (kStackBytes + kPage) < kPage)
        snprintf(detail, sizeof(detail), "address %p: a CUDA thread's stack overflowed (the emulation gives each %zu KiB; "
                 "local arrays that large are legal on a GPU up to 512 KiB)", info->si_addr, kStackBytes >> 10);
    if (state.kernel != NULL && state.dynamic_smem != NULL) {
        uintptr_t s = (uintptr_t)state.dynamic_smem, fence = s + state.dynamic_smem_span;
        if (a >= fence && a < fence + kPage)
            snprintf(detail, sizeof(detail), "address %p, %zu bytes past the end of the %zu bytes of dynamic shared "
                     "memory the launch asked for", info->si_addr, (size_t)(a - fence), state.dynamic_smem_span);
    }
    fprintf(stderr, "emu: %s: invalid memory access, %s%s\n", sig == SIGBUS ? "SIGBUS" : "SIGSEGV", detail,
            state.kernel != NULL ? "" : " (on the host)");
    if (state.kernel != NULL && state.current != NULL)
        fprintf(stderr, "emu: in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)\n", state.kernel, state.block_idx.x,
                state.block_idx.y, state.block_idx.z, state.current->idx.x, state.current->idx.y, state.current->idx.z);
    _exit(3);
}

static void install_handlers(void) {
    static bool installed = false;
    if (installed) return;
    installed = true;
    static unsigned char alt[64 << 10];
    stack_t ss;
    ss.ss_sp = alt;
    ss.ss_size = sizeof(alt);
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    const char* seed = getenv("EMU_SEED");
    state.rng = (seed != NULL ? strtoull(seed, NULL, 10) : 1ull) * 0x9e3779b97f4a7c15ull + 1; // EMU_SEED, default 1
}

// ----------------------------------------------------------------------------------------------
// Kernel launch.

struct LaunchConfig {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), smem(s), stream(st) {}
};

static std::map<const void*, int>& max_dynamic_smem(void) {
    static std::map<const void*, int> table;
    return table;
}

static void ensure_stacks(size_t n) {
    if (state.stacks_threads >= n) return;
    if (state.stacks != NULL) munmap(state.stacks, state.stacks_threads * (kStackBytes + kPage));
    state.stacks = (unsigned char*)mmap(NULL, n * (kStackBytes + kPage), PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (state.stacks == MAP_FAILED) fail("%s", "cannot map fiber stacks");
    for (size_t i = 0; i < n; i++) mprotect(state.stacks + i * (kStackBytes + kPage), kPage, PROT_NONE);
    state.stacks_threads = n;
}

static unsigned char* dynamic_smem_buffer(void) { // fenced above kDynamicSmemMax, see run_kernel
    static unsigned char* buffer = NULL;
    if (buffer == NULL) {
        size_t bytes = kDynamicSmemMax + kPage;
        buffer = (unsigned char*)mmap(NULL, bytes + kPage, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (buffer == MAP_FAILED) fail("%s", "cannot map dynamic shared memory");
    }
    return buffer;
}

static void run_block(const std::function<void()>& body) {
    size_t n = (size_t)state.block.x * state.block.y * state.block.z;
    ensure_stacks(n);
    state.threads.assign(n, Thread());
    size_t num_warps = (n + 31) / 32;
    state.warps.assign(num_warps, Warp());
    for (size_t w = 0; w < num_warps; w++) {
        state.warps[w].lanes = (int)(n - w * 32 < 32 ? n - w * 32 : 32);
        state.warps[w].live = state.warps[w].lanes;
    }
    state.live = (int)n;
    state.waiting = 0;
    state.released = 0;
    state.blocks_run++;
    state.body = &body;
    for (size_t i = 0; i < n; i++) {
        Thread& t = state.threads[i];
        t.idx.x = (unsigned)(i % state.block.x);
        t.idx.y = (unsigned)(i / state.block.x % state.block.y);
        t.idx.z = (unsigned)(i / ((size_t)state.block.x * state.block.y));
        t.warp = (int)(i / 32);
        t.lane = (int)(i % 32);
        getcontext(&t.context);
        t.context.uc_stack.ss_sp = state.stacks + i * (kStackBytes + kPage) + kPage;
        t.context.uc_stack.ss_size = kStackBytes;
        t.context.uc_link = NULL;
        t.started = false;
        makecontext(&t.context, fiber_entry, 0);
    }
    // Warps in a random order; a warp runs (its lanes resumed in a random order, again and again)
    // until none of its lanes can move: all wait at a __syncthreads or returned. So a warp gets
    // as far ahead of the others as the block's barriers let it, also through warp-level
    // collectives (shuffles, mma, ldmatrix), and a missing __syncthreads between warps shows.
    std::vector<size_t> warp_order(num_warps), lanes;
    for (size_t w = 0; w < num_warps; w++) warp_order[w] = w;
    size_t remaining = n;
    while (remaining > 0) {
        for (size_t i = num_warps; i > 1; i--) std::swap(warp_order[i - 1], warp_order[next_random() % i]); // Fisher-Yates
        bool any_progress = false;
        for (size_t wi = 0; wi < num_warps; wi++) {
            size_t first = warp_order[wi] * 32, count = state.warps[warp_order[wi]].lanes;
            do {
                lanes.clear();
                for (size_t i = first; i < first + count; i++)
                    if (!state.threads[i].done) lanes.push_back(i);
                for (size_t i = lanes.size(); i > 1; i--) std::swap(lanes[i - 1], lanes[next_random() % i]);
                state.progress = false;
                for (size_t k : lanes) {
                    Thread& t = state.threads[k];
                    state.current = &t;
                    if (_setjmp(state.scheduler) == 0) {
                        if (!t.started) { t.started = true; setcontext(&t.context); }
                        else _longjmp(t.resume, 1);
                    }
                    if (t.done) remaining--;
                }
                any_progress |= state.progress;
            } while (state.progress);
        }
        state.current = NULL;
        if (remaining > 0 && !any_progress)
            fail("%s", "deadlock: the live threads wait at different barriers (a __syncthreads in divergent code?)");
    }
}

static bool stream_defer(cudaStream_t s, std::function<void()> run); // emu_runtime.h
static void execute_kernel(const char* name, const LaunchConfig& cfg, const std::function<void()>& body);

// EMU_LAUNCH_LOG=FILE: each distinct (kernel as written at the launch, threads per block,
// dynamic shared memory bytes) appended once to FILE, for dev/ptxas_occupancy.py --check-launches.
static void log_launch(const char* name, const LaunchConfig& cfg) {
    static const char* path = getenv("EMU_LAUNCH_LOG");
    static std::set<std::string> seen;
    if (path == NULL) return;
    char line[512];
    snprintf(line, sizeof(line), "%s %zu %zu\n", name, (size_t)cfg.block.x * cfg.block.y * cfg.block.z, cfg.smem);
    for (char* c = line; *c != '\0'; c++)
        if (*c == ' ' && c[1] != '\0' && !isdigit((unsigned char)c[1])) *c = '_'; // "kernel<64, 2>": one field
    if (!seen.insert(line).second) return;
    FILE* f = fopen(path, "a");
    if (f == NULL) fail("%s", "EMU_LAUNCH_LOG: cannot open the file for appending");
    fputs(line, f);
    fclose(f);
}

// Checks the launch (errors are returned at launch, as CUDA does), then runs the grid now, or
// later when its stream still has a collective in flight (emu_runtime.h, stream_defer).
static void run_kernel(const char* name, const LaunchConfig& cfg, const void* func, const std::function<void()>& body) {
    install_handlers();
    size_t threads = (size_t)cfg.block.x * cfg.block.y * cfg.block.z;
    if (threads == 0 || threads > 1024 || cfg.block.z > 64 || cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 ||
        cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x > 2147483647u) {
        fprintf(stderr, "emu: launch of %s with grid (%u,%u,%u) block (%u,%u,%u): invalid configuration\n", name,
                cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z);
        state.last_error = cudaErrorInvalidConfiguration;
        return;
    }
    size_t allowed = kDynamicSmemDefault;
    auto it = max_dynamic_smem().find(func);
    if (it != max_dynamic_smem().end()) allowed = (size_t)it->second;
    if (cfg.smem > allowed || cfg.smem > kDynamicSmemMax) {
        fprintf(stderr, "emu: launch of %s asks %zu bytes of dynamic shared memory; allowed %zu (more than 48 KiB "
                "needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize), at most %zu)\n", name, cfg.smem, allowed,
                kDynamicSmemMax);
        state.last_error = cudaErrorInvalidValue;
        return;
    }
    log_launch(name, cfg);
    if (stream_defer(cfg.stream, [name, cfg, body]() { execute_kernel(name, cfg, body); })) return;
    execute_kernel(name, cfg, body);
}

// Static __shared__ arrays (the section above); weak: a program may have none.
extern "C" __attribute__((weak)) unsigned char __start_emu_shared[];
extern "C" __attribute__((weak)) unsigned char __stop_emu_shared[];

static void check_allocation_fences(const char* kernel);

static void execute_kernel(const char* name, const LaunchConfig& cfg, const std::function<void()>& body) {
    // Dynamic shared memory ends exactly at a guard page (128-byte aligned start), poisoned.
    unsigned char* buffer = dynamic_smem_buffer();
    size_t span = (cfg.smem + 127) / 128 * 128;
    unsigned char* fence = buffer + (kDynamicSmemMax + kPage) / kPage * kPage;
    mprotect(buffer, fence - buffer, PROT_READ | PROT_WRITE);
    mprotect(fence, kPage, PROT_NONE);
    state.dynamic_smem = fence - span;
    state.dynamic_smem_span = span;
    state.kernel = name;
    state.grid = cfg.grid;
    state.block = cfg.block;
    // Blocks in a random order (CUDA promises none), each with poisoned shared memory.
    size_t blocks = (size_t)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    std::vector<size_t> order(blocks);
    for (size_t i = 0; i < blocks; i++) order[i] = i;
    for (size_t i = blocks; i > 1; i--) std::swap(order[i - 1], order[next_random() % i]);
    for (size_t b = 0; b < blocks; b++) {
                unsigned x = (unsigned)(order[b] % cfg.grid.x), y = (unsigned)(order[b] / cfg.grid.x % cfg.grid.y);
                unsigned z = (unsigned)(order[b] / ((size_t)cfg.grid.x * cfg.grid.y));
                state.block_idx = uint3{x, y, z};
                memset(state.dynamic_smem, 0xff, span);
                unsigned char *shared_lo = __start_emu_shared, *shared_hi = __stop_emu_shared;
                if (shared_lo != NULL && shared_hi > shared_lo) memset(shared_lo, 0xff, (size_t)(shared_hi - shared_lo));
                run_block(body);
                // The fence sits at the 128-byte rounded size; the bytes between the size asked
                // for and the fence must still hold the poison (a write past the end otherwise).
                for (size_t i = cfg.smem; i < span; i++)
                    if (state.dynamic_smem[i] != 0xff) {
                        char detail[160];
                        snprintf(detail, sizeof(detail), "block (%u,%u,%u) wrote at byte %zu of dynamic shared memory; the "
                                 "launch asked for %zu bytes", x, y, z, i, cfg.smem);
                        state.current = NULL;
                        fail("%s", detail);
                    }
    }
    state.current = NULL;
    check_allocation_fences(name);
    state.kernel = NULL;
    state.dynamic_smem = NULL;
}

// emu_launch(cfg, kernel, "kernel")(args...): what rewrite.py makes of kernel<<<cfg>>>(args...).
template <typename... Params>
struct Launch {
    LaunchConfig cfg;
    void (*func)(Params...);
    const char* name;
    template <typename... Args>
    void operator()(Args&&... args) const {
        // the arguments are converted to the kernel's parameter types once, as the launch would
        std::function<void()> body = [f = func, tuple = std::tuple<Params...>(std::forward<Args>(args)...)]() {
            std::apply(f, tuple);
        };
        run_kernel(name, cfg, (const void*)func, body);
    }
};

template <typename... Params>
static Launch<Params...> launch(LaunchConfig cfg, void (*func)(Params...), const char* name) {
    return Launch<Params...>{cfg, func, name};
}

} // namespace emu

#include "emu_runtime.h"

// ----------------------------------------------------------------------------------------------
// Device built-ins as the kernels spell them.

#undef __shared__
// One block runs at a time: a function-static array is the block's shared memory. All of them
// live in one section, poisoned (0xff) before every block, as if each block got fresh memory.
#define __shared__ static __attribute__((section("emu_shared")))
#undef __launch_bounds__
#define __launch_bounds__(...)
// EMU_CONTRACT=1 (emu.mk's contracted flavor, compiled -mfma -ffp-contract=off): multiply-adds
// in device code (__global__ and __device__ functions) contract into fused multiply-adds, host
// code's do not, as in the CUDA build (nvcc contracts device code, --fmad=true by default; the
// host compiler gets no FMA-capable -march there, so the CPU twins and the host AdamW of -zo
// never contract). How close to nvcc: gcc forms an fma from a product whose every use is an add
// or subtract in the same basic block (a*b+c, a*b-c, c-a*b), as NVPTX's fusion does (it fuses
// products with up to 4 add uses, per basic block); in a*b+c*d both fuse the product that comes
// first, but after each compiler's own reassociation and operand order the one kept unrounded
// may differ, and loops vectorised or unrolled differently may pair other terms. One measured
// difference: `out[i] = acc ? out[i] + q * s : q * s` (the dequantize before f7029bd) nvcc fuses
// and gcc does not (the product also feeds the plain store). So an error measured here has the
// size nvcc's contraction gives, not the device's bits, and the PTX check (dev/ptx_contraction.py,
// t_62) stays what holds a kernel to a bit-identity claim. Measured over test_kernels' 53 kernels
// (2026-12-06; nvcc 13.0 PTX -fmad=true minus false, vs gcc 12 vfmadd with EMU_CONTRACT minus
// without): the same 49 contract or not; attention_forward_kernel (nvcc 2, gcc 0) and
// attention_backward_kernel (nvcc 0, gcc 1) differ (their mma fragments are host code here).
// Counts differ in size: nvcc unrolls the 8-element pack loops that gcc keeps. Explicitly
// rounded operations (__fmul_rn, __fadd_rn below) never contract, as on the device. A function
// both __host__ and __device__ contracts here when the host calls it too (only integer ones
// exist: attention_padded_T).
#if defined(EMU_CONTRACT) && EMU_CONTRACT
#if !defined(__FMA__)
#error "EMU_CONTRACT needs an FMA-capable target (-mfma): without FMA instructions gcc contracts nothing"
#endif
#undef __device__
#undef __global__
#define __device__ __attribute__((optimize("fp-contract=fast")))
#define __global__ __attribute__((optimize("fp-contract=fast")))
#endif
#define threadIdx (emu::state.current->idx)
#define blockIdx (emu::state.block_idx)
#define blockDim (emu::state.block)
#define gridDim (emu::state.grid)
#define warpSize 32

#define __syncthreads() emu::block_barrier(__FILE__, __LINE__)
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask, "__syncwarp"); }

template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 64 bits");
    if (width != 32) emu::fail("%s", "__shfl_xor_sync with width != 32 is not modelled");
    emu::Thread* t = emu::state.current;
    emu::Warp& w = emu::state.warps[t->warp];
    int parity = (int)(t->warp_phase & 1);
    memcpy(&w.slots[parity][t->lane], &value, sizeof(T));
    emu::warp_barrier(mask, "__shfl_xor_sync");
    T result;
    int source = (t->lane ^ lane_mask) & 31;
    // the source took part if it reached this exchange's phase (it may have finished since)
    if (source >= w.lanes || emu::state.threads[(size_t)t->warp * 32 + source].warp_phase < t->warp_phase)
        memset(&result, 0xff, sizeof(T)); // an exited or absent lane: undefined on the GPU, poison here
    else
        memcpy(&result, &w.slots[parity][source], sizeof(T));
    return result;
}

static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
// EMU_DEVICE_MATH=1: the fast-math intrinsics and rsqrtf err as much as the device may (CUDA C++
// Programming Guide, "Mathematical Functions": maximum ulp errors of rsqrtf (2, standard
// functions table) and of the intrinsics __expf (2 + floor(|1.173 x|)), __logf (absolute
// 2^-21.41 for x in [0.5, 2], else 3 ulps), __fdividef (2 ulps)), instead of the exact libm value:
// the result is moved by k ulps, k in [-bound, bound] drawn from a hash of the input bits (the
// same input, the same error, as a fixed device approximation). Tensor-core products (mma.sync
// here, the cuBLASLt model) accumulate in fp32 instead of double. Default: off (exact).
namespace emu {
static bool device_math(void) {
    static int on = -1;
    if (on < 0) { const char* e = getenv("EMU_DEVICE_MATH"); on = e != NULL && atoi(e) != 0; }
    return on != 0;
}
static inline uint32_t math_hash(float x) {
    uint32_t h;
    memcpy(&h, &x, 4);
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    return h;
}
// exact moved by k in [-bound, bound] ulps (k from x); zeros, infinities and NaN unchanged.
static inline float perturb_ulps(float exact, float x, float bound) {
    if (!device_math() || !(bound >= 1.0f) || !isfinite(exact) || exact == 0.0f) return exact;
    int64_t b = bound > 1e6f ? 1000000 : (int64_t)bound;
    int64_t k = (int64_t)(math_hash(x) % (uint32_t)(2 * b + 1)) - b;
    uint32_t u;
    memcpy(&u, &exact, 4);
    int64_t mag = (int64_t)(u & 0x7fffffffu) + k; // a finite float's bits grow with its magnitude
    if (mag < 0) mag = 0;
    if (mag > 0x7f7fffff) mag = 0x7f7fffff;
    u = (u & 0x80000000u) | (uint32_t)mag;
    float r;
    memcpy(&r, &u, 4);
    return r;
}
} // namespace emu
static inline float rsqrtf(float x) { return emu::perturb_ulps(1.0f / sqrtf(x), x, 2.0f); }
// declared extern "C" by crt/device_functions.h (as device functions), so defined to match
extern "C" float __expf(float x) __THROW { return emu::perturb_ulps(expf(x), x, 2.0f + floorf(fabsf(1.173f * x))); }
extern "C" float __logf(float x) __THROW {
    float exact = logf(x);
    if (!emu::device_math() || !(x >= 0.5f && x <= 2.0f)) return emu::perturb_ulps(exact, x, 3.0f);
    // absolute error up to 2^-21.41 here: k/8 of it, k in [-8, 8]
    int k = (int)(emu::math_hash(x) % 17u) - 8;
    return exact + (float)k / 8.0f * 3.5877e-7f; // 2^-21.41
}
static inline float __fdividef(float a, float b) { return emu::perturb_ulps(a / b, a * 0.5f + b, 2.0f); }
// The explicitly rounded operations (CUDA Math API, "Single Precision Intrinsics"): IEEE
// round-to-nearest, one rounding each, never fused with a neighbour; fmaf is the fused
// multiply-add with one rounding. In the contracted flavor (EMU_CONTRACT above) each operand and
// result passes through an empty asm, which no fused multiply-add can span.
static inline float emu_rounded(float r) {
#if defined(__x86_64__)
    __asm__("" : "+x"(r));
#endif
    return r;
}
static inline float __fmul_rn(float a, float b) { return emu_rounded(emu_rounded(a) * emu_rounded(b)); }
static inline float __fadd_rn(float a, float b) { return emu_rounded(emu_rounded(a) + emu_rounded(b)); }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int4 __ldcs(const int4* p) { return *p; }
static inline void __stcs(int4* p, int4 v) { *p = v; }
static inline float __ldcg(const float* p) { return *p; }
static inline void __stcg(float* p, float v) { *p = v; }
// Fibers switch only at barriers, so a read-modify-write is atomic here.
static inline float atomicAdd(float* p, float v) { float old = *p; *p = old + v; return old; }

// ----------------------------------------------------------------------------------------------
// WMMA (CUDA C++ Programming Guide, "Warp Matrix Functions"): bf16 16x16x16 with fp32 accumulate.

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct fragment_shape;
template <int M, int N, int K> struct fragment_shape<matrix_a, M, N, K> { static const int rows = M, cols = K; };
template <int M, int N, int K> struct fragment_shape<matrix_b, M, N, K> { static const int rows = K, cols = N; };
template <int M, int N, int K> struct fragment_shape<accumulator, M, N, K> { static const int rows = M, cols = N; };

// The whole tile, row-major, as floats (bf16 values are exact in fp32).
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static const int rows = fragment_shape<Use, M, N, K>::rows, cols = fragment_shape<Use, M, N, K>::cols;
    float v[rows * cols];
};

static inline void check_pointer(const void* p, unsigned ldm, size_t element_bytes, const char* what) {
    if ((uintptr_t)p % 32 != 0) emu::fail("%s: pointer not 256-bit aligned", what);
    if ((ldm * element_bytes) % 16 != 0) emu::fail("%s: ldm not a multiple of 16 bytes", what);
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
static inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
    for (float& x : f.v) x = value;
}

// matrix_a / matrix_b from bf16 memory, layout from the fragment type.
template <typename Use, int M, int N, int K, typename Layout>
static inline void load_matrix_sync(fragment<Use, M, N, K, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
                                    unsigned ldm) {
    check_pointer(p, ldm, 2, "wmma::load_matrix_sync");
    typedef fragment<Use, M, N, K, __nv_bfloat16, Layout> F;
    for (int i = 0; i < F::rows; i++)
        for (int j = 0; j < F::cols; j++)
            f.v[i * F::cols + j] = __bfloat162float(std::is_same<Layout, row_major>::value ? p[(size_t)i * ldm + j]
                                                                                           : p[(size_t)j * ldm + i]);
}

template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                                    layout_t layout) {
    check_pointer(p, ldm, 4, "wmma::load_matrix_sync (accumulator)");
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            f.v[i * N + j] = layout == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
}

// Each lane writes elements lane, lane + 32, ...: the tile is complete only after __syncwarp.
template <int M, int N, int K>
static inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                                     layout_t layout) {
    check_pointer(p, ldm, 4, "wmma::store_matrix_sync");
    for (int e = emu::state.current->lane; e < M * N; e += 32) {
        int i = e / N, j = e % N;
        if (layout == mem_row_major) p[(size_t)i * ldm + j] = f.v[e];
        else p[(size_t)j * ldm + i] = f.v[e];
    }
}

template <int M, int N, int K, typename LayoutA, typename LayoutB>
static inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                            const fragment<matrix_a, M, N, K, __nv_bfloat16, LayoutA>& a,
                            const fragment<matrix_b, M, N, K, __nv_bfloat16, LayoutB>& b,
                            const fragment<accumulator, M, N, K, float>& c) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.v[i * N + j];
            for (int k = 0; k < K; k++) s += a.v[i * K + k] * b.v[k * N + j];
            out[i * N + j] = s;
        }
    memcpy(d.v, out, sizeof(out));
}
} // namespace wmma
} // namespace nvcuda

#include "emu_ptx.h"      // mma.sync, ldmatrix, cp.async (kernels/ptx.cuh)
#include "cublaslt_emu.h" // the cuBLASLt model (kernels/matmul.cuh's subset)
#ifdef EMU_NCCL
#include "nccl_emu.h" // NCCL's collectives over MPI (the NCCL build of train_gpt2.cu)
#endif

#endif // EMU_H
