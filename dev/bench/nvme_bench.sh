#!/usr/bin/env bash
# The offload I/O engine (zero/nvme_io.h) against the disk's sequential bandwidth, measured in the
# same run with fio (Debian's; installed if missing): a file of SIZE MiB in DIR written then read
# with O_DIRECT, 4 MiB requests, 2 in flight (the optimizer's stream), each backend of ours, and
# fio with the same request size at depth 2 and at depth 16 (the disk's best), interleaved over
# ROUNDS rounds; medians. Target (issue 11): ours >= 80% of fio's sequential bandwidth.
# Usage: [SIZE=1024] [ROUNDS=2] dev/bench/nvme_bench.sh [DIR (default: a new dir under /tmp)]
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${SIZE:-1024}
rounds=${ROUNDS:-2}
dir=${1:-$(mktemp -d /tmp/nvme_bench.XXXXXX)}
command -v fio >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null; }
make -s build/nvme_bench
out=$(mktemp)
trap 'rm -f "$out" "$dir"/fio_bench.bin' EXIT
fio_run() { # OP DEPTH
    fio --name=seq --filename="$dir/fio_bench.bin" --size="${size}M" --rw="$1" --bs=4M --direct=1 --ioengine=io_uring \
        --iodepth="$2" --end_fsync=1 --output-format=json 2>/dev/null | python3 -c "
import json, sys; j = json.load(sys.stdin)['jobs'][0]; op = 'write' if '$1' == 'write' else 'read'
print(json.dumps({'backend': 'fio depth $2', 'op': op, 'bytes_per_s': j[op]['bw_bytes']}))"
}
echo "load before: $(uptime)"
for r in $(seq "$rounds"); do
    for depth in 2 16; do fio_run write $depth >>"$out"; fio_run read $depth >>"$out"; done
    build/nvme_bench "$dir" "$size" 4096 2 >>"$out"
done
echo "load after: $(uptime)"
echo "file system of $dir: $(df -h "$dir" | tail -1)"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for r in rows: med.setdefault((r["backend"], r["op"]), []).append(r["bytes_per_s"])
med = {k: statistics.median(v) for k, v in med.items()}
print("| I/O | write MB/s | read MB/s | write vs fio depth 2 / 16 | read vs fio depth 2 / 16 |")
print("|---|---|---|---|---|")
for b in dict.fromkeys(k[0] for k in med):
    w, rd = med.get((b, "write"), 0), med.get((b, "read"), 0)
    cmp = lambda x, op: f"{100 * x / med[('fio depth 2', op)]:.0f}% / {100 * x / med[('fio depth 16', op)]:.0f}%"
    print(f"| {b} | {w / 1e6:.0f} | {rd / 1e6:.0f} | {cmp(w, 'write')} | {cmp(rd, 'read')} |")
PY
