/*
 * emu_launch.h: kernel launch in the emulation (see emu.h for the model): what rewrite.py makes of
 * `kernel<<<grid, block, smem, stream>>>(args)`, emu::launch(LaunchConfig(...), kernel, "kernel")(args).
 * run_kernel checks the configuration as CUDA does at launch (block <= 1024 threads, grid y/z <=
 * 65535, dynamic shared memory > 48 KiB only after cudaFuncSetAttribute, <= 227 KiB) and sets
 * cudaGetLastError's error instead of running; execute_kernel runs the blocks in a random order,
 * each with poisoned static and fenced dynamic shared memory, and run_block the block's warps and
 * lanes as fibers (emu_fibers.h) until all returned. EMU_LAUNCH_LOG=FILE logs each distinct launch.
 * Included by emu.h after emu_memory.h; stream_defer is emu_runtime.h's, included after this file.
 */
#ifndef EMU_LAUNCH_H
#define EMU_LAUNCH_H
#ifndef EMU_H
#error "dev/emu/emu_launch.h is part of the CPU emulation of CUDA; include dev/emu/emu.h"
#endif

namespace emu {

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

// Static __shared__ arrays (the emu_shared section, emu_device.h); weak: a program may have none.
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

#endif // EMU_LAUNCH_H
