/*
 * zero/offload/offload.h: ZeRO-Offload and ZeRO-Infinity placement, where the optimizer state and the
 * parameter shard live between uses (flags -zo, -zp, -zd). Part of the ZeRO engine (the map is in
 * zero.cuh).
 *
 * Sources: Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training" (sec. 4:
 * fp32 master weights and Adam state, 12Ψ, and the gradients live on the CPU, which runs the
 * optimizer; the GPU keeps the 2Ψ fp16 parameters); Rajbhandari et al. 2021, "ZeRO-Infinity:
 * Breaking the GPU Memory Wall for Extreme Scale Deep Learning" (sec. 5: the stage-3 partitions of
 * parameters, gradients and optimizer state move to CPU memory or NVMe, fetched before use).
 *
 *   -zo none|cpu|nvme  the optimizer state: fp32 master weights (GPU build), Adam m and v, and the
 *                      AdamW step on it. none: where the engine computes (the GPU's memory; the CPU
 *                      build's RAM). cpu: pinned host memory, the host runs AdamW (GPU build; in
 *                      the CPU build the same as none). nvme: files under -zd, streamed through
 *                      host memory unit by unit. Stages 1-3 (stage 0 has no shard to place).
 *   -zp none|cpu|nvme  the parameter shard (ZeRO stage 3 only), the same way; it is read back
 *                      before each of the unit's all-gathers (prefetched with the gather).
 *   -zd DIR            the directory for the offload files (NVMe), one file per rank.
 *
 * NVMe layout: this rank's file DIR/zero_offload_<pid>_r<rank>_of_<N>.bin holds, for each unit in
 * order, the regions of the rank's slice that live on NVMe, back to back: [parameters][master
 * weights][Adam m][Adam v] (those placed there), each rounded up to NVME_ALIGN bytes. The
 * optimizer walks the units in use order, each cut into pieces of ZERO_OFFLOAD_PIECE elements (so
 * the staging stays a few MiB whatever the model), with three staging slots: piece q+1 is read
 * while piece q is updated and piece q-1 written back (and the first two reads start when
 * backward does, so they hide behind it). A stage-3 all-gather reads the unit's parameter region
 * in one request into a bounce buffer. Each piece's checksum is kept in memory from its last
 * write and checked on every read: a file changed under the running job stops every rank with one
 * error line. The file is preallocated at start-up, so
 * a disk without room fails then, not mid-run; an I/O error mid-run (a disk that fills up anyway,
 * say on a copy-on-write filesystem) stops every rank with one line, and the checkpoints in -o,
 * written to temporary names and renamed, stay the last complete ones. The file is removed at
 * exit, also when the job ends under the rank (an abort, the launcher's SIGTERM: zero/cluster/faults.h).
 * Checkpoints are the same files whatever the placement (zero/checkpoint.h reads and writes the
 * state through the accessors here, and writes them under its contract: temporary name and
 * rename, the run id and checksums), so a run resumes under any other placement. What the
 * placement costs in bytes, per rank and per step, and how it is printed: zero/offload/offload_accounting.h.
 */
#ifndef ZERO_OFFLOAD_H
#define ZERO_OFFLOAD_H
#ifndef ZERO_CUH
#error "zero/offload/offload.h is part of the ZeRO engine; include zero.cuh"
#endif
#include <sys/statvfs.h>

// ---- flags ----

// "none", "cpu" or "nvme" into *placement; returns 0, or -1 for anything else.
static int zero_placement_parse(const char* s, int* placement) {
    for (int k = 0; k < 3; k++) if (strcmp(s, zero_placement_names[k]) == 0) { *placement = k; return 0; }
    return -1;
}

// The checks that need the compiled stage; one error line into err, returns 0 when fine.
static int zero_offload_check_args(const ZeroOffloadArgs* a, int stage, char* err, size_t cap) {
    if (a->params != ZERO_PLACE_NONE && stage != 3)
        snprintf(err, cap, "error: -zp %s: the parameter shard exists at ZeRO stage 3 only; expected -zp none at stage %d (or a build with ZERO_STAGE=3)",
                 zero_placement_names[a->params], stage);
    else if (a->optimizer != ZERO_PLACE_NONE && stage == 0)
        snprintf(err, cap, "error: -zo %s: ZeRO stage 0 replicates the optimizer state, so there is no shard to offload; expected ZeRO stage 1, 2 or 3",
                 zero_placement_names[a->optimizer]);
    else if ((a->optimizer == ZERO_PLACE_NVME || a->params == ZERO_PLACE_NVME) && a->dir == NULL)
        snprintf(err, cap, "error: -%s nvme: the offload files need a directory; expected -zd DIR as well",
                 a->optimizer == ZERO_PLACE_NVME ? "zo" : "zp");
    else if (a->dir != NULL && a->optimizer != ZERO_PLACE_NVME && a->params != ZERO_PLACE_NVME)
        snprintf(err, cap, "error: -zd %s: nothing is placed on NVMe; expected -zo nvme or -zp nvme with it", a->dir);
    else return 0;
    return -1;
}

// ---- the file's regions and pieces ----

// Bytes per element of a region: the parameters' are the build's (bf16 with master weights, the GPU
// build; fp32 without), the rest fp32. _for: either build's, for the planner (plan/plan_offload.h).
static size_t zero_region_elem_bytes_for(int region, int has_master) { return region == ZERO_REGION_PARAMS && has_master ? 2 : sizeof(float); }
static size_t zero_region_elem_bytes(int region) { return zero_region_elem_bytes_for(region, ZERO_HAS_MASTER); }

static size_t* zero_region_bytes(const ZeroEngine* z, int unit, int region) {
    return &z->offload.region_bytes[(size_t)unit * ZERO_NUM_REGIONS + region];
}

// File offset of `region` of the unit.
static uint64_t zero_region_offset(const ZeroEngine* z, int unit, int region) {
    uint64_t at = z->offload.unit_offset[unit];
    for (int r = 0; r < region; r++) at += *zero_region_bytes(z, unit, r);
    return at;
}

// Pieces of a unit: its regions cut into ZERO_OFFLOAD_PIECE elements, so that the staging slots
// stay small whatever the unit's size (1 when nothing is on NVMe: the whole owned slice).
static int zero_offload_pieces_of(const ZeroOffload* o, const ParamLayout* layout, int unit) {
    if (!o->active) return 1;
    size_t shard = layout->units[unit].shard_numel;
    return (int)((shard + o->piece - 1) / o->piece);
}
static int zero_offload_unit_pieces(const ZeroEngine* z, int unit) { return zero_offload_pieces_of(&z->offload, z->layout, unit); }

// Elements [*lo, *hi) of the unit's owned slice that piece k covers.
static void zero_offload_piece_range_of(const ZeroOffload* o, const ParamLayout* layout, int unit, int k, size_t* lo, size_t* hi) {
    size_t shard = layout->units[unit].shard_numel;
    if (!o->active) { *lo = 0; *hi = shard; return; }
    *lo = (size_t)k * o->piece;
    *hi = *lo + o->piece < shard ? *lo + o->piece : shard;
}
static void zero_offload_piece_range(const ZeroEngine* z, int unit, int k, size_t* lo, size_t* hi) {
    zero_offload_piece_range_of(&z->offload, z->layout, unit, k, lo, hi);
}

// Bytes of piece k of a region in the file (its elements, the last piece up to the region's rounded end).
static size_t zero_piece_bytes_of(const ZeroOffload* o, int unit, int region, int k) {
    size_t stride = o->slot_stride[region], region_bytes = o->region_bytes[(size_t)unit * ZERO_NUM_REGIONS + region];
    size_t at = (size_t)k * stride;
    return region_bytes - at < stride ? region_bytes - at : stride;
}
static size_t zero_piece_bytes(const ZeroEngine* z, int unit, int region, int k) { return zero_piece_bytes_of(&z->offload, unit, region, k); }

static uint64_t* zero_piece_checksum(const ZeroEngine* z, int unit, int k, int region) {
    return &z->offload.checksum[(size_t)(z->offload.piece_first[unit] + k) * ZERO_NUM_REGIONS + region];
}

/*
 * What lives on NVMe for these placements and the file's layout at `layout` (each unit's regions,
 * pieces, the staging slots and bounce buffers), no I/O, no engine: zero_offload_setup (the
 * engine) and the planner (plan/plan_offload.h) both size the file, the staging and the bytes per
 * step from this (the planner for either build: _for with has_master). zero_offload_layout_free releases its tables.
 */
static void zero_offload_layout_for(ZeroOffload* o, const ParamLayout* layout, int optimizer, int params, int has_master) {
    memset(o, 0, sizeof(*o));
    o->fd = -1;
    o->optimizer = optimizer;
    o->params = params;
    o->on_nvme[ZERO_REGION_M] = o->on_nvme[ZERO_REGION_V] = optimizer == ZERO_PLACE_NVME;
    o->on_nvme[ZERO_REGION_MASTER] = has_master && optimizer == ZERO_PLACE_NVME;
    o->on_nvme[ZERO_REGION_PARAMS] = params == ZERO_PLACE_NVME;
    for (int r = 0; r < ZERO_NUM_REGIONS; r++) o->active |= o->on_nvme[r];
    if (!o->active) return;
    // Tests only: ZERO_TEST_OFFLOAD_PIECE=n (a multiple of 1024) cuts small models into many pieces.
    const char* piece = getenv("ZERO_TEST_OFFLOAD_PIECE");
    o->piece = piece ? (size_t)atol(piece) : ZERO_OFFLOAD_PIECE;
    if (o->piece == 0 || o->piece % 1024 != 0) { fprintf(stderr, "error: ZERO_TEST_OFFLOAD_PIECE=%s: expected a positive multiple of 1024\n", piece); exit(1); }
    int n = layout->num_units;
    o->region_bytes = (size_t*)zero_calloc((size_t)n * ZERO_NUM_REGIONS, sizeof(size_t), "offload regions");
    o->unit_offset = (uint64_t*)zero_calloc((size_t)n, sizeof(uint64_t), "offload offsets");
    o->piece_first = (int*)zero_calloc((size_t)n, sizeof(int), "offload pieces");
    for (int r = 0; r < ZERO_NUM_REGIONS; r++) {
        o->slot_stride[r] = o->on_nvme[r] ? o->piece * zero_region_elem_bytes_for(r, has_master) : 0;
        o->slot_bytes += o->slot_stride[r];
    }
    for (int u = 0; u < n; u++) {
        o->unit_offset[u] = o->file_bytes;
        o->piece_first[u] = o->num_pieces;
        o->num_pieces += zero_offload_pieces_of(o, layout, u);
        for (int r = 0; r < ZERO_NUM_REGIONS; r++) {
            if (!o->on_nvme[r]) continue;
            size_t b = nvme_round(layout->units[u].shard_numel * zero_region_elem_bytes_for(r, has_master));
            o->region_bytes[(size_t)u * ZERO_NUM_REGIONS + r] = b;
            o->file_bytes += b;
            if (r == ZERO_REGION_PARAMS && b > o->bounce_bytes) o->bounce_bytes = b;
        }
    }
}
static void zero_offload_layout(ZeroOffload* o, const ParamLayout* layout, int optimizer, int params) {
    zero_offload_layout_for(o, layout, optimizer, params, ZERO_HAS_MASTER); // this build's
}

static void zero_offload_layout_free(ZeroOffload* o) {
    free(o->region_bytes); free(o->unit_offset); free(o->piece_first);
    o->region_bytes = NULL; o->unit_offset = NULL; o->piece_first = NULL;
}

/*
 * Decide what lives on NVMe and lay out the file (no I/O yet): called by zero_init before it
 * allocates the state, which then leaves out what is placed on NVMe.
 */
static void zero_offload_setup(ZeroEngine* z, const ZeroOffloadArgs* a) {
    ZeroOffload* o = &z->offload;
    memset(o, 0, sizeof(*o));
    o->fd = -1;
    if (a == NULL) return;
    zero_offload_layout(o, z->layout, a->optimizer, a->params);
    if (!o->active) return;
    snprintf(o->dir, sizeof(o->dir), "%s", a->dir);
    o->checksum = (uint64_t*)zero_calloc((size_t)o->num_pieces * ZERO_NUM_REGIONS, sizeof(uint64_t), "offload checksums");
    snprintf(o->path, sizeof(o->path), "%s/zero_offload_%ld_r%d_of_%d.bin", o->dir, (long)getpid(), z->rank, z->world_size);
}

// Host bytes the offload path keeps for staging (counted as working memory).
static size_t zero_offload_staging_bytes_of(const ZeroOffload* o) {
    if (!o->active) return 0;
    return ZERO_OFFLOAD_SLOTS * o->slot_bytes + 2 * o->bounce_bytes;
}
static size_t zero_offload_staging_bytes(const ZeroEngine* z) { return zero_offload_staging_bytes_of(&z->offload); }

/*
 * Create and preallocate this rank's offload file, start the I/O engine, allocate the staging
 * slots, and record the checksums of the (zero) initial regions. Every rank calls it (after MPI
 * started); a missing, unwritable or full -zd stops all ranks with the lowest failing rank's line.
 */
static void zero_offload_open(ZeroEngine* z) {
    ZeroOffload* o = &z->offload;
    if (!o->active) return;
    char err[9000] = "";
    struct stat st;
    int ok = 1;
    if (stat(o->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, sizeof(err), "error: -zd %s (rank %d on %s): %s; expected an existing, writable directory (on an NVMe disk)",
                 o->dir, z->rank, zero_cluster.host, stat(o->dir, &st) != 0 ? strerror(errno) : "not a directory");
        ok = 0;
    } else if ((o->fd = nvme_open(o->path, &o->direct)) < 0) {
        snprintf(err, sizeof(err), "error: -zd %s (rank %d on %s): cannot create the offload file %s (%s); expected a writable directory",
                 o->dir, z->rank, zero_cluster.host, o->path, strerror(errno));
        ok = 0;
    } else {
        int rc = posix_fallocate(o->fd, 0, (off_t)o->file_bytes);
        if (rc != 0) {
            struct statvfs vfs;
            unsigned long long avail = statvfs(o->dir, &vfs) == 0 ? (unsigned long long)vfs.f_bavail * vfs.f_frsize : 0;
            snprintf(err, sizeof(err), "error: -zd %s (rank %d on %s): cannot reserve %zu bytes for this rank's offload file (%s; %llu bytes free); "
                     "expected a disk with room for the placed state", o->dir, z->rank, zero_cluster.host, o->file_bytes, strerror(rc), avail);
            close(o->fd);
            unlink(o->path);
            o->fd = -1;
            ok = 0;
        }
    }
    if (ok) zero_faults_remove_at_end(o->path); // an abort, a signal or an error exit removes it too
    zero_startup_agree(ok, err, "creating the offload files"); // within -wt; the failing rank's line (zero/cluster/handshake.h)
    nvme_io_init(&o->io, NVME_BACKEND_URING);
    for (int i = 0; i < ZERO_OFFLOAD_SLOTS; i++) {
        o->opt_slot[i].data = (char*)nvme_alloc(o->slot_bytes, "offload staging slot");
        o->opt_slot[i].unit = -1;
    }
    for (int i = 0; i < 2; i++) {
        o->bounce[i] = o->bounce_bytes ? (char*)nvme_alloc(o->bounce_bytes, "offload parameter bounce buffer") : NULL;
        o->bounce_unit[i] = -1;
    }
    // The preallocated file reads as zeros: Adam m and v start there; the parameters are written
    // (and their checksums set) when the model hands them over (zero_set_unit_params).
    for (int u = 0; u < z->layout->num_units; u++)
        for (int k = 0; k < zero_offload_unit_pieces(z, u); k++)
            for (int r = 0; r < ZERO_NUM_REGIONS; r++)
                if (o->on_nvme[r]) *zero_piece_checksum(z, u, k, r) = nvme_checksum(o->opt_slot[0].data, zero_piece_bytes(z, u, r, k));
}

// ---- waiting and checking ----

// One line naming the file, the unit and what failed, then every rank stops.
static void zero_offload_fail(ZeroEngine* z, const char* verb, int unit, const char* what, size_t bytes, uint64_t offset, int error) {
    char name[64];
    fprintf(stderr, "error: -zd %s (rank %d on %s): %s %s (%s of unit %s, %zu bytes at offset %llu) failed: %s; expected the offload file to stay "
            "readable, writable and unchanged while the job runs (the last checkpoint in -o is intact)\n",
            z->offload.dir, z->rank, zero_cluster.host, verb, z->offload.path, what, zero_unit_name(z->layout, unit, name, sizeof(name)), bytes,
            (unsigned long long)offset, nvme_strerror(error));
    zero_abort_all_ranks(1);
}

// Wait for a request on the critical path (timed as exposed I/O); stop all ranks on an error.
static void zero_offload_wait(ZeroEngine* z, NvmeRequest* r, int unit, const char* what) {
    if (r->state == NVME_IDLE) return;
    double t0 = zero_clock();
    int op = r->op;
    size_t bytes = r->bytes;
    uint64_t offset = r->offset;
    int error = nvme_wait(&z->offload.io, r);
    double waited = zero_clock() - t0;
    z->offload.io_wait_s_step += waited;
    z->offload.io_wait_s_total += waited;
    if (error) zero_offload_fail(z, op == NVME_READ ? "reading" : "writing", unit, what, bytes, offset, error);
}

// Piece k of `region` just read back (at data) must be what this job wrote there.
static void zero_offload_verify(ZeroEngine* z, int unit, int k, int region, const void* data) {
    size_t bytes = zero_piece_bytes(z, unit, region, k);
    uint64_t want = *zero_piece_checksum(z, unit, k, region), got = nvme_checksum(data, bytes);
    if (got == want) return;
    char name[64];
    fprintf(stderr, "error: -zd %s (rank %d on %s): the offload file %s changed under the running job: %s of unit %s (%zu bytes at offset %llu) reads back "
            "with checksum %016llx; expected %016llx, what this job wrote (nothing else may write the offload files)\n",
            z->offload.dir, z->rank, zero_cluster.host, z->offload.path, zero_region_names[region], zero_unit_name(z->layout, unit, name, sizeof(name)), bytes,
            (unsigned long long)(zero_region_offset(z, unit, region) + (uint64_t)k * z->offload.slot_stride[region]),
            (unsigned long long)got, (unsigned long long)want);
    zero_abort_all_ranks(1);
}

static void zero_offload_submit(ZeroEngine* z, NvmeRequest* r, NvmeOp op, void* buf, size_t bytes, uint64_t offset) {
    nvme_submit(&z->offload.io, r, op, z->offload.fd, buf, bytes, offset);
}

// Submit the reads (or writes) of piece k of the unit between slot s and the file.
static void zero_offload_piece_io(ZeroEngine* z, ZeroOffloadSlot* s, int unit, int k, NvmeOp op) {
    char* at = s->data;
    for (int r = 0; r < ZERO_NUM_REGIONS; r++) {
        if (!z->offload.on_nvme[r]) continue;
        uint64_t offset = zero_region_offset(z, unit, r) + (uint64_t)k * z->offload.slot_stride[r];
        zero_offload_submit(z, op == NVME_READ ? &s->read[r] : &s->write[r], op, at, zero_piece_bytes(z, unit, r, k), offset);
        at += z->offload.slot_stride[r];
    }
    s->unit = unit;
    s->piece = k;
}

// Wait for slot s's reads (check them) or writes.
static void zero_offload_slot_wait(ZeroEngine* z, ZeroOffloadSlot* s, NvmeOp op) {
    char* at = s->data;
    for (int r = 0; r < ZERO_NUM_REGIONS; r++) {
        if (!z->offload.on_nvme[r]) continue;
        if (op == NVME_READ) {
            int pending = s->read[r].state != NVME_IDLE;
            zero_offload_wait(z, &s->read[r], s->unit, zero_region_names[r]);
            if (pending) zero_offload_verify(z, s->unit, s->piece, r, at);
        } else {
            zero_offload_wait(z, &s->write[r], s->unit, zero_region_names[r]);
        }
        at += z->offload.slot_stride[r];
    }
}

// Wait for every write still in flight (before the file is read outside the optimizer's order).
static void zero_offload_drain(ZeroEngine* z) {
    ZeroOffload* o = &z->offload;
    if (!o->active) return;
    for (int i = 0; i < ZERO_OFFLOAD_SLOTS; i++) zero_offload_slot_wait(z, &o->opt_slot[i], NVME_WRITE);
}

// Bytes read and written on NVMe so far (submitted: a step's count does not depend on timing).
static long long zero_offload_bytes_read(const ZeroEngine* z) { return z->offload.io.bytes_read_submitted; }
static long long zero_offload_bytes_written(const ZeroEngine* z) { return z->offload.io.bytes_written_submitted; }

// ---- whole regions, synchronously (set-up, checkpoints) ----

// Read (or write) `region` of the unit to (from) host memory `data` (shard_numel elements),
// piece by piece through slot 0.
static void zero_offload_region_io(ZeroEngine* z, int unit, int region, void* data, int write) {
    ZeroOffload* o = &z->offload;
    zero_offload_drain(z);
    ZeroOffloadSlot* s = &o->opt_slot[0];
    zero_offload_slot_wait(z, s, NVME_READ);
    size_t elem = zero_region_elem_bytes(region);
    for (int k = 0; k < zero_offload_unit_pieces(z, unit); k++) {
        size_t lo, hi, bytes = zero_piece_bytes(z, unit, region, k);
        zero_offload_piece_range(z, unit, k, &lo, &hi);
        uint64_t offset = zero_region_offset(z, unit, region) + (uint64_t)k * o->slot_stride[region];
        if (write) {
            memset(s->data, 0, bytes);
            memcpy(s->data, (char*)data + lo * elem, (hi - lo) * elem);
            *zero_piece_checksum(z, unit, k, region) = nvme_checksum(s->data, bytes);
            zero_offload_submit(z, &s->write[0], NVME_WRITE, s->data, bytes, offset);
            zero_offload_wait(z, &s->write[0], unit, zero_region_names[region]);
        } else {
            zero_offload_submit(z, &s->read[0], NVME_READ, s->data, bytes, offset);
            zero_offload_wait(z, &s->read[0], unit, zero_region_names[region]);
            zero_offload_verify(z, unit, k, region, s->data);
            memcpy((char*)data + lo * elem, s->data, (hi - lo) * elem);
        }
    }
    s->unit = -1;
}

// ---- the optimizer's stream of pieces ----

// The q-th piece of the optimizer's walk this step (units in use order, each unit's pieces in
// order): its unit and piece index; 0 past the end.
static int zero_offload_seq_piece(const ZeroEngine* z, int q, int* unit, int* k) {
    for (int i = 0; i < z->layout->num_units; i++) {
        int u = zero_unit_in_use_order(z->layout, i), pieces = zero_offload_unit_pieces(z, u);
        if (q < pieces) { *unit = u; *k = q; return 1; }
        q -= pieces;
    }
    return 0;
}

// Start reading the optimizer's q-th piece into slot q % 3, once that slot's previous
// write-back (piece q-3) has finished.
static void zero_offload_read_piece(ZeroEngine* z, int q) {
    ZeroOffload* o = &z->offload;
    int unit, k;
    if (!o->active || !zero_offload_seq_piece(z, q, &unit, &k)) return;
    ZeroOffloadSlot* s = &o->opt_slot[q % ZERO_OFFLOAD_SLOTS];
    zero_offload_slot_wait(z, s, NVME_WRITE);
    zero_offload_piece_io(z, s, unit, k, NVME_READ);
}

// Backward started on the step's last micro-step: read the optimizer's first two pieces now, so
// the disk works while backward computes.
static void zero_offload_prefetch_optimizer(ZeroEngine* z) {
    ZeroOffload* o = &z->offload;
    if (!o->active || o->prefetched) return;
    o->prefetched = 1;
    o->seq = 0;
    zero_offload_read_piece(z, 0);
    zero_offload_read_piece(z, 1);
}

/*
 * Piece k of the unit is next for AdamW: point region[r] (the piece's elements of each region
 * as the engine keeps them in memory: parameters, master weights, m, v) at the staged copies of
 * the regions that live on NVMe, once read and checked.
 */
static void zero_offload_piece_begin(ZeroEngine* z, int unit, int k, void** region) {
    ZeroOffload* o = &z->offload;
    if (!o->active) return;
    zero_offload_prefetch_optimizer(z); // (already done when backward ran on this step)
    ZeroOffloadSlot* s = &o->opt_slot[o->seq % ZERO_OFFLOAD_SLOTS];
    if (s->unit != unit || s->piece != k) {
        fprintf(stderr, "error: internal: the optimizer's piece %d is unit %d piece %d, the slot holds unit %d piece %d\n", o->seq, unit, k, s->unit, s->piece);
        zero_abort_all_ranks(1);
    }
    zero_offload_slot_wait(z, s, NVME_READ);
    char* at = s->data;
    for (int r = 0; r < ZERO_NUM_REGIONS; r++) {
        if (!o->on_nvme[r]) continue;
        region[r] = at;
        at += o->slot_stride[r];
    }
}

// AdamW is done with the piece: checksum and write it back, and start reading piece q+2 into
// the slot piece q-1 is being written back from.
static void zero_offload_piece_end(ZeroEngine* z, int unit, int k) {
    ZeroOffload* o = &z->offload;
    if (!o->active) return;
    ZeroOffloadSlot* s = &o->opt_slot[o->seq % ZERO_OFFLOAD_SLOTS];
    char* at = s->data;
    for (int r = 0; r < ZERO_NUM_REGIONS; r++) {
        if (!o->on_nvme[r]) continue;
        *zero_piece_checksum(z, unit, k, r) = nvme_checksum(at, zero_piece_bytes(z, unit, r, k));
        at += o->slot_stride[r];
    }
    zero_offload_piece_io(z, s, unit, k, NVME_WRITE);
    zero_offload_read_piece(z, o->seq + 2);
    o->seq++;
    if (o->seq == o->num_pieces) o->prefetched = 0; // the last piece: the next step prefetches again
}

// ---- stage 3, -zp nvme: the parameter shard read back before each all-gather ----

// Start reading the unit's parameter shard into bounce buffer b (the optimizer may still be
// writing that unit: wait for it first).
static void zero_offload_param_read(ZeroEngine* z, int b, int unit) {
    ZeroOffload* o = &z->offload;
    for (int i = 0; i < ZERO_OFFLOAD_SLOTS; i++)
        if (o->opt_slot[i].unit == unit) zero_offload_slot_wait(z, &o->opt_slot[i], NVME_WRITE);
    o->bounce_unit[b] = unit;
    zero_offload_submit(z, &o->bounce_read[b], NVME_READ, o->bounce[b], *zero_region_bytes(z, unit, ZERO_REGION_PARAMS),
                        zero_region_offset(z, unit, ZERO_REGION_PARAMS));
}

// Wait for bounce buffer b's read; returns the unit's shard (shard_numel elements), checked.
static const ZeroFloat* zero_offload_param_read_wait(ZeroEngine* z, int b) {
    ZeroOffload* o = &z->offload;
    int unit = o->bounce_unit[b];
    zero_offload_wait(z, &o->bounce_read[b], unit, "parameters");
    for (int k = 0; k < zero_offload_unit_pieces(z, unit); k++)
        zero_offload_verify(z, unit, k, ZERO_REGION_PARAMS, o->bounce[b] + (size_t)k * o->slot_stride[ZERO_REGION_PARAMS]);
    o->bounce_unit[b] = -1;
    return (const ZeroFloat*)o->bounce[b];
}

static void zero_offload_free(ZeroEngine* z) {
    ZeroOffload* o = &z->offload;
    if (o->active && o->fd >= 0) {
        zero_offload_drain(z);
        for (int i = 0; i < ZERO_OFFLOAD_SLOTS; i++) { zero_offload_slot_wait(z, &o->opt_slot[i], NVME_READ); free(o->opt_slot[i].data); }
        for (int i = 0; i < 2; i++) { zero_offload_wait(z, &o->bounce_read[i], o->bounce_unit[i], "parameters"); free(o->bounce[i]); }
        nvme_io_free(&o->io);
        close(o->fd);
        unlink(o->path);
        zero_faults_remove_at_end(NULL);
    }
    zero_offload_layout_free(o);
    free(o->checksum);
    memset(o, 0, sizeof(*o));
}


// The step's I/O counters (zero/hooks.h; both engines' zero_step_begin).
static void zero_hook_offload_step_begin(ZeroEngine* z) {
    z->offload.io_wait_s_step = 0.0;
    z->offload.read_at_step = zero_offload_bytes_read(z);
    z->offload.written_at_step = zero_offload_bytes_written(z);
}

// ============================================================================================
// The CPU engine's offload hooks (declared in zero/hooks.h, called by zero/engine_cpu.h and
// zero/optimizer_cpu.h): the calls above, in the engine's words (a ZeroBuffer, not a region).

#if !ZERO_GPU_BUILD
static int zero_offload_region_of(ZeroBuffer which) {
    return which == ZERO_BUF_PARAMS ? ZERO_REGION_PARAMS : which == ZERO_BUF_ADAM_M ? ZERO_REGION_M : ZERO_REGION_V;
}

static void zero_hook_offload_setup(ZeroEngine* z, const ZeroOffloadArgs* args) {
    zero_offload_setup(z, args);
    z->bytes_working += zero_offload_staging_bytes(z);
    zero_offload_open(z);
}
static int zero_hook_offload_on_nvme(const ZeroEngine* z, ZeroBuffer which) { return z->offload.on_nvme[zero_offload_region_of(which)]; }
static void zero_hook_offload_free(ZeroEngine* z) { zero_offload_free(z); }
static void zero_hook_offload_unit_io(ZeroEngine* z, int unit, ZeroBuffer which, void* data, int write) {
    zero_offload_region_io(z, unit, zero_offload_region_of(which), data, write);
}
// -zo nvme: the unit's slices of Adam m and v (shard_numel elements each) to or from the file; 0 when in RAM.
static int zero_hook_offload_optimizer_io(ZeroEngine* z, int unit, float* m, float* v, int write) {
    if (!z->offload.on_nvme[ZERO_REGION_M]) return 0;
    zero_offload_region_io(z, unit, ZERO_REGION_M, m, write);
    zero_offload_region_io(z, unit, ZERO_REGION_V, v, write);
    return 1;
}

static void zero_hook_offload_prefetch(ZeroEngine* z) { zero_offload_prefetch_optimizer(z); }

// The optimizer's walk over a unit's owned slice, piece by piece (one piece when nothing is on NVMe).
static int zero_hook_offload_piece(const ZeroEngine* z, int unit, int k, size_t* lo, size_t* hi) {
    if (k >= zero_offload_unit_pieces(z, unit)) return 0;
    zero_offload_piece_range(z, unit, k, lo, hi);
    return 1;
}
static void zero_hook_offload_piece_begin(ZeroEngine* z, int unit, int k, float** p, float** m, float** v) {
    void* region[ZERO_NUM_REGIONS] = {*p, NULL, *m, *v};
    zero_offload_piece_begin(z, unit, k, region); // nvme: the staged copies, read and checked
    *p = (float*)region[ZERO_REGION_PARAMS], *m = (float*)region[ZERO_REGION_M], *v = (float*)region[ZERO_REGION_V];
}
static void zero_hook_offload_piece_end(ZeroEngine* z, int unit, int k) { zero_offload_piece_end(z, unit, k); }

// Stage 3, -zp nvme: start the all-gathers whose shards are being read from NVMe, oldest first,
// waiting for each read, up to working unit `upto` (NULL: all of them; a unit not being read:
// none). Every rank must issue its collectives in the same order, so this runs only at fixed
// points of the model's calls (never when a read happens to finish): a unit prefetched at one
// unit's start is gathered at its end.
static void zero_hook_offload_start_gathers(ZeroEngine* z, ZeroWorkingUnit* upto) {
    int* awaiting = z->offload.awaiting_read; // per param working unit
    if (upto != NULL && !awaiting[upto - z->param_work]) return;
    for (;;) {
        ZeroWorkingUnit* oldest = NULL;
        for (int i = 0; i < ZERO_WORKING_UNITS; i++)
            if (awaiting[i] && (oldest == NULL || z->param_work[i].age < oldest->age)) oldest = &z->param_work[i];
        if (oldest == NULL) return;
        const ParamUnit* u = &z->layout->units[oldest->unit];
        const ZeroFloat* mine = zero_offload_param_read_wait(z, awaiting[oldest - z->param_work] - 1);
        awaiting[oldest - z->param_work] = 0;
        // The bounce buffer goes back at once: the shard is copied to its place and gathered in place.
        memcpy(oldest->data + (size_t)z->rank * u->shard_numel, mine, u->shard_numel * sizeof(float));
        zero_op_all_gather(z, &oldest->op, NULL, oldest->data, u->padded_numel, oldest->unit, "parameters");
        if (oldest == upto) return;
    }
}

// Stage 3, -zp nvme: the gather of `unit` into working unit w starts with reading its shard from
// NVMe into a bounce buffer; zero_hook_offload_start_gathers gathers it when asked. Returns 0
// when the shard is in RAM (the core gathers it).
static int zero_hook_offload_param_gather(ZeroEngine* z, ZeroWorkingUnit* w, int unit) {
    if (!z->offload.on_nvme[ZERO_REGION_PARAMS]) return 0;
    int busy[2] = {0, 0}; // the two bounce buffers: gather what holds them if both are taken
    for (int i = 0; i < ZERO_WORKING_UNITS; i++) if (z->offload.awaiting_read[i]) busy[z->offload.awaiting_read[i] - 1] = 1;
    if (busy[0] && busy[1]) { zero_hook_offload_start_gathers(z, NULL); busy[0] = busy[1] = 0; }
    int b = busy[0] ? 1 : 0;
    zero_offload_param_read(z, b, unit);
    z->offload.awaiting_read[w - z->param_work] = 1 + b;
    return 1;
}
#endif // !ZERO_GPU_BUILD

#endif // ZERO_OFFLOAD_H
