/*
 * zero/gpu/optimizer_gpu.cuh: the GPU engine's optimizer step, all of it on the device, and its
 * results read back while the next step runs. Part of the ZeRO engine (the map is in zero.cuh);
 * after zero/gpu/engine_gpu.cuh, whose gradients (grads_fp32: the fp32 accumulation of every
 * micro-step, reduced over ranks) it reads.
 *
 * A step, as the trainer drives it:
 *   zero_step_begin(z, t)                 counters, the step's slot (t mod 3), a start event
 *   ... forward and backward of every micro-step (model/gpt2_gpu.cuh calling engine_gpu.cuh) ...
 *   zero_optimizer_step_async(z, ...t)   enqueues the optimizer; returns at once
 *   (the trainer enqueues step t+1 here)
 *   zero_step_result(z, t, &r)           the host waits (timed) for step t's norm; never needed
 *                                        before AdamW, which takes its clip factor on the device
 * Three slots (ZeroStepSlot, step t in slot t mod 3) hold what a step leaves for the host: pinned
 * copies of its norms, its events, its host counters, its third of the stall timers. So step t+1
 * can run while the host reads step t, with step t-1's end event still there to time the gap
 * between them; a step's results must be read before step t+3 begins.
 * zero_optimizer_step(z, opt, lr, t) does both at once (tests, and every caller that wants the
 * norm now): the old synchronous interface, same numbers.
 */
#ifndef ZERO_OPTIMIZER_GPU_CUH
#define ZERO_OPTIMIZER_GPU_CUH
#ifndef ZERO_CUH
#error "zero/gpu/optimizer_gpu.cuh is part of zero.cuh; include zero.cuh"
#endif

// What the host learns about a step once it is done.
typedef struct {
    int step;              // from 1
    float grad_norm;       // global gradient norm before clipping
    double comm_wait_s;    // exposed communication: host waits (MPI backend) + compute-stream stalls
    long long sent_elements; // ring count, bulk collectives
    double device_seconds; // the step on the device, from its start event to its end
    double since_previous_s; // end of the previous step to the end of this one (includes any gap
                             // the host left the GPU idle); NAN when the previous slot is not step - 1
} ZeroStepResult;

// Start optimizer step `step` (from 1, as printed): per-step counters, the step's slot and its
// third of the stall timers, the GNS meter's device sum to zero. Gradients need no zeroing: each
// unit's bf16 buffer is zeroed when backward asks for it, and its first addition into
// grads_fp32 overwrites (GRAD_SET).
static void zero_step_begin(ZeroEngine* z, int step) {
    ZeroStepSlot* slot = &z->gpu.step_slots[step % ZERO_STEP_SLOTS];
    if (slot->pending) {
        fprintf(stderr, "error: internal: step %d begins before step %d's results were read (zero_step_result)\n", step, slot->step);
        zero_abort_all_ranks(1);
    }
    z->step = step;
    zero_trace_step_begin(z, step); // -tr: the step's span opens (zero/trace/trace.h)
    z->sent_elements_step = 0;
    z->scalar_all_reduces_step = 0;
    z->comm_wait_s_step = 0.0;
    z->gpu.stall_base = (step % ZERO_STEP_SLOTS) * z->gpu.stall_capacity;
    z->gpu.stall_count = 0; // waits timed outside a step (evaluation, sampling) are not this step's
    z->gns.local_grad_norm_sq = 0.0;
    memset(z->gpu.grad_folds, 0, (size_t)z->layout->num_units * sizeof(int));
    memset(z->gpu.grad_open, 0, (size_t)z->layout->num_units * sizeof(int));
    z->gpu.d2h_bytes_step = z->gpu.h2d_bytes_step = 0; // -zo, -zp (zero/offload/offload_gpu.cuh)
    z->gpu.copy_wait_s_step = 0.0;
    zero_hook_offload_step_begin(z); // -zo/-zp nvme: the step's I/O counters
    CUDA_CHECK(cudaEventRecord(slot->begin, z->gpu.compute));
    CUDA_CHECK(cudaMemsetAsync(z->gpu.norm_device + 1, 0, sizeof(float), z->gpu.compute)); // the GNS local norm's sum
}

/*
 * Enqueue optimizer step t (from 1) with learning rate lr on the slices this rank owns (the CPU
 * engine's steps 1-5, on the compute stream; nothing here waits on the host, except with -zo
 * cpu|nvme, where step 4's AdamW runs on the host: zero_hook_offload_step):
 *   1. the compute stream waits for the comm stream (every unit's reduction and fp32 addition).
 *      The step's exposed communication is the time the compute stream stood still in this and
 *      every other wait on the comm stream since the step began (zero_compute_wait)
 *   2. average: the collectives summed over ranks; 1/world_size is folded into the norm and
 *      into AdamW's gradient scale instead of a pass over the gradients
 *   3. global norm: squared norms of the owned fp32 slices into norm_device[0] (the GNS meter's
 *      local sum is in [1]); with several ranks both summed by one all-reduce of two floats on
 *      the device (zero_device_all_reduce_floats), so every stage adds the same numbers
 *   4. clip factor on the device (adamw_grad_scale_cuda), then AdamW over every owned tensor
 *      slice in one launch (weight decay on 2-D tensors only; bf16 parameters by stochastic
 *      rounding keyed by step and global index)
 *   5. stages 1, 2: all-gather each unit's updated slice on the comm stream, behind an event
 *      recorded after that unit's AdamW (launched unit by unit then); the next forward waits
 *      for it unit by unit
 *   6. the norms to the slot's pinned copy, then the slot's done event
 */
static void zero_optimizer_step_async(ZeroEngine* z, const AdamWConfig* opt, float lr, int t) {
    const ParamLayout* layout = z->layout;
    int N = z->world_size;
    ZeroStepSlot* slot = &z->gpu.step_slots[t % ZERO_STEP_SLOTS];
    if (t != z->step || slot->pending) {
        fprintf(stderr, "error: internal: optimizer step %d enqueued in step %d (slot pending %d)\n", t, z->step, slot->pending);
        zero_abort_all_ranks(1);
    }
    // 1. Wait for the collectives and the fp32 additions.
    CUDA_CHECK(cudaEventRecord(z->gpu.comm_mark, z->gpu.comm));
    zero_compute_wait(z, z->gpu.comm_mark);
    if (ZERO_STAGE >= 2) // covered by the wait above: free the working units
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) z->grad_work[i].unit = -1;
    if (ZERO_STAGE == 3) { // gathered units are stale once the shard changes: free them
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
            CUDA_CHECK(cudaEventRecord(z->param_work[i].released, z->gpu.compute));
            z->param_work[i].unit = -1;
        }
    }
    // 3. Global norm from the owned fp32 slices, then over ranks (two floats).
    for (int unit = 0; unit < layout->num_units; unit++)
        norm_squared_cuda(z->gpu.norm_device, z->gpu.norm_scratch, zero_owned(z, z->gpu.grads_fp32, ZERO_BUF_GRADS, unit),
                          layout->units[unit].shard_numel, unit > 0, z->gpu.compute);
    zero_device_all_reduce_floats(z, z->gpu.norm_device, 2, "grad norm");
    // 4. Clip factor times 1/N, then AdamW.
    adamw_grad_scale_cuda(z->gpu.grad_scale_device, z->gpu.norm_device, opt->grad_clip, 1.0f / (float)N, z->gpu.compute);
    uint32_t seed = (uint32_t)splitmix64((uint64_t)t);
    if (zero_hook_offload_off_device(z, ZERO_BUF_MASTER)) {
        // -zo cpu|nvme (zero/offload/offload_gpu.cuh): AdamW on the host needs the gradient scale, so the
        // host waits for it here (the offloaded step's one wait), then updates unit by unit.
        zero_hook_offload_step(z, opt, lr, t, seed);
    } else if ((ZERO_STAGE == 1 || ZERO_STAGE == 2) && N > 1) {
        for (int i = 0; i < layout->num_units; i++) { // in the order the next forward needs them (wte's chunks first)
            int unit = zero_unit_in_use_order(layout, i);
            const ParamUnit* u = &layout->units[unit];
            int first = z->gpu.adamw_unit_chunks[unit], count = z->gpu.adamw_unit_chunks[unit + 1] - first;
            adamw_update_cuda(&z->gpu.adamw_plan, first, count, z->params, z->gpu.master, z->gpu.grads_fp32, z->m, z->v, lr, opt->beta1,
                              opt->beta2, opt->eps, opt->weight_decay, z->gpu.grad_scale_device, t, seed, z->gpu.compute);
            // 5. All-gather in place: this rank's updated shard_numel slice out, the unit's
            // padded_numel parameters in; the next forward waits for it when it reaches this unit.
            zero_stream_after(z->gpu.comm, z->gpu.compute, z->gpu.compute_mark);
            zero_device_collective(z, &z->param_ops[unit], ZERO_OP_ALL_GATHER, NULL, z->params + u->offset, u->padded_numel,
                                   unit, "parameters");
            zero_device_progress(z);
        }
    } else {
        adamw_update_cuda(&z->gpu.adamw_plan, 0, z->gpu.adamw_plan.num_chunks, z->params, z->gpu.master, z->gpu.grads_fp32, z->m, z->v, lr,
                          opt->beta1, opt->beta2, opt->eps, opt->weight_decay, z->gpu.grad_scale_device, t, seed, z->gpu.compute);
    }
    // 6. The results, for zero_step_result.
    CUDA_CHECK(cudaMemcpyAsync(slot->norm_host, z->gpu.norm_device, 2 * sizeof(float), cudaMemcpyDeviceToHost, z->gpu.compute));
    CUDA_CHECK(cudaEventRecord(slot->done, z->gpu.compute));
    slot->sent_elements = z->sent_elements_step;
    slot->host_comm_wait_s = z->comm_wait_s_step;
    slot->stall_count = z->gpu.stall_count;
    slot->step = t;
    slot->pending = 1;
    // What the comm stream does next (stage 3's gathers of the updated shards, the next step's
    // reductions) comes after this step's AdamW kernels.
    zero_stream_after(z->gpu.comm, z->gpu.compute, z->gpu.compute_mark);
}

/*
 * The host waits (zero_device_wait: timed, NCCL errors checked) for step t's optimizer and reads
 * what it left: the global norm (also into z->gns.grad_norm_sq) and the GNS meter's local squared
 * norm averaged over ranks (z->gns.local_grad_norm_sq_mean: noise_scale_step reads both), the
 * exposed communication (stall timers of the step's third, plus its host waits; also
 * z->comm_wait_s_step), elements sent, device time. Each step's results are read exactly once,
 * before step t+3 begins.
 */
static void zero_step_result(ZeroEngine* z, int t, ZeroStepResult* r) {
    ZeroStepSlot* slot = &z->gpu.step_slots[t % ZERO_STEP_SLOTS];
    if (!slot->pending || slot->step != t) {
        fprintf(stderr, "error: internal: results of step %d asked for, the slot holds step %d (pending %d)\n", t, slot->step,
                slot->pending);
        zero_abort_all_ranks(1);
    }
    zero_device_wait(z, slot->done, "step results");
    double inv_world = 1.0 / (double)z->world_size;
    double norm_sq = (double)slot->norm_host[0] * inv_world * inv_world; // the reduced gradient is the sum over ranks
    z->gns.grad_norm_sq = norm_sq;
    z->gns.local_grad_norm_sq_mean = (double)slot->norm_host[1] * inv_world;
    double stalled = zero_stall_collect(z, (t % ZERO_STEP_SLOTS) * z->gpu.stall_capacity, slot->stall_count);
    z->comm_wait_s_total += stalled;
    r->step = t;
    r->grad_norm = (float)sqrt(norm_sq);
    r->comm_wait_s = slot->host_comm_wait_s + stalled;
    r->sent_elements = slot->sent_elements;
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, slot->begin, slot->done));
    r->device_seconds = ms / 1000.0;
    const ZeroStepSlot* previous = &z->gpu.step_slots[(t - 1) % ZERO_STEP_SLOTS];
    r->since_previous_s = NAN;
    if (previous->step == t - 1 && !previous->pending) {
        CUDA_CHECK(cudaEventElapsedTime(&ms, previous->done, slot->done));
        r->since_previous_s = ms / 1000.0;
    }
    if (z->step == t) z->comm_wait_s_step = r->comm_wait_s;
    slot->pending = 0;
}

// Optimizer step t, synchronously: enqueue, wait, return the global norm before clipping.
static float zero_optimizer_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t) {
    ZeroStepResult r;
    zero_optimizer_step_async(z, opt, lr, t);
    zero_step_result(z, t, &r);
    return r.grad_norm;
}

#endif // ZERO_OPTIMIZER_GPU_CUH
