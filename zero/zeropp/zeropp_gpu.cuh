/*
 * zero/zeropp/zeropp_gpu.cuh: ZeRO++ in the GPU build (Wang et al. 2023, arXiv 2306.10209), the CPU
 * build's zero/zeropp/zeropp.h on the comm stream, with the same schedule, packets and formulas
 * (zero_pp_formula_bytes, with 2-byte bf16 elements where the CPU build moves fp32):
 *   qwZ  (-qw 1, stage 3; sec. 3.1): the forward all-gather of a unit sends each rank's shard of
 *        the fp32 master weights as blockwise int8 codes + one fp32 scale per block
 *        (kernels/quantize.cuh, twin of cpu/quantize.h): quantize the owned master slice into
 *        this rank's packet, ncclAllGather of the N packets, dequantize each into its slice of
 *        the bf16 working unit. Master weights and AdamW stay exact.
 *   hpZ  (-hp K, stage 3; sec. 3.2): every forward gather also copies this rank's 1/K slice of
 *        the gathered bf16 unit into a secondary shard (2Ψ/K bytes on the device, groups of K
 *        consecutive ranks; -hp 0: the ranks of one host); backward's gather is an
 *        ncclAllGather of those slices on the group's communicator (ncclCommSplit of the
 *        world's), so it never leaves the group. With qwZ the slice holds the dequantized
 *        values: backward computes with the weights forward did.
 *   qgZ  (-qg 1, stages 2-3; sec. 3.3): the gradient reduce-scatter of a unit as a two-level
 *        all-to-all of blockwise int4 (-qgb 4) or int8 codes, grouped ncclSend/ncclRecv of
 *        packets: the bf16 unit to fp32 (exact), within the group each local rank gets the
 *        chunks of its place in every group, dequantizes and sums them in fp32 (its own chunks
 *        unquantized, local ranks in order); the partial sums requantized, across groups each
 *        rank gets its chunk's partial from every group; their fp32 sum (groups in order) goes
 *        into the fp32 gradient shard, where the plain path adds the reduce-scatter's bf16
 *        result. All on the comm stream behind the unit's backward, so it overlaps the units
 *        below it as the plain reduce-scatter does.
 * Groups: G ranks (K with hpZ, else the ranks of a host), H = N/G; rank (g, l) = g*G + l. The
 * group communicator holds ranks g*G .. g*G+G-1 (ranked by l), the cross one the ranks at place l
 * of every group (ranked by g). NCCL builds only: the host-staged MPI backend moves bf16 values
 * (train_setup refuses the flags there with more than one rank). hpZ with -zo/-zp is refused
 * (zero_pp_check_offload): offload's parameter path replaces the device gather the secondary
 * comes from. Packet layout as the CPU build's: ceil(S/b) fp32 scales, then the codes (S bytes
 * int8, ceil(S/2) int4), padded to 4 bytes; qwZ's all-gather carries packets as bf16 pairs of
 * bytes (copied unchanged), the all-to-alls as ncclUint8.
 * Counting (engine's sent elements, bf16 elements: 2 bytes): a packet of W bytes counts W/2, so
 * 2 x sent = the bytes of zero_pp_formula_bytes (tests/zeropp_logcheck.py gpu_sent).
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ZEROPP_GPU_CUH
#define ZERO_ZEROPP_GPU_CUH
#ifndef ZERO_CUH
#error "zero/zeropp/zeropp_gpu.cuh is part of the ZeRO engine; include zero.cuh"
#endif
#include "kernels/grad_accum.cuh"
#include "kernels/quantize.cuh"

// y (+)= x, n fp32 elements: qgZ's own partial into the sum, the sum into the gradient shard. The
// CPU twin is zero/zeropp/zeropp.h's loop `result[i] += own[i]` (and grad_accum.cuh's fp32 addition).
__global__ void zero_pp_add_kernel(float* y, const float* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
static void zero_pp_add_or_copy(float* y, const float* x, size_t n, int add, cudaStream_t stream) {
    if (n == 0) return;
    if (!add) { CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream)); return; }
    zero_pp_add_kernel<<<(unsigned)ceil_div_size(n, 256), 256, 0, stream>>>(y, x, n);
    CUDA_CHECK_LAUNCH();
}

// A packet at p (S elements): its scales first, then its codes.
static float* zero_pp_scales(uint8_t* p) { return (float*)p; }
static uint8_t* zero_pp_codes(uint8_t* p, size_t S, int block) { return p + quant_num_blocks(S, block) * sizeof(float); }

/*
 * Set up ZeRO++ on an initialized engine (every rank, flags checked by zero_pp_check_flags,
 * zero_pp_check_offload and zero_pp_check_group): groups, communicators (ncclCommSplit is
 * collective over the world: every rank splits the same ones), device buffers.
 */
static void zero_pp_setup(ZeroEngine* z, int qw, int qg, int qg_bits, int hp, int block, int grad_block) {
    if (!qw && !qg && hp == 1) return;
    ZeroPP* pp = (ZeroPP*)zero_calloc(1, sizeof(ZeroPP), "ZeRO++ state");
    const ParamLayout* layout = z->layout;
    int N = z->world_size, host_block = zero_pp_host_block();
    pp->qw = qw && ZERO_STAGE == 3; pp->qg = qg; pp->qg_bits = qg_bits; pp->block = block; pp->grad_block = grad_block;
    pp->hp = hp == 0 ? (host_block > 0 ? host_block : 1) : hp;
    pp->group_size = pp->hp > 1 ? pp->hp : host_block > 0 ? host_block : 1;
    pp->num_groups = N / pp->group_size;
    pp->group_rank = z->rank % pp->group_size;
    pp->group_index = z->rank / pp->group_size;
    int H = pp->num_groups, qg_on = pp->qg && N > 1;
#if ZERO_COMM_MPI
    if (pp->hp > 1 || qg_on) { // train_setup refuses these flags with this backend
        fprintf(stderr, "error: internal: hpZ/qgZ set up with the host-staged MPI backend\n");
        zero_abort_all_ranks(1);
    }
#else
    pp->group_nccl = pp->cross_nccl = NULL;
    if ((pp->hp > 1 || qg_on) && pp->group_size > 1) NCCL_CHECK(ncclCommSplit(z->gpu.nccl, pp->group_index, pp->group_rank, &pp->group_nccl, NULL));
    if (qg_on && H > 1) NCCL_CHECK(ncclCommSplit(z->gpu.nccl, pp->group_rank, pp->group_index, &pp->cross_nccl, NULL));
#endif
    size_t max_unit = zero_max_unit_numel(layout), max_shard = max_unit / (size_t)N;
    if (pp->qw) {
        size_t bytes = (size_t)N * 4 * zero_pp_packet_words(max_shard, 8, block);
        for (int i = 0; i < ZERO_WORKING_UNITS; i++) pp->packets[i] = (uint8_t*)zero_device_calloc(bytes, 1, "qwZ packets");
        pp->bytes_buffers += ZERO_WORKING_UNITS * bytes;
    }
    if (pp->hp > 1) {
        size_t n = layout->padded_numel / (size_t)pp->hp;
        pp->secondary = (bf16*)zero_device_calloc(n, sizeof(bf16), "hpZ secondary shard");
        pp->secondary_ready = (int*)zero_calloc((size_t)layout->num_units, sizeof(int), "hpZ flags");
        pp->bytes_secondary = n * sizeof(bf16);
    }
    if (qg_on) {
        size_t bytes = (size_t)N * 4 * zero_pp_packet_words(max_shard, qg_bits, pp->grad_block);
        pp->send = (uint8_t*)zero_device_calloc(bytes, 1, "qgZ send buffer");
        pp->recv = (uint8_t*)zero_device_calloc(bytes, 1, "qgZ receive buffer");
        pp->grads32 = (float*)zero_device_calloc(max_unit, sizeof(float), "qgZ fp32 unit");
        pp->partial = (float*)zero_device_calloc((size_t)H * max_shard, sizeof(float), "qgZ partial sums");
        pp->result = (float*)zero_device_calloc(max_shard, sizeof(float), "qgZ reduced chunk");
        pp->bytes_buffers += 2 * bytes + (max_unit + ((size_t)H + 1) * max_shard) * sizeof(float);
    }
    z->bytes_working += pp->bytes_buffers + pp->bytes_secondary;
    CUDA_CHECK(cudaDeviceSynchronize()); // zero_device_calloc's memsets ran on the legacy stream
    z->pp = pp;
}

static void zero_pp_free(ZeroEngine* z) {
    ZeroPP* pp = z->pp;
    if (pp == NULL) return;
#if !ZERO_COMM_MPI
    if (pp->group_nccl != NULL) NCCL_CHECK(ncclCommDestroy(pp->group_nccl));
    if (pp->cross_nccl != NULL) NCCL_CHECK(ncclCommDestroy(pp->cross_nccl));
#endif
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) CUDA_CHECK(cudaFree(pp->packets[i]));
    CUDA_CHECK(cudaFree(pp->secondary)); CUDA_CHECK(cudaFree(pp->send)); CUDA_CHECK(cudaFree(pp->recv));
    CUDA_CHECK(cudaFree(pp->grads32)); CUDA_CHECK(cudaFree(pp->partial)); CUDA_CHECK(cudaFree(pp->result));
    free(pp->secondary_ready);
    free(pp);
    z->pp = NULL;
}

// zero_abort_device_comm: the split communicators too (a rank may be blocked in their kernels).
static void zero_hook_pp_abort_comms(ZeroEngine* z) {
#if !ZERO_COMM_MPI
    ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    if (pp->group_nccl != NULL) ncclCommAbort(pp->group_nccl);
    if (pp->cross_nccl != NULL) ncclCommAbort(pp->cross_nccl);
    pp->group_nccl = pp->cross_nccl = NULL;
#else
    (void)z;
#endif
}

// The model says which pass the gathers from now on serve (zero/zeropp/zeropp.h's zero_pp_pass).
static void zero_pp_pass(ZeroEngine* z, int backward) { if (z->pp) z->pp->backward = backward; }
static int zero_pp_on(const ZeroEngine* z) { return z->pp != NULL; } // any of -qw, -qg, -hp (as zeropp.h's)

// Stage 3: w's gather is queued on the comm stream (plain or qwZ): a forward gather copies this
// rank's 1/K slice of the unit into the hpZ secondary behind it; then w->op.done (again).
static void zero_pp_device_gathered(ZeroEngine* z, ZeroWorkingUnit* w) {
    ZeroPP* pp = z->pp;
    if (pp != NULL && pp->hp > 1 && pp->forward_gather[w - z->param_work]) {
        const ParamUnit* u = &z->layout->units[w->unit];
        size_t part = u->padded_numel / (size_t)pp->hp;
        CUDA_CHECK(cudaMemcpyAsync(pp->secondary + u->offset / (size_t)pp->hp, w->data + (size_t)pp->group_rank * part,
                                   part * sizeof(bf16), cudaMemcpyDeviceToDevice, z->gpu.comm));
        pp->secondary_ready[w->unit] = 1;
    }
    CUDA_CHECK(cudaEventRecord(w->op.done, z->gpu.comm));
}

/*
 * Stage 3: gather `unit` into working unit w the ZeRO++ way (the caller made the comm stream
 * wait for w's last reader); returns 0 when ZeRO++ does not apply (the plain bf16 all-gather
 * runs, then zero_pp_device_gathered). Sent per rank, in bf16 elements:
 *   backward, hpZ, secondary filled: ncclAllGather of P_u/K elements a rank on the group's
 *       communicator, from the secondary into the unit: (K-1) P_u/K;
 *   forward, or a wte unit for backward's LM-head recompute (hpZ off), qwZ: quantize the owned
 *       master slice into packet `rank` (W bytes), ncclAllGather of the N packets, dequantize
 *       them into the unit: (N-1) W/2; forward's gather then keeps its hpZ slice.
 */
static int zero_pp_device_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    ZeroPP* pp = z->pp;
    if (pp == NULL) return 0;
    const ParamUnit* u = &z->layout->units[unit];
    int N = z->world_size, i = (int)(w - z->param_work), b = pp->block;
    pp->forward_gather[i] = !pp->backward;
#if !ZERO_COMM_MPI
    if (pp->backward && pp->hp > 1 && pp->secondary_ready[unit]) {
        int K = pp->hp;
        size_t part = u->padded_numel / (size_t)K;
        const char* what = "parameters (hpZ secondary shard)";
        long long sent = (long long)(K - 1) * (long long)part;
        int traced = zero_trace_device_collective_begin(z); // -tr: the group gather's span on the comm stream
        zero_device_op_begin(z, &w->op, ZERO_OP_GROUP_ALL_GATHER, unit, what, sent);
        NCCL_CHECK(ncclAllGather(pp->secondary + u->offset / (size_t)K, w->data, part, ncclBfloat16, pp->group_nccl, z->gpu.comm));
        CUDA_CHECK(cudaEventRecord(w->op.done, z->gpu.comm));
        zero_trace_device_collective_end(z, traced, ZERO_OP_GROUP_ALL_GATHER, unit, sent, what);
        return 1;
    }
#endif
    if (!pp->qw || (pp->backward && !zero_pp_wte_unit(z->layout, unit))) return 0;
    size_t S = u->shard_numel, W = 4 * zero_pp_packet_words(S, 8, b);
    uint8_t* packets = pp->packets[i], *own = packets + (size_t)z->rank * W;
    const float* master = z->gpu.master + zero_owned_offset(z->layout, ZERO_STAGE, ZERO_BUF_MASTER, z->rank, unit);
    const char* what = "parameters (qwZ int8 codes)";
    long long sent = (long long)(N - 1) * (long long)(W / 2);
    int traced = N > 1 ? zero_trace_device_collective_begin(z) : -1; // -tr: quantize, gather, dequantize on the comm stream
    quantize_blocks_cuda(zero_pp_codes(own, S, b), zero_pp_scales(own), master, S, 8, b, z->gpu.comm);
    if (N > 1) {
#if !ZERO_COMM_MPI
        zero_device_op_begin(z, &w->op, ZERO_OP_ALL_GATHER, unit, what, sent);
        NCCL_CHECK(ncclAllGather(own, packets, W / 2, ncclBfloat16, z->gpu.nccl, z->gpu.comm));
#endif
    }
    for (int r = 0; r < N; r++) {
        uint8_t* p = packets + (size_t)r * W;
        dequantize_blocks_cuda<bf16>(w->data + (size_t)r * S, zero_pp_codes(p, S, b), zero_pp_scales(p), S, 8, b, 0, z->gpu.comm);
    }
    zero_pp_device_gathered(z, w); // records w->op.done
    zero_trace_device_collective_end(z, traced, ZERO_OP_ALL_GATHER, unit, sent, what);
    return 1;
}

#if !ZERO_COMM_MPI
// One all-to-all round of qgZ on `comm`: to and from every other member `peer` of it, `bytes` at
// send/recv + peer * bytes (grouped, so they progress together; NCCL docs, "Point-to-point").
static void zero_pp_exchange(ZeroPP* pp, ncclComm_t comm, int members, int self, size_t bytes, cudaStream_t stream) {
    NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < members; peer++) {
        if (peer == self) continue;
        NCCL_CHECK(ncclSend(pp->send + (size_t)peer * bytes, bytes, ncclUint8, peer, comm, stream));
        NCCL_CHECK(ncclRecv(pp->recv + (size_t)peer * bytes, bytes, ncclUint8, peer, comm, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}
#endif

/*
 * Stages 2-3, qgZ: reduce `unit`'s gradients (w->data, P_u bf16 elements, this micro-step's)
 * over all ranks into `target` (this rank's S_u fp32 slice of the gradient shard: = when first,
 * else +=), on the comm stream (the caller made it wait for backward's kernels and records
 * w->op.done after). Returns 0 when qgZ is off (the plain reduce-scatter runs). Chunk c (S
 * elements) is rank c's. zero/zeropp/zeropp.h's zero_pp_grad_reduce_scatter, step for step:
 *   1. within the group: to local rank l' the packets of chunks m*G + l' for every group m (H
 *      packets of Q bytes), from each local rank those of chunks m*G + l; partial m = their
 *      fp32 sum, local ranks in order, the own chunk unquantized: (G-1) H Q/2 elements sent;
 *   2. across groups: partial m requantized to group m's rank at place l, from every group its
 *      partial of this rank's chunk; their fp32 sum, groups in order: (H-1) Q/2 elements sent.
 */
static int zero_pp_device_grad_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit, float* target, int first) {
    ZeroPP* pp = z->pp;
    if (pp == NULL || !pp->qg || z->world_size == 1) return 0;
#if ZERO_COMM_MPI
    (void)w; (void)unit; (void)target; (void)first;
    return 0; // refused at start-up (zero_pp_setup)
#else
    const ParamUnit* u = &z->layout->units[unit];
    int G = pp->group_size, H = pp->num_groups, l = pp->group_rank, g = pp->group_index, bits = pp->qg_bits, b = pp->grad_block;
    size_t S = u->shard_numel, Q = 4 * zero_pp_packet_words(S, bits, b); // bytes a packet
    cudaStream_t s = z->gpu.comm;
    const float* x = pp->grads32;
    grad_accumulate_cuda(pp->grads32, w->data, u->padded_numel, GRAD_SET, s); // the unit in fp32 (exact): the quantizer's input
    // The labels carry the code width, as the CPU build's (zero/trace/trace.h names the kind by it).
    const char* within = bits == 4 ? "gradients (qgZ int4, within the group)" : "gradients (qgZ int8, within the group)";
    const char* across = bits == 4 ? "gradients (qgZ int4, across groups)" : "gradients (qgZ int8, across groups)";
    // 1. Within the group: H packets to each local rank (the own ones are not sent).
    if (G > 1) {
        long long sent = (long long)(G - 1) * H * (long long)(Q / 2);
        int traced = zero_trace_device_collective_begin(z); // -tr: quantize, exchange (dequantize follows) on the comm stream
        for (int lp = 0; lp < G; lp++)
            for (int m = 0; m < H && lp != l; m++) {
                uint8_t* p = pp->send + ((size_t)lp * H + m) * Q;
                quantize_blocks_cuda(zero_pp_codes(p, S, b), zero_pp_scales(p), x + (size_t)(m * G + lp) * S, S, bits, b, s);
            }
        zero_device_op_begin(z, &w->op, ZERO_OP_ALL_TO_ALL, unit, within, sent);
        zero_pp_exchange(pp, pp->group_nccl, G, l, (size_t)H * Q, s);
        zero_trace_device_collective_end(z, traced, ZERO_OP_ALL_TO_ALL, unit, sent, within);
    }
    for (int m = 0; m < H; m++) {
        float* partial = pp->partial + (size_t)m * S;
        for (int lp = 0; lp < G; lp++) {
            if (lp == l) {
                grad_accumulate_cuda(partial, w->data + (size_t)(m * G + l) * S, S, lp == 0 ? GRAD_SET : GRAD_ADD, s);
            } else {
                uint8_t* p = pp->recv + ((size_t)lp * H + m) * Q;
                dequantize_blocks_cuda<float>(partial, zero_pp_codes(p, S, b), zero_pp_scales(p), S, bits, b, lp > 0, s);
            }
        }
    }
    // 2. Across groups: partial m to group m (its rank at place l), from every group ours.
    const float* sum = pp->partial; // one group: its partial is the sum
    if (H > 1) {
        long long sent = (long long)(H - 1) * (long long)(Q / 2);
        int traced = zero_trace_device_collective_begin(z);
        for (int m = 0; m < H; m++) {
            if (m == g) continue;
            uint8_t* p = pp->send + (size_t)m * Q;
            quantize_blocks_cuda(zero_pp_codes(p, S, b), zero_pp_scales(p), pp->partial + (size_t)m * S, S, bits, b, s);
        }
        zero_device_op_begin(z, &w->op, ZERO_OP_ALL_TO_ALL, unit, across, sent);
        zero_pp_exchange(pp, pp->cross_nccl, H, g, Q, s);
        zero_trace_device_collective_end(z, traced, ZERO_OP_ALL_TO_ALL, unit, sent, across);
        for (int m = 0; m < H; m++) {
            if (m == g) {
                zero_pp_add_or_copy(pp->result, pp->partial + (size_t)g * S, S, m > 0, s);
            } else {
                uint8_t* p = pp->recv + (size_t)m * Q;
                dequantize_blocks_cuda<float>(pp->result, zero_pp_codes(p, S, b), zero_pp_scales(p), S, bits, b, m > 0, s);
            }
        }
        sum = pp->result;
    }
    zero_pp_add_or_copy(target, sum, S, !first, s);
    return 1;
#endif
}

// Bytes per rank per step by the formulas of zero/zeropp/zeropp.h (bf16 elements: 2 bytes).
static ZeroPPFormula zero_pp_device_formula(const ZeroEngine* z, int grad_accum_steps) {
    const ZeroPP* pp = z->pp;
    ZeroPPShape shape = {0};
    if (pp) shape = (ZeroPPShape){pp->qw, pp->hp, pp->qg, pp->qg_bits, pp->block, pp->grad_block, pp->group_size};
    return zero_pp_formula_bytes(z->layout, ZERO_STAGE, -1, z->world_size, grad_accum_steps, (int)sizeof(bf16), pp ? &shape : NULL);
}

// Start-up lines (rank 0): what ZeRO++ does, the memory it adds, the per-step formulas.
static void zero_pp_print_setup(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    ZeroPPFormula f = zero_pp_device_formula(z, grad_accum_steps);
    ZeroPPFormula plain = zero_pp_formula_bytes(z->layout, ZERO_STAGE, -1, z->world_size, grad_accum_steps, (int)sizeof(bf16), NULL);
    fprintf(out, "zero++: qwZ %s | hpZ %s | qgZ %s | block %d elements | groups of %d ranks (%d groups)\n",
            pp->qw ? "on (int8 forward all-gather)" : "off", pp->hp > 1 ? "on" : "off",
            pp->qg ? (pp->qg_bits == 4 ? "on (int4 all-to-all)" : "on (int8 all-to-all)") : "off", pp->block, pp->group_size,
            pp->num_groups);
    if (pp->hp > 1) {
        size_t formula = sizeof(bf16) * (z->layout->padded_numel / (size_t)pp->hp);
        fprintf(out, "zero++: hpZ secondary shard %zu bytes per rank (device, bf16); formula 2Ψ/K = 2 x %zu / %d = %zu (%s)\n",
                pp->bytes_secondary, z->layout->padded_numel, pp->hp, formula, pp->bytes_secondary == formula ? "equal" : "DIFFERENT");
    }
    fprintf(out, "zero++: bytes per rank per step (A = %d): forward gathers %lld, backward gathers %lld, gradients %lld = %lld "
            "(formulas in zero/zeropp/zeropp.h, bf16 elements of 2 bytes; plain stage %d: %lld; counted: 2 x \"sent\" on every step "
            "line) | buffers %zu bytes\n", grad_accum_steps, f.forward, f.backward, f.gradients, f.forward + f.backward + f.gradients,
            ZERO_STAGE, plain.forward + plain.backward + plain.gradients, pp->bytes_buffers);
}

// JSON fields for the config record: the flags and the formulas (bytes per rank per step).
static const char* zero_pp_config_fields(const ZeroEngine* z, int grad_accum_steps, char* buf, size_t cap) {
    const ZeroPP* pp = z->pp;
    ZeroPPFormula f = zero_pp_device_formula(z, grad_accum_steps);
    snprintf(buf, cap, "\"zeropp_qw\":%d,\"zeropp_qg\":%d,\"zeropp_qg_bits\":%d,\"zeropp_hp\":%d,\"zeropp_block\":%d,"
             "\"zeropp_grad_block\":%d,\"zeropp_group_size\":%d,\"zeropp_formula_forward_bytes\":%lld,\"zeropp_formula_backward_bytes\":%lld,"
             "\"zeropp_formula_gradient_bytes\":%lld,\"zeropp_bytes_secondary\":%zu",
             pp ? pp->qw : 0, pp ? pp->qg : 0, pp ? pp->qg_bits : 0, pp ? pp->hp : 1, pp ? pp->block : 0, pp ? pp->grad_block : 0,
             pp ? pp->group_size : 1,
             f.forward, f.backward, f.gradients, pp ? pp->bytes_secondary : 0);
    return buf;
}

// ---- the GPU engine's ZeRO++ hooks (declared in zero/hooks.h, called by zero/gpu/engine_gpu.cuh) ----
static int zero_hook_pp_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) { return zero_pp_device_param_gather(z, w, unit); }
static void zero_hook_pp_gather_done(ZeroEngine* z, ZeroWorkingUnit* w) { if (z->pp) zero_pp_device_gathered(z, w); }
static int zero_hook_pp_device_grad_reduce(ZeroEngine* z, ZeroWorkingUnit* w, int unit, float* target, int first) {
    return zero_pp_device_grad_reduce(z, w, unit, target, first);
}
static void zero_hook_pp_free(ZeroEngine* z) { zero_pp_free(z); }

#endif // ZERO_ZEROPP_GPU_CUH
