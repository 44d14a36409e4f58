#!/usr/bin/env bash
# dev/gpu_check.sh: the one prepared script for a session that is lent a GPU (written for one
# H200; any sm_90 GPU with ~40 GB works). Budget: under 8 minutes, every step under `timeout`.
#   1. build test_kernels, and train_gpt2cu + test_gpt2cu for ZeRO stages 0-3, with -arch=sm_90
#   2. build/test_kernels: every kernel against its CPU twin
#   3. test_gpt2cu at each stage: the bf16 model against the PyTorch reference
#   4. 20 steps of d12 at B=64, T=1024 at each stage (stage 3 included): tokens/s, MFU, memory
#   5. a table: tokens/s, MFU, peak GPU memory by stage, and the max errors vs the reference
# Data is local only: data/tinyshakespeare/ shards (data/tinyshakespeare.py from ../shared/data)
# when they can be made, else random-token shards in build/gpu_check/data (a tiny Python script):
# throughput does not depend on which tokens are trained on.
# Usage: bash dev/gpu_check.sh   (from anywhere; logs in build/gpu_check/)
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=build/gpu_check
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START ))s; }
JOBS=$(nproc 2>/dev/null || echo 4)
export PATH=/usr/local/cuda/bin:$PATH

echo "== gpu_check: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi unavailable')"

# ---- 1. builds (parallel; about 30 s on 16 cores)
STAGES="0 1 2 3"
targets="build/test_kernels"
for s in $STAGES; do targets="$targets build/cuda/train_gpt2cu_sm90_zero$s build/cuda/test_gpt2cu_sm90_zero$s"; done
if ! timeout 240 make -j"$JOBS" GPU_ARCH=90 $targets >"$OUT/build.log" 2>&1; then
    echo "FAIL build: $(grep -m3 -E 'error' "$OUT/build.log" | tr '\n' ' ')"
    echo "(full log: $OUT/build.log)"
    exit 1
fi
echo "PASS build ($(elapsed))"

# ---- data: tinyshakespeare if it can be made locally, else random tokens
TRAIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
if [ ! -f "$TRAIN" ] && [ -f ../shared/data/tinyshakespeare/input.txt ]; then
    timeout 60 python3 data/tinyshakespeare.py --text ../shared/data/tinyshakespeare/input.txt \
        --bpe-dir ../shared/data/gpt2 >"$OUT/data.log" 2>&1
fi
if [ ! -f "$TRAIN" ]; then
    TRAIN=$OUT/data/random_train.bin
    VAL=$OUT/data/random_val.bin
    mkdir -p "$OUT/data"
    # llm.c shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
    python3 - "$TRAIN" "$VAL" <<'PY'
import random, struct, sys
from array import array
rng = random.Random(1337)
for path, n in ((sys.argv[1], 2_000_000), (sys.argv[2], 200_000)):
    tokens = array("H", (rng.randrange(50257) for _ in range(n)))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(tokens.tobytes())
PY
    echo "data: random tokens ($TRAIN), no tinyshakespeare source here"
else
    echo "data: $TRAIN"
fi

# ---- 2. kernels vs CPU twins
timeout 180 ./build/test_kernels >"$OUT/test_kernels.log" 2>&1
kernels_rc=$?
grep -E '^(PASS|FAIL)' "$OUT/test_kernels.log"
[ $kernels_rc -eq 0 ] || echo "FAIL test_kernels: exit $kernels_rc (log: $OUT/test_kernels.log)"
echo "-- test_kernels done ($(elapsed))"

# ---- 3. the model vs the PyTorch reference, per stage
declare -A logits_err grads_l2 params_mean ref_rc
for s in $STAGES; do
    log=$OUT/test_gpt2cu_zero$s.log
    timeout 120 "./build/cuda/test_gpt2cu_sm90_zero$s" >"$log" 2>&1
    ref_rc[$s]=$?
    grep -E '^(PASS|FAIL)' "$log" | sed "s/^/[stage $s] /"
    logits_err[$s]=$(grep -m1 'forward_logits' "$log" | grep -o 'max abs err [0-9.e+-]*' | awk '{print $4}')
    grads_l2[$s]=$(grep -m1 'gradients_match_pytorch_bf16_l2' "$log" | grep -o 'L2 err [0-9.e+-]*' | awk '{print $3}')
    params_mean[$s]=$(grep -m1 'final_params_mean' "$log" | grep -o 'mean abs err [0-9.e+-]*' | awk '{print $4}')
done
echo "-- test_gpt2cu done ($(elapsed))"

# ---- 4. throughput: 20 steps of d12, B=64, T=1024 (65,536 tokens per step), per stage
declare -A tok_s mfu peak step_ms loss train_rc
for s in $STAGES; do
    log=$OUT/train_d12_zero$s.log
    timeout 150 "./build/cuda/train_gpt2cu_sm90_zero$s" -i "$TRAIN" -j "$VAL" -e d12 -b 64 -t 1024 -x 20 \
        -v 0 -s 0 -l 6e-4 -u 10 >"$log" 2>&1
    train_rc[$s]=$?
    done_line=$(grep -m1 '^done:' "$log")
    step_ms[$s]=$(grep -o 'mean step [0-9.]* ms' <<<"$done_line" | awk '{print $3}')
    tok_s[$s]=$(grep -o '[0-9]* tok/s' <<<"$done_line" | awk '{print $1}')
    mfu[$s]=$(grep -o 'MFU [0-9.]*%' <<<"$done_line" | awk '{print $2}')
    peak[$s]=$(grep -o 'peak GPU memory [0-9.]* MiB' <<<"$done_line" | awk '{print $4}')
    loss[$s]=$(grep -E '^step +20/' "$log" | grep -o 'loss [0-9.]*' | awk '{print $2}')
    if [ "${train_rc[$s]}" -eq 0 ] && [ -n "$done_line" ]; then
        echo "PASS train_d12_zero$s: $done_line"
    else
        echo "FAIL train_d12_zero$s: exit ${train_rc[$s]}: $(tail -2 "$log" | tr '\n' ' ')"
    fi
    echo "-- stage $s done ($(elapsed))"
done

# ---- 5. table
echo
echo "d12 (124M), B=64 x T=1024, 20 steps, 1 GPU; MFU against 989 TFLOP/s dense bf16, 6N + 12LCT FLOPs/token"
printf "%-6s %10s %12s %7s %14s %10s | %12s %12s %12s %s\n" stage "step ms" "tokens/s" MFU "peak MiB" "loss@20" \
    "logits err" "grad L2 rel" "param mean" "reference"
for s in $STAGES; do
    printf "%-6s %10s %12s %7s %14s %10s | %12s %12s %12s %s\n" "$s" "${step_ms[$s]:--}" "${tok_s[$s]:--}" \
        "${mfu[$s]:--}" "${peak[$s]:--}" "${loss[$s]:--}" "${logits_err[$s]:--}" "${grads_l2[$s]:--}" \
        "${params_mean[$s]:--}" "$([ "${ref_rc[$s]}" -eq 0 ] && echo pass || echo "FAIL (exit ${ref_rc[$s]})")"
done
echo "total $(elapsed); logs in $OUT/"
