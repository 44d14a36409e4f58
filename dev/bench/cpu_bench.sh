#!/usr/bin/env bash
# CPU training-step benchmark (not a test): tokens/s, matmul share, GFLOP/s, sgemm-bound tokens/s
# and peak memory for d12 (GPT-2 124M) at B=4 T=64, and d6 at B=4 T=64 and B=8 T=256, 2 threads.
# Run on an otherwise idle machine; numbers vary with other load. About 1.5 minutes idle.
# The BLAS and its kernel are printed first (bench_cpu's blas: line).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build
make -s build/bench_cpu
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
./build/bench_cpu d12 4 64 ${STEPS:-6}
./build/bench_cpu d6 4 64 ${STEPS:-6}
./build/bench_cpu d6 8 256 ${STEPS:-6}
