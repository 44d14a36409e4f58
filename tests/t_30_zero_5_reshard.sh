#!/usr/bin/env bash
# ZeRO group 5: resume at another world size or stage, resharded on load (zero/reshard/reshard.h),
# CPU build. A stage-1 checkpoint of 3 ranks at step 5 (global batch 96 tokens: -b 4 x T 8 x 3):
#   - resumed directly on 2 ranks (stage 1), on 4 ranks (stage 3) and on 3 ranks (stage 2) runs
#     to step 10 bit for bit as `build/zero_consolidate -from 3 -to M -z S` then -y 1 does (the
#     whole model file and every logged loss: the same values loaded, the same run id)
#   - a missing old state file (node-local -o, a host's files not copied): one error line naming
#     the file and this host, exit 1
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

if ! ZERO_TEST_FAULT=stop@5 zrun 3 1 "$ZT/ck" -b 4 -n 5; then
    echo "FAIL zero1_np3_source_checkpoint: $(grep -v '^step' "$ZT/ck.out" | tail -2 | tr '\n' ' ')"; exit 0
fi
# case N STAGE B: direct resume vs consolidate + resume
reshard_case() {
    local n=$1 stage=$2 b=$3 name="zero1_np3_checkpoint_resumes_as_zero${2}_np${1}_resharded_on_load"
    rm -rf "$ZT/direct$n$stage" "$ZT/conv$n$stage"
    cp -r "$ZT/ck" "$ZT/direct$n$stage"; cp -r "$ZT/ck" "$ZT/conv$n$stage"
    build/zero_consolidate -o "$ZT/conv$n$stage" -from 3 -to "$n" -z "$stage" >/dev/null \
        || { echo "FAIL ${name}_consolidate"; return; }
    zrun "$n" "$stage" "$ZT/conv$n$stage" -b "$b" -n 5 -y 1 || { echo "FAIL ${name}_converted_run: $(grep -v '^step' "$ZT/conv$n$stage.out" | tail -2 | tr '\n' ' ')"; return; }
    local start=$(date +%s.%N)
    zrun "$n" "$stage" "$ZT/direct$n$stage" -b "$b" -n 5 -y 1 || { echo "FAIL ${name}_direct_run: $(grep -v '^step' "$ZT/direct$n$stage.out" | tail -2 | tr '\n' ' ')"; return; }
    grep -q "^resume: the checkpoint's state of 3 ranks at ZeRO stage 1, resharded on load onto $n ranks at stage $stage" "$ZT/direct$n$stage.out" \
        && echo "PASS ${name}_says_so" || echo "FAIL ${name}_says_so: $(grep '^resume' "$ZT/direct$n$stage.out" | tr '\n' ' ')"
    check "${name}_same_losses" zcheck same "$ZT/conv$n$stage" "$ZT/direct$n$stage"
    check "${name}_bit_exact_model" cmp "$ZT/conv$n$stage/model_00000010.bin" "$ZT/direct$n$stage/model_00000010.bin"
    echo "INFO ${name}: resumed run (load + 5 steps) $(echo "$(date +%s.%N) - $start" | bc) s"
}
reshard_case 2 1 6
reshard_case 4 3 3
reshard_case 3 2 4

name=zero1_np3_checkpoint_on_np2_old_file_missing
cp -r "$ZT/ck" "$ZT/miss"; rm "$ZT/miss/state_00000005_r1_of_3.bin"
out=$(zrun 2 1 "$ZT/miss" -b 6 -n 5 -y 1; echo "rc $?"; cat "$ZT/miss.out")
if grep -q "^rc 1$" <<<"$out" && [ "$(grep -c '^error' <<<"$out")" -eq 1 ] \
    && grep -q "^error: rank [01] ([^)]*): $ZT/miss/state_00000005_r1_of_3.bin: missing on this host; expected every state file of the 3-rank checkpoint" <<<"$out"; then
    echo "PASS ${name}_one_line"
else echo "FAIL ${name}_one_line: $(grep -E '^(rc|error)' <<<"$out" | head -3 | tr '\n' ' ')"; fi
