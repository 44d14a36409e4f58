/*
 * kernel_occupancy.cpp: theoretical occupancy of kernels on an H200 (sm_90), computed by
 * NVIDIA's occupancy calculator (cuda_occupancy.h from the CUDA toolkit, the logic behind
 * cudaOccupancyMaxActiveBlocksPerMultiprocessor and the CUDA Occupancy Calculator) from the
 * per-SM limits of compute capability 9.0 (CUDA C++ Programming Guide, "Compute Capabilities",
 * table "Technical Specifications per Compute Capability"): 65,536 32-bit registers, 228 KB of
 * shared memory (227 KB per block after opt-in, 1 KB reserved per block), 2,048 threads (64
 * warps), 32 blocks; registers allocated per warp in units of 256. Host-only: no GPU needed.
 * Input (stdin), one kernel a line:  NAME THREADS_PER_BLOCK REGISTERS STATIC_SMEM DYNAMIC_SMEM
 * Output (stdout), one line each:    NAME BLOCKS_PER_SM ACTIVE_WARPS OCCUPANCY_PERCENT LIMITER
 * (LIMITER: registers, shared, warps, blocks, or several joined by '+'). Used by
 * dev/ptxas_occupancy.py. Exit 1 on a malformed line or a configuration that cannot run.
 */
#include <stdio.h>
#include <string.h>
#include <string>

#include <cuda_occupancy.h>

int main(void) {
    cudaOccDeviceProp h200;
    h200.computeMajor = 9;
    h200.computeMinor = 0;
    h200.maxThreadsPerBlock = 1024;
    h200.maxThreadsPerMultiprocessor = 2048;
    h200.regsPerBlock = 65536;
    h200.regsPerMultiprocessor = 65536;
    h200.warpSize = 32;
    h200.sharedMemPerBlock = 48 << 10;
    h200.sharedMemPerMultiprocessor = 228 << 10;
    h200.numSms = 132;
    h200.sharedMemPerBlockOptin = 227 << 10;
    h200.reservedSharedMemPerBlock = 1 << 10;
    cudaOccDeviceState state;
    state.carveoutConfig = SHAREDMEM_CARVEOUT_MAX_SHARED; // the driver grows the carveout to what the launch needs

    char name[1024];
    int threads, registers;
    size_t static_smem, dynamic_smem;
    int line = 0;
    while (scanf("%1023s %d %d %zu %zu", name, &threads, &registers, &static_smem, &dynamic_smem) == 5) {
        line++;
        cudaOccFuncAttributes kernel;
        kernel.maxThreadsPerBlock = 1024;
        kernel.numRegs = registers;
        kernel.sharedSizeBytes = static_smem;
        kernel.partitionedGCConfig = PARTITIONED_GC_OFF;
        kernel.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; // the launchers opt in above 48 KB
        kernel.maxDynamicSharedSizeBytes = 227 << 10;
        kernel.numBlockBarriers = 1;
        cudaOccResult result;
        cudaOccError err = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &h200, &kernel, &state, threads, dynamic_smem);
        if (err != CUDA_OCC_SUCCESS || result.activeBlocksPerMultiprocessor == 0) {
            fprintf(stderr, "error: kernel_occupancy: %s with %d threads, %d registers, %zu + %zu bytes of shared memory "
                    "cannot run on sm_90 (calculator error %d)\n", name, threads, registers, static_smem, dynamic_smem, (int)err);
            return 1;
        }
        std::string limiter;
        const char* names[] = {"warps", "registers", "shared", "blocks"};
        const unsigned bits[] = {OCC_LIMIT_WARPS, OCC_LIMIT_REGISTERS, OCC_LIMIT_SHARED_MEMORY, OCC_LIMIT_BLOCKS};
        for (int i = 0; i < 4; i++)
            if (result.limitingFactors & bits[i]) limiter += (limiter.empty() ? "" : "+") + std::string(names[i]);
        int warps = result.activeBlocksPerMultiprocessor * ((threads + 31) / 32);
        printf("%s %d %d %.1f %s\n", name, result.activeBlocksPerMultiprocessor, warps, 100.0 * warps / 64,
               limiter.empty() ? "-" : limiter.c_str());
    }
    if (!feof(stdin)) {
        fprintf(stderr, "error: kernel_occupancy: line %d: malformed; expected NAME THREADS REGISTERS STATIC_SMEM DYNAMIC_SMEM\n", line + 1);
        return 1;
    }
    return 0;
}
