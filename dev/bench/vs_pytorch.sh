#!/usr/bin/env bash
# This trainer vs PyTorch (eager and torch.compile, Hugging Face GPT2LMHeadModel, fp32) on the
# same training step, interleaved; see dev/bench/vs_pytorch.py for what is compared. Not a test.
# Installs torch and transformers (pip) into build/pytorch_venv the first time (about 6 GB; the
# run and test commands never install them). Takes about 15 minutes on an idle 2-core machine
# (3 configs x 3 rounds x 4 steps per peer, plus about a minute of torch.compile per config).
# Usage: dev/bench/vs_pytorch.sh [vs_pytorch.py flags, e.g. --configs d12:4:64 --rounds 2 --no-compile]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh >/dev/null
make -s build/bench_cpu
venv=build/pytorch_venv
if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
    echo "vs_pytorch: installing torch and transformers into $venv (pip)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch transformers
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE may be set by the environment: neither peer should run forced.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) | torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') | load $(cut -d' ' -f1-3 /proc/loadavg)"
"$venv/bin/python" dev/bench/vs_pytorch.py "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
