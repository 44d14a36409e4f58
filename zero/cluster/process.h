/*
 * zero/cluster/process.h: starting the ranks, the first step of the recipe (train/train_setup.h):
 * MPI starts (bounded by -wt), each rank learns who it is and checks that against the launcher's
 * word, and the fault handlers are installed. Part of the ZeRO engine (the map is in zero.cuh).
 * Process life owns the cluster files beside it (faults, handshake, run lock): they come before
 * it and none calls communication's ending functions but through zero/comm_mpi.h, where the ranks
 * end (zero_ranks_stop, zero_abort_all_ranks) with the clean-ups these files register. The GPU
 * build's start also picks each rank's device (zero/gpu/comm_gpu.cuh); both call zero_ranks_started.
 */
#ifndef ZERO_PROCESS_H
#define ZERO_PROCESS_H
#ifndef ZERO_CUH
#error "zero/cluster/process.h is part of the ZeRO engine; include zero.cuh"
#endif

// Once MPI has started (zero_ranks_start, both builds, which read zero_cluster.launcher before
// MPI_Init): who this rank is, the launcher's word against MPI's, each rank's line when the job
// ends under it (zero/cluster/faults.h).
static void zero_ranks_started(int rank, int world_size) {
    zero_cluster_set_rank(rank, world_size);
    const char* which = zero_cluster.launcher.tasks_var;
    int tasks = zero_cluster.launcher.tasks;
    if (world_size == 1 && tasks > 1) {
        // srun without PMI, or an MPI the launcher cannot talk to: N copies of a one-rank job,
        // each training alone. The launcher's task 0 says so; every task exits 1.
        if (zero_cluster.launcher.task <= 0)
            fprintf(stderr, "error: %s=%d: the launcher started %d tasks, but MPI sees a world of 1 in each (host %s); expected one "
                    "MPI job: under Slurm srun --mpi=pmix (srun --mpi=list shows what Slurm offers), or mpirun (README, \"Many nodes\")\n",
                    which, tasks, tasks, zero_cluster.host);
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) MPI_Finalize();
        exit(1);
    }
    zero_faults_install();
}

#if !ZERO_GPU_BUILD
// Start the ranks: under mpirun each process learns its rank; run directly, MPI starts as a
// singleton (world size 1). OpenMP threads never call MPI; the progress thread
// (zero/progress_cpu.h) does, beside the main thread, hence MULTIPLE (without it: no thread).
static void zero_ranks_start(int* argc, char*** argv, int* rank, int* world_size) {
    zero_cluster.launcher = launcher_view(); // before MPI_Init, which sets variables of its own
    int provided;
    // MPI_Init returns once every rank called it: bounded by -wt (zero/cluster/startup_watchdog.h).
    zero_startup_watchdog_arm("MPI_Init", zero_cluster.timeout_s, "a rank did not start or is stalled");
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    zero_startup_watchdog_disarm();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); // MPI_CHECK reports, then aborts
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world_size));
    zero_ranks_started(*rank, *world_size);
}
#endif

#endif // ZERO_PROCESS_H
