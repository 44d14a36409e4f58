#!/usr/bin/env bash
# ZeRO group 5: checkpoint on a signal (train/signal_checkpoint.h), CPU build.
#   - stages 0-3 at N = 2: SIGUSR1 to one rank only (stage 0: to mpirun, which forwards it to
#     every rank) mid-run: the job writes the checkpoint of the step it is in, says so in one line
#     and exits 75; -y 1 then ends with the model file byte-identical (but for the run id) to an
#     uninterrupted run's and the same logged losses (exact: the same ranks, the same order)
#   - one rank, SIGTERM: the same
#   - a second signal during it: the job ends at once (status 1, not 75), leaving no ".tmp" file;
#     the previous -n checkpoint is intact and resumes onto the uninterrupted trajectory
#   - -sig with an unknown name: one error line, exit 1
# Prints per case (INFO lines) the seconds from the signal to the job's exit and the bytes written.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup
STEPS=(-x 24 -b 6 -n 5) # 24 steps of about 0.1-0.3 s: the signal lands mid-run

# signal_run NAME N STAGE DIR SIGNALS TARGET: start the run, send SIGNALS (e.g. "USR1" or
# "USR1 USR1") after step 6 to TARGET (rank0, rank1, mpirun); sets rc, secs (signal to exit) and
# saw_tmp (1: the second signal went when a .tmp file of the first one's checkpoint was there).
signal_run() {
    local name=$1 n=$2 stage=$3 dir=$4 signals=$5 target=$6
    zrun "$n" "$stage" "$dir" "${STEPS[@]}" &
    local job=$! pid="" i
    # Until step 6 is printed (the handlers are installed by then), however long start-up takes
    # on a loaded machine; the run itself is bounded (zrun's timeout).
    while ! grep -q "^step     6/" "$dir.out" 2>/dev/null && kill -0 "$job" 2>/dev/null; do sleep 0.05; done
    case $target in
        mpirun) pid=$(pgrep -f -- "^mpirun .*-o $dir " | head -1) ;;
        rank*) pid=$(pgrep -f -- "^build/train_gpt2_z$stage .*-o $dir " | sort -n | sed -n "$((${target#rank} + 1))p") ;;
    esac
    local t0=$(date +%s.%N)
    local first=1
    saw_tmp=0
    for s in $signals; do # apart: two signals sent at once are merged into one while pending
        if [ $first -eq 0 ]; then # the second: when the first one's checkpoint is being written
            while kill -0 "$pid" 2>/dev/null; do compgen -G "$dir/*.tmp" >/dev/null && { saw_tmp=1; break; }; sleep 0.01; done
        fi
        first=0
        [ -n "$pid" ] && kill -"$s" "$pid"
    done
    wait "$job"; rc=$?
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
}

for stage in 0 1 2 3; do
    name="zero${stage}_np2_sigusr1_checkpoint_then_resume"
    target=rank1; [ "$stage" -eq 0 ] && target=mpirun
    zrun 2 "$stage" "$ZT/straight$stage" "${STEPS[@]}" || { echo "FAIL ${name}_straight_run: $(tail -2 "$ZT/straight$stage.out" | tr '\n' ' ')"; continue; }
    signal_run "$name" 2 "$stage" "$ZT/sig$stage" USR1 "$target"
    line=$(grep "^checkpointed on a signal" "$ZT/sig$stage.out")
    if [ "$rc" -eq 75 ] && [ -n "$line" ]; then echo "PASS ${name}_exit_75_one_line"
    else echo "FAIL ${name}_exit_75_one_line: exit $rc; $(grep -v tokenizer "$ZT/sig$stage.out" | grep -v '^step' | tail -2 | tr '\n' ' ')"; continue; fi
    echo "INFO ${name}: signal to $target -> exit ${secs} s; $(sed 's/.*step \([0-9]*\) in [^ ]* (\(.*\)); exit.*/step \1, \2/' <<<"$line")"
    ls "$ZT/sig$stage" | grep -q tmp && echo "FAIL ${name}_no_temporary_files: $(ls "$ZT/sig$stage" | tr '\n' ' ')"
    zrun 2 "$stage" "$ZT/sig$stage" "${STEPS[@]}" -y 1 || { echo "FAIL ${name}_resume: $(tail -2 "$ZT/sig$stage.out" | tr '\n' ' ')"; continue; }
    check "${name}_same_losses" zcheck same "$ZT/straight$stage" "$ZT/sig$stage"
    check "${name}_bit_exact_model" cmp_run_files "$ZT/straight$stage/model_00000024.bin" "$ZT/sig$stage/model_00000024.bin"
done

# One rank (no mpirun), SIGTERM (Slurm's preemption and time-limit signal).
name=zero1_np1_sigterm_checkpoint_then_resume
zrun 1 1 "$ZT/straight_np1" "${STEPS[@]}" && signal_run "$name" 1 1 "$ZT/term" TERM rank0
line=$(grep "^checkpointed on a signal: SIGTERM" "$ZT/term.out")
if [ "$rc" -eq 75 ] && [ -n "$line" ]; then
    echo "PASS ${name}_exit_75_one_line"
    echo "INFO ${name}: signal -> exit ${secs} s; $(sed 's/.*step \([0-9]*\) in [^ ]* (\(.*\)); exit.*/step \1, \2/' <<<"$line")"
    if zrun 1 1 "$ZT/term" "${STEPS[@]}" -y 1; then
        check "${name}_same_losses" zcheck same "$ZT/straight_np1" "$ZT/term"
        check "${name}_bit_exact_model" cmp_run_files "$ZT/straight_np1/model_00000024.bin" "$ZT/term/model_00000024.bin"
    else echo "FAIL ${name}_resume: $(tail -2 "$ZT/term.out" | tr '\n' ' ')"; fi
else echo "FAIL ${name}_exit_75_one_line: exit $rc; $(grep -v '^step' "$ZT/term.out" | tail -2 | tr '\n' ' ')"; fi

# A second signal while the first is handled: the job ends at once; the last complete checkpoint
# (the -n one of step 5) holds and no temporary file is left (the handler removes the one being
# written: common/atomic_file.h). ZERO_TEST_FAULT=slowsave:5 (common/test_fault.h) holds each file
# of the signal's checkpoint 5 s under its ".tmp" name, so the second signal, sent as soon as a
# ".tmp" file appears, lands while that checkpoint is being written however loaded the machine is
# (before: the writing took 0.1-0.5 s, polled every 5 ms for at most 0.3 s; whether the second
# signal came during it, after it or after the rank had exited 75 depended on timing).
name=zero1_np2_second_signal_leaves_previous_checkpoint
ZERO_TEST_FAULT=slowsave:5 signal_run "$name" 2 1 "$ZT/twice" "USR1 USR1" rank0
last=$(ls "$ZT/twice" | grep '^model_.*\.bin$' | sort | tail -1)
last_step=$(sed 's/^model_0*\([0-9][0-9]*\)\.bin$/\1/' <<<"$last")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && [ "$saw_tmp" -eq 1 ] && [ "$last" = model_00000005.bin ] && ! ls "$ZT/twice" | grep -q tmp &&
   ! grep -q "^checkpointed on a signal" "$ZT/twice.out"; then
    echo "PASS ${name}_ends_at_once"
    echo "INFO ${name}: two signals -> exit ${secs} s (status $rc); the second sent while the first one's checkpoint was being written; latest complete checkpoint $last; no .tmp left"
else echo "FAIL ${name}_ends_at_once: exit $rc, second signal $([ "$saw_tmp" -eq 1 ] && echo "during the checkpoint" || echo "after rank 0 had ended"), latest $last, expected model_00000005.bin and no .tmp, files left: $(ls "$ZT/twice" | grep tmp | tr '\n' ' '); $(grep -E '^(error|checkpoint)' "$ZT/twice.out" | tail -2 | tr '\n' ' ')"; fi
if zrun 2 1 "$ZT/twice" "${STEPS[@]}" -y 1; then
    grep -q "resume: from step $last_step " "$ZT/twice.out" || echo "FAIL ${name}_resumes_from_$last_step: $(grep resume "$ZT/twice.out")"
    check "${name}_resumes_onto_trajectory" cmp_run_files "$ZT/straight1/model_00000024.bin" "$ZT/twice/model_00000024.bin"
else echo "FAIL ${name}_resume: $(grep -v '^step' "$ZT/twice.out" | tail -2 | tr '\n' ' ')"; fi

check_fails zero_sig_unknown_name_one_line "error: -sig USR1,KILL: unknown signal list" build/train_gpt2_z1 -e d2 -sig USR1,KILL
