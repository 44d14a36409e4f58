#!/usr/bin/env bash
# The CUDA build compiles, warnings as errors (host -Wall -Werror, nvcc -Werror all-warnings):
# train_gpt2cu for sm_90 at ZeRO stages 0-3 and for sm_80, train_gpt2cu with the host-staged MPI
# collective backend (ZERO_COMM=mpi) for sm_90, test_gpt2cu and test_kernels for sm_90 and sm_80,
# and train_gpt2cu and test_kernels with cuDNN's attention (USE_CUDNN=1; the cuDNN frontend's
# headers are fetched from PyPI by scripts/cudnn_frontend.sh when missing) for sm_90, and the
# lesson build (ZERO_EXT=none, the ZeRO core alone) for sm_90 at stage 3 (make cuda_check). No GPU
# is needed or used; nothing here runs a kernel. Then dev/gpu_check.sh as far as it goes without
# a GPU: its plan, its section list, the builds a section list asks for, and its whole flow with a
# stand-in nvidia-smi (every section reached, no shell error; its builds add about 2 minutes).
# One PASS/FAIL line per compiled configuration. Measured 358 s (cpu 392 s) in stop 36's full suite
# on 2 cores beside another group (make -j2), gpu_check's checks included.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
if ! command -v nvcc >/dev/null 2>&1; then
    # CI's machines carry the CUDA toolkit, so there its absence is a failure; a user's CPU-only
    # machine skips the compile checks (the runner counts SKIP lines separately).
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL cuda_toolkit_present: nvcc not found; expected the CUDA toolkit (nvcc, cuBLASLt, NCCL) on CI"
    else
        echo "SKIP cuda_toolkit_present: nvcc not found (no CUDA toolkit); the CUDA build's compile checks did not run"
    fi
    exit 0
fi
targets=$(make -s -f Makefile -f - print_cuda_check_targets <<'MK'
print_cuda_check_targets:
	@echo $(CUDA_CHECK_TARGETS)
MK
)
if [ -z "$targets" ]; then echo "FAIL cuda_check_targets_listed: cuda.mk defines no CUDA_CHECK_TARGETS"; exit 0; fi
# Remove old binaries first: nvcc leaves the previous output in place when a compile fails.
rm -f $targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make -k -j2 cuda_check >"$log" 2>&1
for target in $targets; do
    name=$(basename "$target")
    if [ -x "$target" ]; then
        echo "PASS cuda_compiles_$name"
    else
        why=$(make "$target" 2>&1 | grep -m2 -E 'error|warning' | tr '\n' ' ')
        echo "FAIL cuda_compiles_$name: ${why:-see make cuda_check}"
    fi
done

# dev/gpu_check.sh, the script a session lent a GPU runs, as far as it goes without one: the plan
# and the probe (--dry-run), a bad GPU_CHECK_SECTIONS refused with one line, and a section list
# building only the binaries those sections need (--build-only goes on without a GPU).
gc_out=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$gc_out"' EXIT
dry_run_plans() {
    OUT=$gc_out bash dev/gpu_check.sh --dry-run >"$gc_out/dry.txt" 2>&1 || { cat "$gc_out/dry.txt"; return 1; }
    grep -q '^plan: 0 probe; 1 build; 2 test_kernels' "$gc_out/dry.txt" && grep -q '11 the lesson build' "$gc_out/dry.txt" &&
        grep -q '^probe done' "$gc_out/dry.txt" || { cat "$gc_out/dry.txt"; return 1; }
}
check "gpu_check_dry_run_prints_plan_and_probe" dry_run_plans
bad_sections_refused() { # exit 2 (the script's bad usage), one error line naming the variable and the value
    OUT=$gc_out GPU_CHECK_SECTIONS="1 4" bash dev/gpu_check.sh --dry-run >"$gc_out/bad.txt" 2>&1
    local rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$gc_out/bad.txt")" -eq 1 ] && grep -q "^error: GPU_CHECK_SECTIONS: '1' is not a section" "$gc_out/bad.txt" ||
        { echo "exit $rc: $(cat "$gc_out/bad.txt")"; return 1; }
}
check "gpu_check_sections_refuses_a_section_it_cannot_run_alone" bad_sections_refused
sections_build_only_theirs() { # section 9 needs train_gpt2cu_nompi_<sm>_zero2 and nothing of the one-GPU build
    rm -f build/cuda/train_gpt2cu_nompi_sm90_zero2 # (not a cuda_check target)
    OUT=$gc_out GPU_CHECK_SECTIONS=9 timeout 300 bash dev/gpu_check.sh --build-only >"$gc_out/build.txt" 2>&1
    local logs=build/gpu_check_work/logs compiled
    compiled=$(grep -o -- '-o build/cuda/[A-Za-z0-9_]*' "$logs/build_later.log" 2>/dev/null | sort -u | tr '\n' ' ')
    grep -q '^SKIP build_one_gpu: no section asked for needs it' "$gc_out/build.txt" && [ ! -e "$logs/build.log" ] &&
        [ "$compiled" = "-o build/cuda/train_gpt2cu_nompi_sm90_zero2 " ] && [ -x build/cuda/train_gpt2cu_nompi_sm90_zero2 ] ||
        { echo "compiled: ${compiled:-nothing}; $(tail -3 "$gc_out/build.txt" | tr '\n' ' ')"; return 1; }
}
check "gpu_check_sections_build_only_what_they_need" sections_build_only_theirs
# The whole flow with a stand-in nvidia-smi (one H100, sm_90): every section builds what it needs
# and is reached; each run ends with the trainer's "no CUDA device" line, so the section fails (or
# skips: a build cut short under load, no compute-sanitizer, one GPU for section 10) and says so
# in one line; the summary prints; and no shell error (an unbound variable under set -u, a typo)
# turns up on the path a real GPU run would take. About 2 minutes of builds on 2 cores.
flow_reaches_every_section() {
    mkdir -p "$gc_out/bin"
    printf '%s\n' '#!/bin/sh' 'case "$*" in' \
        '  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-stand-in)";;' \
        '  *query-gpu=name*) echo "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04";;' \
        '  *compute_cap*) echo "9.0";;' '  *) echo "stand-in";;' 'esac' >"$gc_out/bin/nvidia-smi"
    chmod +x "$gc_out/bin/nvidia-smi"
    PATH="$gc_out/bin:$PATH" OUT="$gc_out/flow" GPU_CHECK_BUDGET=300 timeout 360 bash dev/gpu_check.sh >"$gc_out/flow.txt" 2>&1
    local rc=$? name missing=""
    if grep -m3 -E 'unbound variable|command not found|syntax error|: line [0-9]+: ' "$gc_out/flow.txt"; then return 1; fi
    for name in build_one_gpu test_kernels test_gpt2cu_zero0 train_d12_flash train_d12_cudnn test_gpt2cu_zero1 sanitizer_memcheck \
                mpi_backend_np2 zero2_offload_cpu_d12 multi_gpu lesson_build_zero0; do
        grep -qE "^(PASS|FAIL|SKIP) $name: " "$gc_out/flow.txt" || missing+=" $name"
    done
    [ -z "$missing" ] && [ $rc -eq 1 ] && grep -q '^total [0-9]*s of 300s: ' "$gc_out/flow.txt" &&
        grep -q '^FAIL .*no CUDA device' "$gc_out/flow.txt" || # (some run started: its binary was built)
        { echo "exit $rc; no line for:${missing:- (none)}; $(tail -2 "$gc_out/flow.txt" | tr '\n' ' ')"; return 1; }
}
check "gpu_check_flow_reaches_every_section_without_a_shell_error" flow_reaches_every_section
