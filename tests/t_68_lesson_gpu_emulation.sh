#!/usr/bin/env bash
# The GPU trainer's lesson build (make train_gpt2cu ZERO_EXT=none; in the emulation
# build/emu/lesson/train_gpt2cu_zS, emu.mk), run through the CPU emulation of CUDA (dev/emu), as
# tests/t_30_zero_6_lesson.sh runs the CPU trainer's:
# - it compiles without any extension folder: the headers the preprocessor reaches from
#   train_gpt2.cu (g++ -M with the emulation's flags; nvcc -M too where nvcc is found) name nothing
#   of zero/offload, zero/zeropp, zero/trace, zero/tied_rows, and zero/no_extensions.h,
#   zero/gpu/no_extensions_gpu.cuh and zero/gpu/engine_gpu.cuh are among them (t_60 compiles and
#   links the nvcc build, build/cuda/train_gpt2cu_lesson_sm90_zero3)
# - stages 0 and 3 on 2 ranks (NCCL's calls carried by MPI, dev/emu/nccl_emu.h) with 2 accumulation
#   micro-steps, 2 steps (the second from the first's update): losses and grad norms equal to the
#   default emulated build's on the same flags (tolerance 0), the model file and both state files
#   byte-identical but for the run id. Why 0: with no extension flag the default build's hooks go
#   to extension code that returns at once, so both builds do the same arithmetic in the same
#   order; measured: 0 difference (also over 6 steps without accumulation)
# - the flags of offload (-zo), ZeRO++ (-qw) and trace (-tr): one error line naming the flag and
#   the build, exit 1, on 2 ranks
# About 50 s of CPU once built (107 s wall on 2 cores shared at load 9); building the two lesson
# binaries costs about as much again.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1
cuda_headers lesson_gpu_emulation "the lesson build's emulation tests" || exit 0
ET=$(mktemp -d /tmp/t68_lesson_gpu.XXXXXX)
trap 'rm -rf "$ET"' EXIT
if ! make -s -j2 build/emu/train_gpt2cu_z0 build/emu/train_gpt2cu_z3 emu_lesson_binaries >"$ET/make.out" 2>&1; then
    echo "FAIL lesson_gpu_emu_build: $(grep -m3 error "$ET/make.out" | tr '\n' ' ')"; exit 1
fi

# What the lesson build compiles: the headers the preprocessor reaches from train_gpt2.cu.
headers_ok() { # FILE: the dependency list of one compiler
    local zero; zero=$(tr ' \\' '\n\n' <"$1" | grep -E '^(zero/|zero\.cuh$)')
    ! grep -E '^zero/(offload|zeropp|trace|tied_rows)/' <<<"$zero" && grep -qx 'zero/no_extensions.h' <<<"$zero" &&
        grep -qx 'zero/gpu/no_extensions_gpu.cuh' <<<"$zero" && grep -qx 'zero/gpu/engine_gpu.cuh' <<<"$zero" && echo "$(wc -l <<<"$zero") headers of zero/ and zero.cuh"
}
g++ -M -std=c++17 -DCUDA_EMULATION=1 -DOMPI_SKIP_MPICXX=1 -I"$CUDA_HOME/include" -I. -include dev/emu/emu.h -DEMU_NCCL=1 \
    -DZERO_STAGE=3 -DZERO_EXT=0 $(mpicc --showme:compile 2>/dev/null) -x c++ train_gpt2.cu >"$ET/emu.d" 2>&1
check "lesson_gpu_emu_build_includes_no_extension_folder" headers_ok "$ET/emu.d"
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
if [ -x "$NVCC" ]; then
    "$NVCC" -M -std=c++17 -I. -DZERO_STAGE=3 -DZERO_EXT=0 -DZERO_NO_MPI=1 train_gpt2.cu >"$ET/nvcc.d" 2>&1
    check "lesson_gpu_nvcc_build_includes_no_extension_folder" headers_ok "$ET/nvcc.d"
else
    echo "SKIP lesson_gpu_nvcc_build_includes_no_extension_folder: no nvcc"
fi

# Synthetic tokens below V = 1000 (the reference model's vocabulary), as t_65.
python3 tests/markov_shards.py "$ET" 1000 20000 4000 7 >/dev/null
export OMP_NUM_THREADS=1 EMU_DEVICE_COUNT=2 # each rank "has" its own GPU, as NCCL requires
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x EMU_DEVICE_COUNT)
ARGS=(-e dev/reference/gpt2_ref_model.bin -t 32 -l 1e-3 -m 2 -s 0 -i "$ET/train.bin" -j "$ET/val.bin")
erun() { # BINARY DIR ARGS: 2 ranks, 2 micro-steps of B 2 x T 32 per rank, 2 steps, val and checkpoint at 2
    local binary=$1 dir=$2; shift 2
    timeout 600 "${MPIRUN[@]}" -np 2 "$binary" "${ARGS[@]}" -b 2 -d 256 -x 2 -v 2 -n 2 -o "$dir" "$@" >"$dir.out" 2>&1
}
same_files() { # DIR1 DIR2: the model file and both state files, but for the run id
    local f
    for f in model_00000002.bin state_00000002_r0_of_2.bin state_00000002_r1_of_2.bin; do
        cmp_run_files "$1/$f" "$2/$f" || return 1
    done
}
for stage in 0 3; do
    name="lesson_gpu_emu_zero${stage}_np2_accum2"
    erun build/emu/train_gpt2cu_z$stage "$ET/d$stage" || { echo "FAIL ${name}_default_runs: $(tail -2 "$ET/d$stage.out" | tr '\n' ' ')"; continue; }
    erun build/emu/lesson/train_gpt2cu_z$stage "$ET/l$stage" || { echo "FAIL ${name}_runs: $(tail -2 "$ET/l$stage.out" | tr '\n' ' ')"; continue; }
    check "${name}_same_losses_and_norms_as_default_build" python3 tests/zero_logcheck.py losses "$ET/d$stage" "$ET/l$stage" 0
    check "${name}_model_and_state_files_identical" same_files "$ET/d$stage" "$ET/l$stage"
    check "${name}_says_it_is_the_core_alone" grep -q "GPU trainer (the ZeRO core alone" "$ET/l$stage.out"
done

# An extension's flag: one error line naming it and the build (exit 1, 2 ranks).
one_flag_error() { # FLAG ARGS...
    local want=$1 out rc lines; shift
    out=$(timeout 120 "${MPIRUN[@]}" -np 2 build/emu/lesson/train_gpt2cu_z3 "${ARGS[@]}" -b 4 -x 1 "$@" 2>&1); rc=$?
    lines=$(grep -c "^error: $want: this build has no .*ZERO_EXT=none" <<<"$out")
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$lines" -ge 1 ] && [ "$(grep -c '^error' <<<"$out")" -eq "$lines" ] || { echo "exit $rc: $out"; return 1; }
}
check "lesson_gpu_emu_flag_zo_one_error_line" one_flag_error -zo -zo cpu
check "lesson_gpu_emu_flag_qw_one_error_line" one_flag_error -qw -qw 1
check "lesson_gpu_emu_flag_tr_one_error_line" one_flag_error -tr -tr "$ET/trace.json"
