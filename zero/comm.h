/*
 * zero/comm.h: a collective's life in the engine: begin, test, wait. Part of the ZeRO engine
 * (the map is in zero.cuh).
 *
 * Collectives (CPU build): the unit collectives (all-reduce, reduce-scatter, all-gather) are the
 * engine's rings over MPI point-to-point (zero/comm_ring.h; MPI's MPI_Iallreduce,
 * MPI_Ireduce_scatter_block, MPI_Iallgather with ZERO_RING=0), scalars, barriers and checkpoint
 * gathers MPI's own non-blocking collectives, started when a unit is ready and waited on where
 * the result is needed, behind zero_op_* functions (the GPU engine puts NCCL behind its own
 * functions in zero/gpu/comm_gpu.cuh and uses these for scalars, barriers and checkpoints). A wait
 * is an MPI_Test loop with a clock: past -wt seconds it names the rank, collective, unit and step
 * and aborts every rank (zero/comm_mpi.h). With world_size 1 no MPI call is made at all, so a
 * program that never called MPI_Init (test_gpt2) can use the engine. -tr sees each collective
 * through the trace hooks (zero/hooks.h).
 */
#ifndef ZERO_COMM_H
#define ZERO_COMM_H
#ifndef ZERO_CUH
#error "zero/comm.h is part of the ZeRO engine; include zero.cuh"
#endif

// ---- starting and waiting: the only functions that touch MPI requests ----

// The diagnosis line of a collective that waited past -wt (both builds): rank, collective,
// buffer, unit and step. The caller aborts every rank after it.
static void zero_report_timeout(const ZeroEngine* z, const ZeroOp* op, int step, double waited) {
    char unit[64];
    fprintf(stderr, "error: rank %d (%s): %s of %s, unit %s, at step %d waited %.1f s, longer than -wt %g s; "
            "expected every rank to reach this collective (a rank died or is stuck); aborting all ranks\n",
            z->rank, zero_cluster.host, zero_op_names[op->kind], op->what, zero_unit_name(z->layout, op->unit, unit, sizeof(unit)),
            step, waited, z->timeout_s);
}

// The unit collectives run as the engine's rings (zero/comm_ring.h) unless built with ZERO_RING=0.
static int zero_op_is_ring(const ZeroOp* op) {
    return ZERO_RING && (op->kind == ZERO_OP_ALL_REDUCE || op->kind == ZERO_OP_REDUCE_SCATTER || op->kind == ZERO_OP_ALL_GATHER);
}

// Is op complete? Advances the ring queue (rings) or tests the MPI request.
static int zero_op_test(ZeroEngine* z, ZeroOp* op) {
    if (zero_op_is_ring(op)) return zero_ring_done(z, op);
    int done = 0;
    MPI_CHECK(MPI_Test(&op->request, &done, MPI_STATUS_IGNORE));
    if (done) zero_trace_done(op);
    return done;
}

// Wait for op as a test loop with a clock. Past z->timeout_s: one diagnosis line naming
// rank, collective, unit and step, then MPI_Abort for every rank. The time spent here is the
// exposed (not overlapped) communication time.
static void zero_op_wait(ZeroEngine* z, ZeroOp* op) {
    if (op->kind == ZERO_OP_NONE) return;
    double start = zero_clock();
    long spins = 0;
    zero_waiting_begin(zero_op_names[op->kind], op->what, op->unit, z->step, start);
    for (;;) {
        if (zero_op_test(z, op)) break;
        double waited = zero_clock() - start;
        if (waited > z->timeout_s) {
            zero_report_timeout(z, op, z->step, waited);
            zero_abort_all_ranks(1);
        }
        // Ranks may share cores (tests oversubscribe 2 cores): after a short spin, sleep a
        // little between tests so a rank that is still computing gets the core.
        if (++spins > 100) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    zero_waiting_end();
    double end = zero_clock(), waited = end - start;
    zero_trace_wait(op, start, end); // exposed: the wait span; the collective's own span
    z->comm_wait_s_step += waited;
    z->comm_wait_s_total += waited;
    op->kind = ZERO_OP_NONE;
    zero_progress_note_end();
}

#if !ZERO_RING
// Test one collective in flight (zero_progress); the trace notes when it is first seen done.
static void zero_progress_test(ZeroOp* op) {
    int done = 0;
    if (op->kind != ZERO_OP_NONE) MPI_Test(&op->request, &done, MPI_STATUS_IGNORE);
    if (done) zero_trace_done(op);
}
#endif

// Let in-flight collectives advance. Open MPI moves data only inside MPI calls, so the engine
// advances its rings (or tests its requests) at every call the model makes.
static void zero_progress(ZeroEngine* z) {
    if (z->world_size == 1) return;
#if ZERO_RING
    zero_ring_progress(z); // a ring that completes tells the trace (zero/comm_ring.h)
#else
    int n = z->layout->num_units;
    if (z->grad_ops) for (int u = 0; u < n; u++) zero_progress_test(&z->grad_ops[u]);
    zero_hook_tied_op(z, 0); // CPU stages 0, 1: the tied rows' all-gather (zero/tied_rows/)
    if (z->param_ops) for (int u = 0; u < n; u++) zero_progress_test(&z->param_ops[u]);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        zero_progress_test(&z->param_work[i].op);
        zero_progress_test(&z->grad_work[i].op);
    }
#endif
}

static void zero_op_begin(ZeroEngine* z, ZeroOp* op, ZeroOpKind kind, int unit, const char* what, long long sent) {
    if (op->kind != ZERO_OP_NONE) {
        fprintf(stderr, "error: internal: a %s is started on a buffer whose %s is still in flight (unit %d)\n",
                zero_op_names[kind], zero_op_names[op->kind], unit);
        zero_abort_all_ranks(1);
    }
    op->kind = kind;
    op->unit = unit;
    op->what = what;
    zero_progress_note_begin();
    zero_trace_issue(op, sent);
    z->sent_elements_step += sent;
    z->sent_elements_total += sent;
}

// All-reduce (sum) of a unit in place: n elements of buf, the same on every rank afterwards.
static void zero_op_all_reduce(ZeroEngine* z, ZeroOp* op, float* buf, size_t n, int unit, const char* what) {
    if (z->world_size == 1) return;
    zero_op_begin(z, op, ZERO_OP_ALL_REDUCE, unit, what, zero_ring_all_reduce_elements(n, z->world_size));
#if ZERO_RING
    zero_ring_begin(z, op, buf, n, z->world_size - 1, 2 * (z->world_size - 1));
#else
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &op->request));
#endif
}

// Reduce-scatter (sum) in place: buf holds n elements on every rank; afterwards the sum over
// ranks of slice `rank` is at zero_reduce_scatter_result(z, buf, n): at buf + rank*n/world_size
// (the ring; NCCL's in-place form), or at buf (MPI's MPI_IN_PLACE rule, with ZERO_RING=0).
static void zero_op_reduce_scatter(ZeroEngine* z, ZeroOp* op, float* buf, size_t n, int unit, const char* what) {
    if (z->world_size == 1) return; // the single slice is already in place
    zero_op_begin(z, op, ZERO_OP_REDUCE_SCATTER, unit, what, zero_ring_reduce_scatter_elements(n, z->world_size));
#if ZERO_RING
    zero_ring_begin(z, op, buf, n, z->world_size - 1, z->world_size - 1);
#else
    MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)(n / (size_t)z->world_size), MPI_FLOAT, MPI_SUM,
                                        MPI_COMM_WORLD, &op->request));
#endif
}
static float* zero_reduce_scatter_result(const ZeroEngine* z, float* buf, size_t n) {
    return ZERO_RING || z->world_size == 1 ? buf + (size_t)z->rank * (n / (size_t)z->world_size) : buf;
}

// All-gather into buf (n elements): each rank contributes n/world_size elements from `mine`,
// which land at buf + r*n/world_size; mine == NULL means they are already there (in place).
static void zero_op_all_gather(ZeroEngine* z, ZeroOp* op, const float* mine, float* buf, size_t n, int unit, const char* what) {
    size_t shard = n / (size_t)z->world_size;
    float* own = buf + (size_t)z->rank * shard;
    if (z->world_size == 1) {
        if (mine != NULL) memcpy(buf, mine, shard * sizeof(float));
        return;
    }
    zero_op_begin(z, op, ZERO_OP_ALL_GATHER, unit, what, zero_ring_all_gather_elements(n, z->world_size));
#if ZERO_RING
    if (mine != NULL && mine != own) memcpy(own, mine, shard * sizeof(float));
    zero_ring_begin(z, op, buf, n, 0, z->world_size - 1);
#else
    (void)own;
    if (mine == NULL) {
        MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, MPI_COMM_WORLD, &op->request));
    } else {
        MPI_CHECK(MPI_Iallgather(mine, (int)shard, MPI_FLOAT, buf, (int)shard, MPI_FLOAT, MPI_COMM_WORLD, &op->request));
    }
#endif
}

// Gather to rank 0: n/world_size elements from `mine` of every rank into buf (n elements, rank
// 0 only; NULL elsewhere). Used for checkpoints, outside the per-step count.
static void zero_op_gather_to_rank0(ZeroEngine* z, ZeroOp* op, const float* mine, float* buf, size_t n, int unit, const char* what) {
    size_t shard = n / (size_t)z->world_size;
    if (z->world_size == 1) {
        memcpy(buf, mine, shard * sizeof(float));
        return;
    }
    zero_op_begin(z, op, ZERO_OP_GATHER, unit, what, 0);
    MPI_CHECK(MPI_Igather(mine, (int)shard, MPI_FLOAT, buf, (int)shard, MPI_FLOAT, 0, MPI_COMM_WORLD, &op->request));
}

// Sum of one double over all ranks (blocking, with the timed wait).
static double zero_all_reduce_sum(ZeroEngine* z, double x, const char* what) {
    if (z->world_size == 1) return x;
    double result = 0.0;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    z->scalar_all_reduces_step++;
    MPI_CHECK(MPI_Iallreduce(&x, &result, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    return result;
}

// Sum of n doubles element-wise over all ranks, in place (one collective for several scalars).
static void zero_all_reduce_sum_doubles(ZeroEngine* z, double* x, int n, const char* what) {
    if (z->world_size == 1) return;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    z->scalar_all_reduces_step++;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
}

// Mean of x over ranks: the logged losses (each rank's mean over equal-sized micro-batches).
static double zero_all_reduce_mean(ZeroEngine* z, double x, const char* what) {
    return zero_all_reduce_sum(z, x, what) / z->world_size;
}

// Do all ranks pass ok != 0? Returns the lowest failing rank, or -1 when all are ok. Used so
// that an error found by one rank (e.g. its checkpoint file) stops every rank, not just one.
static int zero_first_failing_rank(ZeroEngine* z, int ok) {
    if (z->world_size == 1) return ok ? -1 : 0;
    int mine = ok ? z->world_size : z->rank, lowest = z->world_size;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, "error agreement", 0);
    MPI_CHECK(MPI_Iallreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    return lowest == z->world_size ? -1 : lowest;
}

// Smallest and largest of one int over all ranks, in one collective (MAX over {x, -x}): an
// integer decision every rank must share (the batch schedule's next batch).
static void zero_all_reduce_min_max_int(ZeroEngine* z, int x, int* lo, int* hi, const char* what) {
    *lo = *hi = x;
    if (z->world_size == 1) return;
    int mine[2] = {x, -x}, out[2] = {0, 0};
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    MPI_CHECK(MPI_Iallreduce(mine, out, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    *hi = out[0];
    *lo = -out[1];
}

static void zero_barrier(ZeroEngine* z, const char* what) {
    if (z->world_size == 1) return;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_BARRIER, -1, what, 0);
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
}

// Do all ranks hold the same 64-bit value? (min == max over ranks)
static int zero_all_ranks_equal_u64(ZeroEngine* z, uint64_t value, const char* what) {
    if (z->world_size == 1) return 1;
    uint64_t lo = 0, hi = 0;
    ZeroOp op = {.kind = ZERO_OP_NONE};
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    MPI_CHECK(MPI_Iallreduce(&value, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    op.kind = ZERO_OP_NONE;
    zero_op_begin(z, &op, ZERO_OP_SCALAR_ALL_REDUCE, -1, what, 0);
    MPI_CHECK(MPI_Iallreduce(&value, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD, &op.request));
    zero_op_wait(z, &op);
    return lo == hi;
}

#endif // ZERO_COMM_H
