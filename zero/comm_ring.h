/*
 * zero/comm_ring.h: the engine's bulk collectives as explicit rings over MPI point-to-point, so
 * the bytes on the wire are the ring's (zero/layout.h's formulas) whatever MPI library runs them.
 * Part of the ZeRO engine (the map is in zero.cuh); zero/comm.h starts and waits on them.
 *
 * Why not MPI_Iallreduce: Open MPI 4.1's non-blocking all-reduce (coll/libnbc) picks a binomial
 * reduce + broadcast, which sends about twice the ring's bytes across the slowest link and keeps
 * unaccounted temporary buffers; a ring in rank order sends each rank's 2n(N-1)/N elements to
 * one neighbour, and with ranks placed host by host (mpirun's default) only one ring edge leaves
 * each host: per host per step, the interface carries one rank's count (printed at start-up).
 *
 * Ring over N ranks in rank order, rank r sends to r+1 and receives from r-1 (mod N); a buffer
 * of n elements is N chunks of shard = n/N (the layout pads every unit to a multiple of N):
 *   reduce-scatter, N-1 steps: at step s send chunk (r-s-1) mod N, receive chunk (r-s-2) mod N
 *       into the receive buffer and add it into that chunk; afterwards chunk r holds the sum over
 *       ranks, in place at buf + r*shard (NCCL's in-place form). Each chunk is summed in one
 *       fixed order (starting at the rank after its owner), so the result is deterministic.
 *   all-gather, N-1 steps: at step s send chunk (r-s) mod N, receive chunk (r-s-1) mod N in place.
 *   all-reduce = reduce-scatter then all-gather (2(N-1) steps; Patarasuk and Yuan 2009,
 *       "Bandwidth optimal all-reduce algorithms for clusters of workstations").
 * Elements sent per rank: (N-1)·shard per phase, as zero/layout.h counts.
 *
 * One ring runs at a time: rings queue in the order they start (the same on every rank, as MPI
 * requires of collectives) and only the queue's head has messages in flight, so one receive
 * buffer of the largest chunk serves them all (counted as bytes_ring). Open MPI moves TCP data
 * only inside MPI calls: every zero_progress / zero_op_wait advances the head as far as its
 * messages allow, and so does the progress thread (zero/progress_cpu.h) between them, so a ring
 * goes on step by step while the model computes; a mutex keeps the two threads out of each
 * other's way (MPI_THREAD_MULTIPLE). Messages use MPI_COMM_WORLD point-to-point with one tag per
 * ring (collectives never match point-to-point traffic); start-up messages use tags below
 * ZERO_RING_TAG_BASE.
 */
#ifndef ZERO_COMM_RING_H
#define ZERO_COMM_RING_H
#ifndef ZERO_CUH
#error "zero/comm_ring.h is part of the ZeRO engine; include zero.cuh"
#endif

#include <pthread.h>

#define ZERO_RING_TAG_BASE 1000
#define ZERO_RING_TAGS 30000 // MPI guarantees tags up to 32767 (the progress thread probes 32000)

// The ring queue's lock, and the engine whose rings the progress thread advances (a process has one).
static pthread_mutex_t zero_ring_mutex = PTHREAD_MUTEX_INITIALIZER;
static ZeroEngine* zero_ring_engine = NULL;

// The receive buffer: one chunk of the largest ring, grown only while nothing is posted into it.
static float* zero_ring_scratch(ZeroEngine* z, size_t shard) {
    if (shard > z->ring.scratch_capacity) {
        free(z->ring.scratch);
        z->ring.scratch = (float*)zero_calloc(shard, sizeof(float), "ring receive buffer");
        z->ring.scratch_capacity = shard;
        z->bytes_ring = shard * sizeof(float);
    }
    return z->ring.scratch;
}

// Post the messages of op's next step (it is the queue's head).
static void zero_ring_post(ZeroEngine* z, ZeroOp* op) {
    ZeroRing* g = &op->ring;
    int N = z->world_size, r = z->rank;
    int right = (r + 1) % N, left = (r + N - 1) % N;
    int send_chunk, recv_chunk;
    float* recv_into;
    if (g->step < g->reduce_steps) { // reduce-scatter phase
        int s = g->step;
        send_chunk = ((r - s - 1) % N + N) % N;
        recv_chunk = ((r - s - 2) % N + N) % N;
        recv_into = zero_ring_scratch(z, g->shard);
    } else { // all-gather phase
        int s = g->step - g->reduce_steps;
        send_chunk = ((r - s) % N + N) % N;
        recv_chunk = ((r - s - 1) % N + N) % N;
        recv_into = g->buf + (size_t)recv_chunk * g->shard;
    }
    g->recv_chunk = recv_chunk;
    // Send: shard elements of chunk send_chunk to the right neighbour; receive shard elements
    // of chunk recv_chunk from the left one (into the receive buffer while reducing).
    MPI_CHECK(MPI_Irecv(recv_into, (int)g->shard, MPI_FLOAT, left, g->tag, MPI_COMM_WORLD, &g->requests[1]));
    MPI_CHECK(MPI_Isend(g->buf + (size_t)send_chunk * g->shard, (int)g->shard, MPI_FLOAT, right, g->tag, MPI_COMM_WORLD,
                        &g->requests[0]));
    g->posted = 1;
}

// Advance op (the head) as far as its messages have arrived; returns 1 when it is complete.
static int zero_ring_advance(ZeroEngine* z, ZeroOp* op) {
    ZeroRing* g = &op->ring;
    for (;;) {
        if (g->posted) {
            int done = 0;
            MPI_CHECK(MPI_Testall(2, g->requests, &done, MPI_STATUSES_IGNORE));
            if (!done) return 0;
            g->posted = 0;
            if (g->step < g->reduce_steps) { // add the left neighbour's partial sum into our chunk
                float* chunk = g->buf + (size_t)g->recv_chunk * g->shard;
                const float* partial = z->ring.scratch;
                for (size_t i = 0; i < g->shard; i++) chunk[i] += partial[i];
            }
            g->step++;
        }
        if (g->step == g->steps) return 1;
        zero_ring_post(z, op);
    }
}

// Advance the queue (its lock held): finish rings at its head in order, start the next one's messages.
static void zero_ring_progress_locked(ZeroEngine* z) {
    while (z->ring.head != NULL) {
        ZeroOp* op = z->ring.head;
        if (!zero_ring_advance(z, op)) return;
        z->ring.head = op->ring.next;
        if (z->ring.head == NULL) z->ring.tail = NULL;
        op->ring.queued = 0;
        zero_trace_done(op); // -tr: its completion, whichever thread saw it (zero/trace/trace.h)
    }
}

static void zero_ring_progress(ZeroEngine* z) {
    pthread_mutex_lock(&zero_ring_mutex);
    zero_ring_progress_locked(z);
    pthread_mutex_unlock(&zero_ring_mutex);
}

// Has op's ring completed? Advances the queue first.
static int zero_ring_done(ZeroEngine* z, ZeroOp* op) {
    pthread_mutex_lock(&zero_ring_mutex);
    zero_ring_progress_locked(z);
    int done = !op->ring.queued;
    pthread_mutex_unlock(&zero_ring_mutex);
    return done;
}

// From the progress thread: advance the rings unless the main thread is at it right now.
static void zero_ring_progress_background(void) {
    if (pthread_mutex_trylock(&zero_ring_mutex) != 0) return;
    if (zero_ring_engine != NULL) zero_ring_progress_locked(zero_ring_engine);
    pthread_mutex_unlock(&zero_ring_mutex);
}

// The engine is going away: the progress thread must not touch it any more.
static void zero_ring_forget(ZeroEngine* z) {
    pthread_mutex_lock(&zero_ring_mutex);
    if (zero_ring_engine == z) zero_ring_engine = NULL;
    pthread_mutex_unlock(&zero_ring_mutex);
}

// Queue a ring on buf (n elements, N chunks): reduce_steps of reduce-scatter, then
// (steps - reduce_steps) of all-gather. Returns at once; its messages start when it is the head.
static void zero_ring_begin(ZeroEngine* z, ZeroOp* op, float* buf, size_t n, int reduce_steps, int steps) {
    ZeroRing* g = &op->ring;
    g->buf = buf;
    g->shard = n / (size_t)z->world_size;
    g->reduce_steps = reduce_steps;
    g->steps = steps;
    g->step = 0;
    g->posted = 0;
    g->tag = ZERO_RING_TAG_BASE + (int)(z->ring.count++ % ZERO_RING_TAGS);
    g->next = NULL;
    g->queued = 1;
    pthread_mutex_lock(&zero_ring_mutex);
    zero_ring_engine = z;
    if (z->ring.tail != NULL) z->ring.tail->ring.next = op;
    else z->ring.head = op;
    z->ring.tail = op;
    zero_ring_progress_locked(z);
    pthread_mutex_unlock(&zero_ring_mutex);
}

#endif // ZERO_COMM_RING_H
