/*
 * zero/zeropp/zeropp_state.h: ZeRO++'s state (qwZ, hpZ, qgZ: the flags, the groups, the packets,
 * the secondary shard), reached from the engine by one field, ZeroEngine.pp (NULL when ZeRO++ is
 * off). The CPU build's (fp32 on the host, MPI communicators) and the GPU build's (device buffers,
 * NCCL communicators). What it adds to the core is zero/zeropp/zeropp.h (CPU) and
 * zero/zeropp/zeropp_gpu.cuh (GPU), called through zero/hooks.h. Part of the ZeRO engine (the map
 * is in zero.cuh).
 */
#ifndef ZERO_ZEROPP_STATE_H
#define ZERO_ZEROPP_STATE_H
#ifndef ZERO_CUH
#error "zero/zeropp/zeropp_state.h is part of the ZeRO engine; include zero.cuh"
#endif

#if !ZERO_GPU_BUILD
typedef struct ZeroPP {
    int qw, qg, qg_bits, hp, block; // flags: hp = K (1: off); block: -qb, the weights'
    int grad_block;                 // -qbg: elements per block of qgZ's gradient codes
    int group_size, num_groups;     // G ranks a group (hpZ's K when on, else the ranks of a host), H = N/G
    int group_rank, group_index;    // this rank = group_index * G + group_rank
    MPI_Comm group_comm, cross_comm; // this rank's group; the ranks at its place in every group
    int backward;                   // the model's pass: 1 while backward asks for parameters
    int forward_gather[ZERO_WORKING_UNITS]; // the working unit's gather served forward: keep its hpZ slice
    float* packets[ZERO_WORKING_UNITS]; // qwZ: per parameter working unit, N packets (gathered codes)
    long long dequantize_age[ZERO_WORKING_UNITS]; // the working unit's age (take) whose packets await dequantizing, else -1
    float* secondary;               // hpZ: unit u's slice group_rank of K at units[u].offset / K
    int* secondary_ready;           // per unit: a forward gather has filled it
    uint8_t *send, *recv;           // qgZ: the two all-to-alls' buffers (one unit)
    float* partial;                 // qgZ: H chunks summed within the group
    size_t bytes_buffers, bytes_secondary;
    long long words_offring_step;   // sent outside the rings this step (group gathers, all-to-alls), in words
    long long words_offring_across_step;
} ZeroPP;
#else
typedef struct ZeroPP {
    int qw, qg, qg_bits, hp, block;      // flags: hp = K (1: off); block: -qb, elements per block of qwZ's codes
    int grad_block;                      // elements per block of qgZ's codes (-qbg)
    int group_size, num_groups;          // G ranks a group, H = N/G
    int group_rank, group_index;         // this rank = group_index * G + group_rank
#if !ZERO_COMM_MPI
    ncclComm_t group_nccl, cross_nccl;   // this rank's group; the ranks at its place in every group (NULL: not needed)
#endif
    int backward;                        // the model's pass: 1 while backward asks for parameters
    int forward_gather[ZERO_WORKING_UNITS]; // the working unit's gather serves forward: keep its hpZ slice
    uint8_t* packets[ZERO_WORKING_UNITS]; // device, qwZ: N packets of one unit per parameter working unit
    bf16* secondary;                     // device, hpZ: unit u's slice group_rank of K at units[u].offset / K
    int* secondary_ready;                // host, per unit: a forward gather has filled its slice
    uint8_t *send, *recv;                // device, qgZ: N packets each (phase 1: G x H, phase 2: H)
    float *grads32, *partial, *result;   // device, qgZ: the unit in fp32, H partial chunks, this rank's sum (S each)
    size_t bytes_buffers, bytes_secondary;
} ZeroPP;
#endif

#endif // ZERO_ZEROPP_STATE_H
