#!/usr/bin/env bash
# ZeRO group 5: resume keeps the run's settings (common/run_record.h), CPU build, stage 1, N = 2.
#   - a run at -l 6e-4 -k linear -u 2 -q 0.1 -c 0.05 -gc 0.5 -sd 7, stopped after its step-5
#     checkpoint, resumed with none of those flags: one "resume:" line per value taken from the
#     checkpoint, and the model file at step 10 byte-identical (but for the run id) to the
#     uninterrupted run's, the same logged losses and learning rates
#   - the same resume with -l 1e-3 given: the flag wins, one line says the trajectory differs
#   - a checkpoint without a record (its fields zeroed, as files written before records existed)
#     still resumes, with the flags given, and no "resume: -" line
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup
SETTINGS=(-l 6e-4 -k linear -u 2 -q 0.1 -c 0.05 -gc 0.5 -sd 7)
# run DIR ARGS: 2 ranks, stage 1, no -l in the common args (the default 3e-4 unless given).
run() {
    local dir=$1; shift
    timeout 300 "${MPIRUN[@]}" -np 2 build/train_gpt2_z1 -e d2 -t 8 -x 10 -s 0 -v 5 -m 2 -b 6 -n 5 -i "$ZT/train.bin" -j "$ZT/val.bin" \
        -o "$dir" "$@" >"$dir.out" 2>&1
}
name=zero1_np2_resume_keeps_recorded_settings
if run "$ZT/straight" "${SETTINGS[@]}" && ZERO_TEST_FAULT=stop@5 run "$ZT/split" "${SETTINGS[@]}"; then
    cp -r "$ZT/split" "$ZT/given"
    cp -r "$ZT/split" "$ZT/old"
    if run "$ZT/split" -y 1; then
        lines=$(grep -c "^resume: -[a-z]* .*the checkpoint's run's value" "$ZT/split.out")
        [ "$lines" -eq 7 ] && echo "PASS ${name}_one_line_per_value" \
            || echo "FAIL ${name}_one_line_per_value: $lines lines, expected 7 (-l -k -u -q -c -gc -sd): $(grep '^resume' "$ZT/split.out" | tr '\n' ' ')"
        grep -q "^resume: -l 0.000600000028, the checkpoint's run's value (without -l: 0.000300000014)" "$ZT/split.out" \
            && echo "PASS ${name}_lr_line" || echo "FAIL ${name}_lr_line: $(grep '^resume: -l' "$ZT/split.out")"
        check "${name}_same_losses_and_lr" zcheck same "$ZT/straight" "$ZT/split"
        check "${name}_bit_exact_model" cmp_run_files "$ZT/straight/model_00000010.bin" "$ZT/split/model_00000010.bin"
    else echo "FAIL ${name}_resume: $(grep -v '^step' "$ZT/split.out" | tail -2 | tr '\n' ' ')"; fi

    name=zero1_np2_resume_flag_given_wins
    if run "$ZT/given" -y 1 -l 1e-3; then
        grep -q "^resume: -l 0.00100000005 as given; the checkpoint's run used 0.000600000028: not the same trajectory" "$ZT/given.out" \
            && echo "PASS ${name}_says_so" || echo "FAIL ${name}_says_so: $(grep '^resume: -l' "$ZT/given.out")"
        grep -q '"kind":"config".*"lr":0.001,"resume_step":5' "$ZT/given/log.jsonl" \
            && echo "PASS ${name}_lr_used" || echo "FAIL ${name}_lr_used: $(grep -o '"lr":[^,]*,"resume_step":[0-9]*' "$ZT/given/log.jsonl" | tr '\n' ' ')"
    else echo "FAIL ${name}_resume: $(grep -v '^step' "$ZT/given.out" | tail -2 | tr '\n' ' ')"; fi

    # A checkpoint from before records: zero fields ZS_RECORD.. (int64 29-39, bytes 232-319), as
    # old files have them (the header is outside the payload checksum).
    name=zero1_np2_resume_old_checkpoint_without_record
    for f in "$ZT"/old/state_00000005_r*_of_2.bin; do dd if=/dev/zero of="$f" bs=8 seek=29 count=11 conv=notrunc status=none; done
    if run "$ZT/old" -y 1 "${SETTINGS[@]}"; then
        ! grep -q "^resume: -" "$ZT/old.out" && echo "PASS ${name}_no_settings_lines" || echo "FAIL ${name}_no_settings_lines: $(grep '^resume: -' "$ZT/old.out" | head -2)"
        check "${name}_resumes_onto_trajectory" cmp_run_files "$ZT/straight/model_00000010.bin" "$ZT/old/model_00000010.bin"
    else echo "FAIL ${name}_resume: $(grep -v '^step' "$ZT/old.out" | tail -2 | tr '\n' ' ')"; fi
else echo "FAIL ${name}_source_runs: $(grep -v '^step' "$ZT/split.out" | tail -2 | tr '\n' ' ')"; fi
