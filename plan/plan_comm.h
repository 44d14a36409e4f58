/*
 * plan/plan_comm.h: the planner's collective times, an alpha-beta model of ring collectives
 * (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in
 * MPICH", sec. 2): over N ranks a ring step moves one chunk of n/N elements per rank, costs
 * alpha + chunk bytes / beta, and a reduce-scatter or all-gather takes N-1 steps, an all-reduce
 * 2(N-1) (the CPU build's rings, zero/comm_ring.h, step for step; NCCL's ring algorithm, whose
 * "bus bandwidth" is this beta: nccl-tests doc/PERFORMANCE.md). Ranks are placed node by node,
 * so with several nodes every step crosses nodes on the ring's node-boundary edges; each node
 * then pushes one rank's volume through its NICs: beta = min(intra-node per-rank bandwidth, the
 * node's inter-node bandwidth), alpha = the larger latency. Part of the planner
 * (the overview in plan/plan.h).
 *
 * The network stack's CPU (net_cpu, plan/plan_machine.h: seconds per byte a rank sends, the
 * sender's and the receiver's together; TCP through the kernel, 0 for RDMA and NVLink): in a
 * ring step every rank of a node sends one chunk and receives one, so the node's cores spend
 * rpn x chunk x net_cpu on it. The cores are shared as the kernel's scheduler shares them
 * between runnable threads, equally: a node's rpn x threads compute threads and its rpn progress
 * threads (zero/progress_cpu.h: each runnable while its ring has work; the traces in the
 * simulated cluster show a collective's rate falling as more ranks compute beside it, README), so
 *   - alone (the compute side waiting) a collective gets all of the node's cores: beta <= cores /
 *     (rpn x net_cpu);
 *   - beside the ranks' compute it gets the cores their threads leave idle plus its threads'
 *     share of the busy ones, busy x rpn / (rpn x threads + rpn): beta_compute <= that /
 *     (rpn x net_cpu);
 *   - the CPU it takes beyond the idle cores comes out of the compute beside it: compute runs
 *     at 1 - plan_net_cpu_fraction of its rate meanwhile (plan/plan_schedule.h's plan_compute).
 */
#ifndef ZERO_PLAN_COMM_H
#define ZERO_PLAN_COMM_H
#ifndef ZERO_CUH
#error "plan/plan_comm.h is part of the planner (plan/plan.h), a model of the engine: include zero.cuh first"
#endif

typedef struct {
    int N, nodes;
    double alpha, beta;   // per ring step: latency, bytes/s
    double reduce_bw;     // CPU: the chunk addition's memory bandwidth (0: free)
    int element_bytes;
    // The network stack's CPU (above): seconds per byte a rank sends (0: none), and the node
    // it runs on: its ranks, its cores, the cores its ranks' threads keep busy (0: not known).
    double net_cpu;
    int rpn, cores;
    double busy_cores;
    double beta_link;     // beta before the cores' bound (bytes/s)
    double beta_compute;  // beta beside the ranks' compute (the cores' share left to the stack); = beta without net_cpu
} PlanNet;

static PlanNet plan_net(const PlanMachine* m, int N, int element_bytes) {
    PlanNet net;
    memset(&net, 0, sizeof(net));
    net.N = N; net.nodes = 1; net.alpha = m->intra_lat; net.beta = m->intra_bw;
    net.reduce_bw = m->reduce_on_cpu ? m->mem_bw : 0.0; net.element_bytes = element_bytes;
    int rpn = m->ranks_per_node > 0 && m->ranks_per_node < N ? m->ranks_per_node : N;
    net.nodes = (N + rpn - 1) / rpn;
    if (net.nodes > 1) {
        net.alpha = fmax(m->intra_lat, m->inter_lat);
        net.beta = fmin(rpn > 1 ? m->intra_bw : 1e300, m->inter_bw);
    }
    net.beta_link = net.beta;
    net.rpn = rpn;
    if (m->cores > 0 && m->threads_per_rank > 0 && N > 1) {
        net.net_cpu = plan_net_cpu(m, net.nodes);
        net.cores = m->cores;
        net.busy_cores = fmin((double)m->cores, (double)rpn * m->threads_per_rank);
        if (net.net_cpu > 0.0) net.beta = fmin(net.beta, m->cores / (rpn * net.net_cpu));
    }
    net.beta_compute = net.beta;
    if (net.net_cpu > 0.0) {
        double share = (net.cores - net.busy_cores) + net.busy_cores * rpn / ((double)rpn * m->threads_per_rank + rpn);
        net.beta_compute = fmin(net.beta, share / (rpn * net.net_cpu));
    }
    return net;
}

/*
 * The fraction of the ranks' compute rate a collective takes while it is on the link: its node's
 * CPU demand (rpn x bytes one rank sends x net_cpu over its `seconds`, in cores) beyond the cores
 * the ranks' threads leave idle, over the cores they keep busy; at most 1. 0 without net_cpu.
 */
static double plan_net_cpu_fraction(const PlanNet* net, double bytes_per_rank, double seconds) {
    if (net->net_cpu <= 0.0 || net->busy_cores <= 0.0 || seconds <= 0.0) return 0.0;
    double demand = net->rpn * bytes_per_rank * net->net_cpu / seconds;
    double f = (demand - (net->cores - net->busy_cores)) / net->busy_cores;
    return f < 0.0 ? 0.0 : f > 1.0 ? 1.0 : f;
}

// Seconds for `steps` ring steps of `chunk` bytes each, `reduce_steps` of them adding the
// received chunk (read two, write one).
static double plan_ring_chunk_seconds(const PlanNet* net, double chunk, int steps, int reduce_steps) {
    double t = steps * (net->alpha + chunk / net->beta);
    if (net->reduce_bw > 0) t += reduce_steps * 3.0 * chunk / net->reduce_bw;
    return t;
}

// Seconds for a ring collective of n elements (n divisible by N): `steps` ring steps of one
// chunk, `reduce_steps` of them adding the received chunk.
static double plan_ring_seconds(const PlanNet* net, size_t n, int steps, int reduce_steps) {
    if (net->N == 1) return 0.0;
    return plan_ring_chunk_seconds(net, (double)(n / (size_t)net->N) * net->element_bytes, steps, reduce_steps);
}

/*
 * Seconds for an all-to-all over p ranks sending `message` bytes to each other rank: the
 * pairwise exchange (Thakur, Rabenseifner and Gropp 2005: MPICH's MPI_Alltoall for long
 * messages), p-1 steps, each exchanging one message with one partner at alpha + message / beta
 * (latency alpha, bandwidth beta per rank). NCCL runs an all-to-all as grouped point-to-point
 * sends, all pairs at once; when each rank's own link is the limit its time is the same bytes
 * over the same beta.
 */
static double plan_all_to_all_seconds(int p, double message, double alpha, double beta) {
    return p > 1 ? (p - 1) * (alpha + message / beta) : 0.0;
}

// A scalar all-reduce: recursive doubling, ceil(log2 N) exchanges there and back (latency only).
static double plan_scalar_seconds(const PlanNet* net) {
    if (net->N == 1) return 0.0;
    return 2.0 * ceil(log2((double)net->N)) * net->alpha;
}

#endif // ZERO_PLAN_COMM_H
