#!/usr/bin/env bash
# The test command: install what is needed, build, and run every test group.
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
make -s -j2 train_gpt2 test_gpt2 unit_tests || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
bash tests/run_all.sh "$@"
