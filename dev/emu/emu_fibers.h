/*
 * emu_fibers.h: the emulation's execution state and its fibers and barriers (see emu.h for the
 * model). One fiber per CUDA thread of the running block (emu::Thread, a ucontext with its own
 * stack), the block's warps (emu::Warp: the shuffle exchange slots), the one global emu::state
 * (the running kernel, grid, block, barrier counters, the scheduler's jmp_buf, the EMU_SEED
 * generator), emu::fail (one "emu: error" line naming kernel, block and thread; exit status 3),
 * and the barriers behind __syncthreads (block_barrier) and __syncwarp / the shuffles / mma
 * (warp_barrier). Fibers switch only at barriers: a thread yields to the scheduler (run_block,
 * emu_launch.h) when it waits at one.
 * Included by emu.h first, inside its system includes; the later parts use emu::state and fail.
 */
#ifndef EMU_FIBERS_H
#define EMU_FIBERS_H
#ifndef EMU_H
#error "dev/emu/emu_fibers.h is part of the CPU emulation of CUDA; include dev/emu/emu.h"
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

} // namespace emu

#endif // EMU_FIBERS_H
