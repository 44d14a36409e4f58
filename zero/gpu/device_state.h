/*
 * zero/gpu/device_state.h: the GPU engine's state, reached from the engine by one field,
 * ZeroEngine.gpu (GPU build only): the streams and their marks, the fp32 gradient accumulator and
 * master weights, the optimizer's plan and its results in flight, NCCL's communicator, and the
 * GPU offload's host side. Used by zero/gpu/engine_gpu.cuh, comm_gpu.cuh, state_io_gpu.cuh, optimizer_gpu.cuh and
 * zero/offload/offload_gpu.cuh. Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_DEVICE_STATE_H
#define ZERO_DEVICE_STATE_H
#ifndef ZERO_CUH
#error "zero/gpu/device_state.h is part of the ZeRO engine; include zero.cuh"
#endif

// One optimizer step's results on their way back to the host (zero/gpu/optimizer_gpu.cuh): the
// engine keeps three (step t in slot t mod 3), so the trainer can read step t's while step t+1
// runs, and step t-1's end event is still there to time the gap between them.
#define ZERO_STEP_SLOTS 3
typedef struct {
    cudaEvent_t begin, done;    // compute stream: the step's start; after its AdamW and the norm copy
    float* norm_host;           // pinned, 2 floats: squared norm of the summed gradient (owned slices,
                                // all ranks), and the GNS meter's local squared norm summed over ranks
    long long sent_elements;    // host counters of the step, kept when it was enqueued
    double host_comm_wait_s;
    int stall_count;            // event pairs used in this slot's third of stall_begin/stall_end
    int step;                   // the step it holds (from 1)
    int pending;                // enqueued, not yet read by zero_step_result
} ZeroStepSlot;

// The GPU engine's own state (ZeroEngine.gpu).
typedef struct {
    // GPU build (zero/gpu/engine_gpu.cuh): params, grads, master, m, v live on the device. `grads`
    // (bf16) holds one micro-step's gradient (stages 0, 1; stages 2, 3 use working units);
    // grads_fp32 accumulates the micro-steps and is what the optimizer reads: the full buffer at
    // stages 0, 1 (reduced on the last micro-step), the rank's shard at stages 2, 3.
    float* grads_fp32;
    int* grad_folds;                   // per unit: reductions added into grads_fp32 this step (micro-steps;
                                       // stages 2, 3: twice per micro-step for a wte unit)
    int* grad_open;                    // stages 0, 1, per unit: asked for by backward, not yet ready (a
                                       // wte unit is asked for twice per micro-step: LM head, encoder)
    cudaEvent_t* grad_fold_done;       // stages 0, 1, per unit: its last addition (comm stream)
    float* master;                     // fp32 master weights, stored (full or shard) like m and v
    cudaStream_t compute, comm;        // the model's kernels; the engine's bulk collectives
    cudaEvent_t compute_mark, comm_mark; // re-recorded whenever the other stream must wait for this one
    cudaEvent_t host_mark;             // re-recorded where the host waits (zero_device_wait)
    // Exposed communication: an event pair around every wait of the compute stream on the comm
    // stream (zero_compute_wait), read and summed when the step's results are read. One third
    // of stall_capacity pairs per step slot; stall_base is the current step's.
    cudaEvent_t *stall_begin, *stall_end;
    int stall_count, stall_capacity, stall_base;
    float* norm_device;                // [0] squared norm of the owned gradient slices, [1] the GNS
    float* norm_scratch;               // meter's local squared norm; scratch of the norm kernels
    float* grad_scale_device;          // AdamW's gradient scale (clipping and 1/world_size), 1 float
    AdamWPlan adamw_plan;              // kernels/adamw.cuh: every owned tensor slice, one launch
    int* adamw_unit_chunks;            // host, num_units + 1: each unit's first chunk in the plan
    ZeroStepSlot step_slots[ZERO_STEP_SLOTS];
    float* host_float;                 // host staging of one unit: set-up, checkpoints, ZERO_COMM_MPI
    bf16* host_bf16;
    long long ops_issued;              // device collectives issued so far (ZeroOp.issued)
#if !ZERO_COMM_MPI
    ncclComm_t nccl;                   // NULL with one rank
#endif
    // ZeRO-Offload on the GPU (zero/offload/offload_gpu.cuh): the host's side of the state, by shard layout.
    float *host_master, *host_m, *host_v; // -zo cpu: this rank's optimizer shard, pinned
    float* host_grads;                 // -zo cpu|nvme: the reduced fp32 gradient shard, copied down as each unit's last addition ends
    float* host_grad_scale;            // -zo cpu|nvme: AdamW's gradient scale (pinned, 1 float), from the device
    bf16* host_params;                 // -zo cpu|nvme: the updated parameter shard on its way up; -zp cpu: where the shard lives
    cudaStream_t copy;                 // the offload's host<->device copies
    cudaEvent_t *grads_down, *params_up; // per unit: the gradient slice is on the host / the parameters are back up
    long long d2h_bytes_step, h2d_bytes_step; // this step's copies (bytes)
    double copy_wait_s_step;           // host time waiting for a gradient copy (exposed)
} ZeroDevice;

// Zeroed device memory for the GPU engine and its extensions; out of memory: one line, exit.
static void* zero_device_calloc(size_t n, size_t elem, const char* what) {
    if (n == 0) return NULL;
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, n * elem);
    if (err != cudaSuccess) {
        fprintf(stderr, "error: out of GPU memory allocating %s (%.1f MiB): %s; expected a smaller model, -b/-t or a higher ZeRO stage\n",
                what, n * elem / 1048576.0, cudaGetErrorString(err));
        exit(1);
    }
    CUDA_CHECK(cudaMemset(p, 0, n * elem));
    return p;
}

#endif // ZERO_DEVICE_STATE_H
