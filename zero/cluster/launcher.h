/*
 * zero/cluster/launcher.h: what the launcher (mpirun, srun, mpiexec) tells each process through its
 * environment, readable before MPI starts (plain C, libc only, no MPI: a build without MPI can
 * use it to notice that it was launched as several tasks).
 *
 *   launcher_world_size  tasks the launcher started: OMPI_COMM_WORLD_SIZE (Open MPI's mpirun),
 *                        PMI_SIZE (MPICH/Hydra, Slurm's PMI-2), SLURM_STEP_NUM_TASKS (srun;
 *                        SLURM_NTASKS alone is the allocation's, set in batch scripts too)
 *   launcher_rank        this task's rank: OMPI_COMM_WORLD_RANK, PMIX_RANK (PMIx: mpirun, srun
 *                        --mpi=pmix), PMI_RANK, SLURM_PROCID
 *   launcher_local_rank  its rank among the tasks on this node: OMPI_COMM_WORLD_LOCAL_RANK,
 *                        MPI_LOCALRANKID (Hydra), MV2_COMM_WORLD_LOCAL_RANK (MVAPICH), SLURM_LOCALID
 * Each returns -1 when no launcher variable is set, and names the variable it read in *which.
 * Sources: Open MPI mpirun(1) "Environment variables"; Slurm srun(1) "OUTPUT ENVIRONMENT
 * VARIABLES"; the PMIx standard, sec. "PMIx_Init" (PMIX_RANK).
 *
 * launcher_device_for: the GPU a rank uses, from its local rank and the GPUs it can see: its
 * local rank when there are that many; device 0 when the launcher gave each task one GPU
 * (srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per task: every task sees one device,
 * whatever its local rank); -1 (an error for the caller to name) otherwise.
 */
#ifndef ZERO_LAUNCHER_H
#define ZERO_LAUNCHER_H
#include <stdlib.h>

// The first of `names` set to an integer >= 0 in the environment, or -1; *which gets its name.
static int launcher_env_int(const char* const* names, int count, const char** which) {
    for (int i = 0; i < count; i++) {
        const char* value = getenv(names[i]);
        if (value == NULL || *value == '\0') continue;
        char* end = NULL;
        long v = strtol(value, &end, 10);
        if (end == value || *end != '\0' || v < 0 || v > 1 << 30) continue;
        if (which) *which = names[i];
        return (int)v;
    }
    if (which) *which = NULL;
    return -1;
}

static int launcher_world_size(const char** which) {
    static const char* const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    return launcher_env_int(names, 3, which);
}

static int launcher_rank(const char** which) {
    static const char* const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    return launcher_env_int(names, 4, which);
}

static int launcher_local_rank(const char** which) {
    static const char* const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
    return launcher_env_int(names, 4, which);
}

// What the launcher said, read once before MPI starts (an MPI singleton sets Open MPI's own
// variables in MPI_Init, so they are only the launcher's before it).
typedef struct {
    int tasks, task, local_rank;                   // -1: not said
    const char *tasks_var, *task_var, *local_var;  // which variable said it
} LauncherView;

static LauncherView launcher_view(void) {
    LauncherView v;
    v.tasks = launcher_world_size(&v.tasks_var);
    v.task = launcher_rank(&v.task_var);
    v.local_rank = launcher_local_rank(&v.local_var);
    return v;
}

// Was this process started by a launcher as one of a job's tasks (any rank variable set)?
static int launcher_started_task(void) { return launcher_rank(NULL) >= 0 || launcher_world_size(NULL) >= 0; }

// The device for local_rank (>= 0) among device_count visible GPUs (header comment), or -1.
static int launcher_device_for(int local_rank, int device_count) {
    if (device_count < 1 || local_rank < 0) return -1;
    if (local_rank < device_count) return local_rank;
    if (device_count == 1) return 0;
    return -1;
}

#endif // ZERO_LAUNCHER_H
