#!/usr/bin/env bash
# Test runner: runs the tests/t_*.sh groups. Each group prints one line per check, "PASS <name>"
# or "FAIL <name>: <why>"; a group that exits non-zero without printing a FAIL counts as one
# failure; "SKIP <name>: <why>" lines (a check this machine cannot run) are counted apart.
#   bash tests/run_all.sh              every group (the CI suite)
#   bash tests/run_all.sh quick        the quick tier: the groups with a line "# tier: quick" in
#                                      their first 5 lines, run with TIER=quick in the environment
#                                      (a group may then run a stated part of itself)
#   bash tests/run_all.sh [quick] PAT  only the groups whose path contains PAT
#   JOBS=N                             groups run N at a time (default 1; scripts/test.sh sets 2 for
#                                      the suite and the quick tier, after building what every
#                                      group uses, so no two groups build one file). A group with a line
#                                      "# runs: alone" in its first 5 lines runs with no other beside
#                                      it (it measures time or needs every core).
# Groups run longest first (LONG_GROUPS below, measured) so that the pool ends together. Each
# group's output is held until it ends and printed as one block, closed by
# "== <group>: <s> s (cpu <s> s), <n> passed, <n> failed" (cpu: user + sys of its processes, what it
# costs whatever else runs beside it); the run ends with the total wall time and
# "N passed, N failed" (", N skipped" when any), and exits non-zero on any failure.
# Groups may run side by side because each keeps its files in its own mktemp directory, cluster
# tests use tagged namespaces (tests/cluster.sh), and every binary they build is built before
# (scripts/test.sh), so their own `make` calls find nothing to do.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

tier=full
if [ "${1:-}" = quick ]; then tier=quick; shift; fi
only="${1:-}"
jobs=${JOBS:-1}
export TIER=$tier

# Measured wall times (s) on 2 cores, longest first; groups not named here start after these.
LONG_GROUPS=(t_65_cuda_emulation t_38_zeropp t_66_plan_trace t_30_zero_2_match t_35_offload
             t_75_cluster_3_faults t_30_zero_4_faults t_57_batch_schedule t_67_offload_gpu_emulation
             t_75_cluster_2_checkpoints t_50_gns_trainer t_70_hf t_75_cluster_5_zeropp
             t_75_cluster_4_gpu_emu t_30_zero_3_resume t_60_cuda_build t_75_cluster_1_stages)

marked() { head -5 "$1" | grep -qE "^# $2[[:space:]]*\$"; }
groups=()
for group in tests/t_*.sh; do
    [ -n "$only" ] && [[ "$group" != *"$only"* ]] && continue
    [ "$tier" = quick ] && ! marked "$group" "tier: quick" && continue
    groups+=("$group")
done
ordered=()
for name in "${LONG_GROUPS[@]}"; do
    for group in "${groups[@]}"; do [ "$group" = "tests/$name.sh" ] && ordered+=("$group"); done
done
for group in "${groups[@]}"; do [[ " ${ordered[*]} " == *" $group "* ]] || ordered+=("$group"); done

# Shared inputs made once here, not by groups racing each other.
ensure_tinyshakespeare >/dev/null 2>&1

work=$(mktemp -d /tmp/run_all.XXXXXX)
declare -A pid_of=()   # group -> pid of the subshell that runs it and records its end
# Each group runs in its own session (setsid: no job control needed), so that stopping the runner
# stops every process a group started; its process group id is in $log.pgid.
cleanup() {
    local g f
    for g in "${!pid_of[@]}"; do
        f="$work/$(basename "$g" .sh).pgid"
        kill -TERM "${pid_of[$g]}" 2>/dev/null
        [ -s "$f" ] && kill -TERM -- "-$(cat "$f")" 2>/dev/null
    done
    rm -rf "$work"
}
trap 'cleanup; exit 130' INT TERM
trap cleanup EXIT

passed=0; failed=0; skipped=0; cpu_total=0
started=$(date +%s)
start_group() {
    local group=$1 log="$work/$(basename "$1" .sh)"
    # .done: exit status, wall seconds, and the CPU seconds (user + sys) of the group's processes
    # that it waited for (bash's `times`, second line): what the group costs on an idle machine.
    ( t0=$(date +%s); setsid --wait bash -c 'echo $$ >"$0.pgid"; exec bash "$1"' "$log" "$group" >"$log" 2>&1; rc=$?
      times >"$log.times" # not in a pipe or $(...): a subshell there has no children of its own
      cpu=$(tail -1 "$log.times" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); n += a[1] * 60 + a[2] } printf "%.0f", n }')
      echo "$rc $(( $(date +%s) - t0 )) $cpu" >"$log.done" ) &
    pid_of[$group]=$!
}
# report GROUP: print its block and add its counts.
report() {
    local group=$1 log="$work/$(basename "$1" .sh)" rc secs cpu p f s
    read -r rc secs cpu <"$log.done"
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    echo "== $group"
    cat "$log"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $group: exited $rc"; f=1; fi
    echo "== $group: $secs s (cpu $cpu s), $p passed, $f failed$([ "$s" -gt 0 ] && echo ", $s skipped")"
    cpu_total=$((cpu_total + cpu))
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}
# reap: wait until at least one running group has ended (polled: `wait -n` may miss a job that
# ended before it was called), then report every group that has ended.
reap() {
    local g ended=0
    while [ "$ended" -eq 0 ]; do
        for g in "${!pid_of[@]}"; do
            if [ -f "$work/$(basename "$g" .sh).done" ]; then
                wait "${pid_of[$g]}" 2>/dev/null; unset "pid_of[$g]"; report "$g"; ended=1
            fi
        done
        [ "$ended" -eq 0 ] && sleep 1
    done
}
for group in "${ordered[@]}"; do
    if marked "$group" "runs: alone"; then
        while [ ${#pid_of[@]} -gt 0 ]; do reap; done
        start_group "$group"
        while [ ${#pid_of[@]} -gt 0 ]; do reap; done
        continue
    fi
    while [ ${#pid_of[@]} -ge "$jobs" ]; do reap; done
    start_group "$group"
done
while [ ${#pid_of[@]} -gt 0 ]; do reap; done

echo "total: $(( $(date +%s) - started )) s for ${#ordered[@]} groups (cpu $cpu_total s; $tier tier, $jobs at a time)"
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
