#!/usr/bin/env bash
# ZeRO group 4: bad input and failing ranks. Every bad input gives one `error: ...; expected ...`
# line and exit status 1; a rank that hangs or dies never leaves the others hanging.
#   - resume from a checkpoint of another world size with an old state file missing, a damaged,
#     truncated or missing state file, -y 1 without -o; consolidation tool misuse, a state file
#     of another run or a damaged model file given to it
#   - a stuck rank (ZERO_TEST_FAULT=stall:1@3): the others' wait on their collective passes -wt 3
#     and one of them prints rank, collective, unit and step, then MPI_Abort ends every rank;
#     checked to finish within 30 s (3 s timeout + start-up and abort) with a non-zero status
#   - a crashed rank (ZERO_TEST_FAULT=exit:2@3, exit without MPI_Finalize): mpirun ends the job;
#     checked to finish within 30 s with a non-zero status
#   - ranks launched with different batch-schedule flags (MPMD `A : B`; every rank must pick the
#     same batch each step): -dm, -dl, and -d auto on rank 0 against a fixed -d on rank 1. The
#     start-up handshake (zero/cluster/handshake.h) names rank 1 and the flag in one error line, exit 1,
#     within -wt + 30 s (the cluster version, across hosts: t_75_cluster_3)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

# A stage-1 checkpoint from 2 ranks at step 3.
ZERO_TEST_FAULT=stop@3 zrun 2 1 "$ZT/ck" -b 2 -n 3 -v 0
if [ ! -e "$ZT/ck/model_00000003.bin" ] || [ ! -e "$ZT/ck/state_00000003_r1_of_2.bin" ]; then
    echo "FAIL zero_fault_checkpoint_made: $(grep -v tokenizer "$ZT/ck.out" | tail -2 | tr '\n' ' ')"; exit 1
fi
copy() { rm -rf "$ZT/$1"; cp -r "$ZT/ck" "$ZT/$1"; }
resume() { # resume N STAGE DIR
    local n=$1 stage=$2 dir=$3
    local cmd=(build/train_gpt2_z"$stage" -e d2 -t 8 -b 2 -x 10 -n 3 -v 0 -s 0 -i "$ZT/train.bin" -o "$dir" -y 1 -wt 30)
    [ "$n" -gt 1 ] && cmd=("${MPIRUN[@]}" -np "$n" "${cmd[@]}")
    timeout 120 "${cmd[@]}"
}

# Another world size or stage reshards on load (tests/t_30_zero_5_reshard.sh), unless an old file is missing here.
copy ws; rm "$ZT/ws/state_00000003_r1_of_2.bin"
check_fails zero_resume_other_world_size_old_file_missing "state_00000003_r1_of_2.bin: missing on this host; expected every state file of the 2-rank checkpoint" resume 3 1 "$ZT/ws"
copy flip; printf 'X' | dd of="$ZT/flip/state_00000003_r1_of_2.bin" bs=1 seek=5000 conv=notrunc status=none
check_fails zero_resume_damaged_state_file "state_00000003_r1_of_2.bin: checksum mismatch" resume 2 1 "$ZT/flip"
copy trunc; truncate -s 4000 "$ZT/trunc/state_00000003_r0_of_2.bin"
check_fails zero_resume_truncated_state_file "state_00000003_r0_of_2.bin: file is 4000 bytes" resume 2 1 "$ZT/trunc"
copy miss; rm "$ZT/miss/state_00000003_r1_of_2.bin"
check_fails zero_resume_missing_state_file "state_00000003_r1_of_2.bin: missing state file" resume 2 1 "$ZT/miss"
check_fails zero_resume_without_output_dir "-y 1: resuming needs the checkpoint directory" build/train_gpt2_z1 -y 1
# A sanity check of the fixture: the unmodified copy resumes.
copy good; check zero_resume_fixture_resumes resume 2 1 "$ZT/good"

check_fails zero_consolidate_needs_dir "-o: missing" build/zero_consolidate -to 2
check_fails zero_consolidate_bad_target "-to: 'zero' is not a world size" build/zero_consolidate -o "$ZT/ck" -to zero
check_fails zero_consolidate_missing_source "state_00000003_r0_of_3.bin: missing" build/zero_consolidate -o "$ZT/ck" -from 3 -to 1
check_fails zero_consolidate_full_needs_stage "-z: missing" bash -c "build/zero_consolidate -o '$ZT/ck' -to full >/dev/null && build/zero_consolidate -o '$ZT/ck' -from full -to 1"
check_fails zero_consolidate_damaged_source "checksum mismatch" build/zero_consolidate -o "$ZT/flip" -to full
# A state file of another run (its run id, header bytes 224-231, not under the payload's checksum)
# or a damaged model file: refused before anything is written (the converted files would carry
# rank 0's run id, so the trainer's own check on resume could no longer see the mix).
copy mix; printf 'ABCDEFGH' | dd of="$ZT/mix/state_00000003_r1_of_2.bin" bs=1 seek=224 conv=notrunc status=none
check_fails zero_consolidate_state_of_another_run "state_00000003_r1_of_2.bin: written by run 4847464544434241, but .*model_00000003.bin by run" \
    build/zero_consolidate -o "$ZT/mix" -from 2 -to 1 -z 1
check zero_consolidate_refused_mix_wrote_nothing test ! -e "$ZT/mix/state_00000003_r0_of_1.bin"
copy mflip; printf 'X' | dd of="$ZT/mflip/model_00000003.bin" bs=1 seek=50000 conv=notrunc status=none
check_fails zero_consolidate_damaged_model_file "model_00000003.bin: checksum mismatch" build/zero_consolidate -o "$ZT/mflip" -from 2 -to 1 -z 1

# Hangs and crashes: the job must end, with a diagnosis, well before anyone would notice a hang.
start=$(date +%s)
ZERO_TEST_FAULT=stall:1@3 timeout 120 "${MPIRUN[@]}" -np 3 build/train_gpt2_z3 -e d2 -t 8 -b 2 -x 10 -v 0 -s 0 -i "$ZT/train.bin" -wt 3 >"$ZT/stall.out" 2>&1
rc=$?; took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$took" -le 30 ] \
    && grep -qE "^error: rank [02] \([^)]*\): all_gather of parameters, unit [0-9]+ \([a-z0-9 ]+\), at step 4 waited [0-9.]+ s, longer than -wt 3 s" "$ZT/stall.out"; then
    echo "PASS zero3_np3_stuck_rank_diagnosed_and_all_ranks_aborted"; echo "INFO zero3_np3_stuck_rank_diagnosed_and_all_ranks_aborted: ended after $took s (limit 30)"
else
    echo "FAIL zero3_np3_stuck_rank_diagnosed_and_all_ranks_aborted: exit $rc after $took s; $(grep '^error' "$ZT/stall.out" | head -1)"
fi
start=$(date +%s)
ZERO_TEST_FAULT=stall:0@2 timeout 120 "${MPIRUN[@]}" -np 2 build/train_gpt2_z0 -e d2 -t 8 -b 2 -x 10 -v 0 -s 0 -i "$ZT/train.bin" -wt 3 >"$ZT/stall0.out" 2>&1
rc=$?; took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$took" -le 30 ] && grep -qE "^error: rank 1 \([^)]*\): all_reduce of gradients, unit [0-9]+ .*at step 3 waited" "$ZT/stall0.out"; then
    echo "PASS zero0_np2_stuck_rank_diagnosed_and_all_ranks_aborted"; echo "INFO zero0_np2_stuck_rank_diagnosed_and_all_ranks_aborted: ended after $took s (limit 30)"
else
    echo "FAIL zero0_np2_stuck_rank_diagnosed_and_all_ranks_aborted: exit $rc after $took s; $(grep '^error' "$ZT/stall0.out" | head -1)"
fi
start=$(date +%s)
ZERO_TEST_FAULT=exit:2@3 timeout 120 "${MPIRUN[@]}" -np 3 build/train_gpt2_z2 -e d2 -t 8 -b 2 -x 10 -v 0 -s 0 -i "$ZT/train.bin" -wt 20 >"$ZT/exit.out" 2>&1
rc=$?; took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$took" -le 30 ]; then
    echo "PASS zero2_np3_crashed_rank_ends_the_job"; echo "INFO zero2_np3_crashed_rank_ends_the_job: ended after $took s (limit 30)"
else
    echo "FAIL zero2_np3_crashed_rank_ends_the_job: exit $rc after $took s"
fi

# Ranks that disagree on the batch schedule: one handshake line naming rank 1 and the flag.
mpmd_schedule() { # mpmd_schedule NAME PATTERN "RANK0 FLAGS" "RANK1 FLAGS"
    local name=$1 pattern=$2 out="$ZT/mpmd.$1.out" rc took
    local common=(-e d2 -t 8 -b 2 -x 2 -v 0 -s 0 -i "$ZT/train.bin" -wt 5)
    start=$(date +%s)
    timeout 120 "${MPIRUN[@]}" -np 1 build/train_gpt2_z1 "${common[@]}" $3 : -np 1 build/train_gpt2_z1 "${common[@]}" $4 >"$out" 2>&1
    rc=$?; took=$(( $(date +%s) - start ))
    if [ "$rc" -eq 1 ] && [ "$took" -le 35 ] && [ "$(grep -c '^error' "$out")" -eq 1 ] && grep -qE "$pattern" "$out"; then
        echo "PASS $name"; echo "INFO $name: ended after $took s (limit 35)"
    else
        echo "FAIL $name: exit $rc after $took s; $(grep -c '^error' "$out") error lines; $(grep -m2 -E '^error|rror' "$out" | tr '\n' ' ')"
    fi
}
mpmd_schedule zero_handshake_ranks_disagree_on_dm "^error: rank 1 \([^)]*\): -dm is '128' there but '64' on rank 0 \([^)]*\); expected every rank" \
    "-d auto -dm 64" "-d auto -dm 128"
mpmd_schedule zero_handshake_ranks_disagree_on_dl "^error: rank 1 \([^)]*\): -dl is 'linear' there but 'sqrt' on rank 0" \
    "-d auto -dm 64 -dl sqrt" "-d auto -dm 64 -dl linear"
mpmd_schedule zero_handshake_ranks_disagree_on_d_auto "^error: rank 1 \([^)]*\): -d is '64' there but 'auto' on rank 0" \
    "-d auto -dm 64" "-d 64 -dm 64"
