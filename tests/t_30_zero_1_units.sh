#!/usr/bin/env bash
# tier: quick
# ZeRO group 1: the pure parts and start-up.
#   - shard layout and formulas (build/test_zero_layout), state files (build/test_zero_state),
#     launcher variables, device rule, fingerprint and host arithmetic (build/test_launcher)
#   - every stage's binary runs as a plain process (no mpirun: MPI singleton) and under mpirun,
#     and prints its stage and world size and its accounting beside the formulas at start-up
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

build/test_zero_layout
build/test_zero_state
build/test_launcher

for stage in 0 1 2 3; do
    mkdir -p "$ZT/s$stage"
    if zrun 1 "$stage" "$ZT/s$stage/np1" -x 2 -v 0 && grep -q "ZeRO stage $stage | world size 1" "$ZT/s$stage/np1.out"; then
        echo "PASS zero${stage}_runs_without_mpirun_and_prints_stage"
    else
        echo "FAIL zero${stage}_runs_without_mpirun_and_prints_stage: $(tail -2 "$ZT/s$stage/np1.out" | tr '\n' ' ')"
    fi
    out="$ZT/s$stage/np3.out"
    if zrun 3 "$stage" "$ZT/s$stage/np3" -b 1 -x 2 -v 0 && grep -q "ZeRO stage $stage | world size 3" "$out" \
        && grep -q "zero: bytes per rank: .*formula .* (equal)" "$out" && grep -q "zero: elements sent per rank per step .*formula" "$out" \
        && grep -q '"kind":"config".*"bytes_state_formula"' "$ZT/s$stage/np3/log.jsonl"; then
        echo "PASS zero${stage}_np3_prints_stage_world_size_and_accounting"
    else
        echo "FAIL zero${stage}_np3_prints_stage_world_size_and_accounting: $(grep -E 'error|zero:' "$out" | tail -2 | tr '\n' ' ')"
    fi
done

# Sampling and val run on every rank (stage 3 needs all ranks in each gather); rank 0 prints.
mkdir -p "$ZT/sample"
if zrun 3 3 "$ZT/sample/np3" -b 1 -x 2 -v 2 -s 2 -g 4 && [ "$(grep -c '^sample' "$ZT/sample/np3.out")" -eq 1 ] \
    && grep -q "val loss" "$ZT/sample/np3.out"; then
    echo "PASS zero3_np3_val_and_sampling_run_on_every_rank"
else
    echo "FAIL zero3_np3_val_and_sampling_run_on_every_rank: $(grep -v tokenizer "$ZT/sample/np3.out" | tail -2 | tr '\n' ' ')"
fi
