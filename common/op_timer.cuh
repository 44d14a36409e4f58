/*
 * op_timer.cuh: the per-kernel table of the CUDA build (train_gpt2cu -ot K): CUDA events on the
 * compute stream between op families, over K steps after two warm-up steps, summed per family
 * and printed against the H200's roofline with the FLOPs and bytes of common/op_costs.h.
 *
 * How: op_timer_mark(t, family) records an event now; the time from one mark to the next on the
 * compute stream belongs to the family of the first (so every interval of a profiled step lands
 * in exactly one row, and the rows add up to the step's device time). The marks of a step are
 * read once its results are back (the trainer's finish_step); the host then waits for the last
 * mark only (recorded just after the step's done event), never for the next step's work.
 * Kernels that overlap on other streams (the comm stream's collectives and fp32 gradient
 * additions, the copy stream's inputs) are not in any row; the compute stream's waits for them
 * are, in the row of the op that waited (mostly "engine"), and the exposed communication they
 * add up to is printed beside the table. Recording events costs the host ~2 us each and can
 * add small gaps between kernels, so profiled steps are left out of the run's mean step time.
 */
#ifndef COMMON_OP_TIMER_CUH
#define COMMON_OP_TIMER_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "common/cuda_utils.cuh"
#include "common/op_costs.h"

// The H200 SXM's peaks (NVIDIA datasheet): dense bf16 tensor-core FLOP/s and HBM3e bytes/s.
#define OP_PEAK_FLOPS 989e12
#define OP_PEAK_BYTES 4.8e12

typedef struct {
    int steps_wanted;     // -ot K: steps to time (0: off)
    int first_step;       // the first timed step (from 1)
    int on;               // recording marks in the step being enqueued
    int recording_step;   // that step (from 1)
    // Two sets by step parity: step t's marks are read while step t+1 records into the other.
    cudaEvent_t* events[2];
    int* families[2];     // the family of the interval each event starts
    int count[2], capacity;
    cudaStream_t stream;
    double seconds[OP_NUM_FAMILIES]; // summed over the timed steps
    double comm_wait_s, step_seconds;
    int steps_done;
} OpTimer;

// capacity: marks per step (the trainer's estimate for its L and accumulation).
static void op_timer_init(OpTimer* t, int steps_wanted, int first_step, int capacity, cudaStream_t stream) {
    memset(t, 0, sizeof(*t));
    t->steps_wanted = steps_wanted;
    t->first_step = first_step;
    t->stream = stream;
    if (steps_wanted <= 0) return;
    t->capacity = capacity;
    for (int k = 0; k < 2; k++) {
        t->events[k] = (cudaEvent_t*)malloc((size_t)capacity * sizeof(cudaEvent_t));
        t->families[k] = (int*)malloc((size_t)capacity * sizeof(int));
        if (t->events[k] == NULL || t->families[k] == NULL) { fprintf(stderr, "error: out of host memory (op timer)\n"); exit(1); }
        for (int i = 0; i < capacity; i++) CUDA_CHECK(cudaEventCreate(&t->events[k][i]));
    }
}

static void op_timer_free(OpTimer* t) {
    for (int k = 0; k < 2 && t->capacity > 0; k++) {
        for (int i = 0; i < t->capacity; i++) CUDA_CHECK(cudaEventDestroy(t->events[k][i]));
        free(t->events[k]);
        free(t->families[k]);
    }
}

// Is step (from 1) one of the timed ones?
static int op_timer_times_step(const OpTimer* t, int step) {
    return t->steps_wanted > 0 && step >= t->first_step && step < t->first_step + t->steps_wanted;
}

// The step being enqueued: start recording when it is a timed one.
static void op_timer_step_begin(OpTimer* t, int step) {
    t->on = op_timer_times_step(t, step);
    t->recording_step = step;
    t->count[step & 1] = 0;
}

// The op family that runs from now until the next mark.
static void op_timer_mark(OpTimer* t, OpFamily family) {
    if (!t->on) return;
    int k = t->recording_step & 1;
    if (t->count[k] == t->capacity) { // more marks than the estimate: the rest go into the last interval
        t->families[k][t->count[k] - 1] = OP_OTHER;
        return;
    }
    CUDA_CHECK(cudaEventRecord(t->events[k][t->count[k]], t->stream));
    t->families[k][t->count[k]++] = family;
}

// The step is fully enqueued: a last mark ends its last interval; marks outside steps (val,
// sampling) are not recorded.
static void op_timer_step_end(OpTimer* t) {
    if (!t->on) return;
    op_timer_mark(t, OP_OTHER);
    t->on = 0;
}

// After the step's results are back: add its intervals. The host waited for the step's done
// event, but the last mark is recorded after it (op_timer_step_end follows the optimizer's
// enqueue), so on a GPU it may still be pending and cudaEventElapsedTime would answer
// cudaErrorNotReady: the host waits for the last mark first (it follows done at once, so this
// costs nothing), and every earlier mark on the same stream is then complete too.
static void op_timer_step_read(OpTimer* t, int step, double step_seconds, double comm_wait_s) {
    int k = step & 1;
    if (!op_timer_times_step(t, step) || t->count[k] == 0) return;
    CUDA_CHECK(cudaEventSynchronize(t->events[k][t->count[k] - 1]));
    for (int i = 0; i + 1 < t->count[k]; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t->events[k][i], t->events[k][i + 1]));
        t->seconds[t->families[k][i]] += ms / 1000.0;
    }
    t->count[k] = 0;
    t->step_seconds += step_seconds;
    t->comm_wait_s += comm_wait_s;
    t->steps_done++;
}

/*
 * The table (rank 0): per family the measured ms per step, its share of the summed intervals,
 * the FLOPs and bytes per step (common/op_costs.h), the achieved TFLOP/s and GB/s, the time the
 * family would take at the H200's peaks (the larger of FLOPs / 989e12 and bytes / 4.8e12, which
 * also says whether it is compute- or memory-bound) and the measured time's ratio to it.
 */
static void op_timer_print(const OpTimer* t, const OpCost cost[OP_NUM_FAMILIES], FILE* out) {
    if (t->steps_done == 0) return;
    double k = t->steps_done, total = 0.0;
    for (int f = 0; f < OP_NUM_FAMILIES; f++) total += t->seconds[f];
    fprintf(out, "op timing: %d steps, CUDA events between op families on the compute stream; peaks %.0f TFLOP/s bf16 dense, "
            "%.1f TB/s (H200 SXM)\n", t->steps_done, OP_PEAK_FLOPS / 1e12, OP_PEAK_BYTES / 1e12);
    fprintf(out, "%-38s %9s %6s %11s %11s %8s %8s %9s %7s %s\n", "op family", "ms/step", "share", "GFLOP", "GB", "TFLOP/s",
            "GB/s", "peak ms", "x peak", "bound");
    for (int f = 0; f < OP_NUM_FAMILIES; f++) {
        double ms = 1000.0 * t->seconds[f] / k, s = t->seconds[f] / k;
        double peak_s = fmax(cost[f].flops / OP_PEAK_FLOPS, cost[f].bytes / OP_PEAK_BYTES);
        const char* bound = cost[f].flops / OP_PEAK_FLOPS >= cost[f].bytes / OP_PEAK_BYTES ? "compute" : "memory";
        fprintf(out, "%-38s %9.3f %5.1f%% %11.5g %11.5g %8.1f %8.0f %9.3f %7.2f %s\n", op_family_names[f], ms,
                total > 0 ? 100.0 * t->seconds[f] / total : 0.0, cost[f].flops / 1e9, cost[f].bytes / 1e9,
                s > 0 ? cost[f].flops / s / 1e12 : 0.0, s > 0 ? cost[f].bytes / s / 1e9 : 0.0, 1000.0 * peak_s,
                peak_s > 0 ? s / peak_s : 0.0, cost[f].flops + cost[f].bytes > 0 ? bound : "-");
    }
    fprintf(out, "%-38s %9s %6s   (fused into the matmul epilogues: GELU_AUX_BIAS forward, DGELU_BGRAD backward)\n", "gelu", "-", "-");
    fprintf(out, "%-38s %9s %6s   (fused into the layernorm forward that follows each add)\n", "residual", "-", "-");
    fprintf(out, "sum of the rows %.3f ms per step; step time (device, same steps) %.3f ms; of the rows, exposed "
            "communication (compute-stream waits on the comm stream) %.3f ms\n", 1000.0 * total / k,
            1000.0 * t->step_seconds / k, 1000.0 * t->comm_wait_s / k);
}

#endif // COMMON_OP_TIMER_CUH
