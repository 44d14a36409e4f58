#!/usr/bin/env bash
# The test command: install what is needed, build, and run the test groups (docs/testing.md).
#   bash scripts/test.sh              every group: the CI suite
#   bash scripts/test.sh quick        the quick tier (groups marked "# tier: quick"; minutes)
#   bash scripts/test.sh [quick] PAT  only the groups whose path contains PAT
# The build comes first and once: every binary the chosen groups use, so that groups running side
# by side (tests/run_all.sh, JOBS=2) never build the same file at once. The quick tier builds only
# the CPU trainer, test_gpt2, the unit tests its groups run and the four stage trainers; with a pattern the
# groups build the rest themselves and run one at a time (JOBS=1 unless set). A build step that fails
# here is left to the group that needs it to report (a missing CUDA toolkit is a SKIP there).
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
started=$(date +%s)
# What the quick groups run (t_05, t_10, t_20, t_30_zero_1/2/6, t_40): 9 of the 14 unit tests.
QUICK_UNIT_TESTS=(build/test_core build/test_cpu_ops build/test_dataloader build/test_dataloader_badinput
                  build/test_reference_state build/test_zero_layout build/test_zero_state build/test_launcher build/test_gns)
if [ "${1:-}" = quick ]; then targets=("${QUICK_UNIT_TESTS[@]}"); else targets=(unit_tests); fi
# The planner's own binary where the Makefile has it (t_04, t_35, t_66 run it; t_04 and t_66 would
# each build it if missing, and may run side by side).
make -n plan_gpt2 >/dev/null 2>&1 && targets+=(plan_gpt2)
make -s -j2 train_gpt2 test_gpt2 zero_binaries lesson_binaries "${targets[@]}" || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
if [ $# -eq 0 ]; then
    # The rest of what groups build (t_12 nompi_binaries; t_38, t_65, t_66, t_67, t_68, t_75_cluster_4
    # the emulated CUDA build): built here so that no two groups run one rule at the same time.
    make -s -j2 nompi_binaries >/dev/null 2>&1 || echo "note: make nompi_binaries failed; t_12 will say why"
    if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ]; then
        make -s -j2 emu_binaries emu_lesson_binaries >/dev/null 2>&1 || echo "note: make emu_binaries failed; the emulation groups will say why"
        # The contracted flavor where the CPU has FMA: t_65 (emu_fma_binaries) and t_67
        # (its train_gpt2cu_fma_z2) each build it, and may run side by side.
        if grep -qw fma /proc/cpuinfo; then
            make -s -j2 emu_fma_binaries >/dev/null 2>&1 || echo "note: make emu_fma_binaries failed; t_65 and t_67 will say why"
        fi
    fi
fi
# Two groups at a time once everything is built; with a pattern the groups build what else they
# need themselves, so they run one at a time.
if [ $# -eq 0 ] || { [ "$1" = quick ] && [ $# -eq 1 ]; }; then export JOBS=${JOBS:-2}; else export JOBS=${JOBS:-1}; fi
echo "build: $(( $(date +%s) - started )) s"
bash tests/run_all.sh "$@"
