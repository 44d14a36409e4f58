/*
 * zero/offload/offload_state.h: ZeRO-Offload / ZeRO-Infinity's state (what -zo, -zp and -zd ask
 * for, the NVMe file's regions and pieces, the staging slots), reached from the engine by one
 * field, ZeroEngine.offload. What it adds to the core is zero/offload/offload.h (the zero_offload_*
 * functions the CPU engine calls). Part of the ZeRO engine (the map is in zero.cuh).
 */
#ifndef ZERO_OFFLOAD_STATE_H
#define ZERO_OFFLOAD_STATE_H
#ifndef ZERO_CUH
#error "zero/offload/offload_state.h is part of the ZeRO engine; include zero.cuh"
#endif

// Placement (zero/offload/offload.h): where the optimizer state and the parameter shard live

typedef enum { ZERO_PLACE_NONE, ZERO_PLACE_CPU, ZERO_PLACE_NVME } ZeroPlacement;
static const char* const zero_placement_names[] = {"none", "cpu", "nvme"};

// The regions of a unit's offloaded state, in file (and staging) order.
typedef enum { ZERO_REGION_PARAMS, ZERO_REGION_MASTER, ZERO_REGION_M, ZERO_REGION_V, ZERO_NUM_REGIONS } ZeroRegion;
static const char* const zero_region_names[ZERO_NUM_REGIONS] = {"parameters", "master weights", "Adam m", "Adam v"};

// Host memory for one piece of a unit's regions (zero/offload/offload.h), each region's part at a fixed
// stride, with their reads and writes.
typedef struct {
    int unit, piece;    // what it holds; unit -1 when free
    char* data;         // NVME_ALIGN-aligned
    NvmeRequest read[ZERO_NUM_REGIONS], write[ZERO_NUM_REGIONS];
} ZeroOffloadSlot;

#define ZERO_OFFLOAD_SLOTS 3 // optimizer: piece q+1 read, piece q updated, piece q-1 written back
#define ZERO_OFFLOAD_PIECE ((size_t)1 << 20) // elements of a region per piece: 4 MiB of fp32

typedef struct {
    int optimizer, params;            // ZeroPlacement; NONE = where the engine keeps it anyway
    int active;                       // any region on NVMe
    char dir[4096], path[4400];       // -zd and this rank's offload file in it
    int fd, direct;                   // the file; O_DIRECT granted
    NvmeIO io;
    int on_nvme[ZERO_NUM_REGIONS];    // which regions live in the file
    size_t* region_bytes;             // [unit * ZERO_NUM_REGIONS + region], rounded to NVME_ALIGN; 0: not in the file
    uint64_t* unit_offset;            // [unit]: the unit's first region in the file
    int* piece_first;                 // [unit]: its first piece's index (pieces numbered in unit order)
    uint64_t* checksum;               // [piece * ZERO_NUM_REGIONS + region]: of what this job last wrote there
    size_t file_bytes, slot_stride[ZERO_NUM_REGIONS], slot_bytes, bounce_bytes;
    size_t piece;                     // elements per piece (ZERO_OFFLOAD_PIECE)
    int num_pieces;
    ZeroOffloadSlot opt_slot[ZERO_OFFLOAD_SLOTS];
    char* bounce[2];                  // stage 3, -zp nvme: a unit's parameter shard read for its all-gather
    NvmeRequest bounce_read[2];
    int bounce_unit[2], bounce_next;
    int awaiting_read[ZERO_WORKING_UNITS]; // param working unit i's shard is being read into bounce buffer awaiting_read[i] - 1 (0: none)
    int seq;                          // the optimizer's piece counter this step (use order)
    int prefetched;                   // the optimizer's first reads were issued this step
    long long read_at_step, written_at_step; // io.bytes_*_submitted at the step's start
    double io_wait_s_step, io_wait_s_total;  // exposed: time the engine waited for the disk
} ZeroOffload;

#endif // ZERO_OFFLOAD_STATE_H
