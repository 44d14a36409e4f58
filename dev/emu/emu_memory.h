/*
 * emu_memory.h: the emulation's device memory (see emu.h for the model). guarded_alloc gives each
 * cudaMalloc (and cudaMallocHost) buffer its own mapping: [guard page][poisoned slack][buffer,
 * ending on the last 256-byte boundary before the upper guard page][guard page], filled with the
 * caller's byte (0xff for cudaMalloc: NaN as bf16 and fp32). find_allocation maps a pointer range
 * to its buffer (emu_runtime.h's copy checks); check_allocation_fences, after every kernel, finds a
 * write into the slack; the SIGSEGV/SIGBUS handler names the buffer, the fiber stack or the dynamic
 * shared memory an access fell outside of. install_handlers (first launch) also seeds the
 * scheduler's generator from EMU_SEED.
 * Included by emu.h after emu_fibers.h (it uses emu::state, kPage, fail).
 */
#ifndef EMU_MEMORY_H
#define EMU_MEMORY_H
#ifndef EMU_H
#error "dev/emu/emu_memory.h is part of the CPU emulation of CUDA; include dev/emu/emu.h"
#endif

namespace emu {

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

} // namespace emu

#endif // EMU_MEMORY_H
