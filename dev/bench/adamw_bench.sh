#!/usr/bin/env bash
# The CPU AdamW (cpu/adamw.h) against the memory bandwidth and against PyTorch, on the same threads,
# interleaved: ROUNDS rounds of [build/adamw_bench (triad, our vectorized and scalar AdamW),
# dev/bench/adamw_torch.py (torch.optim.AdamW foreach and fused)], median per kernel.
# Targets (issue 11): >= 70% of the triad's bytes/s, >= 1.5x PyTorch's fastest.
# PyTorch: the system python's if it has one (scripts/setup.sh --hf), else PyPI's into build/bench_venv
# (installed on first use: a few GB, minutes).
# Usage: [THREADS=n] [N=params] [ROUNDS=3] dev/bench/adamw_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${THREADS:-$(nproc)}
n=${N:-16777216}
rounds=${ROUNDS:-3}
make -s build/adamw_bench
venv=build/bench_venv
torch_python=$venv/bin/python
if python3 -c "import torch" 2>/dev/null; then torch_python=python3 # (scripts/setup.sh --hf installs it)
elif ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "installing torch from PyPI into $venv ..."
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load before: $(uptime)"
for r in $(seq "$rounds"); do
    OMP_NUM_THREADS=$threads build/adamw_bench "$n" 10 >>"$out"
    OMP_NUM_THREADS=$threads "$torch_python" dev/bench/adamw_torch.py "$n" "$threads" >>"$out"
done
echo "load after: $(uptime)"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for k in dict.fromkeys(r["kernel"] for r in rows):
    rs = [r for r in rows if r["kernel"] == k]
    med[k] = (statistics.median(r["bytes_per_s"] for r in rs), statistics.median(r.get("params_per_s", 0) for r in rs), rs[0])
triad = med["triad"][0]
bound = med["inplace4"][0]
torch_best = max(v[1] for k, v in med.items() if k.startswith("torch"))
r0 = rows[0]
print(f"{r0['threads']} threads, {r0['n']} parameters (fp32), median of {len([r for r in rows if r['kernel'] == 'triad'])} interleaved rounds; "
      f"GB = 1e9 bytes; AdamW moves 28 bytes per parameter, the triad 12 per element; inplace4 is AdamW's traffic alone (its bandwidth bound)")
print("| kernel | parameters/s (M) | GB/s | % of triad | % of inplace4 | vs PyTorch's fastest |")
print("|---|---|---|---|---|---|")
for k, (bw, pps, r) in med.items():
    name = k + (f" ({r['path']})" if "path" in r else f" (torch {r['torch']})" if "torch" in r else "")
    print(f"| {name} | {pps / 1e6:.1f} | {bw / 1e9:.2f} | {100 * bw / triad:.0f}% | {100 * bw / bound:.0f}% | " + (f"{pps / torch_best:.2f}x |" if pps else "- |"))
PY
