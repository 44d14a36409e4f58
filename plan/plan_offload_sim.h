/*
 * plan/plan_offload_sim.h: offload simulated beside the engine's schedule (-zo, -zp; the engine's
 * side is zero/offload/offload.h and zero/offload/offload_gpu.cuh): the disk and the
 * host<->device copy stream as queues of known times, the optimizer's stream of pieces through
 * three staging slots, the GPU build's gradient slices down and parameters up, and stage 3 -zp's
 * shard read or copied before its gather. plan/plan_schedule.h calls the plan_off_* functions
 * where the engine calls offload (each returns at once without offload: s->off NULL); the
 * schedule the engine runs is in plan/plan_offload.h's header. Built on plan/plan_sim.h's link
 * and compute timeline. Part of the planner (the overview in plan/plan.h).
 */
#ifndef ZERO_PLAN_OFFLOAD_SIM_H
#define ZERO_PLAN_OFFLOAD_SIM_H
#ifndef ZERO_CUH
#error "plan/plan_offload_sim.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

// ---- the disk and the copy link ----

static double plan_off_disk(PlanSim* s, double bytes, int write) {
    PlanOffloadSim* os = s->os;
    double start = fmax(s->t, os->disk_free), seconds = bytes / (write ? s->off->write_bw : s->off->read_bw);
    os->disk_free = start + seconds;
    os->disk_s += seconds;
    return os->disk_free;
}

// A copy of `bytes` on the copy stream, issued at `issued`, not to begin before not_before.
static double plan_off_copy_at(PlanSim* s, double issued, double not_before, double bytes) {
    PlanOffloadSim* os = s->os;
    double start = fmax(fmax(issued, not_before), os->copy_free), seconds = bytes / s->off->copy_bw;
    os->copy_free = start + seconds;
    os->copy_s += seconds;
    return os->copy_free;
}
static double plan_off_copy(PlanSim* s, double not_before, double bytes) { return plan_off_copy_at(s, s->t, not_before, bytes); }

// The queued gradient slices down, in issue order, each once its reduction's completion is known
// (the optimizer calls it after backward's reductions were all waited for: plan_done reads them).
static void plan_off_downs(PlanSim* s) {
    PlanOffloadSim* os = s->os;
    for (int i = 0; i < os->downs; i++) {
        int u = os->down_unit[i];
        os->down_done[u] = plan_off_copy_at(s, os->down_issued[i], plan_done(s, os->down_after[i]),
                                            4.0 * (double)s->layout->units[u].shard_numel);
    }
    os->downs = 0;
}

// Compute waits for the disk (io) or a copy.
static void plan_off_wait(PlanSim* s, double done, int unit, int io) {
    double before = s->exposed;
    plan_wait(s, done, ZERO_OP_ALL_GATHER, unit);
    *(io ? &s->os->io_exposed_s : &s->os->copy_exposed_s) += s->exposed - before;
}

static void plan_off_checksum(PlanSim* s, int unit, double bytes) {
    double seconds = bytes * s->off->checksum_s_per_byte, t0 = s->t;
    plan_compute(s, ZERO_TRACE_OPTIMIZER, unit, seconds);
    s->os->checksum_s += s->t - t0; // stretched beside a collective like compute (the columns add up to the step)
}

// ---- the optimizer's stream of pieces ----

static void plan_off_read_piece(PlanSim* s, int q) { // zero_offload_read_piece
    if (q >= s->off->num_pieces) return;
    int slot = q % ZERO_OFFLOAD_SLOTS;
    plan_off_wait(s, s->os->slot_write[slot], s->off->piece_unit[q], 1);
    s->os->slot_read[slot] = plan_off_disk(s, s->off->piece_bytes[q], 0);
}

static void plan_off_backward(PlanSim* s) { // zero_offload_prefetch_optimizer (the CPU build's call)
    if (s->off == NULL || !s->off->o.active || s->off->host_optimizer || s->os->prefetched) return;
    s->os->prefetched = 1;
    s->os->seq = 0;
    plan_off_read_piece(s, 0);
    plan_off_read_piece(s, 1);
}

static int plan_off_update(PlanSim* s, const PlanTimes* tm, int unit, size_t owned, double* busy) {
    const PlanOffload* off = s->off;
    if (off == NULL || (!off->o.active && !off->host_optimizer)) return 0;
    PlanOffloadSim* os = s->os;
    double per_element = off->host_optimizer ? off->host_update_s : tm->optimizer_per_element;
    *busy = 0.0;
    if (off->host_optimizer) plan_off_downs(s);
    if (off->host_optimizer) plan_off_wait(s, os->down_done[unit], unit, 0); // the gradient slice is down
    int pieces = zero_offload_pieces_of(&off->o, off->layout, unit);
    double up = 0.0;
    for (int k = 0; k < pieces; k++) {
        size_t lo, hi;
        zero_offload_piece_range_of(&off->o, off->layout, unit, k, &lo, &hi);
        if (off->o.active) {
            if (!os->prefetched) { os->prefetched = 1; os->seq = 0; plan_off_read_piece(s, 0); plan_off_read_piece(s, 1); }
            int q = os->seq, slot = q % ZERO_OFFLOAD_SLOTS;
            plan_off_wait(s, os->slot_read[slot], unit, 1);
            plan_off_checksum(s, unit, off->piece_bytes[q]);
        }
        double seconds = (double)(hi - lo) * per_element, t0 = s->t; // owned = the shard at stages 1-3
        plan_compute(s, ZERO_TRACE_OPTIMIZER, unit, seconds);
        *busy += s->t - t0;
        if (off->o.active) {
            int q = os->seq, slot = q % ZERO_OFFLOAD_SLOTS;
            plan_off_checksum(s, unit, off->piece_bytes[q]);
            os->slot_write[slot] = plan_off_disk(s, off->piece_bytes[q], 1);
            plan_off_read_piece(s, q + 2);
            if (++os->seq == off->num_pieces) os->prefetched = 0;
        }
        if (off->host_optimizer && !off->params_off) up = plan_off_copy(s, 0.0, (double)(hi - lo) * 2.0); // bf16 up
    }
    if (off->host_optimizer) os->up_done[unit] = up;
    return 1;
}

// ---- gradients down, parameters up (GPU build), the -zp shard before a stage-3 gather ----

static void plan_off_grads_final(PlanSim* s, int unit, double done) { // queued now, behind `done` (a time or a handle)
    if (s->off == NULL || !s->off->host_optimizer) return;
    PlanOffloadSim* os = s->os;
    if (os->downs == s->num_units) plan_off_downs(s); // (each unit goes down once a step: not reached)
    os->down_unit[os->downs] = unit;
    os->down_issued[os->downs] = s->t;
    os->down_after[os->downs] = done;
    os->downs++;
}

static double plan_off_params_up(const PlanSim* s, int unit) {
    return s->off != NULL && s->off->host_optimizer && !s->off->params_off ? s->os->up_done[unit] : 0.0;
}

static void plan_off_start_gathers(PlanSim* s, const PlanSlot* upto) { // zero_param_work_start_gathers
    if (s->off == NULL || s->off->params != ZERO_PLACE_NVME || s->off->params_off) return;
    for (;;) {
        PlanSlot* oldest = NULL;
        for (int i = 0; i < ZERO_WORKING_UNITS; i++)
            if (s->param_work[i].pending && (oldest == NULL || s->param_work[i].age < oldest->age)) oldest = &s->param_work[i];
        if (oldest == NULL) return;
        int unit = oldest->unit;
        plan_off_wait(s, oldest->read_done, unit, 1);
        plan_off_checksum(s, unit, (double)s->off->o.region_bytes[(size_t)unit * ZERO_NUM_REGIONS + ZERO_REGION_PARAMS]);
        oldest->pending = 0;
        size_t n = plan_unit_numel(s, unit);
        oldest->done = plan_issue(s, ZERO_OP_ALL_GATHER, unit, plan_ring_seconds(s->net, n, s->net->N - 1, 0),
                                  zero_ring_all_gather_elements(n, s->net->N));
        if (oldest == upto) return;
    }
}

static int plan_off_gather(PlanSim* s, PlanSlot* w, int unit) {
    const PlanOffload* off = s->off;
    if (off == NULL || off->params == ZERO_PLACE_NONE) return 0;
    size_t n = plan_unit_numel(s, unit), shard = s->layout->units[unit].shard_numel;
    double ring = plan_ring_seconds(s->net, n, s->net->N - 1, 0);
    long long elements = zero_ring_all_gather_elements(n, s->net->N);
    double region = off->o.active ? (double)off->o.region_bytes[(size_t)unit * ZERO_NUM_REGIONS + ZERO_REGION_PARAMS] : 0.0;
    if (!off->params_off) { // CPU build: -zp cpu is RAM; -zp nvme reads the shard, gathered at the next engine call
        if (off->params != ZERO_PLACE_NVME) return 0;
        int pending = 0;
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) pending += s->param_work[i].pending && &s->param_work[i] != w;
        if (pending >= 2) plan_off_start_gathers(s, NULL); // both bounce buffers taken
        w->read_done = plan_off_disk(s, region, 0);
        w->pending = 1;
        w->done = 0.0;
        return 1;
    }
    // The bf16 slice up on the comm stream (zero_offload_gpu_params_up): an op of the link's queue
    // that sends nothing, ahead of the gather; -zp nvme: the host reads it, checks it, copies it
    // up and waits for the copy (the bounce buffer is reused).
    double copy = 2.0 * (double)shard / off->copy_bw;
    if (off->params == ZERO_PLACE_NVME) {
        plan_off_wait(s, plan_off_disk(s, region, 0), unit, 1);
        plan_off_checksum(s, unit, region);
    }
    double copied = plan_issue_what(s, ZERO_OP_ALL_GATHER, unit, copy, 0, "-zp copy up");
    s->os->copy_s += copy;
    if (off->params == ZERO_PLACE_NVME) plan_off_wait(s, copied, unit, 0);
    w->done = plan_issue(s, ZERO_OP_ALL_GATHER, unit, ring, elements);
    return 1;
}

// ---- the simulation's state ----

static void plan_off_sim_begin(PlanSim* s) {
    s->os = NULL;
    if (s->off == NULL) return;
    s->os = (PlanOffloadSim*)zero_calloc(1, sizeof(PlanOffloadSim), "plan offload");
    s->os->down_done = (double*)zero_calloc((size_t)s->num_units, sizeof(double), "plan offload");
    s->os->up_done = (double*)zero_calloc((size_t)s->num_units, sizeof(double), "plan offload");
    s->os->down_unit = (int*)zero_calloc((size_t)s->num_units, sizeof(int), "plan offload");
    s->os->down_issued = (double*)zero_calloc((size_t)s->num_units, sizeof(double), "plan offload");
    s->os->down_after = (double*)zero_calloc((size_t)s->num_units, sizeof(double), "plan offload");
}

static void plan_off_step_mark(PlanSim* s) {
    if (s->os == NULL) return;
    PlanOffloadSim* os = s->os;
    double now[5] = {os->disk_s, os->copy_s, os->io_exposed_s, os->copy_exposed_s, os->checksum_s};
    memcpy(os->mark, now, sizeof(now));
}

static void plan_off_sim_end(PlanSim* s, PlanStep* r) {
    if (s->os == NULL) return;
    PlanOffloadSim* os = s->os;
    r->disk_s = os->disk_s - os->mark[0];
    r->copy_s = os->copy_s - os->mark[1];
    r->io_exposed_s = os->io_exposed_s - os->mark[2];
    r->copy_exposed_s = os->copy_exposed_s - os->mark[3];
    r->checksum_s = os->checksum_s - os->mark[4];
    free(os->down_done); free(os->up_done); free(os->down_unit); free(os->down_issued); free(os->down_after); free(os);
    s->os = NULL;
}

#endif // ZERO_PLAN_OFFLOAD_SIM_H
