/*
 * zero/cluster/mpi_single.h: a one-process stand-in for <mpi.h>, for builds without Open MPI
 * (make NO_USE_MPI=1, chosen by itself where no mpicc / MPI_HOME is found). zero.cuh includes it
 * instead of <mpi.h> when ZERO_NO_MPI is 1; nothing else changes: the engine's communication
 * section (zero/comm_mpi.h, zero/comm.h, zero/gpu/comm_gpu.cuh) keeps its structure and its calls, and this file
 * gives them MPI's meaning for a world of one rank (MPI 4.0 standard, the collectives with one
 * process): rank 0 of size 1; an all-reduce, reduce-scatter, all-gather or gather copies its
 * send buffer to its receive buffer (nothing with MPI_IN_PLACE, where the data already is);
 * requests complete at once; barriers and broadcasts return; a probe finds no message; a send or
 * receive (there is no peer) is an internal error line and exit 1. So a single-GPU (or single-process
 * CPU) trainer builds and runs with no MPI installed, with results identical to the MPI build
 * at world size 1 (which makes no MPI call at all on that path).
 *
 * A launch of several processes (mpirun -np N, srun -n N) cannot work without MPI, so
 * MPI_Init_thread, and zero_single_process_check at the GPU trainer's start, look at the
 * launchers' variables (zero/cluster/launcher.h: OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS for
 * the size; OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID for the rank): a size above 1
 * or a rank above 0 is one error line (printed by the task of rank 0 only) and exit status 1 in
 * every task. An sbatch script's own process (SLURM_NTASKS of the allocation, no step) runs.
 * Header-only, C and C++.
 */
#ifndef ZERO_MPI_SINGLE_H
#define ZERO_MPI_SINGLE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "zero/cluster/launcher.h"

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
typedef int MPI_Request;
typedef int MPI_Info;
typedef int MPI_Errhandler;
typedef struct { int MPI_SOURCE, MPI_TAG, MPI_ERROR; } MPI_Status;

#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 15
#define MPI_MAX_ERROR_STRING 256
#define MPI_COMM_WORLD 1
#define MPI_COMM_NULL 0
#define MPI_COMM_TYPE_SHARED 1
#define MPI_INFO_NULL 0
#define MPI_ERRORS_RETURN 1
#define MPI_ERRORS_ARE_FATAL 2
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3
#define MPI_REQUEST_NULL 0
#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_STATUS_IGNORE ((MPI_Status*)0)
#define MPI_STATUSES_IGNORE ((MPI_Status*)0)
#define MPI_IN_PLACE ((void*)1)
// Datatypes carry their size: 16 * code + bytes.
#define MPI_DATATYPE_NULL 0
#define MPI_BYTE (16 * 1 + 1)
#define MPI_CHAR (16 * 2 + 1)
#define MPI_INT (16 * 3 + 4)
#define MPI_FLOAT (16 * 4 + 4)
#define MPI_DOUBLE (16 * 5 + 8)
#define MPI_UINT64_T (16 * 6 + 8)
#define MPI_INT64_T (16 * 7 + 8)
#define MPI_LONG_LONG (16 * 8 + 8)
#define MPI_UNSIGNED (16 * 9 + 4)
#define MPI_SUM 1
#define MPI_MIN 2
#define MPI_MAX 3

static int mpi_single_initialized = 0;

static size_t mpi_single_bytes(int count, MPI_Datatype type) { return (size_t)(count > 0 ? count : 0) * (size_t)(type % 16); }

// A launcher started several tasks (zero/cluster/launcher.h's variables): one error line, printed by the
// task of rank 0, and exit 1 in each task.
static void zero_single_process_check(void) {
    const char *size_var = NULL, *rank_var = NULL;
    int size = launcher_world_size(&size_var), rank = launcher_rank(&rank_var);
    if (size <= 1 && rank <= 0) return;
    if (rank <= 0)
        fprintf(stderr, "error: launcher: %s=%d says several processes were started, but this binary was built without MPI "
                "(one process, world size 1); expected a single process (no mpirun/srun), or a build with Open MPI "
                "(mpicc on PATH or MPI_HOME set, without NO_USE_MPI=1)\n", size_var, size);
    exit(1);
}

static inline int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    (void)argc; (void)argv;
    zero_single_process_check();
    mpi_single_initialized = 1;
    if (provided) *provided = required;
    return MPI_SUCCESS;
}
static inline int MPI_Init(int* argc, char*** argv) { int p; return MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &p); }
static inline int MPI_Initialized(int* flag) { *flag = mpi_single_initialized; return MPI_SUCCESS; }
static inline int MPI_Finalize(void) { mpi_single_initialized = 0; return MPI_SUCCESS; }
static inline int MPI_Abort(MPI_Comm comm, int code) { (void)comm; fflush(stdout); fflush(stderr); exit(code); return MPI_SUCCESS; }
static inline int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler h) { (void)comm; (void)h; return MPI_SUCCESS; }
static inline int MPI_Comm_rank(MPI_Comm comm, int* rank) { (void)comm; *rank = 0; return MPI_SUCCESS; }
static inline int MPI_Comm_size(MPI_Comm comm, int* size) { (void)comm; *size = 1; return MPI_SUCCESS; }
static inline int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm* out) {
    (void)type; (void)key; (void)info; *out = comm; return MPI_SUCCESS;
}
static inline int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) { (void)color; (void)key; *out = comm; return MPI_SUCCESS; }
static inline int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) { *out = comm; return MPI_SUCCESS; }
static inline int MPI_Comm_free(MPI_Comm* comm) { *comm = MPI_COMM_NULL; return MPI_SUCCESS; }
static inline int MPI_Error_string(int code, char* text, int* len) {
    *len = snprintf(text, MPI_MAX_ERROR_STRING, "MPI error %d (one-process build without MPI)", code);
    return MPI_SUCCESS;
}
static inline double MPI_Wtime(void) { return (double)clock() / CLOCKS_PER_SEC; }

static inline int MPI_Query_thread(int* provided) { *provided = MPI_THREAD_FUNNELED; return MPI_SUCCESS; }

// Requests: complete when made.
static inline int MPI_Test(MPI_Request* r, int* flag, MPI_Status* s) { (void)s; *r = MPI_REQUEST_NULL; *flag = 1; return MPI_SUCCESS; }
static inline int MPI_Wait(MPI_Request* r, MPI_Status* s) { (void)s; *r = MPI_REQUEST_NULL; return MPI_SUCCESS; }
static inline int MPI_Waitall(int n, MPI_Request* r, MPI_Status* s) { (void)s; for (int i = 0; i < n; i++) r[i] = MPI_REQUEST_NULL; return MPI_SUCCESS; }
static inline int MPI_Testall(int n, MPI_Request* r, int* flag, MPI_Status* s) { *flag = 1; return MPI_Waitall(n, r, s); }
// Nothing is ever sent in a world of one rank: a probe finds nothing.
static inline int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* s) {
    (void)source; (void)tag; (void)comm; (void)s; *flag = 0; return MPI_SUCCESS;
}
// Point-to-point messages need a second rank: with one, a call is a bug of the caller.
static inline int mpi_single_no_peer(const char* call) {
    fprintf(stderr, "error: internal: %s in a one-process build (world size 1 has no peer)\n", call);
    exit(1);
    return MPI_ERR_OTHER;
}
static inline int MPI_Send(const void* b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c) {
    (void)b; (void)n; (void)t; (void)d; (void)tag; (void)c; return mpi_single_no_peer("MPI_Send");
}
static inline int MPI_Recv(void* b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* s) {
    (void)b; (void)n; (void)t; (void)src; (void)tag; (void)c; (void)s; return mpi_single_no_peer("MPI_Recv");
}
static inline int MPI_Isend(const void* b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c, MPI_Request* r) {
    (void)b; (void)n; (void)t; (void)d; (void)tag; (void)c; (void)r; return mpi_single_no_peer("MPI_Isend");
}
static inline int MPI_Irecv(void* b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* r) {
    (void)b; (void)n; (void)t; (void)src; (void)tag; (void)c; (void)r; return mpi_single_no_peer("MPI_Irecv");
}

// Collectives of one rank: the receive buffer gets the send buffer (unless in place).
static inline void mpi_single_copy(void* recv, const void* send, size_t bytes) {
    if (send != MPI_IN_PLACE && send != recv && bytes > 0) memmove(recv, send, bytes);
}
static inline int MPI_Barrier(MPI_Comm comm) { (void)comm; return MPI_SUCCESS; }
static inline int MPI_Ibarrier(MPI_Comm comm, MPI_Request* r) { (void)comm; *r = MPI_REQUEST_NULL; return MPI_SUCCESS; }
static inline int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    (void)buf; (void)count; (void)type; (void)root; (void)comm; return MPI_SUCCESS;
}
static inline int MPI_Ibcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* r) {
    *r = MPI_REQUEST_NULL; return MPI_Bcast(buf, count, type, root, comm);
}
static inline int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    (void)op; (void)comm; mpi_single_copy(recv, send, mpi_single_bytes(count, type)); return MPI_SUCCESS;
}
static inline int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* r) {
    *r = MPI_REQUEST_NULL; return MPI_Allreduce(send, recv, count, type, op, comm);
}
static inline int MPI_Reduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm) {
    (void)root; return MPI_Allreduce(send, recv, count, type, op, comm);
}
static inline int MPI_Ireduce_scatter_block(const void* send, void* recv, int recvcount, MPI_Datatype type, MPI_Op op,
                                            MPI_Comm comm, MPI_Request* r) {
    (void)op; (void)comm; *r = MPI_REQUEST_NULL; mpi_single_copy(recv, send, mpi_single_bytes(recvcount, type)); return MPI_SUCCESS;
}
static inline int MPI_Allgather(const void* send, int sendcount, MPI_Datatype sendtype, void* recv, int recvcount,
                                MPI_Datatype recvtype, MPI_Comm comm) {
    (void)recvcount; (void)recvtype; (void)comm; mpi_single_copy(recv, send, mpi_single_bytes(sendcount, sendtype)); return MPI_SUCCESS;
}
static inline int MPI_Iallgather(const void* send, int sendcount, MPI_Datatype sendtype, void* recv, int recvcount,
                                 MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* r) {
    *r = MPI_REQUEST_NULL; return MPI_Allgather(send, sendcount, sendtype, recv, recvcount, recvtype, comm);
}
static inline int MPI_Gather(const void* send, int sendcount, MPI_Datatype sendtype, void* recv, int recvcount,
                             MPI_Datatype recvtype, int root, MPI_Comm comm) {
    (void)root; return MPI_Allgather(send, sendcount, sendtype, recv, recvcount, recvtype, comm);
}
static inline int MPI_Igather(const void* send, int sendcount, MPI_Datatype sendtype, void* recv, int recvcount,
                              MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* r) {
    *r = MPI_REQUEST_NULL; return MPI_Gather(send, sendcount, sendtype, recv, recvcount, recvtype, root, comm);
}
static inline int MPI_Ialltoall(const void* send, int sendcount, MPI_Datatype sendtype, void* recv, int recvcount,
                                MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* r) { // ZeRO++ qgZ (zero/zeropp/zeropp.h)
    *r = MPI_REQUEST_NULL; return MPI_Allgather(send, sendcount, sendtype, recv, recvcount, recvtype, comm);
}

#endif // ZERO_MPI_SINGLE_H
