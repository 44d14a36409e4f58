#!/usr/bin/env bash
# dev/gpu_check.sh: the one prepared script for a session that is lent a GPU (written for one
# H200; any sm_80+ GPU with ~40 GB works). First, here (no GPU needed; build/ is not committed):
#   bash dev/device_deps.sh      -> build/device_deps (Open MPI + OpenBLAS, about 20 MiB)
# then the device tool call:
#
#   run(command="bash dev/gpu_check.sh", carry=["build/device_deps"], timeout_s=580)
#
# The whole script ends within GPU_CHECK_BUDGET seconds (default 540, under the 580 above): each
# section checks the time left first and prints SKIP with the reason when it does not fit, and
# every step runs under `timeout`, cut to what the budget leaves. Most informative first:
#   0. probe (under 15 s): a found/missing table of the GPU, nvcc, cuBLASLt, NCCL, Open MPI,
#      OpenBLAS, mpirun, compute-sanitizer, from the toolkit, the system, python's nvidia wheels
#      (nvidia-nccl-cu13, nvidia-cublas) or build/device_deps; it picks the make flags. No GPU:
#      one STOP line, exit 2 (--build-only goes on to build anyway). No NCCL anywhere: the
#      host-staged MPI backend builds (_mpi_, 1 rank) stand in for the NCCL ones.
#   1. build with make -k (a failing target does not stop the others), warnings not errors:
#      test_kernels, train_gpt2cu + test_gpt2cu for ZeRO stages 0-3 and the host-staged MPI
#      backend at stages 1 and 3, for the GPU's arch (sm_90 on an H200); random data meanwhile
#   2. build/test_kernels: every kernel against its CPU twin
#   3. test_gpt2cu at stage 0: the bf16 model against the PyTorch reference
#   4. 20 steps of d12 at B=64, T=1024 at stage 0: tokens/s, MFU, peak memory
#   5. steps 3 and 4 at stages 1, 2, 3
#   6. compute-sanitizer memcheck and racecheck over build/test_kernels (its small shapes)
#   7. the ZeRO engine (zero.cuh + zero/engine_gpu.cuh) on d2: per stage, 6 steps straight vs 3 steps +
#      -y 1 resume from the step-3 checkpoint (losses and norms expected identical)
#   8. the gradient noise scale meter on the device (zero/engine_gpu.cuh, common/noise_scale.h): 4 steps
#      of d2 with 4 micro-steps at stages 0 (first micro-batch) and 2 (every micro-batch), every
#      logged |G_small|^2, |G_big|^2 finite and > 0
#   9. when mpirun is here (system or bundle): the host-staged MPI backend with 2 ranks on this
#      one GPU at stages 1 and 3 vs 1 rank at stage 0 on the same global batch (losses within
#      2e-2: bf16 sums in another order, the test_gpt2cu loss tolerance)
#  10. ZeRO-Offload: d12 at stage 2 with -zo cpu, 10 steps: step time and peak GPU memory beside
#      the on-device stage-2 run of section 5, and the loss difference
# Then the table: tokens/s, MFU, peak GPU memory by stage, the max errors vs the reference, and a
# PASS/FAIL/SKIP line per section. Caps per step (s): build 200, test_kernels 60, test_gpt2cu 40
# and d12 90 per stage, each sanitizer 75, each d2 run 30, each mpirun 60. Expected total (an
# estimate, not yet measured on a GPU) about 5 minutes; a cap is cut to what the budget leaves,
# so the sum never passes it, and a hang costs one cap, not the call.
# Output: this script's output in $LOG/gpu_check.txt and every step's log in
# $LOG/gpu_check_logs.tgz (rewritten after each section), LOG=${OUT:-build/gpu_check}: the device
# tool brings $OUT back, at most 8 files, hence the archive; run here, the logs are plain files
# in $LOG/logs too. Data, checkpoints, unpacked libraries: build/gpu_check_work (not brought back).
# Data: data/tinyshakespeare/ shards when present, else random-token shards (throughput does not
# depend on which tokens are trained on).
# Usage: bash dev/gpu_check.sh [--build-only]     (from anywhere)
set -u
cd "$(dirname "$0")/.." || exit 1
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-540}
RESERVE=12 # seconds kept for the table and the archive at the end
BUILD_ONLY=0
[ "${1:-}" = "--build-only" ] && BUILD_ONLY=1

LOG=${OUT:-build/gpu_check}
WORK=build/gpu_check_work # data shards, unpacked OpenBLAS, checkpoints: never brought back
mkdir -p "$LOG" "$WORK"
if [ -n "${OUT:-}" ]; then LOGS=$WORK/logs; else LOGS=$LOG/logs; fi
rm -rf "$LOGS"
mkdir -p "$LOGS"
exec > >(tee "$LOG/gpu_check.txt") 2>&1
TEE_PID=$!
archive() { tar -czf "$LOG/gpu_check_logs.tgz" -C "$LOGS" . 2>/dev/null; }
finish() { archive; exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null; }
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

echo "== gpu_check $(date -u +%FT%TZ) on $(hostname); budget ${BUDGET}s; logs: $LOG"

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
else row mpi MISSING "no mpicc and no $DEPS/mpi (run bash dev/device_deps.sh here, carry build/device_deps)"; FATAL+=("Open MPI"); fi

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
for d in "${CUBLAS_LIBDIR:-}" "${NCCL_LIBDIR:-}" "${OPENBLAS_LIBDIR:-}"; do
    [ -n "$d" ] && RUN_LD=$RUN_LD${RUN_LD:+:}$d
done
# On the device build without -Werror: another host gcc may warn where CI's does not.
MK+=("NVCC_WARN=-Xcompiler -Wall,-Wno-unused-function")
echo "make flags: ${MK[*]}"
echo "run-time library path: ${RUN_LD:-(none needed)}"
echo "probe done ($(elapsed))"

if [ ${#FATAL[@]} -gt 0 ]; then
    echo "STOP: cannot build: missing ${FATAL[*]} (see the table above)"
    exit 2
fi
if [ "$GPU_OK" = 0 ] && [ "$BUILD_ONLY" = 0 ]; then
    echo "STOP: no GPU visible ($GPU_WHY); nothing run (--build-only would build anyway)"
    exit 2
fi

# =============================================================================================
# 1. build (parallel, make -k), data in the background meanwhile
STAGES="0 1 2 3"
SM=sm$GPU_ARCH
if [ "$NCCL_OK" = 1 ]; then TRAIN=train_gpt2cu_$SM; TEST=test_gpt2cu_$SM; else TRAIN=train_gpt2cu_mpi_$SM; TEST=test_gpt2cu_mpi_$SM; fi
targets=()
[ "$BLAS_OK" = 1 ] && targets+=(build/test_kernels)
for s in $STAGES; do targets+=("build/cuda/${TEST}_zero$s" "build/cuda/${TRAIN}_zero$s"); done
targets+=("build/cuda/train_gpt2cu_mpi_${SM}_zero1" "build/cuda/train_gpt2cu_mpi_${SM}_zero3")

TRAIN_BIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL_BIN=data/tinyshakespeare/tiny_shakespeare_val.bin
if [ ! -f "$TRAIN_BIN" ] || [ ! -f "$VAL_BIN" ]; then
    TRAIN_BIN=$WORK/data/random_train.bin
    VAL_BIN=$WORK/data/random_val.bin
    mkdir -p "$WORK/data"
    # llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
    timeout 60 python3 - "$TRAIN_BIN" "$VAL_BIN" >"$LOGS/data.log" 2>&1 <<'PY' &
import os, struct, sys
for path, n in ((sys.argv[1], 2_000_000), (sys.argv[2], 200_000)):
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
missing=()
if t=$(limit 200 60); then
    run_to "$t" "$LOGS/build.log" make -k -j"$JOBS" "${MK[@]}" "${targets[@]}"
    build_rc=$?
    # A failed compile can leave an older binary in place (a rerun on a warm machine): a target
    # make reports as failed counts as missing, and is removed so no later step runs it.
    for b in "${targets[@]}"; do
        if [ ! -x "$b" ] || grep -qF "] $b] Error" "$LOGS/build.log" || grep -qF ": $b] Error" "$LOGS/build.log"; then
            missing+=("$(basename "$b")"); rm -f "$b"
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        record build PASS "${#targets[@]} binaries ($(elapsed))"
    else
        why=$(grep -m3 -E 'error|Error|undefined reference|cannot find' "$LOGS/build.log" | cut -c1-300 | tr '\n' ' ')
        record build FAIL "$(rc_text $build_rc "$t"); not built: ${missing[*]}: $why"
    fi
else
    skip_budget build 60
fi
[ -n "$DATA_PID" ] && wait "$DATA_PID"
[ -n "$RUN_LD" ] && export LD_LIBRARY_PATH=$RUN_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -f "$TRAIN_BIN" ]; then echo "data: $TRAIN_BIN"; else echo "data: MISSING ($(tail -1 "$LOGS/data.log" 2>/dev/null))"; fi
archive
if [ "$BUILD_ONLY" = 1 ]; then
    echo "build-only: stop after the build ($(elapsed))"
    [ ${#missing[@]} -eq 0 ] && exit 0 || exit 1
fi

# =============================================================================================
# 2. kernels vs CPU twins
if [ ! -x build/test_kernels ]; then
    record test_kernels SKIP "build/test_kernels not built$([ "$BLAS_OK" = 0 ] && echo ' (no OpenBLAS)')"
elif t=$(limit 60 20); then
    run_to "$t" "$LOGS/test_kernels.log" ./build/test_kernels
    rc=$?
    grep -E '^(PASS|FAIL)' "$LOGS/test_kernels.log"
    npass=$(grep -c '^PASS' "$LOGS/test_kernels.log"); nfail=$(grep -c '^FAIL' "$LOGS/test_kernels.log")
    if [ $rc -eq 0 ] && [ "$nfail" -eq 0 ]; then record test_kernels PASS "$npass checks"
    else record test_kernels FAIL "$(rc_text $rc "$t"), $npass passed, $nfail failed: $(grep -m1 -E '^FAIL|error' "$LOGS/test_kernels.log" | cut -c1-200)"; fi
else skip_budget test_kernels 20; fi
archive

# =============================================================================================
# 3-5. per stage: the model vs the PyTorch reference, then 20 steps of d12, B=64, T=1024
declare -A logits_err grads_l2 params_mean ref_rc tok_s mfu peak step_ms loss
reference() {
    local s=$1 log=$LOGS/test_gpt2cu_zero$1.log bin=build/cuda/${TEST}_zero$1 t rc
    if [ ! -x "$bin" ]; then record "test_gpt2cu_zero$s" SKIP "$bin not built"; return; fi
    t=$(limit 40 15) || { skip_budget "test_gpt2cu_zero$s" 15; return; }
    run_to "$t" "$log" "./$bin"
    rc=$?
    ref_rc[$s]=$rc
    grep -E '^(PASS|FAIL)' "$log" | sed "s/^/[stage $s] /"
    logits_err[$s]=$(grep -m1 'forward_logits' "$log" | grep -o 'max abs err [0-9.e+-]*' | awk '{print $4}')
    grads_l2[$s]=$(grep -m1 'gradients_match_pytorch_bf16_l2' "$log" | grep -o 'L2 err [0-9.e+-]*' | awk '{print $3}')
    params_mean[$s]=$(grep -m1 'final_params_mean' "$log" | grep -o 'mean abs err [0-9.e+-]*' | awk '{print $4}')
    if [ $rc -eq 0 ] && ! grep -q '^FAIL' "$log"; then record "test_gpt2cu_zero$s" PASS "$(grep -c '^PASS' "$log") checks"
    else record "test_gpt2cu_zero$s" FAIL "$(rc_text $rc "$t"): $(grep -m1 -E '^FAIL|error' "$log" | cut -c1-200)"; fi
}
throughput() {
    local s=$1 log=$LOGS/train_d12_zero$1.log bin=build/cuda/${TRAIN}_zero$1 t rc done_line
    if [ ! -x "$bin" ]; then record "train_d12_zero$s" SKIP "$bin not built"; return; fi
    [ -f "$TRAIN_BIN" ] || { record "train_d12_zero$s" SKIP "no data shard"; return; }
    t=$(limit 90 30) || { skip_budget "train_d12_zero$s" 30; return; }
    run_to "$t" "$log" "./$bin" -i "$TRAIN_BIN" -j "$VAL_BIN" -e d12 -b 64 -t 1024 -x 20 -v 0 -s 0 -l 6e-4 -u 10
    rc=$?
    done_line=$(grep -m1 '^done:' "$log")
    step_ms[$s]=$(grep -o 'mean step [0-9.]* ms' <<<"$done_line" | awk '{print $3}')
    tok_s[$s]=$(grep -o '[0-9]* tok/s' <<<"$done_line" | awk '{print $1}')
    mfu[$s]=$(grep -o 'MFU [0-9.]*%' <<<"$done_line" | awk '{print $2}')
    peak[$s]=$(grep -o 'peak GPU memory [0-9.]* MiB' <<<"$done_line" | awk '{print $4}')
    loss[$s]=$(grep -E '^step +20/' "$log" | grep -o 'loss [0-9.]*' | awk '{print $2}')
    if [ $rc -eq 0 ] && [ -n "$done_line" ]; then record "train_d12_zero$s" PASS "$done_line"
    else record "train_d12_zero$s" FAIL "$(rc_text $rc "$t"): $(tail -2 "$log" | tr '\n' ' ' | cut -c1-300)"; fi
    [ -s "$log" ] || SEC_NOTES[-1]+="(no output)"
}
for s in $STAGES; do
    reference "$s"
    throughput "$s"
    echo "-- stage $s done ($(elapsed))"
    archive
done

# =============================================================================================
# 6. compute-sanitizer over the kernel tests (small shapes: seconds natively)
sanitize() {
    local tool=$1 log=$LOGS/sanitizer_$1.log t rc
    if [ -z "$SANITIZER" ]; then record "sanitizer_$tool" SKIP "compute-sanitizer not found"; return; fi
    if [ ! -x build/test_kernels ]; then record "sanitizer_$tool" SKIP "build/test_kernels not built"; return; fi
    t=$(limit 75 20) || { skip_budget "sanitizer_$tool" 20; return; }
    run_to "$t" "$log" "$SANITIZER" --tool "$tool" --error-exitcode 3 ./build/test_kernels
    rc=$?
    summary=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | sed 's/^========= //' | tr '\n' ' ')
    if grep -q -E 'Device not supported|not supported on this' "$log"; then
        record "sanitizer_$tool" SKIP "compute-sanitizer: $(grep -m1 -E 'not supported' "$log" | sed 's/^========= //' | cut -c1-150)"
    elif [ $rc -eq 0 ]; then record "sanitizer_$tool" PASS "${summary:-no errors}"
    else record "sanitizer_$tool" FAIL "$(rc_text $rc "$t"): ${summary:-$(grep -m1 -E 'Error|error' "$log" | cut -c1-200)}"; fi
}
sanitize memcheck
sanitize racecheck
archive

# =============================================================================================
# 7. the ZeRO engine on d2: resume from a checkpoint matches the straight run
D2=(-i "$TRAIN_BIN" -e d2 -b 4 -t 64 -v 0 -s 0 -l 1e-3 -u 2 -wt 60)
steps_of() { grep -E '^step +[0-9]+/' "$1" | grep -v 'val loss' | awk -F'|' '{print $1 $2 $4}'; }
for s in $STAGES; do
    name=zero${s}_resume_matches_straight_run bin=build/cuda/${TRAIN}_zero$s
    [ -x "$bin" ] || { record "$name" SKIP "$bin not built"; continue; }
    [ -f "$TRAIN_BIN" ] || { record "$name" SKIP "no data shard"; continue; }
    limit 24 24 >/dev/null || { skip_budget "$name" 24; continue; }
    t=$(limit 30 12)
    dir=$WORK/resume_zero$s
    rm -rf "$dir" "$dir.resumed"
    run_to "$t" "$LOGS/resume_zero$s.log" "./$bin" "${D2[@]}" -x 6 -n 3 -o "$dir"
    rc1=$?
    if [ $rc1 -ne 0 ]; then
        record "$name" FAIL "straight run: $(rc_text $rc1 "$t"): $(tail -1 "$LOGS/resume_zero$s.log" | cut -c1-200)"
        continue
    fi
    mkdir -p "$dir.resumed"
    cp "$dir"/model_00000003.bin "$dir"/state_00000003_* "$dir.resumed/" 2>/dev/null
    t=$(limit 30 12) || { skip_budget "$name" 12; continue; }
    run_to "$t" "$LOGS/resume_zero$s.resumed.log" "./$bin" "${D2[@]}" -x 6 -n 3 -o "$dir.resumed" -y 1
    rc2=$?
    straight=$(steps_of "$LOGS/resume_zero$s.log" | sed -n 4,6p)
    resumed=$(steps_of "$LOGS/resume_zero$s.resumed.log")
    if [ -n "$straight" ] && [ "$straight" = "$resumed" ]; then
        record "$name" PASS "steps 4-6 identical"
    else
        record "$name" FAIL "resumed run $(rc_text $rc2 "$t"); straight [$(tr '\n' ';' <<<"$straight")] resumed [$(tr '\n' ';' <<<"$resumed")] (resume_zero$s*.log)"
    fi
done
archive

# =============================================================================================
# 8. GNS meter: finite, |G_big|^2 = grad_norm^2 (1e-4 relative: grad_norm is logged with 6
# digits), and at stage 2 |G_small|^2 >= |G_big|^2 on every step (a mean of squares >= the square
# of the mean; 1e-2 relative slack for bf16 gradients summed in another order).
for s in 0 2; do
    name=zero${s}_gns_meter_finite bin=build/cuda/${TRAIN}_zero$s
    [ -x "$bin" ] || { record "$name" SKIP "$bin not built"; continue; }
    [ -f "$TRAIN_BIN" ] || { record "$name" SKIP "no data shard"; continue; }
    t=$(limit 30 12) || { skip_budget "$name" 12; continue; }
    dir=$WORK/gns_zero$s
    rm -rf "$dir"
    run_to "$t" "$LOGS/gns_zero$s.log" "./$bin" "${D2[@]}" -d 1024 -x 4 -o "$dir"
    rc=$?
    cp "$dir/log.jsonl" "$LOGS/gns_zero$s.jsonl" 2>/dev/null
    verdict=$(python3 - "$dir/log.jsonl" "$s" <<'PY'
import json, math, sys
stage = int(sys.argv[2])
try:
    recs = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train"]
except (OSError, ValueError) as e:
    recs, bad = [], [str(e)]
else:
    bad = [] if len(recs) == 4 else ["%d train records, expected 4" % len(recs)]
num = lambda x: isinstance(x, (int, float)) and math.isfinite(x) and x > 0
for r in recs:
    small, big, norm = r.get("gns_small_sq"), r.get("gns_big_sq"), r.get("grad_norm")
    if not (num(small) and num(big) and num(norm)):
        bad.append("step %s: gns_small_sq %s gns_big_sq %s grad_norm %s" % (r.get("step"), small, big, norm))
    elif abs(big - norm * norm) > 1e-4 * big or (stage >= 2 and small < big * (1 - 1e-2)):
        bad.append("step %s: gns_small_sq %g gns_big_sq %g grad_norm^2 %g" % (r.get("step"), small, big, norm * norm))
last = recs[-1] if recs else {}
print("FAIL " + "; ".join(bad) if bad else "PASS 4 steps, last |G_small|^2 %g |G_big|^2 %g b_simple %s"
      % (last["gns_small_sq"], last["gns_big_sq"], last.get("b_simple")))
PY
)
    case $verdict in
        PASS*) record "$name" PASS "${verdict#PASS }" ;;
        *) record "$name" FAIL "$(rc_text $rc "$t"); ${verdict#FAIL }" ;;
    esac
done
archive

# =============================================================================================
# 9. the host-staged MPI backend, 2 ranks on this one GPU, vs 1 rank at stage 0
if [ ${#MPIRUN[@]} -eq 0 ]; then
    record mpi_backend_np2 SKIP "mpirun not found (system or $DEPS/mpi)"
elif [ ! -x "build/cuda/${TRAIN}_zero0" ] || [ ! -f "$TRAIN_BIN" ]; then
    record mpi_backend_np2 SKIP "build/cuda/${TRAIN}_zero0 or the data shard missing"
elif ! t=$(limit 30 12); then
    skip_budget mpi_backend_np2 12
else
    run_to "$t" "$LOGS/mpi_reference.log" "./build/cuda/${TRAIN}_zero0" "${D2[@]}" -x 5
    for s in 1 3; do
        name=zero${s}_mpi_backend_np2_matches_np1_stage0 log=$LOGS/mpi_np2_zero$s.log bin=build/cuda/train_gpt2cu_mpi_${SM}_zero$s
        [ -x "$bin" ] || { record "$name" SKIP "$bin not built"; continue; }
        t=$(limit 60 20) || { skip_budget "$name" 20; continue; }
        run_to "$t" "$log" "${MPIRUN[@]}" "./$bin" -i "$TRAIN_BIN" -e d2 -b 2 -t 64 -d 256 -v 0 -s 0 \
            -l 1e-3 -u 2 -wt 60 -x 5
        rc=$?
        worst=$(paste <(grep -E '^step +[0-9]+/' "$LOGS/mpi_reference.log" | grep -o 'loss [0-9.]*' | awk '{print $2}') \
                      <(grep -E '^step +[0-9]+/' "$log" | grep -o 'loss [0-9.]*' | awk '{print $2}') |
                awk 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n == 5) printf "%.3g", w; else print "missing" }')
        if [ "$worst" != "missing" ] && awk -v w="$worst" 'BEGIN { exit !(w < 2e-2) }'; then
            record "$name" PASS "max loss difference $worst over 5 steps (tolerance 2e-2)"
        else
            record "$name" FAIL "$(rc_text $rc "$t"); max loss difference $worst: $(grep -m1 -iE 'error' "$log" | cut -c1-200)"
        fi
    done
fi
archive

# =============================================================================================
# 10. ZeRO-Offload (zero/offload_gpu.cuh): d12 at stage 2, B=64 x T=1024, 10 steps with the
# optimizer state and AdamW on the host (-zo cpu) beside the device run of section 4-5 (stage 2):
# step time and peak GPU memory, and the first 10 losses of both (on a GPU nvcc may fuse
# multiply-adds the host AdamW does not, so they agree to bf16 rounding, not bit for bit)
name=zero2_offload_cpu_d12 bin=build/cuda/${TRAIN}_zero2
if [ ! -x "$bin" ] || [ ! -f "$TRAIN_BIN" ]; then record "$name" SKIP "$bin or the data shard missing"
elif ! t=$(limit 90 40); then skip_budget "$name" 40
else
    log=$LOGS/train_d12_zero2_zo_cpu.log
    run_to "$t" "$log" "./$bin" -i "$TRAIN_BIN" -j "$VAL_BIN" -e d12 -b 64 -t 1024 -x 10 -v 0 -s 0 -l 6e-4 -u 10 -zo cpu
    rc=$?
    done_line=$(grep -m1 '^done:' "$log")
    off_ms=$(grep -o 'mean step [0-9.]* ms' <<<"$done_line" | awk '{print $3}')
    off_peak=$(grep -o 'peak GPU memory [0-9.]* MiB' <<<"$done_line" | awk '{print $4}')
    worst=$(paste <(grep -E '^step +[0-9]+/' "$LOGS/train_d12_zero2.log" 2>/dev/null | head -10 | grep -o 'loss [0-9.]*' | awk '{print $2}') \
                  <(grep -E '^step +[0-9]+/' "$log" | grep -o 'loss [0-9.]*' | awk '{print $2}') |
            awk 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n > 0) printf "%.3g over %d steps", w, n; else print "no steps to compare" }')
    if [ $rc -eq 0 ] && [ -n "$done_line" ]; then
        record "$name" PASS "-zo cpu: ${off_ms:-?} ms/step, peak GPU ${off_peak:-?} MiB vs on device ${step_ms[2]:-?} ms, ${peak[2]:-?} MiB; max loss difference $worst; $(grep -m1 '^offload: host' "$log" | cut -c1-120)"
    else record "$name" FAIL "$(rc_text $rc "$t"): $(grep -m1 -iE 'error' "$log" | cut -c1-200)"; fi
fi
archive

# =============================================================================================
# the table, then one line per section
echo
echo "d12 (124M), B=64 x T=1024, 20 steps, 1 GPU; MFU against 989 TFLOP/s dense bf16, 6N + 12LCT FLOPs/token"
printf "%-6s %10s %12s %7s %14s %10s | %12s %12s %12s %s\n" stage "step ms" "tokens/s" MFU "peak MiB" "loss@20" \
    "logits err" "grad L2 rel" "param mean" "reference"
for s in $STAGES; do
    if [ -z "${ref_rc[$s]:-}" ]; then ref="not run"; elif [ "${ref_rc[$s]}" -eq 0 ]; then ref=pass; else ref="FAIL (exit ${ref_rc[$s]})"; fi
    printf "%-6s %10s %12s %7s %14s %10s | %12s %12s %12s %s\n" "$s" "${step_ms[$s]:--}" "${tok_s[$s]:--}" \
        "${mfu[$s]:--}" "${peak[$s]:--}" "${loss[$s]:--}" "${logits_err[$s]:--}" "${grads_l2[$s]:--}" \
        "${params_mean[$s]:--}" "$ref"
done
echo
npass=0 nfail=0 nskip=0
for i in "${!SEC_NAMES[@]}"; do
    printf '%-4s %-44s %s\n' "${SEC_STATUS[$i]}" "${SEC_NAMES[$i]}" "$(cut -c1-160 <<<"${SEC_NOTES[$i]}")"
    case ${SEC_STATUS[$i]} in PASS) npass=$((npass + 1));; FAIL) nfail=$((nfail + 1));; *) nskip=$((nskip + 1));; esac
done
echo "total $(elapsed) of ${BUDGET}s: $npass PASS, $nfail FAIL, $nskip SKIP; logs: $LOG/gpu_check.txt, $LOG/gpu_check_logs.tgz"
[ "$nfail" -eq 0 ]
