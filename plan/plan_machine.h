/*
 * plan/plan_machine.h: the planner's machine (--plan MACHINE): device FLOP/s and memory, the
 * links within and across nodes (bandwidth, latency per ring step), presets for H100/H200 nodes
 * and this CPU, and the key=value overrides. Part of the planner (the overview
 * in plan/plan.h).
 */
#ifndef ZERO_PLAN_MACHINE_H
#define ZERO_PLAN_MACHINE_H
#ifndef ZERO_CUH
#error "plan/plan_machine.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

typedef struct {
    char name[800];
    double peak_flops;     // per device (MFU's denominator): bf16 dense tensor cores, or the measured sgemm rate
    double gemm_eff;       // fraction of peak_flops the GEMMs run at
    double mem_bw;         // bytes/s per device for element-wise ops and the optimizer
    double memory;         // bytes per device (CPU: the host's memory, shared by its ranks)
    double reserve;        // bytes per device the runtime takes besides the engine and activations
    int ranks_per_node;
    double intra_bw, intra_lat; // within a node: bytes/s per rank (a ring edge), seconds per ring step
    double inter_bw, inter_lat; // across nodes: bytes/s per node (all its NICs), seconds per ring step
    int cores, threads_per_rank; // CPU: ranks on one node share its cores; 0 on a GPU
    int reduce_on_cpu;     // ring reductions (adding a received chunk) run on the CPU at mem_bw
    int hosts_here;        // CPU: nodes simulated on this one machine (tests/cluster.sh), their ranks sharing its cores
    // The slowest rank's rates measured while the ranks that share its cores run at once (cpu:
    // plan/measure.h's measure_rank_rates; a step waits for its slowest rank), with how many ran;
    // 0: derive them from peak_flops, gemm_eff, mem_bw and the cores' share (plan_rank_rates,
    // plan/plan_compute.h).
    double rank_flops, rank_mem_bw;
    int rank_rates_ranks;
    double quant_bw;       // ZeRO++'s (de)quantize passes, bytes/s streamed (quant_gbs); 0: measured (cpu) or the memory rate
    // The network stack's CPU: seconds of CPU per byte a rank sends, the sender's and the
    // receiver's together (net_cpu_ns; plan/plan_comm.h charges it to the node's cores). 0: the
    // bytes move without the host CPU (RDMA, NVLink); < 0: the cpu preset's default (plan_net_cpu).
    double net_cpu;
    // cpu: the work besides the big GEMMs timed at the plan's shapes by one rank alone on its
    // threads (plan/measure_ops.h): one layer's forward and backward, the classifier over the whole
    // vocabulary forward and backward (seconds), the optimizer per owned element and the
    // gradients' zeroing per element (seconds). 0 (ops_measured 0): bytes at mem_bw instead.
    int ops_measured;
    double op_layer_fwd_s, op_layer_bwd_s, op_head_fwd_s, op_head_bwd_s, op_optimizer_s, op_zero_grads_s;
    // Offload (plan/plan_offload.h): the node's NVMe read and write rates (bytes/s, shared by its
    // ranks), host<->device per GPU (bytes/s per direction, nominal, and the fraction achieved),
    // the host's streaming rate for host AdamW and checksums (bytes/s per node, shared by its
    // ranks; cpu: 0, the trainer's measured optimizer and checksum), the host's memory (bytes per
    // node; cpu: memory).
    double nvme_read_bw, nvme_write_bw, pcie_bw, pcie_eff, host_bw, host_memory;
    int nvme_given;        // nvme_read_gbs or nvme_write_gbs given (cpu: else measured in -zd when given)
    // Which build's layout is planned: 1 the GPU build's (bf16 parameters and micro-step gradients,
    // fp32 accumulated gradients, master weights and Adam state: zero/gpu/engine_gpu.cuh), 0 the
    // CPU build's (fp32 throughout). The preset's (h100, h200: 1; cpu: 0) unless gpu_build= is given.
    int gpu_build;
} PlanMachine;

/*
 * Presets (nominal datasheet values; the efficiencies are assumptions, each overridable):
 *   h100  node of 8 x H100 SXM 80 GB: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3; NVLink 4 450 GB/s
 *         per GPU per direction; 8 x 400 Gb/s InfiniBand NDR per node (400 GB/s); latencies
 *         1 us (NVLink) and 5 us (IB) per ring step (assumed)
 *   h200  the same node with H200 SXM 141 GB, 4.8 TB/s HBM3e
 *   cpu   this machine (filled in by the CPU trainer: measured sgemm rate and memory bandwidth,
 *         its cores, threads per rank from OMP_NUM_THREADS; when ranks share its cores, the
 *         rates one rank gets with all of them running at once, plan/measure.h); ranks on one host talk through
 *         Open MPI's shared memory: 3 GB/s and 60 us per ring step are assumptions (a copy at
 *         memory speed, the progress thread's 50 us poll); dev/bench/plan_check.sh prints the
 *         bandwidth the trace shows the collectives achieving beside them (far lower when the
 *         ranks' cores are busy: the ring advances only when a progress thread gets a core)
 *         The network stack's CPU (net_cpu_ns): 0 on the GPU presets; cpu: plan_net_cpu below.
 * GEMM efficiency on the GPUs: 0.7 of peak (assumed; gpu_check.sh measures it when a GPU is
 * at hand), element-wise kernels at 0.8 of the memory bandwidth (assumed).
 * Offload (assumptions, each overridable): h100/h200 nodes as a DGX H100's, 8 PCIe Gen4 NVMe data
 * drives per node at 6.5 GB/s read and 3.5 GB/s write each (datacenter Gen4 drives' datasheet
 * class; striped, so one rank alone gets all 8), PCIe Gen5 x16 per GPU, 63 GB/s per direction
 * nominal at an assumed 0.8, 2 TiB of host memory per node, and 200 GB/s of host memory rate per
 * node for host AdamW, shared by its ranks (two sockets of 8-channel DDR5-4800, 2 x 307 GB/s
 * nominal, about a third achieved by a streaming update: assumed). cpu: this machine's virtio disk as
 * dev/bench/nvme_bench.sh measured it at the optimizer stream's depth 2 with io_uring (README:
 * 281 MB/s read, 218 MB/s rewrite), one disk shared by the host's ranks.
 */
static int plan_machine_preset(const char* name, PlanMachine* m) {
    memset(m, 0, sizeof(*m));
    if (strcmp(name, "h100") == 0 || strcmp(name, "h200") == 0) {
        int h200 = name[3] == '2';
        m->gpu_build = 1;
        snprintf(m->name, sizeof(m->name), "%s: nodes of 8 x %s SXM, NVLink 4 + 8 x 400 Gb/s InfiniBand", name, h200 ? "H200" : "H100");
        m->peak_flops = 989e12;
        m->gemm_eff = 0.7;
        m->mem_bw = (h200 ? 4.8e12 : 3.35e12) * 0.8;
        m->memory = h200 ? 141e9 : 80e9;
        m->reserve = 2.0 * 1073741824.0; // CUDA context, cuBLASLt workspace, NCCL buffers (assumed)
        m->ranks_per_node = 8;
        m->intra_bw = 450e9;
        m->intra_lat = 1e-6;
        m->inter_bw = 8 * 400e9 / 8;
        m->inter_lat = 5e-6;
        m->net_cpu = 0.0; // NVLink and InfiniBand RDMA move the bytes without the host CPU
        m->nvme_read_bw = 8 * 6.5e9;
        m->nvme_write_bw = 8 * 3.5e9;
        m->pcie_bw = 63e9;
        m->pcie_eff = 0.8;
        m->host_bw = 200e9;
        m->host_memory = 2048.0 * 1073741824.0;
        return 0;
    }
    if (strcmp(name, "cpu") == 0) {
        snprintf(m->name, sizeof(m->name), "cpu: this machine");
        m->gemm_eff = 1.0; // peak_flops is the measured sgemm rate itself
        m->ranks_per_node = 0; // all ranks on this host unless -rpn says otherwise
        m->intra_bw = 3.0e9;   // Open MPI shared memory, one rank's ring edge (assumed; see above)
        m->intra_lat = 60e-6;  // a ring step waits for the progress thread's poll (50 us, zero/progress_cpu.h)
        m->inter_bw = 1e9 / 8; // 1 Gbit/s Ethernet unless overridden
        m->inter_lat = 100e-6;
        m->reduce_on_cpu = 1;
        m->net_cpu = -1.0;     // plan_net_cpu: TCP's measured cost across nodes, 0 within one
        m->nvme_read_bw = 281e6;  // dev/bench/nvme_bench.sh, io_uring at depth 2 (README "NVMe I/O")
        m->nvme_write_bw = 218e6; // its rewrite pass: every step after the first rewrites the file
        m->pcie_bw = 0.0;         // the host is the device: no copies
        m->pcie_eff = 1.0;
        return 0;
    }
    return -1;
}

/*
 * What strtok_r in plan_machine_parse would hide: an empty item ("cpu,,", "h100,": it skips
 * them), a key given twice (the last would win unseen) and a spec longer than its buffer (cut
 * short, so a number would silently change). Returns 0, or -1 after the error line.
 */
static int plan_machine_check_items(const char* spec, size_t cap) {
    size_t n = strlen(spec);
    if (n >= cap) {
        fprintf(stderr, "error: --plan %.64s...: %zu characters; expected at most %zu\n", spec, n, cap - 1);
        return -1;
    }
    for (const char* item = spec; item != NULL;) {
        const char* comma = strchr(item, ',');
        size_t len = comma ? (size_t)(comma - item) : strlen(item);
        if (len == 0) {
            fprintf(stderr, "error: --plan %s: an empty item (\",,\" or a trailing or leading comma); expected MACHINE,key=value,...\n", spec);
            return -1;
        }
        const char* eq = (const char*)memchr(item, '=', len);
        size_t key = eq ? (size_t)(eq - item) : 0;
        for (const char* prev = spec; key > 0 && prev < item;) { // the same key in an earlier item
            const char* pc = strchr(prev, ',');
            if (strncmp(prev, item, key + 1) == 0) {
                fprintf(stderr, "error: --plan %s: key '%.*s' given twice; expected each key once\n", spec, (int)key, item);
                return -1;
            }
            prev = pc + 1;
        }
        item = comma ? comma + 1 : NULL;
    }
    return 0;
}

/*
 * MACHINE: a preset name, then optional key=value overrides, comma-separated, e.g.
 * "h100,gemm_eff=0.6" or "cpu,rpn=1,inter_gbit=0.1". Keys: peak_tflops, gemm_eff, mem_gbs (GB/s),
 * mem_gib (device memory), reserve_gib, rpn (ranks per node), intra_gbs (GB/s per rank),
 * intra_us, inter_gbit (Gbit/s per node), inter_us, inter_eff (payload fraction of the link
 * rate), cores (per node), threads (per rank), hosts_here (cpu: how many of the nodes are
 * simulated on this machine, sharing its cores: tests/cluster.sh), quant_gbs (ZeRO++'s
 * quantize and dequantize passes, GB/s streamed), net_cpu_ns (CPU ns per byte a rank sends,
 * sender + receiver: dev/bench/net_cpu_bench.sh measures it), offload's nvme_read_gbs and
 * nvme_write_gbs (GB/s per node), pcie_gbs (GB/s per GPU and direction), pcie_eff, host_gbs
 * (GB/s per node, host AdamW), host_gib (host memory per node) and gpu_build (1: the GPU build's
 * layout, 0: the CPU build's; the preset's by default). Returns 0, or -1 after
 * printing the error line.
 */
static int plan_machine_parse(const char* spec, PlanMachine* m, int* is_cpu) {
    char buf[512];
    if (plan_machine_check_items(spec, sizeof(buf)) != 0) return -1;
    snprintf(buf, sizeof(buf), "%s", spec);
    char* save = NULL;
    char* tok = strtok_r(buf, ",", &save);
    if (tok == NULL || plan_machine_preset(tok, m) != 0) {
        fprintf(stderr, "error: --plan %s: unknown machine '%s'; expected h100, h200 or cpu, then key=value overrides\n", spec, tok ? tok : "");
        return -1;
    }
    *is_cpu = strcmp(tok, "cpu") == 0;
    double inter_eff = 1.0;
    int overridden = 0;
    while ((tok = strtok_r(NULL, ",", &save)) != NULL) {
        char* eq = strchr(tok, '=');
        char* end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0.0;
        if (eq == NULL || end == eq + 1 || *end != '\0' || !isfinite(v)) {
            fprintf(stderr, "error: --plan %s: '%s' is not key=number; expected e.g. inter_gbit=100\n", spec, tok);
            return -1;
        }
        *eq = '\0';
        // Rates and sizes divide (0 would print inf/nan times), latencies and the reserve may be 0,
        // counts are whole numbers (0: the preset's "not set"), fractions at most 1.
        int rate = strcmp(tok, "peak_tflops") == 0 || strcmp(tok, "gemm_eff") == 0 || strcmp(tok, "mem_gbs") == 0 ||
                   strcmp(tok, "mem_gib") == 0 || strcmp(tok, "intra_gbs") == 0 || strcmp(tok, "inter_gbit") == 0 ||
                   strcmp(tok, "inter_eff") == 0 || strcmp(tok, "nvme_read_gbs") == 0 || strcmp(tok, "nvme_write_gbs") == 0 ||
                   strcmp(tok, "pcie_gbs") == 0 || strcmp(tok, "pcie_eff") == 0 || strcmp(tok, "host_gbs") == 0 || strcmp(tok, "host_gib") == 0;
        int count = strcmp(tok, "rpn") == 0 || strcmp(tok, "cores") == 0 || strcmp(tok, "threads") == 0 || strcmp(tok, "hosts_here") == 0;
        if (strcmp(tok, "gpu_build") == 0 && v != 0.0 && v != 1.0) {
            fprintf(stderr, "error: --plan %s: gpu_build=%s; expected 0 (the CPU build's fp32 layout) or 1 (the GPU build's bf16 + fp32 master)\n", spec, eq + 1);
            return -1;
        }
        int fraction = strcmp(tok, "gemm_eff") == 0 || strcmp(tok, "inter_eff") == 0 || strcmp(tok, "pcie_eff") == 0;
        if (rate && !(v > 0.0)) {
            fprintf(stderr, "error: --plan %s: %s=%s is not positive; expected a number > 0\n", spec, tok, eq + 1);
            return -1;
        }
        if (fraction && v > 1.0) {
            fprintf(stderr, "error: --plan %s: %s=%s is above 1; expected a fraction in (0, 1]\n", spec, tok, eq + 1);
            return -1;
        }
        // Past 1e6 of its unit (GB/s, Gbit/s, TFLOP/s, GiB, us, ns) a value overflows to an inf rate or
        // time; a rate under 1e-6 prints step times of 1e300 ms: both refused, not planned.
        if (!count && (v > 1e6 || (rate && v < 1e-6))) {
            fprintf(stderr, "error: --plan %s: %s=%s is out of range; expected a number in [%s, %s]\n", spec, tok, eq + 1, rate ? "1e-6" : "0",
                    fraction ? "1" : "1e6");
            return -1;
        }
        if (count && (v != floor(v) || v < 0.0 || v > 1048576.0)) {
            fprintf(stderr, "error: --plan %s: %s=%s is not a count; expected an integer in [0, 1048576]\n", spec, tok, eq + 1);
            return -1;
        }
        if (!(v >= 0.0)) {
            fprintf(stderr, "error: --plan %s: %s=%s is negative; expected a number >= 0\n", spec, tok, eq + 1);
            return -1;
        }
        overridden = 1;
        if (strcmp(tok, "peak_tflops") == 0) m->peak_flops = v * 1e12;
        else if (strcmp(tok, "gemm_eff") == 0) m->gemm_eff = v;
        else if (strcmp(tok, "mem_gbs") == 0) m->mem_bw = v * 1e9;
        else if (strcmp(tok, "mem_gib") == 0) m->memory = v * 1073741824.0;
        else if (strcmp(tok, "reserve_gib") == 0) m->reserve = v * 1073741824.0;
        else if (strcmp(tok, "rpn") == 0 && v < 1.0) { // 0 would put every rank in one node: not the preset's, as -rpn 0 is
            fprintf(stderr, "error: --plan %s: rpn=%s is no ranks per node; expected an integer in [1, 1048576] (or no rpn: the machine's)\n",
                    spec, eq + 1);
            return -1;
        }
        else if (strcmp(tok, "rpn") == 0) m->ranks_per_node = (int)v;
        else if (strcmp(tok, "intra_gbs") == 0) m->intra_bw = v * 1e9;
        else if (strcmp(tok, "intra_us") == 0) m->intra_lat = v * 1e-6;
        else if (strcmp(tok, "inter_gbit") == 0) m->inter_bw = v * 1e9 / 8;
        else if (strcmp(tok, "inter_us") == 0) m->inter_lat = v * 1e-6;
        else if (strcmp(tok, "inter_eff") == 0) inter_eff = v;
        else if (strcmp(tok, "cores") == 0) m->cores = (int)v;
        else if (strcmp(tok, "threads") == 0) m->threads_per_rank = (int)v;
        else if (strcmp(tok, "hosts_here") == 0) m->hosts_here = (int)v;
        else if (strcmp(tok, "quant_gbs") == 0) m->quant_bw = v * 1e9;
        else if (strcmp(tok, "net_cpu_ns") == 0) m->net_cpu = v * 1e-9;
        else if (strcmp(tok, "nvme_read_gbs") == 0) { m->nvme_read_bw = v * 1e9; m->nvme_given = 1; }
        else if (strcmp(tok, "nvme_write_gbs") == 0) { m->nvme_write_bw = v * 1e9; m->nvme_given = 1; }
        else if (strcmp(tok, "pcie_gbs") == 0) m->pcie_bw = v * 1e9;
        else if (strcmp(tok, "pcie_eff") == 0) m->pcie_eff = v;
        else if (strcmp(tok, "host_gbs") == 0) m->host_bw = v * 1e9;
        else if (strcmp(tok, "host_gib") == 0) m->host_memory = v * 1073741824.0;
        else if (strcmp(tok, "gpu_build") == 0) m->gpu_build = (int)v;
        else {
            fprintf(stderr, "error: --plan %s: unknown key '%s'; expected peak_tflops, gemm_eff, mem_gbs, mem_gib, reserve_gib, "
                    "rpn, intra_gbs, intra_us, inter_gbit, inter_us, inter_eff, cores, threads, hosts_here, quant_gbs, net_cpu_ns, nvme_read_gbs, "
                    "nvme_write_gbs, pcie_gbs, pcie_eff, host_gbs, host_gib or gpu_build\n", spec, tok);
            return -1;
        }
    }
    m->inter_bw *= inter_eff;
    if (overridden) snprintf(m->name + strlen(m->name), sizeof(m->name) - strlen(m->name), " (%s)", spec);
    return 0;
}

/*
 * The network stack's CPU seconds per byte a rank sends (sender + receiver) for a plan of
 * `nodes` nodes: net_cpu_ns when given; the cpu preset's default across nodes is
 * PLAN_CPU_TCP_NS, TCP through the kernel as Open MPI's btl tcp sends it, measured on this
 * machine inside tests/cluster.sh's namespaces (dev/bench/net_cpu_bench.sh 1000 200 3, quiet,
 * 03:05 UTC 2026-12-02, every core's /proc/stat busy time over one TCP stream: a host's
 * loopback path 0.55 ns per byte, the veth + bridge + tbf path at 1 Gbit 9.88, 8.87 of it
 * softirq; their mean, as a 2-ranks-per-host ring's bytes split between them); on one node Open
 * MPI's shared memory moves the bytes with a memory copy, which the plan does not charge (0).
 */
#ifndef PLAN_CPU_TCP_NS
#define PLAN_CPU_TCP_NS 5.2
#endif
static double plan_net_cpu(const PlanMachine* m, int nodes) {
    if (m->net_cpu >= 0.0) return m->net_cpu;
    return nodes > 1 ? PLAN_CPU_TCP_NS * 1e-9 : 0.0;
}

#endif // ZERO_PLAN_MACHINE_H
