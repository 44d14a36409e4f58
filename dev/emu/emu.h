/*
 * emu.h: a CPU emulation of the CUDA execution model, so that the GPU build's kernels and host
 * code run (slowly, single-threaded) on a machine without a GPU, in CI. It is a test tool, not
 * a second backend: nothing it computes is a GPU measurement.
 *
 * How a program is built (see emu.mk): dev/emu/rewrite.py copies the sources into build/emu/src
 * and rewrites the two constructs plain C++ cannot parse (`kernel<<<grid, block, smem,
 * stream>>>(args)` and `extern __shared__ T name[]`); g++ then compiles the copy with
 * `-include dev/emu/emu.h -DCUDA_EMULATION`, the real CUDA headers for types and declarations,
 * and without libcudart: this file and the parts it includes (listed at its end, one concern
 * each) define the runtime functions the project calls.
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

// The parts, in the order each needs the ones before it:
#include "emu_fibers.h"  // execution state, fibers, __syncthreads / warp barriers, emu::fail
#include "emu_memory.h"  // guarded cudaMalloc buffers, fences, the SIGSEGV handler
#include "emu_launch.h"  // kernel<<<...>>>: launch checks, blocks, warps and lanes as fibers
#include "emu_runtime.h" // the CUDA runtime API: memory calls, streams, events, devices
#include "emu_device.h"  // device built-ins: __shared__, threadIdx, shuffles, intrinsics, device math
#include "emu_wmma.h"    // nvcuda::wmma (bf16 16x16x16, fp32 accumulate)
#include "emu_ptx.h"      // mma.sync, ldmatrix, cp.async (kernels/ptx.cuh)
#include "cublaslt_emu.h" // the cuBLASLt model (kernels/matmul.cuh's subset)
#ifdef EMU_NCCL
#include "nccl_emu.h" // NCCL's collectives over MPI (the NCCL build of train_gpt2.cu)
#endif

#endif // EMU_H
