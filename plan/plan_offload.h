/*
 * plan/plan_offload.h: the planner's offload rows (--plan with -zo, -zp; zero/offload/offload.h is the
 * engine's side): for ZeRO-Offload / ZeRO-Infinity placements at a stage, the bytes per rank that
 * stay in device memory, go to host RAM and go to the NVMe file, the NVMe and host<->device bytes
 * per step, and the step simulated with the disk and the host<->device link beside the engine's
 * schedule (plan/plan_offload_sim.h). Part of the planner (the overview in plan/plan.h).
 *
 * The bytes are the engine's: zero_offload_layout (the file's regions, rounded to NVME_ALIGN, the
 * pieces and the staging slots), zero_offload_staging_bytes_of, zero_offload_step_bytes_of and
 * zero_offload_copy_bytes_formula, at the layout the engine builds for N ranks.
 *
 * The schedule the engine runs (zero/offload/offload.h, zero/offload/offload_gpu.cuh):
 *   - the optimizer walks the units in use order in pieces of ZERO_OFFLOAD_PIECE elements through
 *     three staging slots: piece q's read waits for the write-back its slot still holds (piece
 *     q-3), AdamW on q waits for q's read and checks its checksum, then q's checksum and write-back,
 *     and q+2's read (CPU build: the first two reads start when backward's first unit is ready on
 *     the last micro-step; GPU build: at the first piece);
 *   - stage 3 -zp nvme (CPU build): each all-gather reads the unit's shard first, and the gather is
 *     issued at the next engine call (a unit's use or its end) once the read is back;
 *   - GPU build -zo cpu|nvme: each unit's final fp32 gradient slice goes down on the copy stream as
 *     soon as its reduction is done; after backward the host runs AdamW unit by unit (waiting for
 *     each slice), each updated bf16 slice goes up on the copy stream, stages 1-2 all-gather behind
 *     it, stage 3's next gathers wait for it; -zp cpu copies the slice up on the comm stream before
 *     each gather; -zp nvme reads it on the host first (the host waits for the read and the copy).
 * The disk serves requests in issue order at the machine's read and write rates, shared by the
 * node's ranks; the copy stream one copy at a time at PCIe's rate. The comm stream is
 * plan/plan_sim.h's link queue: -zp's copies up are ops on it (sending nothing), a gather
 * behind an updated slice an op with a not_before; a slice's copy down waits for its reduction,
 * whose completion is a handle until the link gets there, so the copies down are timed once the
 * optimizer has waited for the reductions (plan_off_downs). Exposed: the time compute (the
 * host, which issues the step) waits for the disk or a copy, plus the checksums' passes.
 */
#ifndef ZERO_PLAN_OFFLOAD_H
#define ZERO_PLAN_OFFLOAD_H
#ifndef ZERO_CUH
#error "plan/plan_offload.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

// What --plan was given: -zo, -zp (ZeroPlacement), -zd (NULL: none), -z (-1: every stage that takes them).
typedef struct {
    int given, optimizer, params, stage;
    const char* dir;
} PlanOffloadFlags;

// ---- the bytes and rates of one configuration ----

/*
 * The placements at `stage` for pm's model and world: bytes per rank and per step from the
 * engine's functions, and the rates per rank (disk_ranks share the node's disk; checksum_bw:
 * bytes/s of nvme_checksum). plan_offload_free releases it.
 */
static void plan_offload_init(PlanOffload* off, const PlanModel* pm, const ParamLayout* layout, const PlanMachine* m, int stage,
                              int optimizer, int params, int disk_ranks, int host_ranks, double checksum_bw) {
    memset(off, 0, sizeof(*off));
    off->stage = stage;
    off->optimizer = optimizer;
    off->params = params;
    off->layout = layout;
    zero_offload_layout_for(&off->o, layout, optimizer, params, pm->has_master);
    PlanBytes b = plan_stage_bytes(pm, layout, stage);
    off->staging = zero_offload_staging_bytes_of(&off->o);
    off->nvme_file = off->o.file_bytes;
    zero_offload_step_bytes_of(&off->o, layout, pm->grad_accum_steps, &off->nvme_read, &off->nvme_written);
    if (pm->has_master) { // the GPU build's: device: bf16 parameters (unless -zp), gradients, working units; host: zero_offload_gpu_init's arrays
        size_t shard = layout->shard_numel;
        off->host_optimizer = optimizer != ZERO_PLACE_NONE;
        off->params_off = params != ZERO_PLACE_NONE;
        off->engine_device = (off->params_off ? 0 : b.params) + b.grads;
        off->engine_host = off->host_optimizer ? (optimizer == ZERO_PLACE_NVME ? 0 : b.optimizer) +
                                                 shard * (sizeof(float) + (params == ZERO_PLACE_NVME ? 0 : 2 /* bf16 */)) : 0;
        off->working = b.working;
        off->device = off->engine_device + (off->host_optimizer ? 0 : b.optimizer) + b.working + b.ring + b.activations;
        off->host = off->engine_host + off->staging;
        off->nvme_state = (params == ZERO_PLACE_NVME ? shard * 2 /* bf16 */ : 0) + (optimizer == ZERO_PLACE_NVME ? 12 * shard : 0);
        if (off->host_optimizer)
            zero_offload_copy_bytes_formula(layout->padded_numel, (size_t)pm->world_size, zero_embedding_numel(layout), pm->grad_accum_steps,
                                            off->params_off, &off->down, &off->up);
        off->copy_bw = m->pcie_bw * m->pcie_eff;
        off->host_update_s = 32.0 * host_ranks / m->host_bw; // adamw_update_mixed: p (bf16), master, g, m, v read, p, master, m, v written
    } else { // the CPU build's: the host is the device: RAM holds what is not on NVMe, the working units and the staging
        off->nvme_state = (params == ZERO_PLACE_NVME ? b.params : 0) + (optimizer == ZERO_PLACE_NVME ? b.optimizer : 0);
        off->engine_ram = b.params + b.grads + b.optimizer - off->nvme_state;
        off->working = b.working + off->staging;
        off->device = off->host = off->engine_ram + off->working + b.ring + b.activations;
    }
    off->read_bw = m->nvme_read_bw / disk_ranks;
    off->write_bw = m->nvme_write_bw / disk_ranks;
    off->checksum_s_per_byte = 1.0 / checksum_bw;
    for (int u = 0; u < layout->num_units; u++) off->num_pieces += off->o.active ? zero_offload_pieces_of(&off->o, layout, u) : 0;
    off->piece_unit = (int*)zero_calloc((size_t)off->num_pieces + 1, sizeof(int), "plan offload");
    off->piece_bytes = (double*)zero_calloc((size_t)off->num_pieces + 1, sizeof(double), "plan offload");
    off->piece_elements = (double*)zero_calloc((size_t)off->num_pieces + 1, sizeof(double), "plan offload");
    for (int i = 0, q = 0; off->o.active && i < layout->num_units; i++) { // the optimizer's walk: use order
        int u = zero_unit_in_use_order(layout, i);
        for (int k = 0; k < zero_offload_pieces_of(&off->o, layout, u); k++, q++) {
            size_t lo, hi;
            zero_offload_piece_range_of(&off->o, layout, u, k, &lo, &hi);
            off->piece_unit[q] = u;
            off->piece_elements[q] = (double)(hi - lo);
            for (int r = 0; r < ZERO_NUM_REGIONS; r++) if (off->o.on_nvme[r]) off->piece_bytes[q] += (double)zero_piece_bytes_of(&off->o, u, r, k);
        }
    }
}

static void plan_offload_free(PlanOffload* off) {
    zero_offload_layout_free(&off->o);
    free(off->piece_unit); free(off->piece_bytes); free(off->piece_elements);
}

/*
 * The disk under dir, measured as the optimizer's stream uses it (cpu, -zd given, no nvme_*_gbs):
 * a scratch file of `bytes` (4 MiB requests, 2 in flight, O_DIRECT where granted, through
 * zero/offload/nvme_io.h's io_uring engine), written once into its fallocated extents (as a run's first
 * step), then timed rewriting it (every later step's write-back) and reading it. About 3 x bytes
 * of I/O. Returns 0 with the rates (bytes/s) and the time taken, or -errno if the file cannot be
 * made, reserved or written (nothing is left in dir either way).
 */
static int plan_offload_measure_disk(const char* dir, size_t bytes, double* read_bw, double* write_bw, double* seconds) {
    char path[4400];
    snprintf(path, sizeof(path), "%s/zero_plan_probe_%ld.bin", dir, (long)getpid());
    int direct = 0, fd = nvme_open(path, &direct);
    if (fd < 0) return -errno;
    // Unlinked at once: the file has no name while it is measured, so a plan stopped in the probe
    // (SIGINT, SIGTERM, SIGKILL) leaves nothing behind; its blocks go back when the fd closes.
    unlink(path);
    size_t req = (size_t)4 << 20;
    bytes = bytes < 2 * req ? 2 * req : bytes / req * req;
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc != 0) { close(fd); return -rc; }
    char* buf[2] = {(char*)nvme_alloc(req, "plan disk probe"), (char*)nvme_alloc(req, "plan disk probe")};
    NvmeIO io;
    memset(&io, 0, sizeof(io));
    nvme_io_init(&io, NVME_BACKEND_URING);
    NvmeRequest r[2];
    memset(r, 0, sizeof(r));
    double t[3], begin = zero_clock();
    int error = 0;
    for (int pass = 0; pass < 3 && !error; pass++) { // 0: the first write, 1: the rewrite, 2: the read
        double t0 = zero_clock();
        for (size_t at = 0, i = 0; at < bytes && !error; at += req, i++) {
            error |= nvme_wait(&io, &r[i % 2]);
            nvme_submit(&io, &r[i % 2], pass == 2 ? NVME_READ : NVME_WRITE, fd, buf[i % 2], req, at);
        }
        for (int k = 0; k < 2; k++) error |= nvme_wait(&io, &r[k]);
        t[pass] = zero_clock() - t0;
    }
    nvme_io_free(&io);
    close(fd);
    free(buf[0]); free(buf[1]);
    if (error) return -EIO;
    *write_bw = (double)bytes / t[1];
    *read_bw = (double)bytes / t[2];
    *seconds = zero_clock() - begin;
    return 0;
}

// nvme_checksum's rate on this host (bytes/s): best of 5 passes over 4 MiB (a few ms).
static double plan_offload_checksum_rate(void) {
    size_t n = (size_t)4 << 20;
    uint64_t* buf = (uint64_t*)zero_calloc(n / 8, 8, "plan checksum");
    for (size_t i = 0; i < n / 8; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = zero_clock();
        sink ^= nvme_checksum(buf, n);
        double dt = zero_clock() - t0;
        if (dt < best) best = dt;
    }
    (void)sink;
    free(buf);
    return (double)n / fmax(best, 1e-9);
}

/*
 * The offload rows: flags' placements at each stage the engine takes them (zero_offload_check_args;
 * -z S: that stage only), each simulated beside the plain stage (plain_step_s[stage]); a table row
 * and a "plan_offload_json {...}" line each. budget: device bytes per rank.
 */
static void plan_print_offload(const PlanModel* pm, const PlanMachine* m, const ParamLayout* layout, const PlanNet* net,
                               const PlanTimes* tm, int rpn, double mem_bw, double budget, const double* plain_step_s,
                               const PlanOffloadFlags* f, FILE* out) {
    int N = pm->world_size, A = pm->grad_accum_steps, e = pm->element_bytes;
    long long tokens = (long long)pm->B * pm->T * N * A;
    int hosts = m->hosts_here > 0 ? m->hosts_here : 1, cpu = m->cores > 0;
    int disk_ranks = cpu ? (rpn * hosts < N ? rpn * hosts : N) : rpn; // cpu: the ranks on this machine share its one disk
    double checksum_bw = pm->has_master ? m->host_bw / rpn : plan_offload_checksum_rate() * (m->mem_bw > 0 && mem_bw < m->mem_bw ? mem_bw / m->mem_bw : 1.0);
    double host_budget = (m->host_memory > 0 ? m->host_memory : m->memory) / rpn;
    double disk_free = -1.0;
    struct statvfs vfs;
    if (f->dir != NULL && statvfs(f->dir, &vfs) == 0) disk_free = (double)vfs.f_bavail * vfs.f_frsize;
    // cpu with -zd: the disk's rates measured there now, on a scratch file of 1 GiB, or the size of
    // this machine's ranks' offload files together if larger (up to 4 GiB), and at most half the
    // free space. A short probe sees the virtual disk's bursts: measured here (AMD EPYC VM, ext4 on
    // /dev/vda), 32-232 MiB probes read 0.63-1.1 GB/s from one plan to the next, 1 GiB ones 0.62-0.73,
    // and the runs' rows predict best at 0.7 (dev/bench/offload_plan_check.sh: 15 of 16 within 20%
    // given 0.7, 11 with this probe, 8 with one the size of the files). About 3 x its bytes of I/O (~6 s at 0.7 GB/s).
    PlanMachine mm = *m;
    ZeroOffload probe_layout;
    zero_offload_layout_for(&probe_layout, layout, f->optimizer, f->params, pm->has_master);
    double probe_want = fmin(fmax((double)probe_layout.file_bytes * disk_ranks, (double)(1 << 30)), 4.0 * (1 << 30));
    if (disk_free >= 0 && probe_want > disk_free / 2) probe_want = disk_free / 2;
    size_t probe_bytes = (size_t)probe_want;
    zero_offload_layout_free(&probe_layout);
    char disk_how[256];
    snprintf(disk_how, sizeof(disk_how), "%s", cpu ? "dev/bench/nvme_bench.sh's io_uring depth-2 read and rewrite on this machine" :
             m->nvme_given ? "given" : "assumed");
    double probe_s = 0.0;
    if (cpu && !pm->has_master && f->dir != NULL && !m->nvme_given) {
        // Too little room for a probe, or one that failed (another job filled the disk): said in
        // the header, the bench's rates used, never silently.
        int rc = probe_bytes >= ((size_t)32 << 20) ? plan_offload_measure_disk(f->dir, probe_bytes, &mm.nvme_read_bw, &mm.nvme_write_bw, &probe_s) : 1;
        if (rc == 0)
            snprintf(disk_how, sizeof(disk_how), "measured now in -zd: %.0f MiB rewritten and read, 4 MiB requests at depth 2, %.2f s",
                     (double)probe_bytes / (1 << 20), probe_s);
        else
            snprintf(disk_how, sizeof(disk_how), "dev/bench/nvme_bench.sh's io_uring depth-2 read and rewrite on this machine; %s%s",
                     rc > 0 ? "no probe in -zd: under 64 MiB free" : "the probe in -zd failed: ", rc > 0 ? "" : strerror(-rc));
    }
    if (m->nvme_given) snprintf(disk_how, sizeof(disk_how), "given");
    m = &mm;
    char buf[10][32];
    fprintf(out, "plan: offload -zo %s -zp %s%s%s: NVMe %.3f GB/s read, %.3f GB/s write per rank (the node's rates %s; %d rank%s sharing them)%s",
            zero_placement_names[f->optimizer], zero_placement_names[f->params], f->dir ? " -zd " : "", f->dir ? f->dir : "",
            m->nvme_read_bw / disk_ranks / 1e9, m->nvme_write_bw / disk_ranks / 1e9,
            disk_how, disk_ranks, disk_ranks > 1 ? "s" : "",
            pm->has_master ? "" : "; the host is the device: AdamW at the measured optimizer rate");
    if (pm->has_master)
        fprintf(out, "; host<->device %.1f GB/s (PCIe %.1f GB/s nominal x %.2f, assumed); host AdamW at %.1f GB/s per rank (32 bytes per "
                "parameter; the node's %.0f GB/s, assumed, shared by %d)",
                m->pcie_bw * m->pcie_eff / 1e9, m->pcie_bw / 1e9, m->pcie_eff, m->host_bw / rpn / 1e9, m->host_bw / 1e9, rpn);
    fprintf(out, "; checksums %.1f GB/s (%s); the free space in -zd: %s\n", checksum_bw / 1e9, pm->has_master ? "the host rate" : "measured now",
            disk_free >= 0 ? plan_gib(disk_free, buf[0], 32) : f->dir ? "not known (statvfs failed)" : "not known (no -zd)");
    fprintf(out, "%-5s | %-22s | %-10s | %-10s | %-10s | %-9s | %-4s | %-21s | %-21s | %9s | %9s | %10s | %9s | %9s | %10s | %6s\n", "stage",
            "offload", pm->has_master ? "device" : "RAM", "host", "NVMe file", "staging", "fits", "NVMe read/written", "down/up (host)",
            "disk", "copies", "exposed io", "step", "vs plain", "tokens/s", "MFU");
    for (int stage = 1; stage <= 3; stage++) {
        char err[512];
        int nvme = f->optimizer == ZERO_PLACE_NVME || f->params == ZERO_PLACE_NVME;
        ZeroOffloadArgs a = {f->optimizer, f->params, f->dir ? f->dir : nvme ? "(none: a plan)" : NULL};
        if ((f->stage >= 0 && stage != f->stage) || zero_offload_check_args(&a, stage, err, sizeof(err)) != 0) continue;
        PlanOffload off;
        plan_offload_init(&off, pm, layout, m, stage, f->optimizer, f->params, disk_ranks, rpn, checksum_bw);
        double shard_add = !pm->has_master ? 3.0 * e : 0.0;
        size_t tied = zero_tied_rows_numel(stage, N, (size_t)pm->B * pm->T, (size_t)pm->T, pm->config->channels, pm->has_master);
        PlanStep st = plan_simulate(stage, layout, net, tm, A, shard_add, mem_bw, tied, NULL, &off, NULL, 0, NULL);
        double tps = tokens / st.step_s, mfu = tps * pm->flops_per_token / (m->peak_flops * N);
        int fits_memory = (double)off.device <= budget && (!pm->has_master || (double)off.host <= host_budget);
        int fits_disk = disk_free < 0 || (double)off.nvme_file * disk_ranks <= disk_free;
        int fits = fits_memory && fits_disk;
        char label[64], rw[48], du[48];
        snprintf(label, sizeof(label), "-zo %s -zp %s", zero_placement_names[f->optimizer], zero_placement_names[f->params]);
        snprintf(rw, sizeof(rw), "%s / %s", plan_gib((double)off.nvme_read, buf[0], 32), plan_gib((double)off.nvme_written, buf[1], 32));
        if (off.host_optimizer) snprintf(du, sizeof(du), "%s / %s", plan_gib((double)off.down, buf[0], 32), plan_gib((double)off.up, buf[1], 32));
        else snprintf(du, sizeof(du), "-");
        fprintf(out, "%-5d | %-22s | %-10s | %-10s | %-10s | %-9s | %-4s | %-21s | %-21s | %6.1f ms | %6.1f ms | %7.1f ms | %6.1f ms | %+7.1f%% | %10.0f | %5.1f%%\n",
                stage, label, plan_gib((double)off.device, buf[2], 32), pm->has_master ? plan_gib((double)off.host, buf[3], 32) : "-",
                plan_gib((double)off.nvme_file, buf[4], 32), plan_gib((double)off.staging, buf[5], 32),
                fits ? "yes" : fits_memory ? "NO (disk)" : "NO", rw, du, 1e3 * st.disk_s, 1e3 * st.copy_s,
                1e3 * (st.io_exposed_s + st.copy_exposed_s), 1e3 * st.step_s, 100.0 * (st.step_s / plain_step_s[stage] - 1.0), tps, 100.0 * mfu);
        if (plan_json_out) fprintf(plan_json_out, "plan_offload_json {\"stage\":%d,\"offload_optimizer\":\"%s\",\"offload_params\":\"%s\",\"world_size\":%d,"
                "\"grad_accum_steps\":%d,\"element_bytes\":%d,\"bytes_device\":%zu,\"bytes_host\":%zu,\"bytes_ram\":%zu,\"bytes_working\":%zu,"
                "\"bytes_device_counted\":%zu,\"bytes_host_counted\":%zu,\"bytes_nvme\":%zu,\"nvme_file_bytes\":%zu,"
                "\"offload_staging_bytes\":%zu,\"nvme_read_per_step\":%lld,\"nvme_written_per_step\":%lld,\"d2h_bytes\":%lld,"
                "\"h2d_bytes\":%lld,\"fits\":%s,\"nvme_read_gbs\":%.4f,\"nvme_write_gbs\":%.4f,\"copy_gbs\":%.3f,\"checksum_gbs\":%.3f,"
                "\"disk_ms\":%.4f,\"copy_ms\":%.4f,\"io_exposed_ms\":%.4f,\"copy_exposed_ms\":%.4f,\"checksum_ms\":%.4f,"
                "\"compute_ms\":%.4f,\"comm_ms\":%.4f,\"exposed_ms\":%.4f,\"step_ms\":%.4f,\"plain_step_ms\":%.4f,"
                "\"tokens_per_s\":%.2f,\"mfu\":%.5f}\n",
                stage, zero_placement_names[f->optimizer], zero_placement_names[f->params], N, A, e, off.device, off.host, off.engine_ram,
                off.working, off.engine_device, off.engine_host, off.nvme_state, off.nvme_file, off.staging, off.nvme_read, off.nvme_written,
                off.down, off.up, fits ? "true" : "false", off.read_bw / 1e9, off.write_bw / 1e9, off.copy_bw / 1e9, checksum_bw / 1e9,
                1e3 * st.disk_s, 1e3 * st.copy_s, 1e3 * st.io_exposed_s, 1e3 * st.copy_exposed_s, 1e3 * st.checksum_s, 1e3 * st.compute_s,
                1e3 * st.comm_s, 1e3 * st.exposed_s, 1e3 * st.step_s, 1e3 * plain_step_s[stage], tps, mfu);
        plan_offload_free(&off);
    }
    fprintf(out, "plan: offload: %s = the bytes per rank there (state, working units, activations%s); staging = the NVMe stream's "
            "three slots and two bounce buffers (zero_offload_staging_bytes); NVMe read/written and down/up per rank per step; disk, "
            "copies = their busy time; exposed io = compute waiting for them; vs plain = the step against the stage's row above\n",
            pm->has_master ? "device, host" : "RAM", pm->has_master ? "; host: master, m, v, the gradient and parameter staging" : ", staging");
}

#endif // ZERO_PLAN_OFFLOAD_H
