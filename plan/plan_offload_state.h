/*
 * plan/plan_offload_state.h: what the planner's offload simulation holds (-zo, -zp): one
 * configuration's bytes and rates (PlanOffload, set by plan/plan_offload.h's plan_offload_init)
 * and the disk's, the copy link's and the optimizer's pieces' state during a simulated step
 * (PlanOffloadSim, plan/plan_offload_sim.h). Before plan/plan_sim.h, whose PlanSim holds one of
 * each (NULL: no offload), as zero/offload/offload_state.h comes before the engine's state.
 * Part of the planner (the overview in plan/plan.h).
 */
#ifndef ZERO_PLAN_OFFLOAD_STATE_H
#define ZERO_PLAN_OFFLOAD_STATE_H
#ifndef ZERO_CUH
#error "plan/plan_offload_state.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

typedef struct {
    int stage, optimizer, params;
    int host_optimizer, params_off; // GPU build: AdamW on the host (-zo cpu|nvme); the shard off the device (-zp)
    ZeroOffload o;                  // the engine's file layout for these placements (zero_offload_layout)
    const ParamLayout* layout;
    // Bytes per rank: device (CPU build: RAM, the host being the device), host (GPU build), NVMe.
    size_t device, host, nvme_state, nvme_file, staging, working;
    size_t engine_ram;                 // CPU build: the log's bytes_ram (the state less what is on NVMe)
    size_t engine_device, engine_host; // GPU build: the start-up line's counted device and host bytes
    long long nvme_read, nvme_written, down, up; // per step
    // Rates per rank: the disk (bytes/s), the copies (bytes/s), the host's AdamW (s per element) and
    // checksum (s per byte; GPU build: 0, the host's), and the pieces' sizes in the optimizer's walk.
    double read_bw, write_bw, copy_bw, host_update_s, checksum_s_per_byte;
    int num_pieces;
    int* piece_unit;
    double *piece_bytes, *piece_elements;
} PlanOffload;

typedef struct PlanOffloadSim {
    double disk_free, copy_free;
    double *down_done, *up_done;                          // [unit]
    // GPU -zo: the gradient slices queued to go down, in issue order, each behind its reduction
    // (a pending collective's handle: its time is known once the link gets there, plan_done)
    int *down_unit, downs;
    double *down_issued, *down_after;
    double slot_read[ZERO_OFFLOAD_SLOTS], slot_write[ZERO_OFFLOAD_SLOTS];
    int seq, prefetched;
    double disk_s, copy_s, io_exposed_s, copy_exposed_s, checksum_s; // so far
    double mark[5];                                       // at the step's start
} PlanOffloadSim;

#endif // ZERO_PLAN_OFFLOAD_STATE_H
