#!/usr/bin/env bash
# The offload I/O engine (zero/offload/nvme_io.h) against the disk's sequential bandwidth, measured in the
# same run with fio (Debian's; installed if missing): a file of SIZE MiB in DIR, O_DIRECT, 4 MiB
# requests, interleaved over ROUNDS rounds; medians. Three passes, each against fio doing the same:
#   write    a new file, preallocated with fallocate (as zero/offload/offload.h creates the offload file;
#            fio lays its new file out the same way): every write also converts an unwritten
#            extent, which the file system journals. The training run pays this in step 1 only.
#   rewrite  the same file again (its blocks now written): what every later step's write-back is.
#   read     the file back.
# Ours at 2 requests in flight (the optimizer's stream) and at DEPTH (default 16); fio at 2 and 16.
# Target (issue 11): ours >= 80% of fio's sequential bandwidth.
# Usage: [SIZE=1024] [ROUNDS=3] [DEPTH=16] dev/bench/nvme_bench.sh [DIR (default: a new dir under /tmp)]
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${SIZE:-1024}
rounds=${ROUNDS:-3}
depth_hi=${DEPTH:-16}
made_dir=""
if [ $# -ge 1 ]; then dir=$1; else dir=$(mktemp -d /tmp/nvme_bench.XXXXXX); made_dir=$dir; fi
command -v fio >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null; }
make -s build/nvme_bench
out=$(mktemp)
trap 'rm -f "$out" "$dir"/fio_bench.bin; [ -z "$made_dir" ] || rmdir "$made_dir"' EXIT
fio_run() { # LABEL-OP RW DEPTH (fio's file: removed before "write", kept for "rewrite" and "read")
    fio --name=seq --filename="$dir/fio_bench.bin" --size="${size}M" --rw="$2" --bs=4M --direct=1 --ioengine=io_uring \
        --iodepth="$3" --end_fsync=1 --output-format=json 2>/dev/null | python3 -c "
import json, sys; j = json.load(sys.stdin)['jobs'][0]; op = 'write' if '$2' == 'write' else 'read'
print(json.dumps({'backend': 'fio depth $3', 'op': '$1', 'bytes_per_s': j[op]['bw_bytes']}))"
}
echo "load before: $(uptime)"
for r in $(seq "$rounds"); do
    for depth in 2 16; do
        rm -f "$dir/fio_bench.bin"; fio_run write write $depth >>"$out"
        fio_run rewrite write $depth >>"$out"
        fio_run read read $depth >>"$out"
    done
    rm -f "$dir/fio_bench.bin"
    for depth in 2 "$depth_hi"; do
        build/nvme_bench "$dir" "$size" 4096 "$depth" | sed "s/\"backend\":\"\([a-z_]*\)\"/\"backend\":\"\1 depth $depth\"/" >>"$out"
    done
    echo "round $r: $(uptime)"
done
echo "load after: $(uptime)"
echo "file system of $dir: $(df -hT "$dir" | tail -1)"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for r in rows: med.setdefault((r["backend"], r["op"]), []).append(r["bytes_per_s"])
n = max(len(v) for v in med.values())
med = {k: statistics.median(v) for k, v in med.items()}
ops = ("write", "rewrite", "read")
print(f"medians of {n} rounds, MB/s (1e6 bytes/s); in brackets: vs fio depth 2 / fio depth 16 doing the same pass")
print("| I/O | " + " | ".join(ops) + " |")
print("|---|---|---|---|")
for b in dict.fromkeys(k[0] for k in med):
    cells = []
    for op in ops:
        x = med.get((b, op), 0)
        cells.append(f"{x / 1e6:.0f} ({100 * x / med[('fio depth 2', op)]:.0f}% / {100 * x / med[('fio depth 16', op)]:.0f}%)")
    print(f"| {b} | " + " | ".join(cells) + " |")
PY
