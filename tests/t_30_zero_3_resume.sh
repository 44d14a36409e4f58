#!/usr/bin/env bash
# ZeRO group 3: sharded checkpoints.
#   - resume is bit-exact: for each stage at N = 2, 10 steps straight = 5 steps, checkpoint
#     (the job stops: ZERO_TEST_FAULT=stop@5), resume with -y 1 for 5 more: identical logged
#     losses and byte-identical parameters in the model file at step 10 (cmp from byte 1024: the
#     header carries each run's own run id)
#   - resharding: a stage-2 checkpoint saved by 4 ranks resumes on 2 ranks at stage 3 (converted
#     N -> M directly) and on 1 rank at stage 0 (through the full form: 4 -> full -> 1), with the
#     same global batch; steps 6-10 match the straight 4-rank run within 1e-5 (the tolerance of
#     t_30_zero_2_match.sh, same reason: only the reduction order over ranks changes)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

for stage in 0 1 2 3; do
    name="zero${stage}_np2_resume_after_5_steps"
    zrun 2 "$stage" "$ZT/straight$stage" -b 6 -n 5 || { echo "FAIL ${name}_straight_run: $(grep -v tokenizer "$ZT/straight$stage.out" | tail -2 | tr '\n' ' ')"; continue; }
    ZERO_TEST_FAULT=stop@5 zrun 2 "$stage" "$ZT/split$stage" -b 6 -n 5 || { echo "FAIL ${name}_first_half: $(tail -2 "$ZT/split$stage.out" | tr '\n' ' ')"; continue; }
    if [ -e "$ZT/split$stage/model_00000010.bin" ] || [ ! -e "$ZT/split$stage/state_00000005_r1_of_2.bin" ]; then
        echo "FAIL ${name}_first_half_stops_at_5: $(ls "$ZT/split$stage" | tr '\n' ' ')"; continue
    fi
    zrun 2 "$stage" "$ZT/split$stage" -b 6 -n 5 -y 1 || { echo "FAIL ${name}_second_half: $(grep -v tokenizer "$ZT/split$stage.out" | tail -2 | tr '\n' ' ')"; continue; }
    check "${name}_same_losses" zcheck same "$ZT/straight$stage" "$ZT/split$stage"
    check "${name}_bit_exact_model" cmp -i 1024 "$ZT/straight$stage/model_00000010.bin" "$ZT/split$stage/model_00000010.bin"
    grep -q "resume: from step 5" "$ZT/split$stage.out" || echo "FAIL ${name}_says_resumed: no 'resume: from step 5' line"
done

# Resharding: stage 2 on 4 ranks (B 3), stopped after the step-5 checkpoint.
if zrun 4 2 "$ZT/reshard_straight" -b 3 -n 5 && ZERO_TEST_FAULT=stop@5 zrun 4 2 "$ZT/reshard" -b 3 -n 5; then
    cp -r "$ZT/reshard" "$ZT/reshard_np2"
    cp -r "$ZT/reshard" "$ZT/reshard_np1"
    check zero_consolidate_np4_to_np2_stage3 build/zero_consolidate -o "$ZT/reshard_np2" -from 4 -to 2 -z 3
    if zrun 2 3 "$ZT/reshard_np2" -b 6 -n 5 -y 1; then
        check zero2_np4_checkpoint_resumes_as_zero3_np2 zcheck losses "$ZT/reshard_straight" "$ZT/reshard_np2" 1e-5 --kinds train,val --from-step 6
    else echo "FAIL zero2_np4_checkpoint_resumes_as_zero3_np2: $(grep -v tokenizer "$ZT/reshard_np2.out" | tail -2 | tr '\n' ' ')"; fi
    check zero_consolidate_np4_to_full build/zero_consolidate -o "$ZT/reshard_np1" -to full
    check zero_consolidate_full_to_np1_stage0 build/zero_consolidate -o "$ZT/reshard_np1" -from full -to 1 -z 0
    if zrun 1 0 "$ZT/reshard_np1" -b 12 -n 5 -y 1; then
        check zero2_np4_checkpoint_resumes_as_zero0_np1 zcheck losses "$ZT/reshard_straight" "$ZT/reshard_np1" 1e-5 --kinds train,val --from-step 6
    else echo "FAIL zero2_np4_checkpoint_resumes_as_zero0_np1: $(grep -v tokenizer "$ZT/reshard_np1.out" | tail -2 | tr '\n' ' ')"; fi
    # Round trip through the full form is lossless: 4 -> full -> 4 rewrites the same rank files.
    cp -r "$ZT/reshard" "$ZT/roundtrip"
    build/zero_consolidate -o "$ZT/roundtrip" -to full >/dev/null && rm "$ZT"/roundtrip/state_00000005_r*_of_4.bin \
        && build/zero_consolidate -o "$ZT/roundtrip" -from full -to 4 -z 2 >/dev/null
    ok=1; for r in 0 1 2 3; do cmp -s "$ZT/reshard/state_00000005_r${r}_of_4.bin" "$ZT/roundtrip/state_00000005_r${r}_of_4.bin" || ok=0; done
    [ $ok -eq 1 ] && echo "PASS zero_consolidate_np4_full_np4_round_trip_byte_identical" || echo "FAIL zero_consolidate_np4_full_np4_round_trip_byte_identical: rank files differ"
else
    echo "FAIL zero2_np4_reshard_source_runs: $(grep -v tokenizer "$ZT/reshard.out" | tail -2 | tr '\n' ' ')"
fi
