#!/usr/bin/env bash
# Memory per rank at each ZeRO stage (CPU build), to show that the vocab-chunked tied embedding
# (common/gpt2_config.h) lets peak RSS fall at every stage: for d6 and d12 at N = 2 and 4 (B 4,
# T 64 per rank, 2 steps, 1 thread per rank), the bytes the trainer prints (model state, working
# units, activations) beside the formula, and the largest peak RSS over the ranks (/usr/bin/time
# per rank). With BASELINE=<git ref> (e.g. BASELINE=60785e6, the engine before the chunking) the
# same runs of that revision, built from `git archive` into build/baseline, are measured in the
# same session, in a second column.
# Usage: dev/bench/zero_memory.sh ["d6 d12"] ["2 4"]
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-"d6 d12"}
sizes=${2:-"2 4"}
make -s zero_binaries >/dev/null
tmp=$(mktemp -d /tmp/zero_memory.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import numpy as np; h = np.zeros(256, '<i4'); h[:3] = 20240520, 1, 400000
open('$tmp/train.bin', 'wb').write(h.tobytes() + np.random.default_rng(0).integers(0, 50257, 400000).astype('<u2').tobytes())"
bins=(build)
if [ -n "${BASELINE:-}" ]; then
    rm -rf build/baseline && mkdir -p build/baseline
    git archive "$BASELINE" | tar -x -C build/baseline
    make -s -C build/baseline zero_binaries >/dev/null
    bins+=(build/baseline/build)
fi
export OMP_NUM_THREADS=1
echo "load before: $(uptime)"
for m in $models; do for n in $sizes; do for stage in 0 1 2 3; do for b in "${!bins[@]}"; do
    d="$tmp/${m}_np${n}_z${stage}_b$b"; mkdir -p "$d"
    mpirun --allow-run-as-root --oversubscribe -np "$n" bash -c \
        "exec /usr/bin/time -f '%M' -o '$d/rss_'\$OMPI_COMM_WORLD_RANK ${bins[$b]}/train_gpt2_z$stage -e $m -b 4 -t 64 -x 2 -v 0 -s 0 -i '$tmp/train.bin'" \
        >"$d/out" 2>&1 || { echo "run failed: $d"; tail -3 "$d/out"; exit 1; }
done; done; done; done
echo "load after: $(uptime)"
python3 - "$tmp" "$models" "$sizes" "${#bins[@]}" <<'PY'
import glob, re, sys
tmp, models, sizes, nbins = sys.argv[1], sys.argv[2].split(), [int(s) for s in sys.argv[3].split()], int(sys.argv[4])
MiB = 1048576
def parse(d):
    out = open(f"{d}/out").read()
    st = re.search(r"params (\d+) \+ grads (\d+) \+ optimizer (\d+) = (\d+); formula (\S+) = (\d+) \((\w+)\) \| working units (\d+)", out)
    act = re.search(r"activations ([0-9.]+) MiB", out)
    rss = max(int(open(f).read().split()[-1]) for f in glob.glob(f"{d}/rss_*")) / 1024
    return dict(state=int(st.group(4)), formula_text=st.group(5), formula=int(st.group(6)), working=int(st.group(8)),
                act=float(act.group(1)), rss=rss)
head = "| model | N | stage | state printed (MiB) | formula | working units (MiB) | activations (MiB) | peak RSS, max over ranks (MiB) |"
if nbins > 1: head += " baseline: working (MiB) | baseline peak RSS (MiB) |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for m in models:
    for n in sizes:
        for stage in range(4):
            r = parse(f"{tmp}/{m}_np{n}_z{stage}_b0")
            row = (f"| {m} | {n} | {stage} | {r['state'] / MiB:.1f} | {r['formula_text']} = {r['formula'] / MiB:.1f} | {r['working'] / MiB:.1f} | "
                   f"{r['act']:.1f} | {r['rss']:.1f} |")
            if nbins > 1:
                b = parse(f"{tmp}/{m}_np{n}_z{stage}_b1")
                row += f" {b['working'] / MiB:.1f} | {b['rss']:.1f} |"
            print(row)
PY
