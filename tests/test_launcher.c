/*
 * test_launcher.c: the pure parts of multi-node start-up. zero/cluster/launcher.h: which environment
 * variable each launcher sets is read, in order, malformed values are ignored, and the device rule
 * (local rank's GPU; device 0 when a task sees one GPU; else none). zero/cluster/handshake.h: the
 * fingerprint names the first differing field, and a longer or shorter fingerprint differs.
 * zero/cluster/handshake.h's cluster arithmetic: local rank, host count, host leader and the ring edges
 * leaving a host for a block and a round-robin placement. No MPI call is made.
 * Prints PASS/FAIL lines; exits 1 on any failure.
 */
#include "zero.cuh"

static int failures = 0;
static void report(int ok, const char* name, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
}

static const char* const all_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                       "PMI_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "SLURM_NTASKS"};
static void clear_env(void) { for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++) unsetenv(all_vars[i]); }

// The cluster fields for `world` ranks on the given hosts, as rank `rank` computes them.
static ZeroCluster cluster_for(const char* const* hosts, int world, int rank) {
    static char names[16][ZERO_HOST_CHARS];
    for (int r = 0; r < world; r++) snprintf(names[r], ZERO_HOST_CHARS, "%s", hosts[r]);
    zero_cluster.world_size = world;
    zero_cluster.rank = rank;
    snprintf(zero_cluster.host, sizeof(zero_cluster.host), "%s", hosts[rank]);
    zero_cluster.hosts = names;
    zero_cluster_from_hosts();
    ZeroCluster c = zero_cluster;
    zero_cluster.hosts = NULL;
    return c;
}

int main(void) {
    char why[2048];
    const char* which = NULL;
    clear_env();
    report(launcher_world_size(&which) == -1 && which == NULL && launcher_rank(NULL) == -1 && launcher_local_rank(NULL) == -1,
           "launcher_nothing_set_means_no_launcher", "a variable was read with none set");
    // Slurm's allocation size alone (a batch script's environment) is not a step of N tasks.
    setenv("SLURM_NTASKS", "8", 1);
    report(launcher_world_size(NULL) == -1, "launcher_slurm_ntasks_alone_is_not_a_step", "SLURM_NTASKS was taken as the step's task count");
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_LOCALID", "1", 1);
    int tasks = launcher_world_size(&which);
    snprintf(why, sizeof(why), "tasks %d from %s, rank %d, local %d", tasks, which ? which : "-", launcher_rank(NULL), launcher_local_rank(NULL));
    report(tasks == 4 && which && strcmp(which, "SLURM_STEP_NUM_TASKS") == 0 && launcher_rank(NULL) == 3 && launcher_local_rank(NULL) == 1,
           "launcher_srun_variables_read", why);
    // Open MPI's mpirun sets its own; they come first (an mpirun inside a Slurm allocation).
    setenv("OMPI_COMM_WORLD_SIZE", "16", 1);
    setenv("OMPI_COMM_WORLD_RANK", "9", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
    LauncherView v = launcher_view();
    snprintf(why, sizeof(why), "tasks %d (%s), rank %d (%s), local %d (%s)", v.tasks, v.tasks_var, v.task, v.task_var, v.local_rank, v.local_var);
    report(v.tasks == 16 && v.task == 9 && v.local_rank == 5 && strcmp(v.local_var, "OMPI_COMM_WORLD_LOCAL_RANK") == 0,
           "launcher_open_mpi_variables_first", why);
    clear_env();
    setenv("MPI_LOCALRANKID", "2", 1);
    setenv("PMI_SIZE", "x3", 1); // malformed: ignored
    setenv("PMIX_RANK", "7", 1);
    snprintf(why, sizeof(why), "local %d, tasks %d, rank %d", launcher_local_rank(NULL), launcher_world_size(NULL), launcher_rank(NULL));
    report(launcher_local_rank(NULL) == 2 && launcher_world_size(NULL) == -1 && launcher_rank(NULL) == 7 && launcher_started_task(),
           "launcher_hydra_pmix_variables_malformed_ignored", why);
    clear_env();

    // The device rule.
    int cases[][3] = {{0, 8, 0}, {7, 8, 7}, {1, 1, 0}, {5, 1, 0}, {2, 2, -1}, {0, 0, -1}, {-1, 4, -1}};
    int ok = 1;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = launcher_device_for(cases[i][0], cases[i][1]);
        if (got != cases[i][2]) { ok = 0; snprintf(why, sizeof(why), "local rank %d of %d GPUs -> %d, expected %d", cases[i][0], cases[i][1], got, cases[i][2]); }
    }
    report(ok, "launcher_device_local_rank_or_device0_for_one_visible_gpu", why);

    // The fingerprint: the first differing field, by position.
    ZeroFingerprint a = {"", 0}, b = {"", 0}, c = {"", 0};
    zero_fingerprint_add(&a, "ZeRO stage", "%d", 1);
    zero_fingerprint_add(&a, "-b", "%d", 3);
    zero_fingerprint_add(&a, "-o", "%s", "/x\twith tab"); // tabs and newlines cannot split a field
    memcpy(&b, &a, sizeof(a));
    memcpy(&c, &a, sizeof(a));
    zero_fingerprint_add(&b, "-l", "%g", 1e-3);
    b.text[strlen("ZeRO stage\t1\n-b\t")] = '4';
    char name[128], value[1024];
    int k = zero_fingerprint_first_difference(a.text, b.text);
    zero_fingerprint_field(b.text, k, name, sizeof(name), value, sizeof(value));
    snprintf(why, sizeof(why), "first difference %d (%s = %s)", k, name, value);
    report(k == 1 && strcmp(name, "-b") == 0 && strcmp(value, "4") == 0 && zero_fingerprint_first_difference(a.text, c.text) == -1,
           "fingerprint_first_differing_field_named", why);
    k = zero_fingerprint_first_difference(a.text, (zero_fingerprint_add(&c, "-l", "%g", 1e-3), c.text));
    zero_fingerprint_field(a.text, 2, name, sizeof(name), value, sizeof(value));
    snprintf(why, sizeof(why), "extra field at %d; field 2 = '%s'", k, value);
    report(k == 3 && strcmp(value, "/x with tab") == 0, "fingerprint_extra_field_differs", why);

    // Where the ranks run: block placement (mpirun's default) and round robin.
    const char* block[] = {"node0", "node0", "node1", "node1"};
    const char* robin[] = {"node0", "node1", "node0", "node1"};
    ZeroCluster c2 = cluster_for(block, 4, 2), c1 = cluster_for(block, 4, 1), c3 = cluster_for(robin, 4, 2);
    snprintf(why, sizeof(why), "block rank 2: local %d/%d hosts %d leader %d edges %d; rank 1: leader %d; robin rank 2: local %d edges %d",
             c2.local_rank, c2.local_size, c2.num_hosts, c2.host_leader, c2.ring_edges_leaving_host, c1.host_leader, c3.local_rank,
             c3.ring_edges_leaving_host);
    report(c2.local_rank == 0 && c2.local_size == 2 && c2.num_hosts == 2 && c2.host_leader && c2.ring_edges_leaving_host == 1 &&
           !c1.host_leader && c3.local_rank == 1 && c3.ring_edges_leaving_host == 2, "cluster_local_rank_hosts_and_ring_edges", why);
    return failures ? 1 : 0;
}
