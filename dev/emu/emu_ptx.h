/*
 * emu_ptx.h: the CPU emulation of the warp-level PTX instructions that kernels/ptx.cuh wraps
 * (mma.sync m16n8k16 bf16, ldmatrix m8n8 x4 [.trans], cp.async with commit/wait groups). Part
 * of dev/emu (included by emu.h); the same function names as kernels/ptx.cuh, which defines
 * them with inline PTX when not emulated. Source for every layout: NVIDIA, "PTX ISA",
 * 9.7.14.5.8 (mma.m16n8k16 fragments), 9.7.14.5.15 (ldmatrix), 9.7.9.25 (cp.async).
 *
 * Warp collectives (mma, ldmatrix): each lane deposits its operands in a per-warp exchange slot
 * and meets the others at a warp barrier (emu_fibers.h's warp_barrier, the one behind the shuffles);
 * then each lane computes its own result from the other lanes' slots, element by element, using
 * the documented thread-to-element layout. So a kernel that feeds fragments in another layout
 * gets wrong numbers here as on the GPU. Strict where the GPU is undefined (.sync.aligned):
 *   - every one of the 32 lanes must take part (a returned lane stops the program);
 *   - all lanes must be at the same instruction (a lane at an mma while another is at an
 *     ldmatrix or a shuffle stops the program);
 *   - ldmatrix row addresses must be 16-byte aligned and in shared memory.
 * mma accumulates the 16 products and C in double and rounds once to fp32 (the GPU's internal
 * order and precision are not documented; bf16 products are exact in fp32); with
 * EMU_DEVICE_MATH=1 (emu_device.h) in fp32, rounding after each product, which errs more than a GPU.
 *
 * cp.async (per thread, as in PTX): a copy joins the thread's open group; commit closes it;
 * wait<N> completes all but the N most recent committed groups, oldest first. The copy reads
 * its source when issued and writes its destination only when waited for; in between the
 * destination holds poison (0xff: NaN as bf16 and fp32), so a read before the wait, or by
 * another thread before wait + __syncthreads, sees garbage. A thread that returns with copies
 * not waited for (open or committed) stops the program: their data would land at an undefined
 * time. Destinations must be 16-byte aligned shared memory; sources 16-byte aligned.
 */
#ifndef EMU_PTX_H
#define EMU_PTX_H

#include <deque>
#include <vector>

namespace emu {

// ----------------------------------------------------------------------------------------------
// Warp exchange for the collectives below.

struct PtxSlot {
    const char* instruction; // which collective the lane is at
    unsigned long phase;     // the lane's warp_phase at it
    uint32_t words[6];       // mma: a[0..3], b[0..1]
    const unsigned char* address; // ldmatrix: this lane's row address
};

struct PtxWarp {
    PtxSlot slots[2][32]; // by phase parity, as the shuffle slots
};

static std::vector<PtxWarp>& ptx_warps(void) {
    static std::vector<PtxWarp> warps;
    return warps;
}

// Deposits the calling lane's slot, waits for the warp, checks that all 32 lanes are at the
// same instruction; returns the 32 slots of this exchange.
static const PtxSlot* ptx_exchange(const char* instruction, const PtxSlot& mine) {
    Thread* t = state.current;
    Warp& w = state.warps[t->warp];
    if (w.lanes != 32 || w.live != 32) fail("%s with lanes of the warp that returned or do not exist (undefined behaviour)", instruction);
    if (ptx_warps().size() < state.warps.size()) ptx_warps().resize(state.warps.size());
    int parity = (int)((t->warp_phase + 1) & 1); // the phase warp_barrier is about to enter
    PtxSlot* slots = ptx_warps()[t->warp].slots[parity];
    slots[t->lane] = mine;
    slots[t->lane].instruction = instruction;
    slots[t->lane].phase = t->warp_phase + 1;
    warp_barrier(0xffffffffu, instruction);
    for (int l = 0; l < 32; l++)
        if (slots[l].phase != t->warp_phase || slots[l].instruction != instruction) {
            char detail[200];
            snprintf(detail, sizeof(detail), "lanes of one warp at different warp-level instructions: lane %d at %s, lane %d at "
                     "another (undefined behaviour)", t->lane, instruction, l);
            fail("%s", detail);
        }
    return slots;
}

static inline float bf16_bits_to_float(uint32_t bits16) {
    uint32_t u = bits16 << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Element i (0 = low half, 1 = high half) of a .b32 register holding two bf16.
static inline float bf16_half(uint32_t reg, int i) { return bf16_bits_to_float((reg >> (16 * i)) & 0xffffu); }

static bool in_shared_memory(const void* p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    uintptr_t d = (uintptr_t)state.dynamic_smem;
    if (state.dynamic_smem != NULL && a >= d && a + bytes <= d + state.dynamic_smem_span) return true;
    // static __shared__ arrays: the emu_shared section (emu_device.h)
    return __start_emu_shared != NULL && a >= (uintptr_t)__start_emu_shared && a + bytes <= (uintptr_t)__stop_emu_shared;
}

// ----------------------------------------------------------------------------------------------
// cp.async: per-thread groups.

struct AsyncCopy {
    unsigned char* dst;
    unsigned char data[16];
};

struct AsyncCopyThread {
    std::vector<AsyncCopy> open;                 // issued since the last commit
    std::deque<std::vector<AsyncCopy>> committed; // oldest first
};

static std::vector<AsyncCopyThread>& async_threads(void) {
    static std::vector<AsyncCopyThread> threads;
    return threads;
}

// Called by emu_fibers.h when a fiber returns: no copy may still be pending.
static void async_copy_thread_exit(void) {
    auto& all = async_threads();
    size_t id = (size_t)(state.current - state.threads.data());
    if (id >= all.size()) return;
    AsyncCopyThread& q = all[id];
    if (!q.open.empty() || !q.committed.empty())
        fail("%s", "a thread returned with cp.async copies it never waited for (cp.async.wait_group): their data lands at "
                   "an undefined time");
}

// This thread's queue; emptied at the start of every block (copies cannot outlive their block).
static AsyncCopyThread& async_thread(void) {
    static unsigned long block_seen = 0;
    auto& all = async_threads();
    if (block_seen != state.blocks_run || all.size() < state.threads.size()) {
        all.assign(state.threads.size(), AsyncCopyThread());
        block_seen = state.blocks_run;
        state.thread_exit_check = async_copy_thread_exit;
    }
    return all[(size_t)(state.current - state.threads.data())];
}

} // namespace emu

// ----------------------------------------------------------------------------------------------
// The functions of kernels/ptx.cuh.

// d += a b (16 x 8 x 16, bf16 in, fp32 accumulate); the fragment layouts of PTX ISA 9.7.14.5.8.
static inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    emu::PtxSlot mine = {};
    for (int i = 0; i < 4; i++) mine.words[i] = a[i];
    mine.words[4] = b[0];
    mine.words[5] = b[1];
    const emu::PtxSlot* s = emu::ptx_exchange("mma.sync.m16n8k16", mine);
    const int lane = emu::state.current->lane, g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        double sum = d[i];
        float sum_f = d[i]; // EMU_DEVICE_MATH=1: fp32 accumulation, one rounding per product added
        for (int k = 0; k < 16; k++) {
            // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k & 1
            const emu::PtxSlot& sa = s[(row % 8) * 4 + (k % 8) / 2];
            float av = emu::bf16_half(sa.words[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1);
            // B[k][col]: lane col * 4 + (k % 8) / 2, register (k >= 8), half k & 1
            const emu::PtxSlot& sb = s[col * 4 + (k % 8) / 2];
            float bv = emu::bf16_half(sb.words[4 + (k >= 8 ? 1 : 0)], k & 1);
            sum += (double)av * (double)bv;
            sum_f += av * bv; // bf16 x bf16 is exact in fp32
        }
        d[i] = emu::device_math() ? sum_f : (float)sum;
    }
}

static inline void emu_ldmatrix_x4(uint32_t r[4], const void* row_address, bool trans) {
    const char* name = trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
    if ((uintptr_t)row_address % 16 != 0) emu::fail("%s: row address not 16-byte aligned", name);
    if (!emu::in_shared_memory(row_address, 16)) emu::fail("%s: row address not in shared memory", name);
    emu::PtxSlot mine = {};
    mine.address = (const unsigned char*)row_address;
    const emu::PtxSlot* s = emu::ptx_exchange(name, mine);
    const int lane = emu::state.current->lane, g = lane / 4, t = lane % 4;
    for (int m = 0; m < 4; m++) { // matrix m: rows at the addresses of lanes 8m .. 8m+7
        if (!trans) {
            memcpy(&r[m], s[8 * m + g].address + 4 * t, 4); // row g, elements 2t, 2t+1
        } else {
            uint16_t lo, hi; // column g, rows 2t and 2t+1
            memcpy(&lo, s[8 * m + 2 * t].address + 2 * g, 2);
            memcpy(&hi, s[8 * m + 2 * t + 1].address + 2 * g, 2);
            r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

static inline void ldmatrix_x4(uint32_t r[4], const void* row_address) { emu_ldmatrix_x4(r, row_address, false); }
static inline void ldmatrix_x4_trans(uint32_t r[4], const void* row_address) { emu_ldmatrix_x4(r, row_address, true); }

static inline void cp_async_16(void* smem, const void* src, bool valid) {
    if ((uintptr_t)smem % 16 != 0 || !emu::in_shared_memory(smem, 16))
        emu::fail("%s", "cp.async: destination not 16-byte aligned shared memory");
    if ((uintptr_t)src % 16 != 0) emu::fail("%s", "cp.async: source not 16-byte aligned");
    emu::AsyncCopy c;
    c.dst = (unsigned char*)smem;
    if (valid) memcpy(c.data, src, 16); // the source is read when issued (a bad address stops here)
    else memset(c.data, 0, 16);         // src-size 0: zero fill
    memset(smem, 0xff, 16);             // undefined until waited for: poison
    emu::async_thread().open.push_back(c);
}

static inline void cp_async_commit(void) {
    emu::AsyncCopyThread& q = emu::async_thread();
    q.committed.push_back(q.open);
    q.open.clear();
}

template <int N>
static inline void cp_async_wait(void) {
    emu::AsyncCopyThread& q = emu::async_thread();
    while (q.committed.size() > (size_t)N) {
        for (const emu::AsyncCopy& c : q.committed.front()) memcpy(c.dst, c.data, 16);
        q.committed.pop_front();
    }
}

#endif // EMU_PTX_H
