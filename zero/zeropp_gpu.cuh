/*
 * zero/zeropp_gpu.cuh: ZeRO++ in the GPU build, so far qwZ only (-qw 1, stage 3; Wang et al.
 * 2023, sec. 3.1): the forward all-gather of a unit sends each rank's shard of the fp32 master
 * weights as blockwise int8 codes + one fp32 scale per block (kernels/quantize.cuh, twin of
 * cpu/quantize.h), all on the comm stream: quantize the owned master slice into this rank's
 * packet, ncclAllGather of the N packets, dequantize each into its slice of the bf16 working
 * unit; op->done after the last. Master weights and AdamW stay exact. NCCL builds (and one
 * process) only: the host-staged MPI backend moves bf16 values, not packets. hpZ and qgZ are
 * refused in this build (zero_pp_check_flags). Packet layout as the CPU build's (zero/zeropp.h):
 * ceil(S/b) scales, then S code bytes, padded to 4 bytes; NCCL carries it as bf16 pairs of
 * bytes (an all-gather copies them unchanged; the CPU emulation's NCCL models bf16 only).
 * Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_ZEROPP_GPU_CUH
#define ZERO_ZEROPP_GPU_CUH
#ifndef ZERO_CUH
#error "zero/zeropp_gpu.cuh is part of the ZeRO engine; include zero.cuh"
#endif
#include "kernels/quantize.cuh"

typedef struct ZeroPP {
    int qw, block;
    int backward;                        // the model's pass: forward gathers are quantized
    uint8_t* packets[ZERO_WORKING_UNITS]; // device: N packets of one unit per parameter working unit
    size_t bytes_buffers;
} ZeroPP;

// Set up qwZ on an initialized engine (every rank; flags checked by zero_pp_check_flags).
static void zero_pp_setup(ZeroEngine* z, int qw, int qg, int qg_bits, int hp, int block) {
    (void)qg; (void)qg_bits; (void)hp;
    if (!qw || ZERO_STAGE != 3) return;
    ZeroPP* pp = (ZeroPP*)zero_calloc(1, sizeof(ZeroPP), "ZeRO++ state");
    pp->qw = qw;
    pp->block = block;
    size_t max_unit = 0;
    for (int u = 0; u < z->layout->num_units; u++)
        if (z->layout->units[u].padded_numel > max_unit) max_unit = z->layout->units[u].padded_numel;
    size_t bytes = (size_t)z->world_size * 4 * zero_pp_packet_words(max_unit / (size_t)z->world_size, 8, block);
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) pp->packets[i] = (uint8_t*)zero_device_calloc(bytes, 1, "qwZ packets");
    pp->bytes_buffers = ZERO_WORKING_UNITS * bytes;
    z->bytes_working += pp->bytes_buffers;
    CUDA_CHECK(cudaDeviceSynchronize()); // zero_device_calloc's memsets ran on the legacy stream
    z->pp = pp;
}

static void zero_pp_free(ZeroEngine* z) {
    if (z->pp == NULL) return;
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) CUDA_CHECK(cudaFree(z->pp->packets[i]));
    free(z->pp);
    z->pp = NULL;
}

static void zero_pp_pass(ZeroEngine* z, int backward) { if (z->pp) z->pp->backward = backward; }

/*
 * Stage 3, forward pass, qwZ: gather `unit` into working unit w as int8 packets (the caller made
 * the comm stream wait for w's last reader). Returns 0 when qwZ does not apply (the plain bf16
 * all-gather runs). Sent per rank: (N-1) packets of W bytes, counted as W/2 bf16 elements each.
 */
static int zero_pp_device_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    ZeroPP* pp = z->pp;
    if (pp == NULL || !pp->qw || pp->backward) return 0;
    const ParamUnit* u = &z->layout->units[unit];
    int N = z->world_size, i = (int)(w - z->param_work), b = pp->block;
    size_t S = u->shard_numel, W = 4 * zero_pp_packet_words(S, 8, b), nb = quant_num_blocks(S, b);
    uint8_t* packets = pp->packets[i], *own = packets + (size_t)z->rank * W;
    const float* master = z->master + zero_owned_offset(z->layout, ZERO_STAGE, ZERO_BUF_MASTER, z->rank, unit);
    const char* what = "parameters (qwZ int8 codes)";
    long long sent = (long long)(N - 1) * (long long)(W / 2);
    int traced = N > 1 ? zero_trace_device_collective_begin(z) : -1; // -tr: quantize, gather, dequantize on the comm stream
    quantize_blocks_cuda(own + nb * sizeof(float), (float*)own, master, S, 8, b, z->comm);
    if (N > 1) {
#if !ZERO_COMM_MPI
        zero_device_op_begin(z, &w->op, ZERO_OP_ALL_GATHER, unit, what, sent);
        NCCL_CHECK(ncclAllGather(own, packets, W / 2, ncclBfloat16, z->nccl, z->comm));
#endif
    }
    for (int r = 0; r < N; r++) {
        const uint8_t* p = packets + (size_t)r * W;
        dequantize_blocks_cuda<bf16>(w->data + (size_t)r * S, p + nb * sizeof(float), (const float*)p, S, 8, b, 0, z->comm);
    }
    CUDA_CHECK(cudaEventRecord(w->op.done, z->comm));
    zero_trace_device_collective_end(z, traced, ZERO_OP_ALL_GATHER, unit, sent, what);
    return 1;
}

// Start-up line (rank 0): what ZeRO++ does here and its per-step forward gather formula.
static void zero_pp_print_setup(const ZeroEngine* z, int grad_accum_steps, FILE* out) {
    const ZeroPP* pp = z->pp;
    if (pp == NULL) return;
    long long words = 0, N = z->world_size;
    for (int unit = 0; unit < z->layout->num_units; unit++)
        words += (unit == UNIT_EMBEDDING ? 2 : 1) * (long long)zero_pp_packet_words(z->layout->units[unit].shard_numel, 8, pp->block);
    fprintf(out, "zero++: qwZ on (int8 forward all-gather, block %d) | forward gathers per rank per step: A (N-1) x packets = "
            "%lld bytes (plain bf16: %lld) | packet buffers %zu bytes\n", pp->block, 4 * words * (N - 1) * grad_accum_steps,
            2 * (long long)(z->layout->padded_numel + z->layout->units[UNIT_EMBEDDING].padded_numel) / N * (N - 1) * grad_accum_steps,
            pp->bytes_buffers);
}

#endif // ZERO_ZEROPP_GPU_CUH
