#!/usr/bin/env bash
# Installs the cuDNN frontend's C++ headers (header-only; the USE_CUDNN=1 build of the CUDA
# trainer includes them, kernels/attention_cudnn.cuh) from PyPI's nvidia-cudnn-frontend wheel:
# the wheel is downloaded with pip (no dependencies, nothing installed into Python) and only its
# include/ folder is unpacked, into DIR (default build/cudnn_frontend; DIR/include/cudnn_frontend.h).
# The cuDNN library itself (libcudnn 9, cudnn.h) comes with the CUDA installation, not from here.
# Safe to run again: does nothing when DIR already holds this version. About 3 MB, a few seconds.
#   usage: bash scripts/cudnn_frontend.sh [DIR]
set -euo pipefail
VERSION=1.32.0
dir=${1:-build/cudnn_frontend}
if [ -f "$dir/include/cudnn_frontend.h" ] && [ "$(cat "$dir/version" 2>/dev/null)" = "$VERSION" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$VERSION" >"$tmp/log" 2>&1; then
    echo "error: scripts/cudnn_frontend.sh: pip could not download nvidia-cudnn-frontend==$VERSION; expected PyPI access ($(tail -1 "$tmp/log"))" >&2
    exit 1
fi
mkdir -p "$dir"
rm -rf "$dir/include.new"
python3 - "$tmp"/nvidia_cudnn_frontend-*.whl "$dir/include.new" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit("error: %s: no include/cudnn_frontend.h in the wheel; expected the frontend's headers" % wheel)
    for n in names:
        target = os.path.join(out, n[len("include/"):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(n) as src, open(target, "wb") as dst:
            dst.write(src.read())
PY
rm -rf "$dir/include"
mv "$dir/include.new" "$dir/include" # whole or not at all
echo "$VERSION" >"$dir/version"
echo "cudnn_frontend: headers $VERSION in $dir/include"
