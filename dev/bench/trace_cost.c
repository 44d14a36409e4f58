/*
 * trace_cost.c: what the CPU build's timeline hooks (zero/trace/trace.h) cost per call (not a test).
 * A whole step cannot resolve it (dev/bench/trace_overhead.sh: steps of ~800 ms move by 10%
 * between rounds on this machine, the hooks are microseconds per step), so this times the hooks
 * themselves, as the engine calls them, in a loop on one thread:
 *   a cycle = the compute mark a unit's phase starts with (zero_trace_compute), a collective's
 *   issue (zero_trace_issue), its completion (zero_trace_done) and the wait on it
 *   (zero_trace_wait): 3 recorded events (compute span, wait span, comm span), one mutex round
 *   each for issue, done and wait, 3 clock reads (the wait's begin and end are the engine's own
 *   clock reads for its comm-wait count, made with or without -tr, so not timed here).
 * Tracing on (a traced step) and off (no -tr: each hook tests one flag), best of `rounds`, ns per
 * event. With EVENTS per step (a traced run's count: trace_overhead.sh prints rank 0's) and the
 * step time in ms, it prints the cost per step and its share.
 * usage: build/trace_cost [events_per_step (506)] [step_ms (824)] [rounds (5)]
 */
#define TESTING
#include "train_gpt2.c"

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// ns per recorded event for `cycles` cycles of the four hooks (3 events each)
static double time_cycles(ZeroOp* op, int cycles) {
    ZeroTrace* t = &zero_trace;
    double t0 = wall();
    for (int i = 0; i < cycles; i++) {
        if (t->count > 60000) t->count = 0; // a bounded buffer: the run's grows once, then stays
        zero_trace_compute(NULL, ZERO_TRACE_BACKWARD, i & 7);
        zero_trace_issue(op, 1000);
        zero_trace_done(op);
        zero_trace_wait(op, 1.0, 1.0); // its times are the engine's own wait clock reads, made with or without -tr
    }
    return (wall() - t0) / (3.0 * cycles) * 1e9;
}

int main(int argc, char** argv) {
    int events = argc > 1 ? atoi(argv[1]) : 506;
    double step_ms = argc > 2 ? atof(argv[2]) : 824.0;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (events < 1 || step_ms <= 0 || rounds < 1) { fprintf(stderr, "error: arguments: expected [events_per_step >= 1] [step_ms > 0] [rounds >= 1]\n"); return 1; }
    ZeroTrace* t = &zero_trace;
    t->in_flight_capacity = 64;
    t->in_flight = (ZeroTraceInFlight*)calloc((size_t)t->in_flight_capacity, sizeof(ZeroTraceInFlight));
    ZeroOp op;
    memset(&op, 0, sizeof(op));
    op.kind = ZERO_OP_ALL_GATHER;
    op.unit = 3;
    op.what = "params";
    const int cycles = 200000;
    double best_on = 1e30, best_off = 1e30;
    for (int r = 0; r < rounds; r++) {
        t->on = 1; t->recording = 1; t->first_step = 1; t->last_step = 1; t->step = 1; t->open_compute = -1;
        double on = time_cycles(&op, cycles);
        t->on = 0; t->recording = 0;
        double off = time_cycles(&op, cycles);
        if (on < best_on) best_on = on;
        if (off < best_off) best_off = off;
    }
    double per_step_us = best_on * events * 1e-3;
    printf("trace hooks, one thread, best of %d rounds of %d cycles (3 events each):\n", rounds, cycles);
    printf("  on : %.1f ns per recorded event (clock read, 72-byte record, the in-flight table's mutex)\n", best_on);
    printf("  off: %.2f ns per event's hooks (one flag test each)\n", best_off);
    printf("  %d events per step x %.1f ns = %.1f us per step = %.4f%% of a %.0f ms step (off: %.4f%%)\n", events, best_on,
           per_step_us, per_step_us * 1e-3 / step_ms * 100.0, step_ms, best_off * events * 1e-6 / step_ms * 100.0);
    printf("  (writing the file after the last step is not in a step)\n");
    return 0;
}
