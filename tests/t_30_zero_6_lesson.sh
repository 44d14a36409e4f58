#!/usr/bin/env bash
# tier: quick
# (With TIER=quick: stages 0 and 3 only; the full tier runs all four.)
# ZeRO group 6: the lesson build (make train_gpt2 ZERO_EXT=none; build/lesson/train_gpt2_zK) is the
# ZeRO core alone and trains exactly like the default build.
# - It compiles without any extension folder: the headers it includes (gcc -M) name nothing of
#   zero/offload, zero/zeropp, zero/trace, zero/tied_rows, and zero/no_extensions.h is among them.
# - Stages 0-3 at 2 ranks with 2 accumulation micro-steps, 10 steps, against the default build on
#   the same flags: losses and grad norms equal (tolerance 0) and the model file bit-identical
#   after the header's run id. Why 0: with no extension flag the default build's hooks go to
#   extension code that returns at once, so both builds do the same arithmetic in the same order;
#   measured: 0 difference at every stage (stages 0 and 1 at N = 2 included, where the default
#   build reduces wte's rows early through the tied-rows hook and the lesson build keeps the dense
#   schedule: the ring adds the same values in the same order either way).
# - Each extension's flag (-zo, -zp, -zd, -qw, -qg, -hp, -tr) is one error line naming the flag
#   and the build, exit 1, under mpirun -np 2 too.
# - A lesson rank and a default rank in one job are told apart by the start-up handshake.
# (The GPU trainer's lesson build, in the emulation: tests/t_68_lesson_gpu_emulation.sh.)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup
if ! make -s lesson_binaries >"$ZT/make.out" 2>&1; then echo "FAIL lesson_build: $(tail -3 "$ZT/make.out" | tr '\n' ' ')"; exit 1; fi

# What the lesson build compiles: the headers gcc's preprocessor reaches from train_gpt2.c.
lesson_headers() {
    gcc -M -std=gnu11 -fopenmp -I. -DZERO_STAGE=3 -DZERO_EXT=0 -DZERO_NO_MPI=1 train_gpt2.c | tr ' \\' '\n\n' | grep -E '^(zero|common|cpu|train|model|kernels)/|^zero\.cuh$'
}
lesson_headers >"$ZT/headers" 2>&1
no_extension_folder() { ! grep -E '^zero/(offload|zeropp|trace|tied_rows)/' "$ZT/headers" && grep -qx 'zero/no_extensions.h' "$ZT/headers"; }
check "lesson_build_includes_no_extension_folder" no_extension_folder
echo "INFO lesson build: $(grep -c '^zero' "$ZT/headers") headers of zero/ and zero.cuh, $(cat $(grep -E '^zero' "$ZT/headers") | wc -l) lines"

lrun() { # like zrun, the lesson binary
    local n=$1 stage=$2 dir=$3; shift 3
    local cmd=(build/lesson/train_gpt2_z"$stage" "${ZERO_TEST_ARGS[@]}" -i "$ZT/train.bin" -j "$ZT/val.bin" -o "$dir" "$@")
    if [ "$n" -gt 1 ]; then cmd=("${MPIRUN[@]}" -np "$n" "${cmd[@]}"); fi
    timeout 300 "${cmd[@]}" >"$dir.out" 2>&1
}

stages=(0 1 2 3); [ "${TIER:-full}" = quick ] && stages=(0 3)
for stage in "${stages[@]}"; do
    name="lesson_zero${stage}_np2_accum2"
    zrun 2 "$stage" "$ZT/d$stage" -b 6 -n 10 -d 192 || { echo "FAIL ${name}_default_runs: $(tail -2 "$ZT/d$stage.out" | tr '\n' ' ')"; continue; }
    lrun 2 "$stage" "$ZT/l$stage" -b 6 -n 10 -d 192 || { echo "FAIL ${name}_runs: $(tail -2 "$ZT/l$stage.out" | tr '\n' ' ')"; continue; }
    check "${name}_same_losses_and_norms_as_default_build" zcheck losses "$ZT/d$stage" "$ZT/l$stage" 0
    check "${name}_model_file_identical" cmp_run_files "$ZT/d$stage/model_00000010.bin" "$ZT/l$stage/model_00000010.bin"
    check "${name}_says_it_is_the_core_alone" grep -q "the ZeRO core alone" "$ZT/l$stage.out"
    echo "INFO stage $stage: default '$(grep -m1 '^zero: elements sent' "$ZT/d$stage.out" | cut -c7-140)'; lesson '$(grep -m1 '^zero: elements sent' "$ZT/l$stage.out" | cut -c7-140)'"
done

# Each extension's flag: one error line naming it (rank 0 of 2 says it; exit 1).
one_flag_error() { # FLAG-TEXT STAGE ARGS...
    local want=$1 stage=$2; shift 2
    local out rc
    out=$(timeout 60 "${MPIRUN[@]}" -np 2 build/lesson/train_gpt2_z"$stage" "${ZERO_TEST_ARGS[@]}" -i "$ZT/train.bin" -j "$ZT/val.bin" -x 1 "$@" 2>&1); rc=$?
    local lines; lines=$(grep -c "^error: $want: this build has no .*ZERO_EXT=none" <<<"$out")
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$lines" -ge 1 ] && [ "$(grep -c '^error' <<<"$out")" -eq "$lines" ] || { echo "exit $rc: $out"; return 1; }
}
check "lesson_flag_zo_one_error_line" one_flag_error -zo 3 -zo cpu
check "lesson_flag_zp_one_error_line" one_flag_error -zp 3 -zp nvme -zd "$ZT"
check "lesson_flag_zd_one_error_line" one_flag_error -zd 3 -zd "$ZT"
check "lesson_flag_qw_one_error_line" one_flag_error -qw 3 -qw 1
check "lesson_flag_qg_one_error_line" one_flag_error -qg 3 -qg 1
check "lesson_flag_hp_one_error_line" one_flag_error -hp 3 -hp 2
check "lesson_flag_tr_one_error_line" one_flag_error -tr 3 -tr "$ZT/trace.json"

# One job of a lesson rank and a default rank: the handshake names the build each has.
mixed() {
    local out rc
    out=$(timeout 120 "${MPIRUN[@]}" -np 1 build/train_gpt2_z3 "${ZERO_TEST_ARGS[@]}" -i "$ZT/train.bin" -j "$ZT/val.bin" -x 1 : \
          -np 1 build/lesson/train_gpt2_z3 "${ZERO_TEST_ARGS[@]}" -i "$ZT/train.bin" -j "$ZT/val.bin" -x 1 2>&1); rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "ZERO_EXT=none" <<<"$out" || { echo "exit $rc: $(tail -3 <<<"$out")"; return 1; }
}
check "lesson_and_default_ranks_in_one_job_refused_at_handshake" mixed
