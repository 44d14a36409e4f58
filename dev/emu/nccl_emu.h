/*
 * nccl_emu.h: the NCCL calls zero/gpu/engine_gpu.cuh makes, for the CPU emulation of CUDA (emu.h includes
 * it when EMU_NCCL is defined), carried by MPI between the ranks of an mpirun job. Lets CI run
 * the default (NCCL) build of train_gpt2.cu on several ranks. Defines the extern "C" functions
 * <nccl.h> declares: include it in one translation unit and do not link libnccl.
 * Semantics (NCCL docs, "Collective Operations", "In-place Operations", "CUDA Stream
 * Semantics"): a collective is queued on its stream (emu_runtime.h). It reads its input when
 * issued (a snapshot, after the earlier collectives of its stream that write that input) and
 * writes its output only when it completes: when an event recorded after it is waited on or
 * synchronized, or the stream runs a kernel or copy, or the device synchronizes. Collectives
 * queued back to back on one stream stay in flight together (completing in order). So a consumer that does not wait for it sees
 * the old contents (poisoned at the issue: NaN), and a producer that writes the input after the
 * issue (outside the output range) is reported when the collective completes.
 * bf16 sum: each input converted to fp32, MPI_SUM over ranks in fp32, one rounding to bf16
 * (NCCL's own order of rounding differs; tests compare with bf16 tolerances). ncclAllReduce also
 * takes ncclFloat32 (the optimizer's norms): MPI_SUM in fp32.
 * Checks: counts and buffers inside cudaMalloc allocations; in-place calls must use NCCL's
 * documented placement (recvbuff == sendbuff + rank*count for reduce-scatter, sendbuff ==
 * recvbuff + rank*count for all-gather) and other overlaps are refused; bf16 (and fp32 for
 * all-reduce) and sum only.
 * Each communicator is an MPI_Comm_dup of MPI_COMM_WORLD (its collectives never match the
 * host's MPI calls); nonblocking MPI collectives, so a rank waiting on one keeps progressing.
 * ncclCommSplit is MPI_Comm_split of the parent's (NCCL_SPLIT_NOCOLOR: no communicator, NULL).
 * Point-to-point (ZeRO++'s all-to-alls, zero/zeropp/zeropp_gpu.cuh): ncclSend / ncclRecv are
 * MPI_Isend / MPI_Irecv issued at the call (NCCL starts a group's operations at ncclGroupEnd;
 * MPI's nonblocking calls progress together either way, and messages between two ranks on one
 * communicator match in order, as NCCL's do), queued on the stream like a collective: a send's
 * buffer must stay unchanged until it completes, a receive's is poisoned until then. Types
 * ncclInt8, ncclUint8, ncclBfloat16, ncclFloat32 (bytes, moved unchanged). ncclGroupStart /
 * ncclGroupEnd only check their nesting. EMU_NCCL_FAIL=R:K makes rank R's K-th collective fail
 * (nccl_inject_failure).
 */
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <algorithm>
#include <climits>
#include <memory>
#include <mpi.h>
#include <nccl.h>

struct ncclComm {
    MPI_Comm comm;
    int rank, nranks;
};

namespace emu {

static ncclResult_t nccl_fail(const char* call, const char* why) {
    fprintf(stderr, "emu: %s: %s\n", call, why);
    return ncclInvalidArgument;
}

static bool nccl_device_range(const void* p, size_t bytes) { return find_allocation(p, bytes, NULL) != NULL; }

static bool ranges_overlap(const void* a, size_t an, const void* b, size_t bn) {
    return (const char*)a < (const char*)b + bn && (const char*)b < (const char*)a + an;
}

static void bf16_to_float(float* out, const __nv_bfloat16* in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(in[i]);
}

// Queue an MPI request on the stream; finish() runs after it completes (writes the output).
// At the issue, the output range is poisoned (a reader that skips the wait sees NaN even where
// the result equals the old contents) and the input bytes outside the output are kept; at
// completion they must be unchanged (a producer that overwrote the input while the collective
// was in flight is reported: the GPU's result would have depended on timing).
static void nccl_enqueue(const char* call, cudaStream_t stream, MPI_Request request, std::function<void()> finish,
                         const void* in, size_t in_bytes, void* out, size_t out_bytes) {
    auto req = std::make_shared<MPI_Request>(request);
    // the input's parts outside the output: [a, head_end) before it and [tail_begin, a_end) after it
    const unsigned char *a = (const unsigned char*)in, *a_end = a + in_bytes;
    const unsigned char *b = (const unsigned char*)out, *b_end = b + out_bytes;
    const unsigned char* head_end = std::min(a_end, std::max(a, b));
    const unsigned char* tail_begin = std::max(a, std::min(a_end, b_end));
    auto head = std::make_shared<std::vector<unsigned char>>(a, head_end);
    auto tail = std::make_shared<std::vector<unsigned char>>(tail_begin, a_end);
    memset(out, 0xff, out_bytes);
    stream_enqueue(stream, [req, finish, call, a, tail_begin, head, tail](bool block) {
        int done = 0;
        if (block) MPI_Wait(req.get(), MPI_STATUS_IGNORE), done = 1;
        else MPI_Test(req.get(), &done, MPI_STATUS_IGNORE);
        if (!done) return false;
        if (memcmp(a, head->data(), head->size()) != 0 || memcmp(tail_begin, tail->data(), tail->size()) != 0)
            fail("%s: its input was written while the collective was in flight (a missing wait of the producer "
                 "on the collective's event)", call);
        finish();
        return true;
    }, out, out_bytes);
}

static ncclResult_t nccl_check_common(const char* call, ncclDataType_t type, ncclComm_t comm, bool float32_ok = false) {
    if (comm == NULL) return nccl_fail(call, "NULL communicator");
    if (type != ncclBfloat16 && !(float32_ok && type == ncclFloat32))
        return nccl_fail(call, float32_ok ? "only ncclBfloat16 and ncclFloat32 are modelled" : "only ncclBfloat16 is modelled");
    return ncclSuccess;
}

// Bytes of one element of the types point-to-point calls move unchanged; 0: not modelled.
static size_t nccl_p2p_elem_bytes(ncclDataType_t type) {
    switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclBfloat16: return 2;
    case ncclFloat32: return 4;
    default: return 0;
    }
}

static int nccl_group_depth = 0; // ncclGroupStart minus ncclGroupEnd calls so far

// EMU_NCCL_FAIL=R:K: on MPI_COMM_WORLD rank R, the K-th collective or point-to-point call (from
// 1) returns ncclSystemError without starting (a network error, as a real NCCL may report it);
// the peers are left blocked in the matching collective, so this tests how fast they end.
static bool nccl_inject_failure(const char* call) {
    static int fail_rank = -2, fail_call = 0, calls = 0;
    if (fail_rank == -2) {
        fail_rank = -1;
        const char* e = getenv("EMU_NCCL_FAIL");
        if (e != NULL && sscanf(e, "%d:%d", &fail_rank, &fail_call) != 2) fail_rank = -1;
    }
    if (fail_rank < 0) return false;
    int world_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (world_rank != fail_rank || ++calls != fail_call) return false;
    fprintf(stderr, "emu: %s: injected ncclSystemError (EMU_NCCL_FAIL=%d:%d)\n", call, fail_rank, fail_call);
    return true;
}

static ncclResult_t nccl_check_p2p(const char* call, ncclDataType_t type, int peer, ncclComm_t comm, size_t* elem) {
    if (comm == NULL) return nccl_fail(call, "NULL communicator");
    *elem = nccl_p2p_elem_bytes(type);
    if (*elem == 0) return nccl_fail(call, "only ncclInt8, ncclUint8, ncclBfloat16 and ncclFloat32 are modelled");
    if (peer < 0 || peer >= comm->nranks) return nccl_fail(call, "peer outside the communicator");
    return ncclSuccess;
}

} // namespace emu

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (CPU emulation)";
    case ncclInvalidUsage: return "invalid usage (CPU emulation)";
    case ncclSystemError: return "system error (CPU emulation)";
    default: return "unknown result (CPU emulation)";
    }
}

// The id carries nothing: ranks find each other through MPI_COMM_WORLD.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "emu");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    int initialized = 0, size = 0, world_rank = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return emu::nccl_fail("ncclCommInitRank", "MPI is not initialized (the emulation carries NCCL over MPI)");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (size != nranks || world_rank != rank) return emu::nccl_fail("ncclCommInitRank", "nranks/rank differ from MPI_COMM_WORLD's");
    ncclComm* c = new ncclComm();
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    c->rank = rank;
    c->nranks = nranks;
    *comm = c;
    return ncclSuccess;
}

// The ranks of `comm` that pass the same color form a new communicator, ranked by key (then by
// their rank in comm); collective over comm, as NCCL's (NCCL docs, "ncclCommSplit"). config is
// not read (NULL: the parent's, as NCCL allows).
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
    (void)config;
    if (comm == NULL || newcomm == NULL) return emu::nccl_fail("ncclCommSplit", "NULL communicator");
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return emu::nccl_fail("ncclCommSplit", "negative color other than NCCL_SPLIT_NOCOLOR");
    cudaDeviceSynchronize(); // the parent's queued work first: the split is a blocking call
    MPI_Comm split;
    MPI_Comm_split(comm->comm, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &split);
    if (split == MPI_COMM_NULL) { *newcomm = NULL; return ncclSuccess; }
    ncclComm* c = new ncclComm();
    c->comm = split;
    MPI_Comm_rank(split, &c->rank);
    MPI_Comm_size(split, &c->nranks);
    *newcomm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (comm == NULL) return emu::nccl_fail("ncclCommCount", "NULL communicator");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (comm == NULL) return emu::nccl_fail("ncclCommUserRank", "NULL communicator");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    emu::nccl_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (emu::nccl_group_depth == 0) return emu::nccl_fail("ncclGroupEnd", "without a matching ncclGroupStart");
    emu::nccl_group_depth--;
    return ncclSuccess;
}

// count elements of sendbuff to rank `peer` of comm: read at the call (a snapshot, after its
// producers on this stream), and, as a collective's input, checked unchanged at completion.
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    const char* call = "ncclSend";
    size_t elem = 0;
    ncclResult_t r = emu::nccl_check_p2p(call, datatype, peer, comm, &elem);
    if (r != ncclSuccess) return r;
    size_t bytes = count * elem;
    if (bytes > (size_t)INT_MAX) return emu::nccl_fail(call, "more than INT_MAX bytes (one MPI message here)");
    if (!emu::nccl_device_range(sendbuff, bytes)) return emu::nccl_fail(call, "the buffer is not inside one cudaMalloc allocation");
    emu::stream_settle_for_input(stream, sendbuff, bytes); // its producers on this stream have run
    auto snapshot = std::make_shared<std::vector<unsigned char>>((const unsigned char*)sendbuff, (const unsigned char*)sendbuff + bytes);
    MPI_Request request;
    MPI_Isend(snapshot->data(), (int)bytes, MPI_BYTE, peer, 0, comm->comm, &request);
    // no output: the whole buffer is input, which must be unchanged at completion
    emu::nccl_enqueue(call, stream, request, [snapshot]() {}, sendbuff, bytes, (void*)sendbuff, 0);
    return ncclSuccess;
}

// count elements from rank `peer` of comm into recvbuff, there once the stream passes it.
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
    const char* call = "ncclRecv";
    size_t elem = 0;
    ncclResult_t r = emu::nccl_check_p2p(call, datatype, peer, comm, &elem);
    if (r != ncclSuccess) return r;
    size_t bytes = count * elem;
    if (bytes > (size_t)INT_MAX) return emu::nccl_fail(call, "more than INT_MAX bytes (one MPI message here)");
    if (!emu::nccl_device_range(recvbuff, bytes)) return emu::nccl_fail(call, "the buffer is not inside one cudaMalloc allocation");
    // Earlier work on this stream that reads or writes the buffer runs before it is poisoned
    // (now); the message lands in a host copy, written into the buffer at completion.
    emu::stream_settle_for_input(stream, recvbuff, bytes);
    auto landing = std::make_shared<std::vector<unsigned char>>(bytes);
    MPI_Request request;
    MPI_Irecv(landing->data(), (int)bytes, MPI_BYTE, peer, 0, comm->comm, &request);
    emu::nccl_enqueue(call, stream, request, [landing, recvbuff, bytes]() { memcpy(recvbuff, landing->data(), bytes); },
                      recvbuff, 0, recvbuff, bytes);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) return ncclSuccess;
    cudaDeviceSynchronize(); // what is queued on the communicator still completes
    MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete comm; // the MPI job is being torn down by the caller
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
    *async_error = ncclSuccess;
    return comm != NULL ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* call = "ncclAllReduce";
    if (emu::nccl_inject_failure(call)) return ncclSystemError;
    ncclResult_t r = emu::nccl_check_common(call, datatype, comm, true);
    if (r != ncclSuccess) return r;
    if (op != ncclSum) return emu::nccl_fail(call, "only ncclSum is modelled");
    const bool fp32 = datatype == ncclFloat32;
    size_t bytes = count * (fp32 ? 4 : 2);
    if (!emu::nccl_device_range(sendbuff, bytes) || !emu::nccl_device_range(recvbuff, bytes))
        return emu::nccl_fail(call, "a buffer is not inside one cudaMalloc allocation");
    if (sendbuff != recvbuff && emu::ranges_overlap(sendbuff, bytes, recvbuff, bytes))
        return emu::nccl_fail(call, "send and receive buffers overlap without being the same (not in-place)");
    emu::stream_settle_for_input(stream, sendbuff, bytes); // reads the input now
    auto in = std::make_shared<std::vector<float>>(count), out = std::make_shared<std::vector<float>>(count);
    if (fp32) memcpy(in->data(), sendbuff, bytes);
    else emu::bf16_to_float(in->data(), (const __nv_bfloat16*)sendbuff, count);
    MPI_Request request;
    MPI_Iallreduce(in->data(), out->data(), (int)count, MPI_FLOAT, MPI_SUM, comm->comm, &request);
    emu::nccl_enqueue(call, stream, request, [in, out, recvbuff, count, fp32]() {
        if (fp32) { memcpy(recvbuff, out->data(), count * 4); return; }
        __nv_bfloat16* dst = (__nv_bfloat16*)recvbuff;
        for (size_t i = 0; i < count; i++) dst[i] = __float2bfloat16((*out)[i]);
    }, sendbuff, bytes, recvbuff, bytes);
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    const char* call = "ncclReduceScatter";
    if (emu::nccl_inject_failure(call)) return ncclSystemError;
    ncclResult_t r = emu::nccl_check_common(call, datatype, comm);
    if (r != ncclSuccess) return r;
    if (op != ncclSum) return emu::nccl_fail(call, "only ncclSum is modelled");
    size_t n = recvcount * comm->nranks;
    if (!emu::nccl_device_range(sendbuff, n * 2) || !emu::nccl_device_range(recvbuff, recvcount * 2))
        return emu::nccl_fail(call, "a buffer is not inside one cudaMalloc allocation");
    const void* in_place = (const char*)sendbuff + (size_t)comm->rank * recvcount * 2;
    if (recvbuff != in_place && emu::ranges_overlap(sendbuff, n * 2, recvbuff, recvcount * 2))
        return emu::nccl_fail(call, "receive buffer overlaps the send buffer but is not sendbuff + rank*recvcount");
    emu::stream_settle_for_input(stream, sendbuff, n * 2);
    auto in = std::make_shared<std::vector<float>>(n), out = std::make_shared<std::vector<float>>(recvcount);
    emu::bf16_to_float(in->data(), (const __nv_bfloat16*)sendbuff, n);
    MPI_Request request;
    MPI_Ireduce_scatter_block(in->data(), out->data(), (int)recvcount, MPI_FLOAT, MPI_SUM, comm->comm, &request);
    emu::nccl_enqueue(call, stream, request, [in, out, recvbuff, recvcount]() {
        __nv_bfloat16* dst = (__nv_bfloat16*)recvbuff;
        for (size_t i = 0; i < recvcount; i++) dst[i] = __float2bfloat16((*out)[i]);
    }, sendbuff, n * 2, recvbuff, recvcount * 2);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* call = "ncclAllGather";
    if (emu::nccl_inject_failure(call)) return ncclSystemError;
    ncclResult_t r = emu::nccl_check_common(call, datatype, comm);
    if (r != ncclSuccess) return r;
    size_t n = sendcount * comm->nranks;
    if (!emu::nccl_device_range(sendbuff, sendcount * 2) || !emu::nccl_device_range(recvbuff, n * 2))
        return emu::nccl_fail(call, "a buffer is not inside one cudaMalloc allocation");
    const void* in_place = (const char*)recvbuff + (size_t)comm->rank * sendcount * 2;
    if (sendbuff != in_place && emu::ranges_overlap(sendbuff, sendcount * 2, recvbuff, n * 2))
        return emu::nccl_fail(call, "send buffer overlaps the receive buffer but is not recvbuff + rank*sendcount");
    emu::stream_settle_for_input(stream, sendbuff, sendcount * 2);
    auto in = std::make_shared<std::vector<unsigned char>>(sendcount * 2);
    auto out = std::make_shared<std::vector<unsigned char>>(n * 2);
    memcpy(in->data(), sendbuff, sendcount * 2);
    MPI_Request request;
    MPI_Iallgather(in->data(), (int)(sendcount * 2), MPI_BYTE, out->data(), (int)(sendcount * 2), MPI_BYTE, comm->comm,
                   &request);
    emu::nccl_enqueue(call, stream, request, [in, out, recvbuff, n]() { memcpy(recvbuff, out->data(), n * 2); },
                      sendbuff, sendcount * 2, recvbuff, n * 2);
    return ncclSuccess;
}

} // extern "C"

#endif // EMU_NCCL_H
