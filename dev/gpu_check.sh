#!/usr/bin/env bash
# dev/gpu_check.sh: the one prepared script for a session lent a GPU (one H200 in a 15-minute
# window: two calls of at most 400 s each, so a rerun after a fix fits). First, here (no GPU
# needed; build/ is not committed):
#   bash dev/device_deps.sh      -> build/device_deps (Open MPI + OpenBLAS, about 20 MiB); only the
#                                   multi-rank sections need Open MPI, test_kernels needs OpenBLAS
# then the device tool call:
#
#   run(command="bash dev/gpu_check.sh", carry=["build/device_deps"], timeout_s=430)
#
# The whole script ends within GPU_CHECK_BUDGET seconds (default 400): each section checks the
# time left first and prints SKIP with the reason when it does not fit, every step runs under
# `timeout`, cut to what the budget leaves, and a failed section never stops the next one.
# Most informative first:
#   0. probe (under 15 s): a found/missing table of the GPU, nvcc, cuBLASLt, cuDNN and its
#      frontend headers, NCCL, Open MPI, OpenBLAS, compute-sanitizer; it picks the make flags.
#      No GPU: one STOP line, exit 2 (--build-only goes on to build anyway).
#   1. build, first what one GPU needs and nothing else (no MPI, no NCCL: make's _nompi_ targets,
#      zero/cluster/mpi_single.h): test_kernels, test_gpt2cu and train_gpt2cu at stage 0, and beside them
#      train_gpt2cu and test_kernels with USE_CUDNN=1 (cuDNN's attention; its frontend headers
#      carried in build/device_deps/cudnn_frontend) when cuDNN is here; then, in the
#      background while the GPU runs, test_gpt2cu at stages 1-3 and (with Open MPI) the host-
#      staged MPI backend; random-token shards meanwhile
#   2. test_kernels: every kernel against its CPU twin; its "INFO err" lines are the device's
#      errors per check, to set beside the emulation's (the numbers next to each tolerance in
#      dev/test_kernels.cu, measured in the contracted flavor with EMU_DEVICE_MATH=1)
#   3. test_gpt2cu (stage 0): the bf16 model against the PyTorch reference
#   4. d12 at B=64, T=1024, stage 0, the own attention kernel: 12 steps, steps 3-6 timed op
#      family by op family (-ot 4: the per-kernel table, common/op_timer.cuh), MFU (llm.c's
#      6N + 6LCT) and tokens/s from steps 7-12, peak device memory against the formula
#   5. with cuDNN's attention (the USE_CUDNN=1 binaries): test_kernels (both attention paths vs
#      the CPU twin), then the d12 run of 4
#   6. test_gpt2cu at stages 1-3 (one GPU, no MPI: every stage with one rank)
#   7. compute-sanitizer memcheck over test_kernels (small shapes)
#   8. with Open MPI: the host-staged MPI backend, 2 ranks on this one GPU at stage 1, vs 1 rank
#   9. ZeRO-Offload: d12 at stage 2 (one GPU, no MPI), 8 steps on the device and 8 with -zo cpu:
#      step time, peak device memory, the loss difference
# Then the summary: a table (tokens/s, MFU, step ms, peak memory and the formula's bytes) per
# attention path, the two per-kernel tables, the errors against the reference, and a
# PASS/FAIL/SKIP line per section. Caps per step (s): build 170 (first part), test_kernels 45 (per
# binary), test_gpt2cu 30, d12 70 per attention path, sanitizer 50, offload 60 per run, the rest
# 30 each. Expected total (an estimate: never measured on a GPU yet) 345 s without offload; a
# hang costs one cap, not the call, and what the budget cannot hold (stages 1-3, sanitizer, 2
# ranks, offload: the least informative) is skipped.
# Output (at most 8 files): $LOG/gpu_check.txt (all of this), $LOG/op_table_flash.txt and
# $LOG/op_table_cudnn.txt (the per-kernel tables), $LOG/gpu_check_logs.tgz (every step's log,
# rewritten after each section), LOG=${OUT:-build/gpu_check}. Data, unpacked libraries:
# build/gpu_check_work (not brought back).
#  10. with more than one GPU visible (NCCL and Open MPI found): the NCCL build at 2 ranks, stages
#      0-3, and with 4 GPUs ZeRO++ at 4 ranks (stage 3, -qw 1 -qg 1 -hp 2), each against the one-GPU
#      NCCL-build run of the same config: losses and norms within the bf16-per-hop tolerance
#      derived at the section. Its builds join the background build; 30 s per run.
#  11. the lesson build (make train_gpt2cu ZERO_EXT=none, NCCL and Open MPI found): 5 steps of d2
#      at stage 0 on one GPU against the default build, losses and norms identical. 30 s per run.
# The first lines printed say what will run (the plan), before the probe's table.
# Usage: bash dev/gpu_check.sh [--build-only | --dry-run]     (from anywhere)
#   --dry-run: the plan and the probe, then exit 0: nothing built or run (checks this script
#              on a machine without a GPU).
#   GPU_CHECK_SECTIONS="4 9" (numbers 2-11, spaces or commas): only those sections after the
#              probe, and only the binaries they need built: the rerun after a fix, which must fit
#              what the device budget has left (a fresh machine starts bare, so it builds again):
#   run(command="GPU_CHECK_SECTIONS='4 9' GPU_CHECK_BUDGET=240 bash dev/gpu_check.sh",
#       carry=["build/device_deps"], timeout_s=270)   # budget: status's budget_left_s minus the
#                                                     # start (1-2 min) and 30 s of margin

# ---- Readers of what the trainer and test_gpt2cu print. tests/t_64_gpu_check_readers.sh runs them
# on the emulated binaries' logs (`GPU_CHECK_LIB=1; source dev/gpu_check.sh` defines them and
# returns), so a changed line fails there, in CI, rather than on the GPU.
declare -A logits_err grads_l2 accum_err tok_s mfu peak step_ms loss_at expect_mib off_ms off_peak
# read_reference LOG S: test_gpt2cu's errors against the PyTorch reference, at stage S.
read_reference() {
    logits_err[$2]=$(grep -m1 'forward_logits' "$1" | grep -o 'max abs err [0-9.e+-]*' | awk '{print $4}')
    grads_l2[$2]=$(grep -m1 'gradients_match_pytorch_bf16_l2' "$1" | grep -o 'L2 err [0-9.e+-]*' | awk '{print $3}')
    accum_err[$2]=$(grep -m1 'gradient_accumulation' "$1" | grep -o 'L2 err [0-9.e+-]*' | awk '{print $3}')
}
# read_d12 LOG PATH: a timed run's mean step (ms), tokens/s, MFU, peak device memory and the
# formula's (MiB), the loss at step 12.
read_d12() {
    local done_line; done_line=$(grep -m1 '^done:' "$1")
    step_ms[$2]=$(grep -o 'mean step [0-9.]* ms' <<<"$done_line" | awk '{print $3}')
    tok_s[$2]=$(grep -o '[0-9]* tok/s' <<<"$done_line" | awk '{print $1}')
    mfu[$2]=$(grep -o 'MFU [0-9.]*%' <<<"$done_line" | awk '{print $2}')
    peak[$2]=$(grep -o "([0-9.]* above the CUDA context" <<<"$done_line" | tr -d "(" | awk "{print \$1}")
    expect_mib[$2]=$(grep -m1 '^device memory:' "$1" | grep -o 'expected [0-9.]* MiB' | awk '{print $2}')
    loss_at[$2]=$(grep -E '^step +12/' "$1" | grep -o 'loss [0-9.]*' | awk '{print $2}')
}
# op_table LOG: the -ot per-kernel table, from its header to its sum line.
op_table() { sed -n '/^op timing:/,/^sum of the rows/p' "$1"; }
# read_offload LOG TAG: an offload section run's mean step (ms) and peak GPU memory (MiB).
read_offload() {
    local done_line; done_line=$(grep -m1 '^done:' "$1")
    off_ms[$2]=$(grep -o 'mean step [0-9.]* ms' <<<"$done_line" | awk '{print $3}')
    off_peak[$2]=$(grep -o 'peak GPU memory [0-9.]* MiB' <<<"$done_line" | awk '{print $4}')
}
# loss_norm_pairs LOG: "loss norm" of each step line, one line per step.
loss_norm_pairs() { grep -E '^step +[0-9]+/' "$1" | sed -E 's/.*\| loss ([0-9.eE+-]+) .*\| norm ([0-9.eE+-]+) .*/\1 \2/'; }
# multi_compare REF LOG TOL: "worst loss difference, worst norm relative difference" over 5 steps
# and exit 0 when both are within TOL.
multi_compare() {
    paste <(loss_norm_pairs "$1") <(loss_norm_pairs "$2") |
    awk -v tol="$3" 'NF == 4 { d = $1 - $3; if (d < 0) d = -d; if (d > wl) wl = d;
                               r = ($2 - $4) / ($2 > 0 ? $2 : 1); if (r < 0) r = -r; if (r > wn) wn = r; n++ }
                     END { printf "loss %.3g, norm %.3g relative over %d steps (tolerance %g)", wl, wn, n, tol;
                           exit !(n == 5 && wl <= tol && wn <= tol) }'
}
if [ "${GPU_CHECK_LIB:-0}" = 1 ]; then return 0 2>/dev/null || exit 0; fi

set -u
cd "$(dirname "$0")/.." || exit 1
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-400}
RESERVE=10 # seconds kept for the summary and the archive at the end
BUILD_ONLY=0 DRY_RUN=0
[ "${1:-}" = "--build-only" ] && BUILD_ONLY=1
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1
SECTIONS=$(tr ',' ' ' <<<"${GPU_CHECK_SECTIONS:-}")
# want N: section N is asked for (every section when GPU_CHECK_SECTIONS is unset or empty).
want() { [ -z "${SECTIONS// /}" ] || [[ " $SECTIONS " == *" $1 "* ]]; }
for n in $SECTIONS; do
    case $n in 2|3|4|5|6|7|8|9|10|11) ;;
        *) echo "error: GPU_CHECK_SECTIONS: '$n' is not a section this script can run alone; expected numbers from 2 to 11" >&2; exit 2;;
    esac
done

LOG=${OUT:-build/gpu_check}
WORK=build/gpu_check_work # data shards, unpacked OpenBLAS: never brought back
mkdir -p "$LOG" "$WORK"
if [ -n "${OUT:-}" ]; then LOGS=$WORK/logs; else LOGS=$LOG/logs; fi
rm -rf "$LOGS"
mkdir -p "$LOGS"
exec > >(tee "$LOG/gpu_check.txt") 2>&1
TEE_PID=$!
archive() { tar -czf "$LOG/gpu_check_logs.tgz" -C "$LOGS" . 2>/dev/null; }
BG_PID=
finish() { [ -n "$BG_PID" ] && kill "$BG_PID" 2>/dev/null; archive; exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null; }
trap finish EXIT

elapsed() { echo $(( $(date +%s) - START ))s; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# limit WANT MIN: the timeout for the next step, WANT cut to what the budget leaves after RESERVE;
# fails (no output) when that is under MIN seconds.
limit() { local l=$(( $(left) - RESERVE )); [ "$l" -ge "$2" ] || return 1; echo $(( l < $1 ? l : $1 )); }
# run_to SECONDS LOGFILE CMD...: run under timeout (SIGKILL 5 s after the TERM), output to LOGFILE.
run_to() { local t=$1 log=$2; shift 2; timeout -k 5 "$t" "$@" >"$log" 2>&1; }
rc_text() { case $1 in 124|137) echo "timed out after ${2}s";; *) echo "exit $1";; esac; }

SEC_NAMES=() SEC_STATUS=() SEC_NOTES=()
# record NAME STATUS NOTE: one result line now, and again in the summary at the end.
record() {
    SEC_NAMES+=("$1"); SEC_STATUS+=("$2"); SEC_NOTES+=("$3")
    echo "$2 $1: $3"
}
skip_budget() { record "$1" SKIP "time budget: $(( $(left) - RESERVE ))s left for steps (of ${BUDGET}s), needs $2s"; }
not_asked() { record "$1" SKIP "section $2 not asked (GPU_CHECK_SECTIONS=$SECTIONS)"; }

echo "== gpu_check $(date -u +%FT%TZ) on $(hostname); budget ${BUDGET}s; logs: $LOG"
# The plan first (what this run will do); the probe below may still skip a section, with a reason.
NGPU=$(timeout 10 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
NGPU=${NGPU:-0}
echo "plan: 0 probe; 1 build; 2 test_kernels (kernels vs CPU twins); 3 test_gpt2cu stage 0; 4 d12 B=64 T=1024 with -ot 4" \
     "(per-kernel table) and MFU; 5 the same with cuDNN attention if found; 6 test_gpt2cu stages 1-3; 7 compute-sanitizer;" \
     "8 MPI backend 2 ranks on one GPU; 9 ZeRO-Offload -zo cpu; 11 the lesson build (ZERO_EXT=none) vs the default build"
if [ "$NGPU" -gt 1 ]; then
    echo "plan: 10 multi-GPU: $NGPU GPUs visible: NCCL stages 0-3 at 2 ranks vs 1 GPU$([ "$NGPU" -ge 4 ] && echo '; ZeRO++ (-qw 1 -qg 1 -hp 2) at 4 ranks' || echo '; ZeRO++ at 4 skipped (needs 4 GPUs)')"
else
    echo "plan: 10 multi-GPU: skipped ($NGPU GPUs visible; needs 2)"
fi
[ -n "${SECTIONS// /}" ] && echo "plan: GPU_CHECK_SECTIONS=$SECTIONS: the probe, the builds those sections need, then only them"
[ "$BUILD_ONLY" = 1 ] && echo "plan: --build-only: sections 0-1 only"
[ "$DRY_RUN" = 1 ] && echo "plan: --dry-run: the probe only, nothing built or run"

# =============================================================================================
# 0. probe: what is here, and the make flags that follow
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
DEPS=build/device_deps
MK=() # extra make arguments
FATAL=()
printf '%-18s %-8s %s\n' "component" "status" "where / detail"
row() { printf '%-18s %-8s %s\n' "$1" "$2" "$3"; }

HDR_DIRS=("$CUDA_HOME/include" "$CUDA_HOME/targets/x86_64-linux/include" /usr/include /usr/include/x86_64-linux-gnu /usr/local/include)
LIB_DIRS=("$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
          /usr/local/lib /usr/lib64 /usr/lib)
# first_file NAME DIRS...: the first DIR/NAME that exists (NAME may be a glob).
first_file() {
    local name=$1 d f; shift
    for d in "$@"; do for f in "$d"/$name; do [ -e "$f" ] && { echo "$f"; return 0; }; done; done
    return 1
}
# python's nvidia wheels (namespace package nvidia: nvidia/nccl, nvidia/cu13, nvidia/cublas ...)
NV_DIRS=$(timeout 10 python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
# wheel_dir HEADER LIBGLOB: the wheel folder holding include/HEADER and lib/LIBGLOB.
wheel_dir() {
    local h d
    [ -n "$NV_DIRS" ] || return 1
    # shellcheck disable=SC2086 # NV_DIRS: site-packages paths, no spaces
    while read -r h; do
        d=$(dirname "$(dirname "$h")")
        first_file "$2" "$d/lib" >/dev/null && { echo "$d"; return 0; }
    done < <(find $NV_DIRS -maxdepth 3 -path "*/include/$1" 2>/dev/null)
    return 1
}

row "nvidia wheels" info "${NV_DIRS:-none (python3 -c 'import nvidia' failed)}"

# GPU
GPU_OK=0
GPU_ARCH=90
GPU_WHY=
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)
    if [ -n "$gpu" ] && ! grep -qiE 'fail|error|not found|no devices|not a valid|timed out' <<<"$gpu"; then
        GPU_OK=1
        cap=$(timeout 5 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
        [[ $cap =~ ^[0-9]+$ ]] && GPU_ARCH=$cap
        row gpu found "$gpu (sm_$GPU_ARCH)"
    else
        GPU_WHY="nvidia-smi: ${gpu:-no answer within 10 s}"; row gpu MISSING "$GPU_WHY"
    fi
else
    if ls /dev/nvidia0 >/dev/null 2>&1; then GPU_OK=1; row gpu found "/dev/nvidia0 (no nvidia-smi; assuming sm_90)"
    else GPU_WHY="no nvidia-smi and no /dev/nvidia0"; row gpu MISSING "$GPU_WHY"; fi
fi
MK+=("GPU_ARCH=$GPU_ARCH")

# nvcc, host compiler, make
if command -v nvcc >/dev/null 2>&1; then row nvcc found "$(nvcc --version | grep -m1 -o 'release [0-9.]*, V[0-9.]*') ($(command -v nvcc))"
else row nvcc MISSING "not on PATH nor in $CUDA_HOME/bin"; FATAL+=("nvcc"); fi
if command -v g++ >/dev/null 2>&1; then
    gomp=$(g++ -print-file-name=libgomp.so 2>/dev/null)
    row g++ found "$(g++ -dumpfullversion 2>/dev/null); libgomp $([ -e "$gomp" ] && echo "$gomp" || echo MISSING)"
else row g++ MISSING "nvcc needs a host compiler"; FATAL+=("g++"); fi
command -v make >/dev/null 2>&1 || { row make MISSING "-"; FATAL+=("make"); }
glibc_have=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')
glibc_need=$(sed -n 's/^needs at least: GLIBC_//p' "$DEPS/MANIFEST" 2>/dev/null)
if [ -n "$glibc_need" ] && [ -n "$glibc_have" ] &&
   [ "$(printf '%s\n%s\n' "$glibc_need" "$glibc_have" | sort -V | head -1)" != "$glibc_need" ]; then
    row glibc OLD "$glibc_have, but the bundle's libraries need $glibc_need: links against it will fail"
else row glibc info "${glibc_have:-?}; the bundle needs ${glibc_need:-- (no bundle)}"; fi

# cuBLASLt: the toolkit/system, else the nvidia-cublas wheel
if h=$(first_file cublasLt.h "${HDR_DIRS[@]}") && l=$(first_file libcublasLt.so "${LIB_DIRS[@]}"); then
    row cublasLt found "$h, $l"
elif w=$(wheel_dir cublasLt.h 'libcublasLt.so*'); then
    # The wheel's include/ also holds a CUDA runtime's headers: take only cuBLAS's, so nvcc
    # keeps its own toolkit's cuda_runtime.h.
    rm -rf "$WORK/cublas_include"; mkdir -p "$WORK/cublas_include"
    ln -s "$w"/include/cublas*.h "$WORK/cublas_include/"
    MK+=("CUBLAS_INCDIR=$WORK/cublas_include" "CUBLAS_LIBDIR=$w/lib"); CUBLAS_LIBDIR=$w/lib
    row cublasLt wheel "$w (cublas*.h via $WORK/cublas_include, CUBLAS_LIBDIR)"
elif h=$(first_file cublasLt.h "${HDR_DIRS[@]}") && l=$(first_file 'libcublasLt.so.*' "${LIB_DIRS[@]}"); then
    MK+=("CUBLAS_LIBDIR=$(dirname "$l")"); CUBLAS_LIBDIR=$(dirname "$l")
    row cublasLt found "$h, $l (versioned only: CUBLAS_LIBDIR)"
else row cublasLt MISSING "no cublasLt.h + libcublasLt.so in $CUDA_HOME or the nvidia wheels"; FATAL+=("cuBLASLt"); fi

# cuDNN (the USE_CUDNN=1 attention): the library and its headers (system or the nvidia-cudnn
# wheel), and the frontend's header-only C++ API (PyPI nvidia-cudnn-frontend, or carried in
# build/device_deps/cudnn_frontend/include, or build/cudnn_frontend/include, made by make here)
CUDNN_OK=0
CUDNN_MK=()
if h=$(first_file cudnn.h "${HDR_DIRS[@]}") && l=$(first_file 'libcudnn.so*' "${LIB_DIRS[@]}"); then
    CUDNN_OK=1; row cudnn found "$h, $l"
elif w=$(wheel_dir cudnn.h 'libcudnn.so*'); then
    CUDNN_OK=1; CUDNN_MK+=("CUDNN_HOME=$w"); CUDNN_LIBDIR=$w/lib; row cudnn wheel "$w (CUDNN_HOME)"
else row cudnn MISSING "no cudnn.h + libcudnn.so*: the cuDNN attention section is skipped"; fi
FE=$(first_file cudnn_frontend.h "$DEPS/cudnn_frontend/include" build/cudnn_frontend/include "${HDR_DIRS[@]}" 2>/dev/null || true)
[ -z "$FE" ] && FE=$(timeout 10 python3 -c 'import cudnn, os; print(os.path.join(os.path.dirname(cudnn.__file__), "include", "cudnn_frontend.h"))' 2>/dev/null || true)
# cuda.mk's CUDNN_FRONTEND_DIR is the folder above include/ (DIR/include/cudnn_frontend.h).
if [ -n "$FE" ] && [ -f "$FE" ]; then CUDNN_MK+=("CUDNN_FRONTEND_DIR=$(dirname "$(dirname "$FE")")"); row cudnn-frontend found "$FE"
else [ "$CUDNN_OK" = 1 ] && row cudnn-frontend MISSING "no cudnn_frontend.h (carry it in $DEPS/cudnn_frontend/include): no cuDNN attention"; CUDNN_OK=0; fi

# NCCL: the toolkit/system, else the nvidia-nccl-cu13 wheel; else the NCCL-free MPI-backend builds
NCCL_OK=1
if h=$(first_file nccl.h "${HDR_DIRS[@]}") && l=$(first_file libnccl.so "${LIB_DIRS[@]}"); then
    row nccl found "$h, $l"
elif w=$(wheel_dir nccl.h 'libnccl.so*'); then
    MK+=("NCCL_HOME=$w"); NCCL_LIBDIR=$w/lib
    row nccl wheel "$w (NCCL_HOME)"
elif h=$(first_file nccl.h "${HDR_DIRS[@]}") && l=$(first_file 'libnccl.so.*' "${LIB_DIRS[@]}"); then
    MK+=("NCCL_LIBDIR=$(dirname "$l")"); NCCL_LIBDIR=$(dirname "$l")
    row nccl found "$h, $l (versioned only: NCCL_LIBDIR)"
else
    NCCL_OK=0
    row nccl MISSING "no nccl.h + libnccl.so*; training uses the host-staged MPI backend builds (1 rank)"
fi

# Open MPI: mpicc, else the bundle (headers + libmpi; zero.cuh needs <mpi.h> in every binary)
MPI_BUNDLE=0
if command -v mpicc >/dev/null 2>&1 && [ -n "$(mpicc --showme:compile 2>/dev/null)" ]; then
    row mpi found "mpicc: $(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')"
elif [ -f "$DEPS/mpi/include/mpi.h" ] && [ -e "$DEPS/mpi/lib/libmpi.so" ]; then
    MPI_BUNDLE=1
    MK+=("MPI_HOME=$DEPS/mpi")
    row mpi bundle "$DEPS/mpi (MPI_HOME; $(sed -n 2p "$DEPS/MANIFEST" 2>/dev/null | cut -d';' -f1))"
else row mpi MISSING "no mpicc and no $DEPS/mpi: one-GPU builds only (zero/cluster/mpi_single.h); the 2-rank section is skipped"; fi
MPI_OK=$([ "$MPI_BUNDLE" = 1 ] || command -v mpicc >/dev/null 2>&1 && echo 1 || echo 0)

# OpenBLAS (test_kernels' CPU twins): the system, else the bundle, unpacked into $WORK
BLAS_OK=1
if first_file cblas.h "${HDR_DIRS[@]}" >/dev/null && { l=$(first_file libopenblas.so "${LIB_DIRS[@]}" /usr/lib/x86_64-linux-gnu/openblas-openmp) ||
        l=$(ldconfig -p 2>/dev/null | awk '/libopenblas\.so / {print $NF; exit}' | grep .); }; then
    row openblas found "$l"
elif [ -f "$DEPS/openblas/lib.tar.xz" ] && [ -f "$DEPS/openblas/include/cblas.h" ]; then
    ob=$WORK/openblas
    rm -rf "$ob"; mkdir -p "$ob"
    cp -r "$DEPS/openblas/include" "$ob/include"
    if bash dev/device_deps.sh unpack "$ob/lib" 2>"$LOGS/openblas_unpack.log"; then
        MK+=("OPENBLAS_HOME=$ob"); OPENBLAS_LIBDIR=$PWD/$ob/lib
        row openblas bundle "$ob (OPENBLAS_HOME, unpacked from $DEPS/openblas/lib.tar.xz)"
    else BLAS_OK=0; row openblas MISSING "unpacking the bundle failed: $(tail -1 "$LOGS/openblas_unpack.log")"; fi
else BLAS_OK=0; row openblas MISSING "no cblas.h + libopenblas and no bundle; test_kernels is skipped"; fi

# mpirun (optional: the 2-rank check)
MPIRUN=()
if [ "$MPI_BUNDLE" = 0 ] && command -v mpirun >/dev/null 2>&1; then
    MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)
    row mpirun found "$(command -v mpirun)"
elif [ "$MPI_BUNDLE" = 1 ] && [ -x "$DEPS/mpi/bin/orterun" ]; then
    MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -np 2)
    row mpirun bundle "$DEPS/mpi/bin/mpirun"
else row mpirun MISSING "the 2-rank check is skipped"; fi

# compute-sanitizer (optional)
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || first_file compute-sanitizer/compute-sanitizer "$CUDA_HOME" || true)
if [ -n "$SANITIZER" ]; then row compute-sanitizer found "$SANITIZER"; else row compute-sanitizer MISSING "the sanitizer runs are skipped"; fi

# The environment the binaries run in, exported after the build (the compilers and linkers keep
# the system's libraries): Debian's libmpi carries a RUNPATH of its own, so the bundle's
# libraries are found through LD_LIBRARY_PATH, in $WORK/run_libs: Open MPI's own (with hwloc,
# libevent, PMIx), and of the rest (zlib, libudev, ...) only what this system lacks.
RUN_LD=
if [ "$MPI_BUNDLE" = 1 ]; then
    ld_saved=${LD_LIBRARY_PATH-unset}
    # shellcheck disable=SC1091 # made by dev/device_deps.sh
    source "$DEPS/mpi/env.sh" # OPAL_* and PMIX_* (where the MPI runtime lives), mpirun on PATH
    if [ "$ld_saved" = unset ]; then unset LD_LIBRARY_PATH; else export LD_LIBRARY_PATH=$ld_saved; fi
    have=" $(ldconfig -p 2>/dev/null | awk 'NR > 1 {printf "%s ", $1}')"
    rm -rf "$WORK/run_libs"; mkdir -p "$WORK/run_libs"
    for f in "$DEPS"/mpi/lib/*.so*; do
        n=${f##*/}
        case $n in
            libmpi*|libopen-*|libmca_common*|libpmix*|libhwloc*|libevent*) ;;
            *) [[ $have == *" $n "* ]] && continue ;;
        esac
        ln -sf "$PWD/$f" "$WORK/run_libs/$n"
    done
    RUN_LD=$PWD/$WORK/run_libs
fi
for d in "${CUBLAS_LIBDIR:-}" "${NCCL_LIBDIR:-}" "${OPENBLAS_LIBDIR:-}" "${CUDNN_LIBDIR:-}"; do
    [ -n "$d" ] && RUN_LD=$RUN_LD${RUN_LD:+:}$d
done
# On the device build without -Werror: another host gcc may warn where CI's does not.
MK+=("NVCC_WARN=-Xcompiler -Wall,-Wno-unused-function")
echo "make flags: ${MK[*]}"
echo "run-time library path: ${RUN_LD:-(none needed)}"
echo "probe done ($(elapsed))"

if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: probe done; would $([ ${#FATAL[@]} -gt 0 ] && echo "stop (missing ${FATAL[*]})" || echo build)$([ "$GPU_OK" = 0 ] && echo ', then stop: no GPU')"
    exit 0
fi
if [ ${#FATAL[@]} -gt 0 ]; then
    echo "STOP: cannot build: missing ${FATAL[*]} (see the table above)"
    exit 2
fi
if [ "$GPU_OK" = 0 ] && [ "$BUILD_ONLY" = 0 ]; then
    echo "STOP: no GPU visible ($GPU_WHY); nothing run (--build-only would build anyway)"
    exit 2
fi

# =============================================================================================
# 1. build: first what one GPU needs (no MPI, no NCCL), then the rest in the background
SM=sm$GPU_ARCH
# Each binary is built only when a section asked for needs it (all of them by default).
FIRST=()
{ want 2 || want 7; } && [ "$BLAS_OK" = 1 ] && FIRST+=(build/test_kernels)                 # 2, 7
want 4 && FIRST+=(build/cuda/train_gpt2cu_nompi_${SM}_zero0)                                 # 4
want 3 && FIRST+=(build/cuda/test_gpt2cu_nompi_${SM}_zero0)                                  # 3
LATER=()
want 6 && LATER+=(build/cuda/test_gpt2cu_nompi_${SM}_zero1 build/cuda/test_gpt2cu_nompi_${SM}_zero2
                  build/cuda/test_gpt2cu_nompi_${SM}_zero3)                                  # 6
want 9 && LATER+=(build/cuda/train_gpt2cu_nompi_${SM}_zero2)                                 # 9
want 8 && [ "$MPI_OK" = 1 ] && LATER+=(build/cuda/train_gpt2cu_mpi_${SM}_zero0 build/cuda/train_gpt2cu_mpi_${SM}_zero1)
MULTI_OK=$([ "$NGPU" -gt 1 ] && [ "$NCCL_OK" = 1 ] && [ "$MPI_OK" = 1 ] && [ ${#MPIRUN[@]} -gt 0 ] && echo 1 || echo 0)
want 10 && [ "$MULTI_OK" = 1 ] && LATER+=(build/cuda/train_gpt2cu_${SM}_zero0 build/cuda/train_gpt2cu_${SM}_zero1
                                          build/cuda/train_gpt2cu_${SM}_zero2 build/cuda/train_gpt2cu_${SM}_zero3)
LESSON_OK=$([ "$NCCL_OK" = 1 ] && [ "$MPI_OK" = 1 ] && echo 1 || echo 0) # the lesson build links NCCL and MPI
want 11 && [ "$LESSON_OK" = 1 ] && LATER+=(build/cuda/train_gpt2cu_lesson_${SM}_zero0)
want 11 && [ "$LESSON_OK" = 1 ] && ! { want 10 && [ "$MULTI_OK" = 1 ]; } && LATER+=(build/cuda/train_gpt2cu_${SM}_zero0)
CUDNN_BIN=build/cuda/train_gpt2cu_nompi_cudnn_${SM}_zero0
CUDNN_BUILD=("$CUDNN_BIN")
[ "$BLAS_OK" = 1 ] && CUDNN_BUILD+=(build/cuda/test_kernels_cudnn_${SM})
want 5 || CUDNN_BUILD=()                                                                     # 5

TRAIN_BIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL_BIN=data/tinyshakespeare/tiny_shakespeare_val.bin
if [ ! -f "$TRAIN_BIN" ] || [ ! -f "$VAL_BIN" ]; then
    TRAIN_BIN=$WORK/data/random_train.bin
    VAL_BIN=$WORK/data/random_val.bin
    mkdir -p "$WORK/data"
    # llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
    timeout 60 python3 - "$TRAIN_BIN" "$VAL_BIN" >"$LOGS/data.log" 2>&1 <<'PY' &
import os, struct, sys
for path, n in ((sys.argv[1], 4_000_000), (sys.argv[2], 200_000)):
    if os.path.exists(path) and os.path.getsize(path) == 1024 + 2 * n:
        continue
    try:
        import numpy as np
        data = np.random.default_rng(1337).integers(0, 50257, n, dtype=np.uint16).tobytes()
    except ImportError:
        import random
        from array import array
        rng = random.Random(1337)
        data = array("H", (rng.randrange(50257) for _ in range(n))).tobytes()
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(data)
    os.replace(path + ".tmp", path)
PY
    DATA_PID=$!
else
    DATA_PID=
fi

JOBS=$(nproc 2>/dev/null || echo 4)
# built_ok LOG TARGETS...: the targets that exist and that make did not report as failed (a
# failed compile can leave an older binary in place on a warm machine: removed, never run).
built_missing() {
    local log=$1 b; shift
    for b in "$@"; do
        if [ ! -x "$b" ] || grep -qF "] $b] Error" "$log" || grep -qF ": $b] Error" "$log"; then echo "$(basename "$b")"; rm -f "$b"; fi
    done
}
missing=()
if [ ${#FIRST[@]} -eq 0 ] && [ ${#CUDNN_BUILD[@]} -eq 0 ]; then
    record build_one_gpu SKIP "no section asked for needs it (GPU_CHECK_SECTIONS=$SECTIONS)"
elif t=$(limit 170 60); then
    # The cuDNN binaries (named targets: no stamps shared with the build beside them).
    if [ "$CUDNN_OK" = 1 ] && [ ${#CUDNN_BUILD[@]} -gt 0 ]; then (run_to "$t" "$LOGS/build_cudnn.log" make -k -j"$JOBS" "${MK[@]}" "${CUDNN_MK[@]}" "${CUDNN_BUILD[@]}") & CUDNN_PID=$!; fi
    if [ ${#FIRST[@]} -gt 0 ]; then # (make without a target would build its default)
        run_to "$t" "$LOGS/build.log" make -k -j"$JOBS" "${MK[@]}" "${FIRST[@]}"
        build_rc=$?
        mapfile -t missing < <(built_missing "$LOGS/build.log" "${FIRST[@]}")
        if [ ${#missing[@]} -eq 0 ]; then record build_one_gpu PASS "${#FIRST[@]} binaries, no MPI or NCCL ($(elapsed))"
        else record build_one_gpu FAIL "$(rc_text $build_rc "$t"); not built: ${missing[*]}: $(grep -m3 -E 'error|Error|undefined reference|cannot find' "$LOGS/build.log" | cut -c1-300 | tr '\n' ' ')"; fi
    fi
    if ! want 5; then :
    elif [ "$CUDNN_OK" = 1 ]; then
        wait "$CUDNN_PID"
        mapfile -t cudnn_missing < <(built_missing "$LOGS/build_cudnn.log" "${CUDNN_BUILD[@]}")
        if [ ${#cudnn_missing[@]} -eq 0 ]; then record build_cudnn PASS "${#CUDNN_BUILD[@]} binaries with USE_CUDNN=1, no MPI ($(elapsed))"
        else record build_cudnn FAIL "not built: ${cudnn_missing[*]}: $(grep -m3 -E 'error|Error' "$LOGS/build_cudnn.log" | cut -c1-300 | tr '\n' ' ')"; fi
    else record build_cudnn SKIP "no cuDNN or no frontend headers (probe)"; fi
else
    skip_budget build_one_gpu 60
fi
# The rest builds while the GPU runs the sections below (compiles use the CPUs only).
if [ ${#LATER[@]} -gt 0 ] && [ $(( $(left) - RESERVE )) -gt 120 ]; then
    (make -k -j"$JOBS" "${MK[@]}" "${LATER[@]}" >"$LOGS/build_later.log" 2>&1) & BG_PID=$!
fi
[ -n "$DATA_PID" ] && wait "$DATA_PID"
[ -n "$RUN_LD" ] && export LD_LIBRARY_PATH=$RUN_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -f "$TRAIN_BIN" ]; then echo "data: $TRAIN_BIN"; else echo "data: MISSING ($(tail -1 "$LOGS/data.log" 2>/dev/null))"; fi
archive
if [ "$BUILD_ONLY" = 1 ]; then
    [ -n "$BG_PID" ] && { wait "$BG_PID"; BG_PID=; }
    later_missing=$(built_missing "$LOGS/build_later.log" "${LATER[@]}" | tr '\n' ' ')
    echo "build-only: the rest: ${later_missing:+not built: $later_missing}${later_missing:-all built} ($(elapsed))"
    [ ${#missing[@]} -eq 0 ] && [ -z "$later_missing" ] && exit 0 || exit 1
fi

# =============================================================================================
# 2. kernels vs CPU twins
# kernel_tests NAME BINARY: one section (test_kernels; test_kernels_cudnn checks both attention paths)
kernel_tests() {
    local name=$1 bin=$2 log=$LOGS/$1.log t rc npass nfail
    if [ ! -x "$bin" ]; then
        record "$name" SKIP "$bin not built$([ "$BLAS_OK" = 0 ] && echo ' (no OpenBLAS)')"
    elif t=$(limit 45 15); then
        run_to "$t" "$log" "./$bin"
        rc=$?
        grep -E '^(PASS|FAIL|INFO)|^note' "$log" | sed "s/^/[$name] /"
        npass=$(grep -c '^PASS' "$log"); nfail=$(grep -c '^FAIL' "$log")
        if [ $rc -eq 0 ] && [ "$nfail" -eq 0 ]; then record "$name" PASS "$npass checks"
        else record "$name" FAIL "$(rc_text $rc "$t"), $npass passed, $nfail failed: $(grep -m1 -E '^FAIL|error' "$log" | cut -c1-200)"; fi
    else skip_budget "$name" 15; fi
}
if want 2; then kernel_tests test_kernels build/test_kernels; else not_asked test_kernels 2; fi
archive

# =============================================================================================
# 3, 6. the model vs the PyTorch reference (one GPU, no MPI), stage by stage
reference() {
    local s=$1 log=$LOGS/test_gpt2cu_zero$1.log bin=build/cuda/test_gpt2cu_nompi_${SM}_zero$1 t rc
    if [ "$s" != 0 ] && [ -n "$BG_PID" ]; then # the background build: wait for it, within the budget
        t=$(limit 150 20) || { skip_budget "test_gpt2cu_zero$s" 20; return; }
        timeout "$t" tail --pid="$BG_PID" -f /dev/null; BG_PID=
        mapfile -t later_missing < <(built_missing "$LOGS/build_later.log" "${LATER[@]}")
        [ ${#later_missing[@]} -gt 0 ] && record build_later FAIL "not built: ${later_missing[*]}: $(grep -m2 -E 'error|Error' "$LOGS/build_later.log" | cut -c1-200 | tr '\n' ' ')"
    fi
    if [ ! -x "$bin" ]; then record "test_gpt2cu_zero$s" SKIP "$bin not built"; return; fi
    t=$(limit 30 10) || { skip_budget "test_gpt2cu_zero$s" 10; return; }
    run_to "$t" "$log" "./$bin"
    rc=$?
    grep -E '^(PASS|FAIL)' "$log" | sed "s/^/[stage $s] /"
    read_reference "$log" "$s"
    if [ $rc -eq 0 ] && ! grep -q '^FAIL' "$log"; then record "test_gpt2cu_zero$s" PASS "$(grep -c '^PASS' "$log") checks"
    else record "test_gpt2cu_zero$s" FAIL "$(rc_text $rc "$t"): $(grep -m1 -E '^FAIL|error' "$log" | cut -c1-200)"; fi
}
if want 3; then reference 0; else not_asked test_gpt2cu_zero0 3; fi
archive

# =============================================================================================
# 4, 5. d12 at B=64, T=1024, stage 0, one GPU: per-kernel table (steps 3-6), MFU (steps 7-12)
throughput() {
    local path=$1 bin=$2 log=$LOGS/train_d12_$1.log t rc done_line
    if [ ! -x "$bin" ]; then record "train_d12_$path" SKIP "$bin not built"; return; fi
    [ -f "$TRAIN_BIN" ] || { record "train_d12_$path" SKIP "no data shard"; return; }
    t=$(limit 70 25) || { skip_budget "train_d12_$path" 25; return; }
    run_to "$t" "$log" "$bin" -i "$TRAIN_BIN" -j "$VAL_BIN" -e d12 -b 64 -t 1024 -x 12 -ot 4 -v 0 -s 0 -l 6e-4 -u 10
    rc=$?
    read_d12 "$log" "$path"
    done_line=$(grep -m1 '^done:' "$log")
    op_table "$log" >"$LOG/op_table_$path.txt"
    if [ $rc -eq 0 ] && [ -n "$done_line" ]; then record "train_d12_$path" PASS "$done_line"
    else record "train_d12_$path" FAIL "$(rc_text $rc "$t"): $(grep -v '^step' "$log" | tail -2 | tr '\n' ' ' | cut -c1-300)"; fi
    [ -s "$log" ] || SEC_NOTES[-1]+=" (no output)"
}
if want 4; then throughput flash "build/cuda/train_gpt2cu_nompi_${SM}_zero0"; else not_asked train_d12_flash 4; fi
archive
if ! want 5; then not_asked train_d12_cudnn 5
elif [ -x "$CUDNN_BIN" ]; then
    # cuDNN's attention against the CPU twin first (the flash path again beside it), then its speed
    [ "$BLAS_OK" = 1 ] && kernel_tests test_kernels_cudnn "build/cuda/test_kernels_cudnn_${SM}"
    throughput cudnn "$CUDNN_BIN"
else record train_d12_cudnn SKIP "no USE_CUDNN=1 binary (build_cudnn)"; fi
archive
if want 6; then for s in 1 2 3; do reference "$s"; done; else not_asked test_gpt2cu_zero1-3 6; fi
archive

# =============================================================================================
# 7. compute-sanitizer over the kernel tests (small shapes)
if ! want 7; then not_asked sanitizer_memcheck 7
elif [ -z "$SANITIZER" ]; then record sanitizer_memcheck SKIP "compute-sanitizer not found"
elif [ ! -x build/test_kernels ]; then record sanitizer_memcheck SKIP "build/test_kernels not built"
elif t=$(limit 50 20); then
    run_to "$t" "$LOGS/sanitizer_memcheck.log" "$SANITIZER" --tool memcheck --error-exitcode 3 ./build/test_kernels
    rc=$?
    summary=$(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer_memcheck.log" | sed 's/^========= //' | tr '\n' ' ')
    if grep -q -E 'Device not supported|not supported on this' "$LOGS/sanitizer_memcheck.log"; then
        record sanitizer_memcheck SKIP "compute-sanitizer: $(grep -m1 -E 'not supported' "$LOGS/sanitizer_memcheck.log" | cut -c1-150)"
    elif [ $rc -eq 0 ]; then record sanitizer_memcheck PASS "${summary:-no errors}"
    else record sanitizer_memcheck FAIL "$(rc_text $rc "$t"): ${summary:-$(grep -m1 -E 'Error|error' "$LOGS/sanitizer_memcheck.log" | cut -c1-200)}"; fi
else skip_budget sanitizer_memcheck 20; fi
archive

# =============================================================================================
# 8. the host-staged MPI backend, 2 ranks on this one GPU at stage 1, vs 1 rank at stage 0
D2=(-i "$TRAIN_BIN" -e d2 -b 2 -t 64 -d 256 -v 0 -s 0 -l 1e-3 -u 2 -wt 60 -x 5)
if ! want 8; then not_asked mpi_backend_np2 8
elif [ ${#MPIRUN[@]} -eq 0 ]; then record mpi_backend_np2 SKIP "mpirun not found (system or $DEPS/mpi)"
elif [ ! -x "build/cuda/train_gpt2cu_mpi_${SM}_zero1" ] || [ ! -x "build/cuda/train_gpt2cu_mpi_${SM}_zero0" ]; then
    record mpi_backend_np2 SKIP "the _mpi_ binaries were not built (build_later)"
elif t=$(limit 30 15); then
    run_to "$t" "$LOGS/mpi_np1.log" "./build/cuda/train_gpt2cu_mpi_${SM}_zero0" "${D2[@]}" -b 4 -d 256
    t=$(limit 30 15) || { skip_budget mpi_backend_np2 15; t=; }
    if [ -n "$t" ]; then
        run_to "$t" "$LOGS/mpi_np2.log" "${MPIRUN[@]}" "./build/cuda/train_gpt2cu_mpi_${SM}_zero1" "${D2[@]}"
        rc=$?
        worst=$(paste <(grep -E '^step +[0-9]+/' "$LOGS/mpi_np1.log" | grep -o 'loss [0-9.]*' | awk '{print $2}') \
                      <(grep -E '^step +[0-9]+/' "$LOGS/mpi_np2.log" | grep -o 'loss [0-9.]*' | awk '{print $2}') |
                awk 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n == 5) printf "%.3g", w; else print "missing" }')
        # 2e-2: bf16 sums in another order, the test_gpt2cu loss tolerance
        if [ "$worst" != "missing" ] && awk -v w="$worst" 'BEGIN { exit !(w < 2e-2) }'; then
            record mpi_backend_np2 PASS "stage 1, 2 ranks vs 1: max loss difference $worst over 5 steps (tolerance 2e-2)"
        else record mpi_backend_np2 FAIL "$(rc_text $rc "$t"); max loss difference $worst: $(grep -m1 -iE 'error' "$LOGS/mpi_np2.log" | cut -c1-200)"; fi
    fi
else skip_budget mpi_backend_np2 15; fi
archive

# =============================================================================================
# 9. ZeRO-Offload (zero/offload/offload_gpu.cuh): d12 at stage 2 on one GPU (no MPI), B=64 x T=1024,
# 8 steps on the device, then 8 with the optimizer state and AdamW on the host (-zo cpu): step
# time and peak GPU memory of both, and the largest loss difference: 0 expected (the host AdamW
# and the device kernel spell out the same roundings, kernels/adamw.cuh; t_62 checks the PTX), so
# a non-zero difference here is reported as a FAIL: it is what only a GPU can show
offload_run() { # TAG FLAGS...
    local tag=$1 log=$LOGS/train_d12_zero2_$1.log t done_line; shift
    t=$(limit 60 25) || return 1
    run_to "$t" "$log" "$OFF_BIN" -i "$TRAIN_BIN" -j "$VAL_BIN" -e d12 -b 64 -t 1024 -x 8 -v 0 -s 0 -l 6e-4 -u 10 "$@"
    OFF_RC=$?
    read_offload "$log" "$tag"
    done_line=$(grep -m1 '^done:' "$log")
    [ $OFF_RC -eq 0 ] && [ -n "$done_line" ]
}
name=zero2_offload_cpu_d12 OFF_BIN=build/cuda/train_gpt2cu_nompi_${SM}_zero2
if want 9 && [ -n "$BG_PID" ]; then timeout "$(limit 60 1 || echo 1)" tail --pid="$BG_PID" -f /dev/null; fi
if ! want 9; then not_asked "$name" 9
elif [ ! -x "$OFF_BIN" ] || [ ! -f "$TRAIN_BIN" ]; then record "$name" SKIP "$OFF_BIN (build_later) or the data shard missing"
elif ! limit 60 50 >/dev/null; then skip_budget "$name" 50
elif ! offload_run device; then record "$name" FAIL "on device: exit $OFF_RC: $(grep -m1 -iE 'error' "$LOGS/train_d12_zero2_device.log" | cut -c1-200)"
elif ! offload_run zo_cpu -zo cpu; then
    record "$name" FAIL "-zo cpu: exit ${OFF_RC:-skipped (budget)}: $(grep -m1 -iE 'error' "$LOGS/train_d12_zero2_zo_cpu.log" 2>/dev/null | cut -c1-200)"
else
    worst=$(paste <(grep -E '^step +[0-9]+/' "$LOGS/train_d12_zero2_device.log" | grep -o 'loss [0-9.]*' | awk '{print $2}') \
                  <(grep -E '^step +[0-9]+/' "$LOGS/train_d12_zero2_zo_cpu.log" | grep -o 'loss [0-9.]*' | awk '{print $2}') |
            awk 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n > 0) printf "%.3g over %d steps", w, n; else print "no steps to compare" }')
    case $worst in 0\ over*) off_status=PASS;; *) off_status=FAIL;; esac # bit-identical updates: the same losses
    record "$name" "$off_status" "-zo cpu: ${off_ms[zo_cpu]:-?} ms/step, peak GPU ${off_peak[zo_cpu]:-?} MiB vs on device ${off_ms[device]:-?} ms, ${off_peak[device]:-?} MiB; max loss difference $worst; $(grep -m1 '^offload: host' "$LOGS/train_d12_zero2_zo_cpu.log" | cut -c1-120)"
fi
archive

# =============================================================================================
# 10. multi-GPU (more than one GPU visible, NCCL and Open MPI here): the NCCL build at 2 ranks,
# stages 0-3, and ZeRO++ at 4 ranks when there are 4 GPUs, against the one-GPU run of the NCCL
# build (same global batch: 256 tokens a step, 5 steps of the d2 config of section 8).
# Tolerance, bf16 per hop: NCCL's ring reduce-scatter / all-reduce of bf16 gradients rounds each
# element's partial sum to bf16 at every hop, N-1 roundings at N ranks (a tree needs fewer), each
# at most u = 2^-8 relative (bf16 keeps 8 significant bits); the emulation (t_65: one fp32 sum,
# one bf16 rounding: N-1 = 1) measured losses 1.9e-4 apart and norms 4.3e-4 relative over 6
# steps and holds them to 2e-3 (10x). Rounding errors add at most linearly, so at N ranks:
# tolerance 2e-3 x (N-1) on the loss (absolute) and the norm (relative): 2e-3 at 2 ranks, 6e-3 at
# 4. ZeRO++ (int8 weights, int4 gradients) moves the loss by its quantization error instead:
# t_38 measures 0.05% of the loss, 5e-3 on ~10.8; 10x: 5e-2.
MULTI_ARGS=(-i "$TRAIN_BIN" -e d2 -t 64 -d 256 -v 0 -s 0 -l 1e-3 -u 2 -wt 60 -x 5)
MPIRUN_N=()
[ ${#MPIRUN[@]} -gt 2 ] && MPIRUN_N=("${MPIRUN[@]:0:${#MPIRUN[@]}-2}") # mpirun without its -np 2
if ! want 10; then not_asked multi_gpu 10
elif [ "$MULTI_OK" = 0 ]; then
    record multi_gpu SKIP "$NGPU GPU(s) visible, NCCL $([ "$NCCL_OK" = 1 ] && echo found || echo missing), MPI $([ "$MPI_OK" = 1 ] && echo found || echo missing); needs 2 GPUs, NCCL, Open MPI"
else
    if [ -n "$BG_PID" ]; then timeout "$(limit 90 1 || echo 1)" tail --pid="$BG_PID" -f /dev/null; fi
    REF_BIN=build/cuda/train_gpt2cu_${SM}_zero0
    if [ ! -x "$REF_BIN" ]; then record multi_gpu_reference SKIP "$REF_BIN not built (build_later)"
    elif t=$(limit 30 15); then
        run_to "$t" "$LOGS/multi_np1.log" "$REF_BIN" "${MULTI_ARGS[@]}" -b 4; rc=$?
        if [ $rc -ne 0 ]; then record multi_gpu_reference FAIL "$(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$LOGS/multi_np1.log" | cut -c1-200)"; fi
        for stage in 0 1 2 3; do
            bin=build/cuda/train_gpt2cu_${SM}_zero$stage name=multi_gpu_nccl_zero${stage}_np2
            [ -x "$bin" ] || { record "$name" SKIP "$bin not built"; continue; }
            t=$(limit 30 15) || { skip_budget "$name" 15; continue; }
            run_to "$t" "$LOGS/$name.log" "${MPIRUN_N[@]}" -np 2 "$bin" "${MULTI_ARGS[@]}" -b 2; rc=$?
            if [ $rc -ne 0 ]; then record "$name" FAIL "$(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$LOGS/$name.log" | cut -c1-200)"
            elif cmp_text=$(multi_compare "$LOGS/multi_np1.log" "$LOGS/$name.log" 2e-3); then record "$name" PASS "vs 1 GPU: $cmp_text"
            else record "$name" FAIL "vs 1 GPU: $cmp_text"; fi
        done
        name=multi_gpu_zeropp_np4 bin=build/cuda/train_gpt2cu_${SM}_zero3
        if [ "$NGPU" -lt 4 ]; then record "$name" SKIP "$NGPU GPUs visible; needs 4"
        elif [ ! -x "$bin" ]; then record "$name" SKIP "$bin not built"
        elif t=$(limit 30 15); then
            # -hp 2: two groups of 2 ranks, as two nodes of 2 GPUs would be (qgZ's two levels)
            run_to "$t" "$LOGS/$name.log" "${MPIRUN_N[@]}" -np 4 "$bin" "${MULTI_ARGS[@]}" -b 1 -qw 1 -qg 1 -hp 2; rc=$?
            if [ $rc -ne 0 ]; then record "$name" FAIL "$(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$LOGS/$name.log" | cut -c1-200)"
            elif cmp_text=$(multi_compare "$LOGS/multi_np1.log" "$LOGS/$name.log" 5e-2); then record "$name" PASS "vs 1 GPU: $cmp_text"
            else record "$name" FAIL "vs 1 GPU: $cmp_text"; fi
            name=multi_gpu_nccl_zero3_np4 # plain stage 3 at 4 ranks: 3 hops
            if t=$(limit 30 15); then
                run_to "$t" "$LOGS/$name.log" "${MPIRUN_N[@]}" -np 4 "$bin" "${MULTI_ARGS[@]}" -b 1; rc=$?
                if [ $rc -ne 0 ]; then record "$name" FAIL "$(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$LOGS/$name.log" | cut -c1-200)"
                elif cmp_text=$(multi_compare "$LOGS/multi_np1.log" "$LOGS/$name.log" 6e-3); then record "$name" PASS "vs 1 GPU: $cmp_text"
                else record "$name" FAIL "vs 1 GPU: $cmp_text"; fi
            else skip_budget "$name" 15; fi
        else skip_budget "$name" 15; fi
    else skip_budget multi_gpu_reference 15; fi
fi
archive

# =============================================================================================
# 11. the lesson build (make train_gpt2cu ZERO_EXT=none: the ZeRO core alone, zero/no_extensions.h)
# at stage 0 on one GPU, against the default build: 5 steps of d2 each (section 8's config), the
# same kernels in the same order, so the losses and norms must be identical (the emulation's
# t_68 measures 0 difference at stages 0 and 3).
name=lesson_build_zero0 LESSON_BIN=build/cuda/train_gpt2cu_lesson_${SM}_zero0 DEFAULT_BIN=build/cuda/train_gpt2cu_${SM}_zero0
if want 11 && [ -n "$BG_PID" ]; then timeout "$(limit 90 1 || echo 1)" tail --pid="$BG_PID" -f /dev/null; fi
if ! want 11; then not_asked "$name" 11
elif [ "$LESSON_OK" = 0 ]; then record "$name" SKIP "the lesson build links NCCL and Open MPI: NCCL $([ "$NCCL_OK" = 1 ] && echo found || echo missing), MPI $([ "$MPI_OK" = 1 ] && echo found || echo missing)"
elif [ ! -x "$LESSON_BIN" ] || [ ! -x "$DEFAULT_BIN" ]; then record "$name" SKIP "$LESSON_BIN or $DEFAULT_BIN not built (build_later)"
elif ! t=$(limit 30 15); then skip_budget "$name" 15
else
    run_to "$t" "$LOGS/lesson_default.log" "$DEFAULT_BIN" "${D2[@]}" -b 4; rc=$?
    if [ $rc -ne 0 ]; then record "$name" FAIL "default build: $(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$LOGS/lesson_default.log" | cut -c1-200)"
    elif ! t=$(limit 30 15); then skip_budget "$name" 15
    else
        run_to "$t" "$LOGS/lesson.log" "$LESSON_BIN" "${D2[@]}" -b 4; rc=$?
        if [ $rc -ne 0 ]; then record "$name" FAIL "lesson build: $(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$LOGS/lesson.log" | cut -c1-200)"
        elif cmp_text=$(multi_compare "$LOGS/lesson_default.log" "$LOGS/lesson.log" 0); then record "$name" PASS "vs the default build: $cmp_text"
        else record "$name" FAIL "vs the default build: $cmp_text"; fi
    fi
fi
archive

# =============================================================================================
# the summary
echo
echo "d12 (124M), B=64 x T=1024, stage 0, 1 GPU, no MPI; steps 7-12 (3-6 timed op by op); MFU: llm.c's 6N + 6LCT FLOPs"
echo "per token against 989 TFLOP/s (H200 bf16 dense); the target is 50%"
printf "%-8s %10s %12s %7s %16s %16s %10s\n" attention "step ms" "tokens/s" MFU "peak MiB (ours)" "expected MiB" "loss@12"
for path in flash cudnn; do
    printf "%-8s %10s %12s %7s %16s %16s %10s\n" "$path" "${step_ms[$path]:--}" "${tok_s[$path]:--}" "${mfu[$path]:--}" \
        "${peak[$path]:--}" "${expect_mib[$path]:--}" "${loss_at[$path]:--}"
done
for path in flash cudnn; do
    [ -s "$LOG/op_table_$path.txt" ] || continue
    echo; echo "per-kernel table, $path attention:"; cat "$LOG/op_table_$path.txt"
done
echo
printf "%-6s %12s %12s %14s\n" stage "logits err" "grad L2 rel" "accum L2 rel"
for s in 0 1 2 3; do printf "%-6s %12s %12s %14s\n" "$s" "${logits_err[$s]:--}" "${grads_l2[$s]:--}" "${accum_err[$s]:--}"; done
echo
npass=0 nfail=0 nskip=0
for i in "${!SEC_NAMES[@]}"; do
    printf '%-4s %-36s %s\n' "${SEC_STATUS[$i]}" "${SEC_NAMES[$i]}" "$(cut -c1-170 <<<"${SEC_NOTES[$i]}")"
    case ${SEC_STATUS[$i]} in PASS) npass=$((npass + 1));; FAIL) nfail=$((nfail + 1));; *) nskip=$((nskip + 1));; esac
done
echo "total $(elapsed) of ${BUDGET}s: $npass PASS, $nfail FAIL, $nskip SKIP; files: $LOG/gpu_check.txt, op_table_*.txt, gpu_check_logs.tgz"
[ "$nfail" -eq 0 ]
