/*
 * zero/tied_rows/tied_rows_state.h: the tied rows' state (CPU stages 0, 1 with N > 1: wte's rows
 * reduced right after the LM head), reached from the engine by one field, ZeroEngine.tied.early
 * (zero/engine.h), beside the rows' all-gather, ZeroEngine.tied.early_op. What it adds to the core
 * is zero/tied_rows/tied_rows_cpu.h, called through zero/hooks.h. Part of the ZeRO engine (the map
 * is in zero.cuh).
 */
#ifndef ZERO_TIED_ROWS_STATE_H
#define ZERO_TIED_ROWS_STATE_H
#ifndef ZERO_CUH
#error "zero/tied_rows/tied_rows_state.h is part of the ZeRO engine; include zero.cuh"
#endif

// On the last micro-step the core's arena of set-aside rows (ZeroTiedRows.kept_*) holds the rows of
// every wte unit the encoder adds to while the unit is reduced; kept_data then points at this
// rank's block of `gather` ([R ids as floats][R x C values], N blocks, one all-gather after the
// encoder).
typedef struct {
    int* phase;               // per unit: 1 from the unit's early reduction to its encoder part, 2 after it
    float* gather;            // the N blocks
    float* unit_buf;          // the unit-sized buffer the encoder adds into
    size_t block_numel, rows; // R(C+1), R (zero_tied_rows_numel); 0: dense schedule
    size_t row_ids;           // ids per unit (row id = unit * row_ids + row)
    int positions, wpe_row;   // T: wpe's rows the encoder adds to, from unit 0's row wpe_row
} ZeroTiedEarly;

#endif // ZERO_TIED_ROWS_STATE_H
