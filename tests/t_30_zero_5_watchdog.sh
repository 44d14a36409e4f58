#!/usr/bin/env bash
# ZeRO group 5: the start-up watchdog (zero/cluster/startup_watchdog.h), CPU build.
#   - mpirun -np 2 with rank 1 stopped (SIGSTOP) right after launch, before MPI_Init
#     (ZERO_TEST_FAULT=launchstop:1): rank 0 waits in MPI_Init, and at -wt 5 s prints one line
#     naming itself, its host and MPI_Init; the job ends with a non-zero status within -wt + 25 s
#     (start-up and mpirun's teardown on 2 shared cores) and leaves no process behind
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/zero_common.sh"
zero_setup

name=zero1_np2_rank_stopped_before_mpi_init_bounded_by_wt
start=$(date +%s)
ZERO_TEST_FAULT=launchstop:1 timeout 120 "${MPIRUN[@]}" -x ZERO_TEST_FAULT -np 2 build/train_gpt2_z1 -e d2 -t 8 -b 2 -x 5 \
    -i "$ZT/train.bin" -o "$ZT/wd" -wt 5 >"$ZT/wd.out" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
lines=$(grep -c "^error: rank 0 ([^)]*): MPI_Init did not complete within -wt 5 s: a rank did not start or is stalled" "$ZT/wd.out")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$secs" -le 30 ] && [ "$lines" -eq 1 ] && [ "$(grep -c '^error' "$ZT/wd.out")" -eq 1 ]; then
    echo "PASS ${name}"
else echo "FAIL ${name}: exit $rc after $secs s, $lines watchdog lines: $(grep -v '^-' "$ZT/wd.out" | head -3 | tr '\n' ' ')"; fi
echo "INFO ${name}: ended after $secs s (-wt 5)"
# Ranks that mpirun's teardown has signalled may take a moment to go on a loaded machine: polled
# up to 15 s (before: one fixed 1 s sleep); one stopped or orphaned for good stays and fails.
left=$(pgrep -f -- "-o $ZT/wd")
for _ in $(seq 150); do [ -z "$left" ] && break; sleep 0.1; left=$(pgrep -f -- "-o $ZT/wd"); done
if [ -z "$left" ]; then echo "PASS ${name}_no_process_left"
else echo "FAIL ${name}_no_process_left: $(ps -o pid=,stat=,args= -p $(echo $left | tr ' ' ',') | head -2 | tr '\n' ' ')"; kill -KILL $left 2>/dev/null; fi
