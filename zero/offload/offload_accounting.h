/*
 * zero/offload/offload_accounting.h: ZeRO-Offload / ZeRO-Infinity's bytes (placement and file layout in
 * zero/offload/offload.h): NVMe bytes read and written per step from the file's region table, the GPU
 * build's host<->device bytes per step, the step line's and the log's fields, and the start-up
 * report beside the formulas. The planner (plan/plan_offload.h) plans with the same functions.
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_OFFLOAD_ACCOUNTING_H
#define ZERO_OFFLOAD_ACCOUNTING_H
#ifndef ZERO_CUH
#error "zero/offload/offload_accounting.h is part of the ZeRO engine; include zero.cuh"
#endif

// NVMe bytes read and written per optimizer step with A micro-steps, from the region table: the
// optimizer reads and writes every unit's regions once; stage 3 with -zp nvme also reads each
// parameter shard before each all-gather (2 per micro-step, 3 for wte's units).
static void zero_offload_step_bytes_of(const ZeroOffload* o, const ParamLayout* layout, int grad_accum_steps, long long* read,
                                       long long* written) {
    *read = *written = 0;
    if (!o->active) return;
    for (int u = 0; u < layout->num_units; u++) {
        long long unit_bytes = 0;
        for (int r = 0; r < ZERO_NUM_REGIONS; r++) unit_bytes += (long long)o->region_bytes[(size_t)u * ZERO_NUM_REGIONS + r];
        *read += unit_bytes;
        *written += unit_bytes;
        int is_wte = 0;
        for (int k = 0; k < layout->num_wte_units; k++) is_wte |= wte_unit(layout, k) == u;
        *read += (long long)grad_accum_steps * (is_wte ? 3 : 2) * (long long)o->region_bytes[(size_t)u * ZERO_NUM_REGIONS + ZERO_REGION_PARAMS];
    }
}
static void zero_offload_step_bytes(const ZeroEngine* z, int grad_accum_steps, long long* read, long long* written) {
    zero_offload_step_bytes_of(&z->offload, z->layout, grad_accum_steps, read, written);
}

/*
 * GPU build, -zo cpu|nvme: host<->device bytes per step (Ψ padded, E = wte's elements, A
 * micro-steps, N ranks): down, each unit's fp32 gradient slice once, 4Ψ/N; up, each unit's
 * updated bf16 slice, 2Ψ/N, or with -zp (the shard rests off the device) its slice before each
 * stage-3 all-gather, 2 per micro-step and 3 for wte's units: (4AΨ + 2AE)/N. The start-up line
 * prints it (t_67 checks the copies counted against it) and the planner plans with it.
 */
static void zero_offload_copy_bytes_formula(size_t psi, size_t N, size_t e, int grad_accum_steps, int params_off, long long* down,
                                            long long* up) {
    long long A = grad_accum_steps;
    *down = (long long)(4 * (psi / N));
    *up = params_off ? 2LL * (2LL * A * (long long)(psi / N) + A * (long long)(e / N)) : (long long)(2 * (psi / N));
}

// The step line's and the log's NVMe fields for the step just done (empty without NVMe).
static const char* zero_offload_step_text(const ZeroEngine* z, char* buf, size_t cap) {
    const ZeroOffload* o = &z->offload;
    buf[0] = '\0';
    size_t used = 0;
#if ZERO_GPU_BUILD // the host<->device copies of the host optimizer
    if (o->optimizer != ZERO_PLACE_NONE)
        used += (size_t)snprintf(buf, cap, " | host<->device down %.1f up %.1f MiB, copy wait %.1f ms", z->gpu.d2h_bytes_step / 1048576.0,
                                 z->gpu.h2d_bytes_step / 1048576.0, z->gpu.copy_wait_s_step * 1000.0);
#endif
    if (o->active && used < cap)
        snprintf(buf + used, cap - used, " | nvme read %.1f MiB written %.1f MiB, io wait %.1f ms", (zero_offload_bytes_read(z) - o->read_at_step) / 1048576.0,
                 (zero_offload_bytes_written(z) - o->written_at_step) / 1048576.0, o->io_wait_s_step * 1000.0);
    return buf;
}
static const char* zero_offload_step_fields(const ZeroEngine* z, char* buf, size_t cap) {
    const ZeroOffload* o = &z->offload;
    buf[0] = '\0';
    size_t used = 0;
#if ZERO_GPU_BUILD
    if (o->optimizer != ZERO_PLACE_NONE)
        used += (size_t)snprintf(buf, cap, ",\"d2h_bytes\":%lld,\"h2d_bytes\":%lld,\"copy_wait_ms\":%.3f", z->gpu.d2h_bytes_step, z->gpu.h2d_bytes_step,
                                 z->gpu.copy_wait_s_step * 1000.0);
#endif
    if (o->active && used < cap)
        snprintf(buf + used, cap - used, ",\"nvme_read_bytes\":%lld,\"nvme_written_bytes\":%lld,\"io_wait_ms\":%.3f",
                 zero_offload_bytes_read(z) - o->read_at_step, zero_offload_bytes_written(z) - o->written_at_step, o->io_wait_s_step * 1000.0);
    return buf;
}

// The log's config fields: placements, bytes per rank in RAM and on NVMe, NVMe bytes per step.
static const char* zero_offload_config_fields(const ZeroEngine* z, int grad_accum_steps, char* buf, size_t cap) {
    const ZeroOffload* o = &z->offload;
    int zo = o->on_nvme[ZERO_REGION_M], zp = o->on_nvme[ZERO_REGION_PARAMS];
    size_t state = z->bytes_params + z->bytes_grads + z->bytes_optimizer;
    size_t nvme = (zp ? z->bytes_params : 0) + (zo ? z->bytes_optimizer : 0);
    long long read, written;
    zero_offload_step_bytes(z, grad_accum_steps, &read, &written);
#if ZERO_GPU_BUILD // the device/host split is the start-up line's (zero/offload/offload_gpu.cuh)
    nvme = (zp ? z->layout->shard_numel * sizeof(ZeroFloat) : 0) + (zo ? 12 * z->layout->shard_numel : 0);
    state = nvme; // bytes_ram is not a GPU build's figure: log 0
#endif
    snprintf(buf, cap, "\"offload_optimizer\":\"%s\",\"offload_params\":\"%s\",\"bytes_ram\":%zu,\"bytes_nvme\":%zu,"
             "\"nvme_file_bytes\":%zu,\"offload_staging_bytes\":%zu,\"nvme_read_per_step\":%lld,\"nvme_written_per_step\":%lld,",
             zero_placement_names[o->optimizer], zero_placement_names[o->params], state - nvme, nvme, o->file_bytes,
             zero_offload_staging_bytes(z), read, written);
    return buf;
}

/*
 * Start-up report (rank 0): where each part of the model state lives, in bytes per rank beside
 * the formula, and the NVMe traffic per step beside its formula. CPU build (fp32, the host is
 * the device): RAM holds the parameters (4Ψ, stage 3: 4Ψ/N), the gradients (4Ψ, stages 2-3:
 * 4Ψ/N) and Adam m, v (8Ψ/N) except what is on NVMe: -zo nvme moves the 8Ψ/N of m, v, -zp nvme
 * the 4Ψ/N parameter shard (ZeRO-Infinity sec. 5's placement of the stage-3 partitions). Per step
 * the optimizer reads and writes each placed region once; with -zp nvme each parameter shard is
 * also read before each all-gather, 2A times per step, 3A for wte's units (E):
 *   read (8[zo] + 4[zp]) Ψ/N + 4[zp] (2AΨ + AE)/N,  written (8[zo] + 4[zp]) Ψ/N  bytes.
 */
#if !ZERO_GPU_BUILD // the GPU build's: zero/offload/offload_gpu.cuh (a hook of zero/hooks.h, called by zero/accounting.h)
static void zero_hook_offload_print_accounting(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ZeroOffload* o = &z->offload;
    if (o->optimizer == ZERO_PLACE_NONE && o->params == ZERO_PLACE_NONE) return;
    size_t psi = z->layout->padded_numel, N = (size_t)z->world_size, e = zero_embedding_numel(z->layout);
    int zo = o->on_nvme[ZERO_REGION_M], zp = o->on_nvme[ZERO_REGION_PARAMS];
    size_t params = z->bytes_params, grads = z->bytes_grads, optimizer = z->bytes_optimizer;
    size_t ram = (zp ? 0 : params) + grads + (zo ? 0 : optimizer), nvme = (zp ? params : 0) + (zo ? optimizer : 0);
    size_t ram_formula = (zp ? 0 : (ZERO_STAGE == 3 ? 4 * psi / N : 4 * psi)) + (ZERO_STAGE >= 2 ? 4 * psi / N : 4 * psi) + (zo ? 0 : 8 * psi / N);
    size_t nvme_formula = (zo ? 8 * psi / N : 0) + (zp ? 4 * psi / N : 0);
    char ram_text[64], nvme_text[64];
    snprintf(ram_text, sizeof(ram_text), "%s%s%s", zp ? "" : ZERO_STAGE == 3 ? "4Ψ/N+" : "4Ψ+", ZERO_STAGE >= 2 ? "4Ψ/N" : "4Ψ", zo ? "" : "+8Ψ/N");
    snprintf(nvme_text, sizeof(nvme_text), "%s%s%s", zo ? "8Ψ/N" : "", zo && zp ? "+" : "", zp ? "4Ψ/N" : zo ? "" : "0");
    fprintf(out, "offload: optimizer state %s, parameter shard %s | bytes per rank: RAM %zu, formula %s = %zu (%s); NVMe %zu, formula %s = %zu (%s)\n",
            zo ? "nvme" : "ram", zp ? "nvme" : "ram", ram, ram_text, ram_formula, ram == ram_formula ? "equal" : "DIFFERENT",
            nvme, nvme_text, nvme_formula, nvme == nvme_formula ? "equal" : "DIFFERENT");
    if (!o->active) return;
    long long read, written;
    zero_offload_step_bytes(z, grad_accum_steps, &read, &written);
    long long read_formula = (long long)((zo ? 8 : 0) + (zp ? 4 : 0)) * (long long)(psi / N) +
                             (zp ? 4LL * (2LL * grad_accum_steps * (long long)(psi / N) + (long long)grad_accum_steps * (long long)(e / N)) : 0);
    long long written_formula = (long long)((zo ? 8 : 0) + (zp ? 4 : 0)) * (long long)(psi / N);
    fprintf(out, "offload: NVMe file %s (%zu bytes, regions rounded to %d; %s, %s) | per step (A = %d): read %lld (formula %lld), written %lld (formula %lld) bytes; counted on each step line\n",
            o->path, o->file_bytes, NVME_ALIGN, nvme_backend_names[o->io.backend], o->direct ? "O_DIRECT" : "buffered: the filesystem refused O_DIRECT",
            grad_accum_steps, read, read_formula, written, written_formula);
}
#endif // !ZERO_GPU_BUILD

#endif // ZERO_OFFLOAD_ACCOUNTING_H
