#!/usr/bin/env bash
# Install what the CPU build, the tests and the data scripts need on a fresh Debian machine:
# a C toolchain, OpenBLAS, Open MPI, liburing (Debian packages) and numpy, tiktoken, matplotlib,
# tqdm, scipy-openblas32 (PyPI: a current OpenBLAS that knows every x86-64 CPU; the Makefile
# links it), safetensors (PyPI; for scripts/export_hf.py and import_hf.py), pyarrow (PyPI; data/fineweb.py
# reads local parquet files with it).
# Safe to run again: it skips what is already there.
#   --hf   also PyPI's torch and transformers, which only the Hugging Face tests need (to load
#          what export_hf.py writes; tests/t_70_hf.sh calls this). About 4-5 minutes and 5.6 GB
#          from an empty pip cache (torch's wheel brings its CUDA libraries). dev/make_reference.py
#          needs torch too; its output is committed.
set -euo pipefail
python_modules=(numpy tiktoken matplotlib tqdm scipy_openblas32 safetensors pyarrow)
[ "${1:-}" = "--hf" ] && python_modules+=(torch transformers)
need_apt=()
command -v gcc   >/dev/null 2>&1 || need_apt+=(gcc)
command -v make  >/dev/null 2>&1 || need_apt+=(make)
# The OpenMP build of OpenBLAS: the fallback BLAS without PyPI's, and the CUDA build's tests' one.
ls -d /usr/lib/*/openblas-openmp >/dev/null 2>&1 || need_apt+=(libopenblas-openmp-dev)
command -v mpicc  >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
# io_uring for the NVMe offload I/O (zero/offload/nvme_io.h; without it the build falls back to threads).
[ -f /usr/include/liburing.h ] || need_apt+=(liburing-dev)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
need_pip=()
for mod in "${python_modules[@]}"; do
    python3 -c "import $mod" >/dev/null 2>&1 || need_pip+=("${mod//_/-}")
done
if [ ${#need_pip[@]} -gt 0 ]; then
    echo "setup: installing Python packages: ${need_pip[*]}"
    started=$(date +%s)
    python3 -m pip install -q "${need_pip[@]}" 2>/dev/null || python3 -m pip install -q --break-system-packages "${need_pip[@]}"
    echo "setup: Python packages installed in $(( $(date +%s) - started )) s"
fi
echo "setup: ok"
