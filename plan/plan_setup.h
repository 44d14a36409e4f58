/*
 * plan/plan_setup.h: the --plan entry of ./plan_gpt2 (plan/plan_gpt2.c): the model from -e
 * (a depth descriptor or a model file's header), the batch (-b -t -d) and the world (-np, -rpn)
 * into a PlanModel, the machine from --plan MACHINE; plan_gpt2 fills in what only the planned
 * build knows (element sizes, its activation bytes, its attention, this CPU's measured rates) and
 * plan/plan.h prints the plan. No rank is started, no GPU touched, no file but -e read.
 * Host C; include after zero.cuh.
 */
#ifndef PLAN_PLAN_SETUP_H
#define PLAN_PLAN_SETUP_H
#ifndef ZERO_CUH
#error "include zero.cuh before plan/plan_setup.h"
#endif
#include "common/args.h"
#include "common/model_file.h"

// The trainer's part: fill pm's build fields (element_bytes ... flops_per_token) and, for the
// cpu machine (is_cpu), the machine's measured rates. pm->config, B, T, A and N are set.
typedef void (*PlanFillBuild)(PlanModel* pm, const ParamLayout* layout, PlanMachine* m, int is_cpu);

// --plan: print the plan for stages 0-3, the ZeRO++ rows when asked (-qw -hp -qg -qgb -qb -qbg: that
// row; -pz 1 alone: the usual ones, with -qb's and -qbg's blocks), the offload rows when asked
// (-zo, -zp, -zd), the JSON rows with -pj, and return the exit status (0; 1 on a bad flag or when no stage fits).
static int plan_run(const TrainArgs* a, PlanFillBuild fill) {
    LauncherView launched = launcher_view(); // mpirun -np K --plan: K copies of one plan, racing for one -tr file
    if (launched.tasks > 1) {
        if (launched.task <= 0)
            fprintf(stderr, "error: --plan: started as %d tasks (%s); expected one process (a plan starts no rank: -np N plans N)\n",
                    launched.tasks, launched.tasks_var);
        return 1;
    }
    GPT2Config cfg;
    if (gpt2_config_from_descriptor(a->init, &cfg) != 0) {
        const char* init = a->init;
        if (init[0] == 'd' && init[1] >= '0' && init[1] <= '9' && strchr(init, '.') == NULL && strchr(init, '/') == NULL) {
            fprintf(stderr, "error: -e %s: unknown depth descriptor; expected d1, d2, d3, d4, d6, d12, d24, d36, d48 or a model file\n", init);
            return 1;
        }
        int version;
        model_file_read_header(init, &cfg, &version);
    }
    if (a->T > cfg.max_seq_len) {
        fprintf(stderr, "error: -t %d: longer than the model's max sequence length; expected T <= %d\n", a->T, cfg.max_seq_len);
        return 1;
    }
    int N = a->plan_world_size == -1 ? 1 : a->plan_world_size;
    if (N < 1) { fprintf(stderr, "error: -np %d: expected at least 1 rank\n", N); return 1; }
    if (a->total_batch_tokens == TOTAL_BATCH_AUTO) {
        fprintf(stderr, "error: -d auto: a plan is for one batch; expected -d TOKENS (a multiple of B*T*ranks) or -1\n");
        return 1;
    }
    long long per_micro = (long long)a->B * a->T * N;
    long long total = a->total_batch_tokens == -1 ? per_micro : a->total_batch_tokens;
    if (total % per_micro != 0) {
        fprintf(stderr, "error: -d %lld: not a multiple of B*T*ranks = %d*%d*%d = %lld; expected a multiple of %lld\n", total, a->B,
                a->T, N, per_micro, per_micro);
        return 1;
    }
    PlanMachine m;
    int is_cpu = 0;
    if (plan_machine_parse(a->plan_machine, &m, &is_cpu) != 0) return 1;
    if (a->plan_ranks_per_node > 0) m.ranks_per_node = a->plan_ranks_per_node;
    PlanModel pm;
    memset(&pm, 0, sizeof(pm));
    pm.config = &cfg;
    pm.B = a->B;
    pm.T = a->T;
    pm.grad_accum_steps = (int)(total / per_micro);
    pm.world_size = N;
    ParamLayout layout;
    param_layout_build(&layout, &cfg, N, ZERO_ALIGN);
    fill(&pm, &layout, &m, is_cpu);
    param_layout_free(&layout);
    PlanPPFlags pp = {a->zeropp_qw || a->zeropp_qg || a->zeropp_hp != 1, a->zeropp_qw, a->zeropp_qg, a->zeropp_qg_bits, a->zeropp_hp,
                      a->zeropp_block, a->zeropp_grad_block};
    char err[512];
    if (zero_pp_check_flags(pp.qw, pp.qg, pp.qg_bits, pp.hp, pp.block, 3, 0, err, sizeof(err)) != 0) { // ZeRO++ rows are stage 3's
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (a->trace_path != NULL) { // the predicted timelines are written beside the rows: find out first that they can be
        char path[4300], probe[4400];
        plan_trace_path(a->trace_path, "stage0", path, sizeof(path));
        snprintf(probe, sizeof(probe), "%s.tmp", path);
        FILE* f = fopen(probe, "w");
        if (f == NULL) {
            fprintf(stderr, "error: -tr %s: cannot create %s (%s); expected a writable path\n", a->trace_path, probe, strerror(errno));
            return 1;
        }
        fclose(f);
        remove(probe);
    }
    // hpZ's groups against the planned world, before any row is printed (plan_pp_init's rule).
    int rpn = m.ranks_per_node > 0 && m.ranks_per_node < N ? m.ranks_per_node : N;
    if (pp.hp == 0 && N % rpn != 0) {
        fprintf(stderr, "error: -hp 0: %d ranks per node do not divide the %d ranks; expected -hp K with K dividing %d\n", rpn, N, N);
        return 1;
    }
    if (pp.hp > 1 && N % pp.hp != 0) {
        fprintf(stderr, "error: -hp %d: does not divide the %d ranks; expected a divisor of %d (ranks per secondary group)\n", pp.hp, N, N);
        return 1;
    }
    if (rpn < N && N % rpn != 0) { // the last node would hold fewer ranks than the others: not the machine planned
        fprintf(stderr, "error: -np %d: not whole nodes of %d ranks; expected a multiple of %d, or -rpn K with K dividing %d\n", N, rpn, rpn, N);
        return 1;
    }
    // Offload (-zo, -zp, -zd; -z S: that stage's row only): the engine's checks, before any row. A plan
    // needs no -zd (nothing is written); given, its free space says whether the files fit.
    PlanOffloadFlags off = {0, ZERO_PLACE_NONE, ZERO_PLACE_NONE, a->zero_stage, a->offload_dir};
    zero_placement_parse(a->offload_optimizer, &off.optimizer); // values checked in train_args_validate
    zero_placement_parse(a->offload_params, &off.params);
    off.given = off.optimizer != ZERO_PLACE_NONE || off.params != ZERO_PLACE_NONE || a->offload_dir != NULL;
    if (off.given) {
        int nvme = off.optimizer == ZERO_PLACE_NVME || off.params == ZERO_PLACE_NVME;
        ZeroOffloadArgs oa = {off.optimizer, off.params, a->offload_dir ? a->offload_dir : nvme ? "(none: a plan)" : NULL};
        if (zero_offload_check_args(&oa, off.stage >= 0 ? off.stage : 3, err, sizeof(err)) != 0) { fprintf(stderr, "%s\n", err); return 1; }
        if (m.gpu_build && oa.params != ZERO_PLACE_NONE && oa.optimizer == ZERO_PLACE_NONE) { // zero_offload_gpu_check_args's rule
            fprintf(stderr, "error: -zp %s: in the GPU build the parameter shard is updated where the optimizer runs; expected -zo cpu or -zo nvme with it\n",
                    zero_placement_names[oa.params]);
            return 1;
        }
        if (m.gpu_build) {
            // The cpu machine has no host<->device link and no host AdamW rate (the host is the device):
            // the GPU build's rows would divide by its 0 GB/s (they printed -nan ms). Given both, they plan.
            if (m.pcie_bw <= 0.0 || m.host_bw <= 0.0) {
                fprintf(stderr, "error: --plan %s: the GPU build's offload rows need a host<->device and a host AdamW rate; "
                        "expected pcie_gbs= and host_gbs= with it (or h100, h200)\n", a->plan_machine);
                return 1;
            }
        }
        // A -zd the run would refuse (zero_offload_setup) is refused here too, not planned with the
        // bench's rates: it must be a directory the files (and the disk probe) can be created in.
        struct stat st;
        const char* why = NULL;
        if (a->offload_dir != NULL) {
            if (stat(a->offload_dir, &st) != 0) why = strerror(errno);
            else if (!S_ISDIR(st.st_mode)) why = "not a directory";
            else if (access(a->offload_dir, W_OK | X_OK) != 0) why = strerror(errno); // EROFS on a read-only mount, root too
        }
        if (why != NULL) {
            fprintf(stderr, "error: -zd %s: %s; expected an existing, writable directory (on an NVMe disk)\n", a->offload_dir, why);
            return 1;
        }
    }
    // -pj: the JSON rows to a file (written under a temporary name, renamed once whole) or stdout.
    char json_path[4300], json_tmp[4400];
    plan_json_out = NULL;
    if (a->plan_json != NULL && strcmp(a->plan_json, "-") == 0) plan_json_out = stdout;
    else if (a->plan_json != NULL) {
        snprintf(json_path, sizeof(json_path), "%s", a->plan_json);
        snprintf(json_tmp, sizeof(json_tmp), "%s.tmp", a->plan_json);
        plan_json_out = fopen(json_tmp, "w");
        if (plan_json_out == NULL) {
            fprintf(stderr, "error: -pj %s: cannot create %s (%s); expected a writable path\n", a->plan_json, json_tmp, strerror(errno));
            return 1;
        }
    }
    // The ZeRO++ rows when asked: -pz 1 (the usual ones) or a ZeRO++ flag (that row).
    int status = plan_print(&pm, &m, a->init, a->trace_path, a->plan_zeropp || pp.given ? &pp : NULL, &off, stdout);
    if (plan_json_out != NULL && plan_json_out != stdout) {
        int bad = ferror(plan_json_out) | fclose(plan_json_out);
        if (bad || rename(json_tmp, json_path) != 0) {
            fprintf(stderr, "error: -pj %s: cannot write it (%s); expected a writable path with room\n", a->plan_json, strerror(errno));
            remove(json_tmp);
            return 1;
        }
    }
    plan_json_out = NULL;
    return status;
}

#endif // PLAN_PLAN_SETUP_H
