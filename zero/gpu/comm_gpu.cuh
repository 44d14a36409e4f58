/*
 * zero/gpu/comm_gpu.cuh: communication in the GPU build: starting the ranks and picking each rank's
 * GPU, the host's timed waits on device events (the GPU twin of zero/comm.h's zero_op_wait),
 * the compute stream's waits on the comm stream (timed as exposed communication), and every
 * bulk collective on the comm stream (NCCL, or host-staged MPI with ZERO_COMM_MPI).
 * Scalars, barriers and checkpoint gathers use zero/comm.h's host MPI calls; the ranks end as
 * zero/comm_mpi.h says (zero_ranks_stop, zero_abort_all_ranks), the same in both builds.
 * Part of the ZeRO engine (the map is in zero.cuh); the engine on top is zero/gpu/engine_gpu.cuh.
 */
#ifndef ZERO_COMM_GPU_CUH
#define ZERO_COMM_GPU_CUH
#ifndef ZERO_CUH
#error "zero/gpu/comm_gpu.cuh is part of the ZeRO engine; include zero.cuh"
#endif

#if ZERO_NO_MPI
#define ZERO_COMM_NAME "none (one process, built without MPI)"
#elif ZERO_COMM_MPI
#define ZERO_COMM_NAME "MPI (host-staged)"
#else
#define ZERO_COMM_NAME "NCCL"
#endif

// The engine being used, for zero_abort_device_comm (a process has one).
static ZeroEngine* zero_active_engine = NULL;

// ============================================================================================
// Ranks and devices

// This rank's GPU from its local rank (zero/cluster/launcher.h's rule: the local rank's device, or device
// 0 when the launcher gave each task one GPU); `source` names where the local rank came from.
static void zero_pick_device(int rank, int local_rank, int device_count, const char* source) {
    int device = launcher_device_for(local_rank, device_count);
    if (device < 0 && ZERO_COMM_MPI) device = local_rank % device_count; // host-staged: ranks may share a GPU
    if (device < 0) {
        char host[ZERO_HOST_CHARS] = "?";
        gethostname(host, sizeof(host) - 1);
        fprintf(stderr, "error: rank %d (%s): local rank %d (%s) but only %d GPUs visible on this node; expected at most one rank "
                "per GPU (NCCL cannot share a GPU between ranks; build with ZERO_COMM=mpi to test several ranks on one GPU%s)\n",
                rank, host, local_rank, source, device_count,
#ifdef CUDA_EMULATION
                ", or set EMU_DEVICE_COUNT to the ranks per node: emulated GPUs"
#else
                ""
#endif
        );
        zero_abort_all_ranks(1);
    }
    CUDA_CHECK(cudaSetDevice(device));
    char host[ZERO_HOST_CHARS] = "?";
    gethostname(host, sizeof(host) - 1);
    printf("rank %d (%s): GPU %d of %d visible (local rank %d, from %s)\n", rank, host, device, device_count, local_rank, source);
}

// Run by zero_abort_all_ranks before MPI_Abort (registered by zero_ranks_start): a rank blocked
// in an NCCL kernel would not notice its peers going away, so the communicator is aborted first
// (NCCL docs, ncclCommAbort).
static void zero_abort_device_comm(void) {
#if !ZERO_COMM_MPI
    ZeroEngine* z = zero_active_engine;
    zero_active_engine = NULL; // once: ncclCommAbort itself may fail and call back here
    if (z != NULL) zero_hook_pp_abort_comms(z); // ZeRO++'s group communicators (a hook, zero/hooks.h)
    if (z != NULL && z->gpu.nccl != NULL) ncclCommAbort(z->gpu.nccl);
#endif
}

/*
 * Start the ranks and pick this rank's GPU. The GPU comes first, from the launcher's local rank
 * (zero/cluster/launcher.h: Open MPI, Hydra, MVAPICH or Slurm variables) before MPI_Init, so that a
 * CUDA-aware MPI opens its context on this rank's device, not on GPU 0 for every rank; a
 * launcher that gives none leaves it to MPI_COMM_TYPE_SHARED (the ranks on this node) after
 * MPI_Init. Launched as a task (mpirun, srun): MPI starts. Run directly: one rank, no MPI at all
 * (MPI is not initialized, so the engine makes no MPI call). NCCL cannot put two ranks on one
 * GPU; the host-staged MPI backend can (device = local rank modulo the GPUs present).
 */
static void zero_ranks_start(int* argc, char*** argv, int* rank, int* world_size) {
    *rank = 0;
    *world_size = 1;
    zero_at_abort(zero_abort_device_comm); // first of the clean-ups an abort runs (zero/comm_mpi.h)
#if ZERO_NO_MPI
    zero_single_process_check(); // zero/cluster/mpi_single.h: several tasks started is one error
#endif
    zero_cluster.launcher = launcher_view(); // before MPI_Init, which sets variables of its own
    const char* source = zero_cluster.launcher.local_var;
    int local_rank = zero_cluster.launcher.local_rank;
    int task = zero_cluster.launcher.task > 0 ? zero_cluster.launcher.task : 0;
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        fprintf(stderr, "error: rank %d: no CUDA device visible; expected a GPU (sm_80 or newer) for train_gpt2cu\n",
                task);
        zero_abort_all_ranks(1);
    }
    if (local_rank >= 0) zero_pick_device(task, local_rank, device_count, source);
    if (zero_cluster.launcher.task >= 0 || zero_cluster.launcher.tasks >= 0) {
        int provided;
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); // MPI_CHECK reports, then aborts
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world_size));
        if (local_rank < 0) {
            MPI_Comm node;
            MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node));
            MPI_CHECK(MPI_Comm_rank(node, &local_rank));
            MPI_CHECK(MPI_Comm_free(&node));
            zero_pick_device(*rank, local_rank, device_count, "MPI_COMM_TYPE_SHARED");
        }
    } else if (local_rank < 0) {
        zero_pick_device(0, 0, device_count, "one process");
    }
    zero_ranks_started(*rank, *world_size);
}

// NCCL_CHECK's failure path once the engine is up (common/cuda_utils.cuh): the communicators
// are aborted and every rank stops, so peers blocked in a collective end within seconds.
static void zero_nccl_error_abort(void) { zero_abort_all_ranks(1); }

// ============================================================================================
// Waiting: the host (timed) and the streams (events)

// NCCL's asynchronous error state (a peer vanished, a network error): one line, then abort.
static void zero_check_comm_error(ZeroEngine* z) {
#if !ZERO_COMM_MPI
    if (z->gpu.nccl == NULL) return;
    ncclResult_t state = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(z->gpu.nccl, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
        fprintf(stderr, "error: rank %d: NCCL reports %s at step %d; expected every rank's collectives to complete; aborting all ranks\n",
                z->rank, ncclGetErrorString(state), z->step);
        zero_abort_all_ranks(1);
    }
#else
    (void)z;
#endif
}

// The oldest device collective whose done event has not fired, or NULL.
static const ZeroOp* zero_oldest_unfinished_op(const ZeroEngine* z) {
    const ZeroOp* oldest = NULL;
    int n = z->layout->num_units;
    const ZeroOp* lists[2] = {z->grad_ops, z->param_ops};
    for (int l = 0; l < 2; l++) {
        if (lists[l] == NULL) continue;
        for (int u = 0; u < n; u++) {
            const ZeroOp* op = &lists[l][u];
            if (op->issued > 0 && cudaEventQuery(op->done) == cudaErrorNotReady && (oldest == NULL || op->issued < oldest->issued)) oldest = op;
        }
    }
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) {
        const ZeroOp* ops[2] = {&z->param_work[i].op, &z->grad_work[i].op};
        for (int k = 0; k < 2; k++)
            if (ops[k]->issued > 0 && cudaEventQuery(ops[k]->done) == cudaErrorNotReady && (oldest == NULL || ops[k]->issued < oldest->issued)) oldest = ops[k];
    }
    return oldest;
}

/*
 * The host waits until `event` has fired, polling with a clock (the GPU twin of zero_op_wait).
 * The host runs ahead of the GPU by up to a step, so the clock measures the time without
 * progress: it restarts whenever the oldest unfinished collective changes (one finished). Past
 * z->timeout_s without progress, that collective is named as zero_op_wait names a stuck MPI
 * request (rank, collective, unit, step), then the NCCL communicator and every rank are aborted.
 * With one rank there is nothing to wait for from peers: no timeout (CUDA errors still end it).
 */
static void zero_device_wait(ZeroEngine* z, cudaEvent_t event, const char* what) {
    double start = zero_clock(), last_look = start;
    long long oldest_seen = -1;
    long spins = 0;
    for (;;) {
        cudaError_t state = cudaEventQuery(event);
        if (state == cudaSuccess) break;
        if (state != cudaErrorNotReady) CUDA_CHECK(state);
        double now = zero_clock();
        if (z->world_size > 1 && now - last_look > 0.01) { // look at the collectives every 10 ms
            last_look = now;
            zero_check_comm_error(z);
            const ZeroOp* oldest = zero_oldest_unfinished_op(z);
            long long id = oldest != NULL ? oldest->issued : 0;
            if (id != oldest_seen) { oldest_seen = id; start = now; } // progress: restart the clock
            if (now - start > z->timeout_s) {
                if (oldest != NULL) {
                    zero_report_timeout(z, oldest, oldest->step, now - start);
                } else {
                    fprintf(stderr, "error: rank %d: waiting for the GPU (%s) at step %d waited %.1f s, longer than -wt %g s; "
                            "expected its kernels to finish (a kernel is stuck); aborting all ranks\n",
                            z->rank, what, z->step, now - start, z->timeout_s);
                }
                zero_abort_all_ranks(1);
            }
        }
        if (++spins > 100) { // after a short spin, let other processes (ranks sharing a GPU) run
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

// The host waits for everything queued so far on `stream` (timed).
static void zero_stream_synchronize(ZeroEngine* z, cudaStream_t stream, const char* what) {
    CUDA_CHECK(cudaEventRecord(z->gpu.host_mark, stream));
    zero_device_wait(z, z->gpu.host_mark, what);
}

// `waiter` runs nothing more until everything queued so far on `producer` is done.
static void zero_stream_after(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t mark) {
    CUDA_CHECK(cudaEventRecord(mark, producer));
    CUDA_CHECK(cudaStreamWaitEvent(waiter, mark, 0));
}

// The compute stream waits for `event` (recorded on the comm stream; a no-op if never
// recorded). The time it stands still there is exposed communication: an event pair on the
// compute stream brackets the wait (the first completes when compute's earlier work is done,
// the second when the awaited collective is too), read with the step's results
// (zero_stall_collect), in the current step's half of the pairs (stall_base). Past
// stall_capacity pairs in one step the waits go untimed.
static void zero_compute_wait(ZeroEngine* z, cudaEvent_t event) {
    int k = z->gpu.stall_count < z->gpu.stall_capacity ? z->gpu.stall_base + z->gpu.stall_count++ : -1;
    int traced = zero_trace_device_wait_begin(z); // -tr: this wait on the timeline (zero/trace/trace.h)
    if (k >= 0) CUDA_CHECK(cudaEventRecord(z->gpu.stall_begin[k], z->gpu.compute));
    CUDA_CHECK(cudaStreamWaitEvent(z->gpu.compute, event, 0));
    if (k >= 0) CUDA_CHECK(cudaEventRecord(z->gpu.stall_end[k], z->gpu.compute));
    zero_trace_device_wait_end(z, traced);
}

// The compute stream waits for op's collective (and what is queued behind it on comm).
static void zero_compute_wait_op(ZeroEngine* z, const ZeroOp* op) {
    zero_trace_device_wait_label(op->kind, op->unit);
    zero_compute_wait(z, op->done);
}

// Once the compute stream has passed them: the stalls timed in pairs [base, base + count), in seconds.
static double zero_stall_collect(ZeroEngine* z, int base, int count) {
    double seconds = 0.0;
    for (int k = base; k < base + count; k++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, z->gpu.stall_begin[k], z->gpu.stall_end[k]));
        seconds += ms / 1000.0;
    }
    return seconds;
}

// Between the engine's calls: NCCL's error state (cheap; the host does not wait here).
static void zero_device_progress(ZeroEngine* z) { zero_check_comm_error(z); }

// Everything queued on the compute stream, including what it waits for on the comm stream,
// is done: the host may read device results (losses, logits). Timed like every host wait.
static void zero_device_synchronize(ZeroEngine* z, const char* what) {
    zero_stream_after(z->gpu.compute, z->gpu.comm, z->gpu.comm_mark);
    zero_stream_synchronize(z, z->gpu.compute, what);
}

// ============================================================================================
// Device collectives on the comm stream

// Start a device collective on op: zero/comm.h's counting (zero_op_begin), and its issue order and
// step for the timeout diagnosis. The comm stream orders collectives on the same op, so a new
// one may be queued while the previous one is still pending.
static void zero_device_op_begin(ZeroEngine* z, ZeroOp* op, ZeroOpKind kind, int unit, const char* what, long long sent) {
    op->kind = ZERO_OP_NONE;
    zero_op_begin(z, op, kind, unit, what, sent);
    op->issued = ++z->gpu.ops_issued;
    op->step = z->step;
}

// Host buffers of one unit (the largest), for set-up, checkpoints and the MPI backend.
static void zero_host_staging(ZeroEngine* z, float** host_float, bf16** host_bf16) {
    if (z->gpu.host_float == NULL) {
        size_t n = 0;
        for (int u = 0; u < z->layout->num_units; u++)
            if (z->layout->units[u].padded_numel > n) n = z->layout->units[u].padded_numel;
        z->gpu.host_float = (float*)zero_calloc(n, sizeof(float), "host staging (fp32 unit)");
        z->gpu.host_bf16 = (bf16*)zero_calloc(n, sizeof(bf16), "host staging (bf16 unit)");
    }
    if (host_float) *host_float = z->gpu.host_float;
    if (host_bf16) *host_bf16 = z->gpu.host_bf16;
}

#if ZERO_COMM_MPI
// Host-staged collective: device bf16 -> host fp32 -> zero/comm.h's MPI collective (counted and
// timed there) -> bf16 -> device, on the comm stream; the host waits for each step of it.
static void zero_host_staged_collective(ZeroEngine* z, ZeroOpKind kind, const bf16* mine, bf16* buf, size_t n,
                                        int unit, const char* what) {
    size_t shard = n / (size_t)z->world_size, first = (size_t)z->rank * shard;
    float* host;
    bf16* host_half;
    zero_host_staging(z, &host, &host_half);
    // Down: the whole unit (all-reduce, reduce-scatter) or this rank's slice (all-gather).
    size_t down_at = kind == ZERO_OP_ALL_GATHER ? first : 0, down_n = kind == ZERO_OP_ALL_GATHER ? shard : n;
    const bf16* src = kind == ZERO_OP_ALL_GATHER && mine != NULL ? mine : buf + down_at;
    zero_stream_synchronize(z, z->gpu.comm, what); // the input is ready once the comm stream's queue is
    CUDA_CHECK(cudaMemcpy(host_half, src, down_n * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < down_n; i++) host[down_at + i] = __bfloat162float(host_half[i]);
    ZeroOp op = {.kind = ZERO_OP_NONE};
    if (kind == ZERO_OP_ALL_REDUCE) zero_op_all_reduce(z, &op, host, n, unit, what);
    else if (kind == ZERO_OP_REDUCE_SCATTER) zero_op_reduce_scatter(z, &op, host, n, unit, what);
    else zero_op_all_gather(z, &op, NULL, host, n, unit, what);
    zero_op_wait(z, &op);
    // Up: the whole unit, or (reduce-scatter) the rank's reduced slice, from where the MPI path
    // leaves it (zero_reduce_scatter_result) to its own place as NCCL's in-place reduce-scatter would.
    size_t up_from = kind == ZERO_OP_REDUCE_SCATTER ? (size_t)(zero_reduce_scatter_result(z, host, n) - host) : 0, up_to = kind == ZERO_OP_REDUCE_SCATTER ? first : 0, up_n = kind == ZERO_OP_REDUCE_SCATTER ? shard : n;
    for (size_t i = 0; i < up_n; i++) host_half[i] = __float2bfloat16(host[up_from + i]);
    CUDA_CHECK(cudaMemcpyAsync(buf + up_to, host_half, up_n * sizeof(bf16), cudaMemcpyHostToDevice, z->gpu.comm));
    zero_stream_synchronize(z, z->gpu.comm, what); // host_half is reused by the next collective
}
#endif

/*
 * One collective over a unit of n bf16 elements (n divisible by world_size; shard = n/world_size)
 * on the comm stream; op->done fires when it is complete. The caller has made the comm stream
 * wait for the input's producer.
 *   ZERO_OP_ALL_REDUCE      buf (n) summed over ranks, in place: 2n(N-1)/N elements sent
 *   ZERO_OP_REDUCE_SCATTER  buf (n) in; this rank's summed slice out at buf + rank*shard (NCCL's
 *                           in-place form): n(N-1)/N sent
 *   ZERO_OP_ALL_GATHER      every rank's slice (from `mine`, or already at buf + rank*shard when
 *                           mine is NULL) into buf (n): n(N-1)/N sent
 * With one rank nothing moves (an all-gather from elsewhere copies the slice into place).
 */
static void zero_device_collective(ZeroEngine* z, ZeroOp* op, ZeroOpKind kind, const bf16* mine, bf16* buf, size_t n,
                                   int unit, const char* what) {
    int N = z->world_size;
    size_t shard = n / (size_t)N;
    bf16* own = buf + (size_t)z->rank * shard;
    long long sent = kind == ZERO_OP_ALL_REDUCE ? zero_ring_all_reduce_elements(n, N)
                   : kind == ZERO_OP_REDUCE_SCATTER ? zero_ring_reduce_scatter_elements(n, N)
                   : zero_ring_all_gather_elements(n, N);
    int traced = N > 1 ? zero_trace_device_collective_begin(z) : -1; // -tr: its span on the timeline
    if (N == 1) {
        if (kind == ZERO_OP_ALL_GATHER && mine != NULL && mine != own)
            CUDA_CHECK(cudaMemcpyAsync(own, mine, shard * sizeof(bf16), cudaMemcpyDeviceToDevice, z->gpu.comm));
    } else {
#if ZERO_COMM_MPI
        zero_host_staged_collective(z, kind, mine, buf, n, unit, what); // counted by zero_op_*
        op->kind = kind, op->unit = unit, op->what = what, op->step = z->step;
#else
        zero_device_op_begin(z, op, kind, unit, what, sent);
        if (kind == ZERO_OP_ALL_REDUCE)
            NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, z->gpu.nccl, z->gpu.comm));
        else if (kind == ZERO_OP_REDUCE_SCATTER)
            NCCL_CHECK(ncclReduceScatter(buf, own, shard, ncclBfloat16, ncclSum, z->gpu.nccl, z->gpu.comm));
        else
            NCCL_CHECK(ncclAllGather(mine != NULL ? mine : own, buf, shard, ncclBfloat16, z->gpu.nccl, z->gpu.comm));
#endif
    }
    CUDA_CHECK(cudaEventRecord(op->done, z->gpu.comm));
    zero_trace_device_collective_end(z, traced, kind, unit, sent, what);
}

/*
 * Sum of n floats on the device (x, fp32) over all ranks, in place, ordered on the compute stream:
 * the optimizer's squared norms. NCCL: an all-reduce of n floats on the comm stream between two
 * event waits, so the host does not wait (the compute stream's wait is timed as exposed
 * communication). Host-staged MPI backend: the host waits for x, sums it with zero/comm.h's scalar
 * all-reduce (in double) and copies it back (a host stall, as every collective of that backend).
 * One rank: nothing to do. Not counted in the elements sent (a scalar collective).
 */
static void zero_device_all_reduce_floats(ZeroEngine* z, float* x, int n, const char* what) {
    if (z->world_size == 1) return;
#if ZERO_COMM_MPI
    float staged[8];
    double sums[8];
    if (n > 8) { fprintf(stderr, "error: internal: zero_device_all_reduce_floats of %d > 8 floats\n", n); zero_abort_all_ranks(1); }
    CUDA_CHECK(cudaMemcpyAsync(staged, x, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, z->gpu.compute));
    zero_stream_synchronize(z, z->gpu.compute, what);
    for (int i = 0; i < n; i++) sums[i] = staged[i];
    zero_all_reduce_sum_doubles(z, sums, n, what);
    for (int i = 0; i < n; i++) staged[i] = (float)sums[i];
    CUDA_CHECK(cudaMemcpyAsync(x, staged, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, z->gpu.compute));
    zero_stream_synchronize(z, z->gpu.compute, what); // staged is on this stack frame
#else
    (void)what;
    z->scalar_all_reduces_step++;
    zero_stream_after(z->gpu.comm, z->gpu.compute, z->gpu.compute_mark);
    int traced = zero_trace_device_collective_begin(z); // -tr: its span and the wait for it
    NCCL_CHECK(ncclAllReduce(x, x, (size_t)n, ncclFloat32, ncclSum, z->gpu.nccl, z->gpu.comm));
    CUDA_CHECK(cudaEventRecord(z->gpu.comm_mark, z->gpu.comm));
    zero_trace_device_collective_end(z, traced, ZERO_OP_SCALAR_ALL_REDUCE, -1, 0, what);
    zero_trace_device_wait_label(ZERO_OP_SCALAR_ALL_REDUCE, -1);
    zero_compute_wait(z, z->gpu.comm_mark);
#endif
}

#endif // ZERO_COMM_GPU_CUH
