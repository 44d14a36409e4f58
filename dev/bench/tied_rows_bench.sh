#!/usr/bin/env bash
# What starting wte's reductions right after the LM head hides at stages 0-1 (zero/tied_rows/tied_rows_cpu.h;
# not a test): dev/bench/zero_table.sh's config (d6, B 1 x T 64 per rank, one thread per rank,
# 2 ranks on this host) for the trainer as built here against the same trainer built from REV
# (default 5fb5051, branch land before it: wte reduced after the encoder), interleaved REV, here,
# REV, here... for ROUNDS rounds per stage. Per run: rank 0's mean step time and exposed
# communication (the log's ms and comm_wait_ms) over steps 2..S; then the medians over rounds.
# Usage: [ROUNDS=3] dev/bench/tied_rows_bench.sh [REV (5fb5051)] [S (8)] [STAGES ("0 1")] [N (2)]
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:-5fb5051}; steps=${2:-8}; stages=${3:-0 1}; n=${4:-2}; rounds=${ROUNDS:-3}
tmp=$(mktemp -d /tmp/tied_rows_bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
bins=(); for s in $stages; do bins+=(build/train_gpt2_z$s); done
make -s "${bins[@]}" >/dev/null
mkdir -p "$tmp/base"
git archive "$rev" | tar -x -C "$tmp/base"
(cd "$tmp/base" && make -s "${bins[@]}" >/dev/null)
source dev/bench/lib.sh
train=$(timing_train_shard "$tmp")
export OMP_NUM_THREADS=1
echo "tied_rows_bench: d6, B 1 x T 64 per rank, $n ranks x 1 thread, steps 2-$steps, $rounds rounds, $rev vs $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/results"
for r in $(seq "$rounds"); do for stage in $stages; do for variant in before after; do
    bin=$PWD/build/train_gpt2_z$stage; [ $variant = before ] && bin=$tmp/base/build/train_gpt2_z$stage
    run="$tmp/z${stage}_${variant}_$r"
    if ! mpirun --allow-run-as-root --oversubscribe -np "$n" "$bin" -e d6 -b 1 -t 64 -x "$steps" -v 0 -s 0 -n 0 \
            -i "$train" -o "$run" >"$run.out" 2>&1; then
        echo "run failed: stage $stage, $variant: $(tail -2 "$run.out" | tr '\n' ' ')"; continue
    fi
    echo "$stage $variant $run" >>"$tmp/results"
done; done; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/results" <<'PY'
import json, statistics, sys
runs = {}
for stage, variant, run in (l.split() for l in open(sys.argv[1])):
    recs = [json.loads(l) for l in open(run + "/log.jsonl")]
    train = [x for x in recs if x["kind"] == "train" and x["step"] >= 2]
    sent = next(x for x in recs if x["kind"] == "config")["elements_sent_formula"]
    runs.setdefault((stage, variant), []).append((sum(x["ms"] for x in train) / len(train),
                                                 sum(x["comm_wait_ms"] for x in train) / len(train), sent))
print("| stage | build | step ms (runs) | exposed comm ms (runs) | median step ms | median exposed ms | sent/step (M el) |")
print("|---|---|---|---|---|---|---|")
for (stage, variant), v in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != "before")):
    print(f"| {stage} | {variant} | {', '.join(f'{x[0]:.0f}' for x in v)} | {', '.join(f'{x[1]:.0f}' for x in v)} | "
          f"{statistics.median(x[0] for x in v):.0f} | {statistics.median(x[1] for x in v):.1f} | {v[0][2] / 1e6:.3f} |")
PY
