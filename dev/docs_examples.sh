#!/usr/bin/env bash
# dev/docs_examples.sh: rerun the examples whose output and timings the docs quote, and rewrite
# docs/results/examples.md with what they printed, so those lines cannot go stale silently.
# Each section records the date, commit, machine (CPU model, cores, load), the exact command and
# the peer it is compared against, as the `Provenance:` line tests/docs_check.py requires.
# Runs: the README's run command (scripts/run_tinyshakespeare.sh; STEPS=200 by default, about 4
# minutes on 2 cores), a 2-rank stage-3 run (d1, 2 steps), a plan (d4, 2 ranks).
# Usage: bash dev/docs_examples.sh            (STEPS=n for a shorter run command; OUT_MD=file)
set -euo pipefail
cd "$(dirname "$0")/.."
out_md=${OUT_MD:-docs/results/examples.md}
steps=${STEPS:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
cores=$(nproc)
machine="$cpu, $cores cores"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # read only when run as root

# section TITLE PEER COMMAND...: run COMMAND, time it, append its provenance and its output
# (trimmed) to the page. PEER: what the output is compared against.
section() {
    local title=$1 peer=$2; shift 2
    local load0 t0 t1 rc=0
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    t0=$(date +%s)
    "$@" >"$work/out.txt" 2>&1 || rc=$?
    t1=$(date +%s)
    # more runnable threads than cores at the start: say the machine was shared
    local shared=""
    awk -v c="$cores" '{ exit !($1 > c) }' <<<"$load0" && shared=", shared with other jobs"
    {
        echo "## $title"
        echo
        echo "Provenance: date: $(date -u '+%Y-%m-%d %H:%M UTC') · commit: $commit$dirty · machine: $machine$shared (load $load0 at start) · command: \`$*\` · peer: $peer"
        echo
        echo "| date (UTC) | commit | machine | load at start | wall time | exit |"
        echo "|---|---|---|---|---|---|"
        echo "| $(date -u +%Y-%m-%d) | $commit$dirty | $machine | $load0 | $((t1 - t0)) s | $rc |"
        echo
        echo "Command: \`$*\`"
        echo
        echo '```'
        # the start-up lines, the first steps and the end, as a new user sees them
        if [ "$(wc -l <"$work/out.txt")" -gt 60 ]; then
            head -n 30 "$work/out.txt"; echo "..."; tail -n 25 "$work/out.txt"
        else
            cat "$work/out.txt"
        fi
        echo '```'
        echo
    } >>"$work/page.md"
    echo "$title: exit $rc, $((t1 - t0)) s" >&2
}

{
    echo "# Results: the docs' examples, rerun"
    echo
    echo "Written by \`bash dev/docs_examples.sh\` (do not edit by hand: rerun it). Each section is one"
    echo "command as README.md shows it, with its date, commit, machine, load, wall time and output."
    echo
} >"$work/page.md"

make -s train_gpt2 >/dev/null
section "The run command (README)" "the figures README.md quotes (about 4 minutes, about 1000 tokens/s, val loss near 5.8 on an idle 2-core AMD EPYC VM)" env STEPS="$steps" OUT="$work/run" bash scripts/run_tinyshakespeare.sh
make -s build/train_gpt2_z3 plan_gpt2 >/dev/null
section "Two ranks at stage 3 (README)" "none: an example of the output (tests/t_30_zero_2_match.sh compares stage 3 on 2 ranks with one process)" mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 build/train_gpt2_z3 -e d1 -b 2 -t 32 -x 2 -v 0 -s 0 -o "$work/z3" -n 2
section "A plan (README)" "none: an example of the output (dev/bench/plan_check.sh measures plans against runs: docs/results/plan_check.md)" ./plan_gpt2 --plan cpu -e d4 -b 2 -t 64 -np 2

tmp="$out_md.tmp.$$"
sed "s#$work#OUT#g" "$work/page.md" >"$tmp"
mv "$tmp" "$out_md"
echo "wrote $out_md" >&2
