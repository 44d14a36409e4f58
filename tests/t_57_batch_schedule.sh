#!/usr/bin/env bash
# The batch schedule (common/batch_schedule.h, batch_schedule_trainer.h): -d auto grows the batch
# from the gradient noise scale meter, -ds gives a batch sequence by hand.
#   - the decision rule on synthetic B_simple series, the lr rule, the flags (build/test_batch_schedule)
#   - a 2-rank stage-2 run whose batch grows mid-run (twice, 64 -> 128 -> 256 tokens here): its
#     log is consistent (batches only grow, whole micro-steps, within -dm, lr by the sqrt rule,
#     tokens summed), and the same run given its batch sequence by hand (-ds) logs the same
#     losses, grad norms, lr and meter values, bit for bit
#   - that hand run against an independent path: fixed batches (-d), one run per constant
#     stretch, each resumed from the previous one's checkpoint (-y 1) with the next -d and -l:
#     bit for bit again (the same arithmetic, no schedule code involved)
#   - resume across a change: stopped one step before the second growth (its window 2 of 3
#     steps full) and resumed with -y 1, the run grows at the same step and logs the same values;
#     the final model file is byte-identical
#   - every stage and world size: the hand sequence at stages 0, 1, 3 on 2 ranks matches the
#     stage-2 run within 1e-5 in loss and 2e-5 relative in grad norm (the tolerance of
#     t_30_zero_2_match.sh, same reason: only the reduction order changes; measured 0 and 0),
#     and stage 0 on 1 rank (one micro-batch of 4 sequences instead of 2 x 2: another summation
#     order in every op, over 16 steps at lr up to 6e-3) within 5e-5 and 1e-4 (measured 0 and
#     9.4e-6 here, 1.0e-5 and 1.2e-5 with another batch sequence; a wrong accumulation scale
#     moves the loss by 1e-2 within a few steps); -d auto
#     at stage 0 on 2 ranks (small batch: each rank's whole batch, which grows with A) and at
#     stage 3 on 3 ranks grows, agrees on every rank, and equals its own -ds replay bit for bit
#   - bad flags through the trainer: one error line each, exit 1
# Model: the PyTorch reference model (dev/reference, V = 1000, C = 64, 2 layers), T = 16, on a
# synthetic Markov shard over 1000 token ids; 16 steps. About 22 s on the 2 cores when quiet, 60 s under load.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
if ! make -s zero_binaries build/test_batch_schedule >/tmp/t_57_make.$$ 2>&1; then
    echo "FAIL batch_schedule_build: $(tail -3 /tmp/t_57_make.$$ | tr '\n' ' ')"; rm -f /tmp/t_57_make.$$; exit 1
fi
rm -f /tmp/t_57_make.$$
./build/test_batch_schedule

BT=$(mktemp -d /tmp/t_57_batch.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$BT"' EXIT
export OMP_NUM_THREADS=1
python3 tests/markov_shards.py "$BT" 1000 20000 4000 0
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
LR=3e-3
# brun N STAGE DIR ARGS: the small config on N ranks (N = 1: no mpirun), output in DIR.out
brun() {
    local n=$1 stage=$2 dir=$3; shift 3
    local cmd=(build/train_gpt2_z"$stage" -e dev/reference/gpt2_ref_model.bin -t 16 -x 16 -l $LR -s 0 -v 4 -m 2
               -i "$BT/train.bin" -j "$BT/val.bin" -o "$dir" "$@")
    [ "$n" -gt 1 ] && cmd=("${MPIRUN[@]}" -np "$n" "${cmd[@]}")
    timeout 120 "${cmd[@]}" >"$dir.out" 2>&1
}
failed_run() { echo "FAIL $1: $(grep -v tokenizer "$2.out" | tail -2 | tr '\n' ' ')"; }
bcheck() { python3 tests/batch_logcheck.py "$@"; }
AUTO=(-d auto -dm 640 -df 2 -dw 3)

# The auto run: 2 ranks, stage 2, micro-batch 2 x 16 per rank (64 tokens per micro-step).
if ! brun 2 2 "$BT/auto" -b 2 "${AUTO[@]}" -n 8; then failed_run auto_np2_zero2_runs "$BT/auto"; exit 0; fi
check auto_np2_zero2_grows_mid_run_whole_micro_steps_sqrt_lr bcheck grows "$BT/auto" 2 640 $LR 64
lines=$(grep -c '^batch: after step' "$BT/auto.out"); records=$(grep -c '"kind":"batch"' "$BT/auto/log.jsonl")
check auto_every_change_is_a_line_and_a_log_record test "$lines" -ge 2 -a "$lines" -eq "$records"
grep -q "warning: .* disagree" "$BT/auto.out" && echo "FAIL auto_np2_ranks_agree: $(grep disagree "$BT/auto.out")"
DS=$(bcheck ds "$BT/auto")

# The same batch sequence by hand.
if brun 2 2 "$BT/hand" -b 2 -ds "$DS"; then
    check auto_np2_zero2_equals_its_batch_sequence_by_hand bcheck exact "$BT/auto" "$BT/hand"
else failed_run auto_np2_zero2_equals_its_batch_sequence_by_hand "$BT/hand"; fi

# Independent path: fixed -d stretches, each resumed from the last one's checkpoint.
ok=1
mapfile -t stretches < <(bcheck segments "$BT/auto" $LR 64) # read first: mpirun would eat the loop's stdin
for stretch in "${stretches[@]}"; do
    read -r first last batch lr <<<"$stretch"
    extra=(); [ "$first" -gt 0 ] && extra=(-y 1)
    if [ "$last" -lt 16 ]; then fault=stop@$last; else fault=; fi
    ZERO_TEST_FAULT=$fault brun 2 2 "$BT/fixed" -b 2 -d "$batch" -l "$lr" -n 1 "${extra[@]}" || { ok=0; failed_run hand_schedule_equals_fixed_batches_resumed_stretch_by_stretch "$BT/fixed"; break; }
    cat "$BT/fixed.out" >> "$BT/fixed.all"
done
[ $ok -eq 1 ] && check hand_schedule_equals_fixed_batches_resumed_stretch_by_stretch bcheck exact "$BT/hand" "$BT/fixed" --no-batch-records

# Resume across a change: stop one step before the second growth, resume.
second=$(python3 -c "import sys; print(sys.argv[1].split(',')[2].split(':')[0])" "$DS")
stop=$((second - 1))
if ZERO_TEST_FAULT=stop@$stop brun 2 2 "$BT/split" -b 2 "${AUTO[@]}" -n 1 && brun 2 2 "$BT/split" -b 2 "${AUTO[@]}" -n 8 -y 1; then
    check "auto_resume_at_step_${stop}_inside_a_window_after_a_change_bit_exact" bcheck exact "$BT/auto" "$BT/split"
    # the parameters (cmp from byte 1024: the header carries each run's own run id, README "Many nodes")
    check auto_resume_across_a_change_same_model_file cmp -i 1024 "$BT/auto/model_00000016.bin" "$BT/split/model_00000016.bin"
else failed_run auto_resume_across_a_change_bit_exact "$BT/split"; fi

# Every stage and world size, given the same sequence by hand.
for run in "2 0 1e-5 2e-5" "2 1 1e-5 2e-5" "2 3 1e-5 2e-5" "1 0 5e-5 1e-4"; do
    read -r n stage tol norm_tol <<<"$run"
    name="hand_schedule_np${n}_zero${stage}_matches_np2_zero2"
    if brun "$n" "$stage" "$BT/hand_${n}_${stage}" -b $((4 / n)) -ds "$DS"; then
        check "$name" python3 tests/zero_logcheck.py losses "$BT/hand" "$BT/hand_${n}_${stage}" "$tol" --kinds train,val --norm-rtol "$norm_tol"
    else failed_run "$name" "$BT/hand_${n}_${stage}"; fi
done
# -d auto at stage 0 on 2 ranks and stage 3 on 3 ranks: grows, all ranks agree, replays exactly.
for run in "2 0" "3 3"; do
    read -r n stage <<<"$run"
    name="auto_np${n}_zero${stage}"
    if ! brun "$n" "$stage" "$BT/$name" -b 2 "${AUTO[@]}" -dm $((n * 320)); then failed_run "${name}_runs" "$BT/$name"; continue; fi
    check "${name}_grows" bcheck grows "$BT/$name" 1 $((n * 320)) $LR $((n * 32))
    grep -q "disagree" "$BT/$name.out" && echo "FAIL ${name}_ranks_agree: $(grep disagree "$BT/$name.out")"
    if brun "$n" "$stage" "$BT/${name}_hand" -b 2 -ds "$(bcheck ds "$BT/$name")"; then
        check "${name}_equals_its_batch_sequence_by_hand" bcheck exact "$BT/$name" "$BT/${name}_hand"
    else failed_run "${name}_equals_its_batch_sequence_by_hand" "$BT/${name}_hand"; fi
done

# Bad flags through the trainer (the messages themselves: test_batch_schedule).
bad() { OMP_NUM_THREADS=1 timeout 60 build/train_gpt2_z0 -e dev/reference/gpt2_ref_model.bin -t 16 -b 2 -x 4 -s 0 -v 0 -i "$BT/train.bin" "$@"; }
check_fails trainer_dm_below_current_batch "error: -dm 32: below the starting batch of 64 tokens (-d0)" bad -d auto -dm 32
check_fails trainer_dm_not_multiple "error: -dm 100: not a multiple of B\*T\*ranks = 2\*16\*1 = 32" bad -d auto -dm 100
check_fails trainer_auto_with_meter_off "error: -d auto: the gradient noise scale meter is off (-gb -1)" bad -d auto -dm 640 -gb -1
check_fails trainer_auto_one_rank_without_accumulation "error: -d0 32: one rank without gradient accumulation" bad -d auto -dm 640 -d0 32
check_fails trainer_bad_lr_rule "error: -dl cube: unknown learning-rate rule" bad -d auto -dm 640 -dl cube
check_fails trainer_df_without_auto "error: -df 0.125: only with -d auto; expected -d auto as well, or no -df" bad -df 0.125
check_fails trainer_dl_with_fixed_batch "error: -dl linear: the batch never changes; expected -d auto or -ds" bad -d 64 -dl linear
check_fails trainer_d_not_a_number "error: -d: 'often' is not an integer; expected an integer in \[-1, 2147483647\] or auto" bad -d often
one_error_line() {
    local out
    out=$(timeout 60 "${MPIRUN[@]}" -np 2 build/train_gpt2_z0 -e dev/reference/gpt2_ref_model.bin -t 16 -b 2 -x 4 -i "$BT/train.bin" -d auto -dm 96 2>&1)
    [ "$(grep -c 'error: -dm 96: not a multiple of B\*T\*ranks = 2\*16\*2 = 64' <<<"$out")" -eq 1 ]
}
check trainer_bad_dm_under_mpirun_one_error_line one_error_line

# The plot: batch over training beside B_simple.
check plot_log_draws_the_batch_schedule bash -c "python3 scripts/plot_log.py '$BT/auto' -o '$BT/auto.png' --dpi 40 >/dev/null && test -s '$BT/auto.png'"
