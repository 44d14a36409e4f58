#!/usr/bin/env bash
# What CI can say about the kernels on an H200 without one: dev/ptxas_occupancy.py compiles the
# device code of train_gpt2.cu and dev/test_kernels.cu for sm_90 (ptxas -v: registers, shared
# memory, stack, spills), joins each kernel with its d12 launch configuration, and computes the
# theoretical occupancy with NVIDIA's occupancy calculator (cuda_occupancy.h) from Hopper's
# per-SM limits. It prints the table (INFO lines) and fails on a register spill or on an occupancy
# below the floor stated per kernel (attention, layernorm, classifier, AdamW; reason printed with
# each). That the launch table matches the real launchers is checked in t_65 (the emulation logs
# every launch). About 20 s of CPU on 2 cores (device code only, no host compile). Then the PTX
# contraction check (dev/ptx_contraction.py) of the kernels behind a device/host bit-identity claim.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

# The cuDNN attention's decisions without cuDNN or a GPU (tests/test_attention_cudnn_steps.c):
# sampling and T < 64 take the flash kernels; a failure forced at each graph-building step
# (ATTENTION_CUDNN_FAIL) falls back with one line. cuDNN's own calls run only on a GPU
# (dev/gpu_check.sh). Under a second.
if make -s build/test_attention_cudnn_steps >/dev/null 2>&1; then build/test_attention_cudnn_steps
else echo "FAIL attention_cudnn_steps_build: make build/test_attention_cudnn_steps failed"; fi

[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
if ! command -v nvcc >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL ptxas_toolkit_present: nvcc not found; expected the CUDA toolkit on CI"
    else
        echo "SKIP ptxas_toolkit_present: nvcc not found (no CUDA toolkit); the occupancy checks did not run"
    fi
    exit 0
fi
out=$(timeout 900 python3 dev/ptxas_occupancy.py 2>&1); rc=$?
grep -E '^(INFO|PASS|FAIL) ' <<<"$out"
if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
    echo "FAIL ptxas_occupancy_runs: exit $rc: $(tail -3 <<<"$out" | tr '\n' ' ')"
fi

# Device/host bit-identity by construction: the kernels behind such a claim (AdamW, ZeRO++
# quantize / dequantize-accumulate) hold no fused multiply-add nvcc formed on its own (PTX with
# -fmad=true and -fmad=false compared; dev/ptx_contraction.py). About 15 s.
out=$(timeout 300 python3 dev/ptx_contraction.py 2>&1); rc=$?
grep -E '^(INFO|PASS|FAIL) ' <<<"$out"
if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
    echo "FAIL ptx_contraction_runs: exit $rc: $(tail -3 <<<"$out" | tr '\n' ' ')"
fi
