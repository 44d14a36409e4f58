/*
 * zero/offload/offload_gpu.cuh: ZeRO-Offload and ZeRO-Infinity in the GPU build (-zo cpu|nvme, -zp
 * cpu|nvme; flags, file layout and the NVMe stream in zero/offload/offload.h). Part of the ZeRO engine
 * (the map is in zero.cuh); included by zero.cuh under ZERO_GPU_BUILD, before engine_gpu.cuh,
 * which calls it.
 *
 * Ren et al. 2021, "ZeRO-Offload", sec. 4-5: the fp32 master weights and Adam m, v (12Ψ/N per
 * rank) leave the GPU, and the CPU runs AdamW on them; the GPU keeps the bf16 parameters and
 * the gradients (bf16 per micro-step, accumulated in fp32: zero/gpu/engine_gpu.cuh). Per unit:
 *   1. backward's last micro-step: as soon as the unit's reduction and its last addition into
 *      the fp32 gradient (grads_fp32: the rank's slice) are queued on the comm stream, the copy
 *      stream waits for them and copies that fp32 slice down to pinned host memory
 *      (zero_offload_gpu_grads_down); backward goes on with the next units meanwhile;
 *   2. the optimizer step (zero_offload_gpu_step): the global norm and the clip factor are
 *      computed on the device as without offload (zero/gpu/optimizer_gpu.cuh); the host waits for
 *      that one float, then unit by unit in use order waits for that unit's copy, runs AdamW on
 *      it (cpu/adamw.h adamw_update_mixed: the device kernel's arithmetic on fp32 gradients, its
 *      stochastic rounding bits), and queues the updated bf16 slice up on the copy stream while
 *      it updates the next unit; stages 1-2 all-gather each unit behind its copy, stage 3's next
 *      gathers wait for it; the next forward waits unit by unit, never for the whole model.
 * AdamW cannot start before backward ends: the clip coefficient needs the global norm of every
 * unit's gradient (with -gc 0 it would not; this engine keeps one schedule).
 * -zp cpu (stage 3; Rajbhandari et al. 2021, "ZeRO-Infinity", sec. 5): the bf16 parameter shard
 * rests in pinned host memory, which host AdamW updates in place; each all-gather is preceded by
 * its slice's copy up into the working unit on the comm stream (the gather is prefetched, so the
 * copy is too). -zo nvme / -zp nvme: the same, with master, m, v (and the parameter shard) read
 * and written through zero/offload/offload.h's stream of pieces instead of resting in host memory.
 * -zp needs -zo cpu|nvme here: the parameters are updated where the optimizer runs.
 */
#ifndef ZERO_OFFLOAD_GPU_CUH
#define ZERO_OFFLOAD_GPU_CUH
#ifndef ZERO_CUH
#error "zero/offload/offload_gpu.cuh is part of the ZeRO engine; include zero.cuh"
#endif

// The host runs the optimizer (-zo cpu|nvme)?
static int zero_offload_gpu_host_optimizer(const ZeroEngine* z) { return z->offload.optimizer != ZERO_PLACE_NONE; }

// The parameter shard rests off the device (-zp cpu|nvme, stage 3)?
static int zero_offload_gpu_params_off(const ZeroEngine* z) { return z->offload.params != ZERO_PLACE_NONE; }

// The rank's slice of `unit` in a shard-layout host array (offset in elements).
static size_t zero_shard_offset(const ZeroEngine* z, int unit) { return z->layout->units[unit].offset / (size_t)z->world_size; }

static void* zero_pinned_calloc(size_t n, size_t elem, const char* what) {
    if (n == 0) return NULL;
    void* p = NULL;
    if (cudaMallocHost(&p, n * elem) != cudaSuccess) {
        fprintf(stderr, "error: out of pinned host memory allocating %s (%.1f MiB); expected a machine with more RAM, or -zo nvme\n",
                what, n * elem / 1048576.0);
        exit(1);
    }
    memset(p, 0, n * elem);
    return p;
}

// The GPU build's extra check: -zp (cpu|nvme) needs the optimizer on the host.
static int zero_offload_gpu_check_args(const ZeroOffloadArgs* a, char* err, size_t cap) {
    if (a->params != ZERO_PLACE_NONE && a->optimizer == ZERO_PLACE_NONE) {
        snprintf(err, cap, "error: -zp %s: in the GPU build the parameter shard is updated where the optimizer runs; expected -zo cpu or -zo nvme with it",
                 zero_placement_names[a->params]);
        return -1;
    }
    return 0;
}

// Set-up (zero_init_placed): pinned host state, the copy stream, per-unit events.
static void zero_offload_gpu_init(ZeroEngine* z) {
    if (!zero_offload_gpu_host_optimizer(z)) return;
    size_t shard = z->layout->shard_numel;
    int n = z->layout->num_units;
    if (z->offload.optimizer == ZERO_PLACE_CPU) {
        z->gpu.host_master = (float*)zero_pinned_calloc(shard, sizeof(float), "host master weights");
        z->gpu.host_m = (float*)zero_pinned_calloc(shard, sizeof(float), "host Adam m");
        z->gpu.host_v = (float*)zero_pinned_calloc(shard, sizeof(float), "host Adam v");
    }
    z->gpu.host_grads = (float*)zero_pinned_calloc(shard, sizeof(float), "host gradient shard (fp32)");
    z->gpu.host_grad_scale = (float*)zero_pinned_calloc(1, sizeof(float), "host gradient scale");
    if (z->offload.params != ZERO_PLACE_NVME) z->gpu.host_params = (bf16*)zero_pinned_calloc(shard, sizeof(bf16), "host parameter shard");
    CUDA_CHECK(cudaStreamCreateWithFlags(&z->gpu.copy, cudaStreamNonBlocking));
    z->gpu.grads_down = (cudaEvent_t*)zero_calloc((size_t)n, sizeof(cudaEvent_t), "offload events");
    z->gpu.params_up = (cudaEvent_t*)zero_calloc((size_t)n, sizeof(cudaEvent_t), "offload events");
    for (int u = 0; u < n; u++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&z->gpu.grads_down[u], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&z->gpu.params_up[u], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(z->gpu.params_up[u], z->gpu.copy)); // "up" from the start
    }
}

static void zero_offload_gpu_free(ZeroEngine* z) {
    if (!zero_offload_gpu_host_optimizer(z)) return;
    CUDA_CHECK(cudaStreamSynchronize(z->gpu.copy));
    for (int u = 0; u < z->layout->num_units; u++) {
        CUDA_CHECK(cudaEventDestroy(z->gpu.grads_down[u]));
        CUDA_CHECK(cudaEventDestroy(z->gpu.params_up[u]));
    }
    free(z->gpu.grads_down); free(z->gpu.params_up);
    CUDA_CHECK(cudaFreeHost(z->gpu.host_master)); CUDA_CHECK(cudaFreeHost(z->gpu.host_m)); CUDA_CHECK(cudaFreeHost(z->gpu.host_v));
    CUDA_CHECK(cudaFreeHost(z->gpu.host_grads)); CUDA_CHECK(cudaFreeHost(z->gpu.host_params)); CUDA_CHECK(cudaFreeHost(z->gpu.host_grad_scale));
    CUDA_CHECK(cudaStreamDestroy(z->gpu.copy));
}

// Step 1 above: the unit's gradients are final, their reduction and fp32 addition queued behind
// `reduced` (on the comm stream): copy the rank's fp32 slice (shard_numel, at device_slice) down.
static void zero_offload_gpu_grads_down(ZeroEngine* z, int unit, const float* device_slice, cudaEvent_t reduced) {
    if (!zero_offload_gpu_host_optimizer(z)) return;
    size_t n = z->layout->units[unit].shard_numel;
    CUDA_CHECK(cudaStreamWaitEvent(z->gpu.copy, reduced, 0));
    CUDA_CHECK(cudaMemcpyAsync(z->gpu.host_grads + zero_shard_offset(z, unit), device_slice, n * sizeof(float), cudaMemcpyDeviceToHost, z->gpu.copy));
    CUDA_CHECK(cudaEventRecord(z->gpu.grads_down[unit], z->gpu.copy));
    z->gpu.d2h_bytes_step += (long long)(n * sizeof(float));
}

/*
 * Step 2 above for one unit: wait for its gradient slice, AdamW on the host piece by piece
 * (pieces: zero/offload/offload.h, one without NVMe) over each tensor's part of the slice, the updated
 * bf16 slice into host_params (or the NVMe slot), then, if the parameters live on the device,
 * the copy up at device_slice on the copy stream, params_up[unit] recorded behind it.
 * grad_scale folds in the clip coefficient and 1/world_size, as the device path's.
 */
static void zero_offload_gpu_update_unit(ZeroEngine* z, int unit, const AdamWConfig* opt, float lr, int t, float grad_scale,
                                         uint32_t seed, bf16* device_slice) {
    const ParamLayout* layout = z->layout;
    const ParamUnit* u = &layout->units[unit];
    size_t begin, end, at = zero_shard_offset(z, unit);
    zero_update_range(z, unit, &begin, &end);
    double t0 = zero_clock();
    CUDA_CHECK(cudaEventSynchronize(z->gpu.grads_down[unit]));
    z->gpu.copy_wait_s_step += zero_clock() - t0;
    for (int k = 0; k < zero_offload_unit_pieces(z, unit); k++) {
        size_t lo, hi;
        zero_offload_piece_range(z, unit, k, &lo, &hi);
        void* region[ZERO_NUM_REGIONS] = {z->gpu.host_params ? z->gpu.host_params + at + lo : NULL, z->gpu.host_master ? z->gpu.host_master + at + lo : NULL,
                                          z->gpu.host_m ? z->gpu.host_m + at + lo : NULL, z->gpu.host_v ? z->gpu.host_v + at + lo : NULL};
        zero_offload_piece_begin(z, unit, k, region); // -zo/-zp nvme: the staged copies, read and checked
        uint16_t* p = (uint16_t*)region[ZERO_REGION_PARAMS];
        float *w = (float*)region[ZERO_REGION_MASTER], *m = (float*)region[ZERO_REGION_M], *v = (float*)region[ZERO_REGION_V];
        const float* g = z->gpu.host_grads + at + lo;
        for (int ti = 0; ti < u->num_tensors; ti++) {
            const ParamTensor* pt = &layout->tensors[u->first_tensor + ti];
            size_t first, len = zero_tensor_overlap(pt, begin + lo, begin + hi, &first);
            if (len == 0) continue;
            size_t o = first - begin - lo;
            float wd = pt->ndim == 2 ? opt->weight_decay : 0.0f;
            adamw_update_mixed(p + o, w + o, g + o, m + o, v + o, len, lr, opt->beta1, opt->beta2, opt->eps, wd, grad_scale, t,
                               seed, u->offset + first);
        }
        zero_offload_piece_end(z, unit, k); // -zo/-zp nvme: written back while the next pieces update
        if (device_slice != NULL) // the piece's parameters up (host_params, pinned) while the host goes on
            CUDA_CHECK(cudaMemcpyAsync(device_slice + lo, z->gpu.host_params + at + lo, (hi - lo) * sizeof(bf16), cudaMemcpyHostToDevice, z->gpu.copy));
    }
    if (device_slice != NULL) {
        CUDA_CHECK(cudaEventRecord(z->gpu.params_up[unit], z->gpu.copy));
        z->gpu.h2d_bytes_step += (long long)(u->shard_numel * sizeof(bf16));
    }
}

/*
 * Step 2 above, called by zero_optimizer_step_async once the compute stream has the step's
 * gradient scale (z->gpu.grad_scale_device: clip factor times 1/world_size, from the global norm):
 * the host waits for that float (the offloaded step's one wait on the compute stream), then
 * updates unit by unit in use order, each unit's updated bf16 slice going up on the copy stream;
 * stages 1, 2 all-gather each unit behind its copy up (with one rank too: the gather is then an
 * event, which the next forward waits for), stage 3's gathers wait for params_up themselves.
 * The device path reads the same float, so both paths scale the gradients by the same bits.
 */
static void zero_offload_gpu_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t, uint32_t seed) {
    const ParamLayout* layout = z->layout;
    CUDA_CHECK(cudaMemcpyAsync(z->gpu.host_grad_scale, z->gpu.grad_scale_device, sizeof(float), cudaMemcpyDeviceToHost, z->gpu.compute));
    zero_stream_synchronize(z, z->gpu.compute, "gradient scale (offload)");
    float grad_scale = *z->gpu.host_grad_scale;
    for (int i = 0; i < layout->num_units; i++) {
        int unit = zero_unit_in_use_order(layout, i);
        const ParamUnit* u = &layout->units[unit];
        bf16* device_slice = zero_offload_gpu_params_off(z) ? NULL
                           : ZERO_STAGE == 3 ? z->params + zero_owned_offset(layout, ZERO_STAGE, ZERO_BUF_PARAMS, z->rank, unit)
                                             : z->params + u->offset + (size_t)z->rank * u->shard_numel;
        zero_offload_gpu_update_unit(z, unit, opt, lr, t, grad_scale, seed, device_slice);
        if (ZERO_STAGE == 1 || ZERO_STAGE == 2) { // all-gather behind the slice's copy up
            CUDA_CHECK(cudaStreamWaitEvent(z->gpu.comm, z->gpu.params_up[unit], 0));
            zero_device_collective(z, &z->param_ops[unit], ZERO_OP_ALL_GATHER, NULL, z->params + u->offset, u->padded_numel, unit,
                                   "parameters");
        }
        zero_device_progress(z);
    }
}

/*
 * Stage 3, -zp cpu|nvme: the rank's parameter slice of `unit` into `dst` (the working unit at
 * rank*shard_numel) on the comm stream, ahead of its in-place all-gather. From host_params
 * (-zp cpu; the optimizer only writes it after the comm stream is done), or (-zp nvme) read
 * from the file into a bounce buffer, copied up, and waited for before the buffer is reused.
 */
static void zero_offload_gpu_params_up(ZeroEngine* z, int unit, bf16* dst) {
    size_t n = z->layout->units[unit].shard_numel;
    if (z->offload.params == ZERO_PLACE_CPU) {
        CUDA_CHECK(cudaMemcpyAsync(dst, z->gpu.host_params + zero_shard_offset(z, unit), n * sizeof(bf16), cudaMemcpyHostToDevice, z->gpu.comm));
    } else {
        zero_offload_param_read(z, 0, unit);
        const ZeroFloat* shard = zero_offload_param_read_wait(z, 0);
        CUDA_CHECK(cudaMemcpyAsync(dst, shard, n * sizeof(bf16), cudaMemcpyHostToDevice, z->gpu.comm));
        zero_stream_synchronize(z, z->gpu.comm, "parameters from NVMe"); // the bounce buffer is reused
    }
    z->gpu.h2d_bytes_step += (long long)(n * sizeof(bf16));
}

// ---- state in and out (set-up, checkpoints): shard-layout host arrays or NVMe regions ----

// Write (or read) the rank's slice of `unit` of the master weights, m or v (fp32, shard_numel).
static void zero_offload_gpu_state_io(ZeroEngine* z, int unit, int region, float* data, int write) {
    if (z->offload.on_nvme[region]) { zero_offload_region_io(z, unit, region, data, write); return; }
    float* host = region == ZERO_REGION_MASTER ? z->gpu.host_master : region == ZERO_REGION_M ? z->gpu.host_m : z->gpu.host_v;
    size_t at = zero_shard_offset(z, unit), n = z->layout->units[unit].shard_numel;
    if (write) memcpy(host + at, data, n * sizeof(float));
    else memcpy(data, host + at, n * sizeof(float));
}

// The rank's bf16 parameter slice of `unit` where it rests off the device (-zp cpu|nvme).
static void zero_offload_gpu_params_io(ZeroEngine* z, int unit, bf16* data, int write) {
    if (z->offload.params == ZERO_PLACE_NVME) { zero_offload_region_io(z, unit, ZERO_REGION_PARAMS, data, write); return; }
    size_t at = zero_shard_offset(z, unit), n = z->layout->units[unit].shard_numel;
    if (write) memcpy(z->gpu.host_params + at, data, n * sizeof(bf16));
    else memcpy(data, z->gpu.host_params + at, n * sizeof(bf16));
}

// ---- the GPU engine's offload hooks (declared in zero/hooks.h, called by zero/gpu/) ----

static void zero_hook_offload_place(ZeroEngine* z, const ZeroOffloadArgs* args) { zero_offload_setup(z, args); }
static void zero_hook_offload_open(ZeroEngine* z) {
    zero_offload_gpu_init(z);
    zero_offload_open(z); // NVMe: the file, preallocated; every rank
}
static void zero_hook_offload_free(ZeroEngine* z) {
    zero_offload_gpu_free(z);
    zero_offload_free(z);
}
static int zero_hook_offload_off_device(const ZeroEngine* z, ZeroBuffer which) {
    return which == ZERO_BUF_PARAMS ? zero_offload_gpu_params_off(z) : zero_offload_gpu_host_optimizer(z);
}
// Stage 3, before `unit`'s gather into w (the comm stream waits for w's last reader): -zp: the
// slice comes up into its place (1: the core gathers in place); -zo: the comm stream waits for
// the unit's update to be up.
static int zero_hook_offload_device_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    if (zero_offload_gpu_params_off(z)) {
        zero_offload_gpu_params_up(z, unit, w->data + (size_t)z->rank * z->layout->units[unit].shard_numel);
        return 1;
    }
    if (zero_offload_gpu_host_optimizer(z)) CUDA_CHECK(cudaStreamWaitEvent(z->gpu.comm, z->gpu.params_up[unit], 0));
    return 0;
}
static void zero_hook_offload_grads_down(ZeroEngine* z, int unit, const float* slice, cudaEvent_t reduced) {
    zero_offload_gpu_grads_down(z, unit, slice, reduced);
}
static void zero_hook_offload_step(ZeroEngine* z, const AdamWConfig* opt, float lr, int t, uint32_t seed) {
    zero_offload_gpu_step(z, opt, lr, t, seed);
}
// The rank's slice of `unit` where it rests off the device: bf16 parameters, or fp32 master, m, v.
static void zero_hook_offload_unit_io(ZeroEngine* z, int unit, ZeroBuffer which, void* data, int write) {
    if (which == ZERO_BUF_PARAMS) zero_offload_gpu_params_io(z, unit, (bf16*)data, write);
    else zero_offload_gpu_state_io(z, unit, which == ZERO_BUF_MASTER ? ZERO_REGION_MASTER : which == ZERO_BUF_ADAM_M ? ZERO_REGION_M : ZERO_REGION_V,
                                   (float*)data, write);
}
// -zo cpu|nvme: the unit's slices of Adam m and v to or from the host or the file; 0 when on the device.
static int zero_hook_offload_optimizer_io(ZeroEngine* z, int unit, float* m, float* v, int write) {
    if (!zero_offload_gpu_host_optimizer(z)) return 0;
    zero_offload_gpu_state_io(z, unit, ZERO_REGION_M, m, write);
    zero_offload_gpu_state_io(z, unit, ZERO_REGION_V, v, write);
    return 1;
}

// ---- accounting ----

/*
 * Start-up report (rank 0), GPU build: bytes per rank on the device, in host memory and on NVMe
 * beside the formulas (bf16 parameters 2Ψ, 2Ψ/N at stage 3; gradients: one bf16 micro-step 2Ψ
 * plus their fp32 accumulation 4Ψ at stage 1, the fp32 shard 4Ψ/N from stage 2; master + m + v
 * 12Ψ/N), and per step the bytes copied between host and device: each unit's fp32 gradient slice
 * down (4Ψ/N) and, unless it rests on the host, its bf16 parameter slice up (2Ψ/N); with -zp the
 * slice goes up before each all-gather instead, 2AΨ/N + AE/N... in bf16 bytes: (2 · 2AΨ + 2 · AE)/N.
 */
static void zero_hook_offload_print_accounting(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ZeroOffload* o = &z->offload;
    if (!zero_offload_gpu_host_optimizer(z)) return;
    size_t psi = z->layout->padded_numel, N = (size_t)z->world_size, e = zero_embedding_numel(z->layout);
    int zp = zero_offload_gpu_params_off(z), zo_nvme = o->optimizer == ZERO_PLACE_NVME, zp_nvme = o->params == ZERO_PLACE_NVME;
    size_t params = ZERO_STAGE == 3 ? 2 * psi / N : 2 * psi, grads = ZERO_STAGE >= 2 ? 4 * psi / N : (2 + 4) * psi;
    size_t device = (zp ? 0 : params) + grads, device_counted = (zp ? 0 : z->bytes_params) + z->bytes_grads;
    size_t host = (zo_nvme ? 0 : 12 * psi / N) + 4 * psi / N + (zp_nvme ? 0 : 2 * psi / N);
    size_t host_counted = (zo_nvme ? 0 : z->bytes_optimizer) + z->layout->shard_numel * (sizeof(float) + (zp_nvme ? 0 : sizeof(bf16)));
    size_t nvme = (zo_nvme ? 12 * psi / N : 0) + (zp_nvme ? 2 * psi / N : 0);
    char device_text[32], host_text[48], nvme_text[32];
    snprintf(device_text, sizeof(device_text), "%s%s", zp ? "" : ZERO_STAGE == 3 ? "2Ψ/N+" : "2Ψ+", ZERO_STAGE >= 2 ? "4Ψ/N" : "(2+4)Ψ");
    snprintf(host_text, sizeof(host_text), "%s4Ψ/N%s", zo_nvme ? "" : "12Ψ/N+", zp_nvme ? "" : "+2Ψ/N");
    snprintf(nvme_text, sizeof(nvme_text), "%s%s%s", zo_nvme ? "12Ψ/N" : "", zo_nvme && zp_nvme ? "+" : "", zp_nvme ? "2Ψ/N" : nvme ? "" : "0");
    fprintf(out, "offload: optimizer %s, parameter shard %s | bytes per rank: device %zu, formula %s = %zu (%s) + working units; "
            "host %zu, formula %s = %zu (master, m, v, gradient and parameter staging; %s); NVMe %zu, formula %s\n",
            zero_placement_names[o->optimizer], zp ? zero_placement_names[o->params] : "device", device_counted, device_text, device,
            device_counted == device ? "equal" : "DIFFERENT", host_counted, host_text, host, host_counted == host ? "equal" : "DIFFERENT",
            nvme, nvme_text);
    long long down, up;
    zero_offload_copy_bytes_formula(psi, N, e, grad_accum_steps, zp, &down, &up); // zero/offload/offload.h (the planner's too)
    fprintf(out, "offload: host<->device per step (A = %d): down %lld bytes (fp32 gradient shard, formula 4Ψ/N), up %lld bytes (formula %s); counted on each step line\n",
            grad_accum_steps, down, up, zp ? "(4AΨ+2AE)/N" : "2Ψ/N");
    if (o->active) {
        long long read, written;
        zero_offload_step_bytes(z, grad_accum_steps, &read, &written);
        fprintf(out, "offload: NVMe file %s (%zu bytes; %s, %s) | per step: read %lld, written %lld bytes\n", o->path, o->file_bytes,
                nvme_backend_names[o->io.backend], o->direct ? "O_DIRECT" : "buffered", read, written);
    }
}

#endif // ZERO_OFFLOAD_GPU_CUH
