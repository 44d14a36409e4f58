#!/usr/bin/env bash
# ZeRO-Offload / ZeRO-Infinity in the CPU build: for each model (d6, d12), N = 2 ranks (1 thread
# each), stages 1-3 and placements none, -zo nvme, -zo nvme -zp nvme (stage 3), a STEPS-step run
# at B 4 x T 64 per rank: peak RSS (max over ranks) beside the RAM the placement's formula leaves
# (model state + working units + activations, as printed), NVMe bytes per rank, mean step time
# over the steps after the first, the exposed I/O wait, and how much of the I/O hides behind
# compute: the disk time the step's NVMe bytes would take alone (both ranks' bytes over the
# sequential bandwidth build/nvme_bench measures at the start, same directory) against the step
# time it added to the in-memory run (hidden = 1 - added / disk time, clipped to [0, 1]).
# Usage: [STEPS=3] [DIR=nvme dir] dev/bench/offload_table.sh ["d6 d12"] ["1 2 3"]
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-"d6 d12"}
stages=${2:-"1 2 3"}
steps=${STEPS:-3}
make -s zero_binaries build/nvme_bench >/dev/null
tmp=$(mktemp -d /tmp/offload_table.XXXXXX)
nv=${DIR:-$tmp/nvme}; mkdir -p "$nv"
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import numpy as np; h = np.zeros(256, '<i4'); h[:3] = 20240520, 1, 400000
open('$tmp/train.bin', 'wb').write(h.tobytes() + np.random.default_rng(0).integers(0, 50257, 400000).astype('<u2').tobytes())"
echo "load before: $(uptime)"
build/nvme_bench "$nv" 512 4096 2 >"$tmp/disk_all.jsonl" # (not piped into head: with pipefail its SIGPIPE ended the script)
head -2 "$tmp/disk_all.jsonl" >"$tmp/disk.jsonl" # io_uring write, read
export OMP_NUM_THREADS=1
for m in $models; do for stage in $stages; do
    placements=("none" "-zo nvme"); [ "$stage" -eq 3 ] && placements+=("-zo nvme -zp nvme")
    for p in "${placements[@]}"; do
        tag=$(echo "$p" | tr -d ' -'); d="$tmp/${m}_z${stage}_$tag"; mkdir -p "$d"
        extra=""; [ "$p" != none ] && extra="$p -zd $nv"
        mpirun --allow-run-as-root --oversubscribe -np 2 bash -c \
            "exec /usr/bin/time -f '%M' -o '$d/rss_'\$OMPI_COMM_WORLD_RANK build/train_gpt2_z$stage -e $m -b 4 -t 64 -x $steps -v 0 -s 0 -i '$tmp/train.bin' -o '$d/run' $extra" \
            >"$d/out" 2>&1 || { echo "run failed: $d"; tail -3 "$d/out"; exit 1; }
    done
done; done
echo "load after: $(uptime)"
python3 - "$tmp" "$models" "$stages" <<'PY'
import glob, json, re, sys
tmp, models, stages = sys.argv[1], sys.argv[2].split(), [int(s) for s in sys.argv[3].split()]
disk = {json.loads(l)["op"]: json.loads(l)["bytes_per_s"] for l in open(f"{tmp}/disk.jsonl")}
MiB = 1048576
def load(d):
    recs = [json.loads(l) for l in open(f"{d}/run/log.jsonl")]
    cfg = next(r for r in recs if r["kind"] == "config")
    train = [r for r in recs if r["kind"] == "train"]
    timed = train[1:] or train
    out = open(f"{d}/out").read()
    act = float(re.search(r"activations ([0-9.]+) MiB", out).group(1))
    rss = max(int(open(f).read().split()[-1]) for f in glob.glob(f"{d}/rss_*")) / 1024
    ms = sum(r["ms"] for r in timed) / len(timed)
    io = sum(r.get("io_wait_ms", 0) for r in timed) / len(timed)
    rd = timed[-1].get("nvme_read_bytes", 0); wr = timed[-1].get("nvme_written_bytes", 0)
    return dict(cfg=cfg, act=act, rss=rss, ms=ms, io=io, rd=rd, wr=wr)
print(f"disk (build/nvme_bench, io_uring, 4 MiB x 2): write {disk['write'] / 1e6:.0f} MB/s, read {disk['read'] / 1e6:.0f} MB/s; N = 2 ranks, B 4 x T 64")
print("| model | stage | placement | RAM state + working + activations (MiB) | peak RSS (MiB) | NVMe per rank (MiB) | step ms | exposed I/O ms | NVMe r / w per rank per step (MiB) | disk time alone (ms) | I/O hidden |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for m in models:
    for s in stages:
        base = None
        for tag, name in (("none", "none"), ("zonvme", "-zo nvme"), ("zonvmezpnvme", "-zo nvme -zp nvme")):
            try: r = load(f"{tmp}/{m}_z{s}_{tag}")
            except FileNotFoundError: continue
            c = r["cfg"]
            ram = c.get("bytes_ram", c["bytes_params"] + c["bytes_grads"] + c["bytes_optimizer"])
            expect = (ram + c["bytes_working"]) / MiB + r["act"]
            if tag == "none": base = r
            disk_ms = 1000 * 2 * (r["rd"] / disk["read"] + r["wr"] / disk["write"])  # both ranks share the disk
            hidden = "-" if tag == "none" or disk_ms == 0 else f"{100 * min(1.0, max(0.0, 1 - (r['ms'] - base['ms']) / disk_ms)):.0f}%"
            print(f"| {m} | {s} | {name} | {expect:.0f} | {r['rss']:.0f} | {c.get('bytes_nvme', 0) / MiB:.0f} | {r['ms']:.0f} | {r['io']:.0f} | "
                  f"{r['rd'] / MiB:.0f} / {r['wr'] / MiB:.0f} | {disk_ms:.0f} | {hidden} |")
PY
