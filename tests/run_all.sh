#!/usr/bin/env bash
# Test runner: runs every tests/t_*.sh group in order. Each group prints one line per check,
# "PASS <name>" or "FAIL <name>: <why>"; a group that exits non-zero without printing a FAIL
# counts as one failure; "SKIP <name>: <why>" lines (a check this machine cannot run) are counted
# apart. Ends with "N passed, N failed" (", N skipped" when any) and exits non-zero on any failure.
cd "$(dirname "$0")/.."
passed=0; failed=0; skipped=0
only="${1:-}"
for group in tests/t_*.sh; do
    [ -n "$only" ] && [[ "$group" != *"$only"* ]] && continue
    echo "== $group"
    log=$(mktemp)
    bash "$group" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $group: exited $rc"; f=1; fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    rm -f "$log"
done
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
