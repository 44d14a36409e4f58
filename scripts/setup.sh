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
#   --slurm  also Debian's Slurm (slurmctld, slurmd, slurm-client) and munge, which only the Slurm
#          tests need (tests/t_76_slurm.sh calls this; tests/slurm_cluster.sh starts the daemons
#          itself, inside the simulated cluster). The packages' own daemons are kept from starting
#          at install time (policy-rc.d), and nothing else of the default set-up changes.
set -euo pipefail
python_modules=(numpy tiktoken matplotlib tqdm scipy_openblas32 safetensors pyarrow)
[ "${1:-}" = "--hf" ] && python_modules+=(torch transformers)
if [ "${1:-}" = "--slurm" ]; then
    need_slurm=()
    command -v slurmctld >/dev/null 2>&1 || need_slurm+=(slurmctld)
    command -v slurmd    >/dev/null 2>&1 || need_slurm+=(slurmd)
    command -v srun      >/dev/null 2>&1 || need_slurm+=(slurm-client)
    command -v munged    >/dev/null 2>&1 || need_slurm+=(munge)
    if [ ${#need_slurm[@]} -gt 0 ]; then
        echo "setup: installing Debian packages: ${need_slurm[*]}"
        started=$(date +%s)
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        # Debian starts a package's daemon on install unless /usr/sbin/policy-rc.d exits 101: a
        # temporary one (only where none exists) keeps munged, slurmctld and slurmd from starting
        # outside the tests' namespaces; removed on every exit path.
        made_policy=""
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
            $SUDO chmod 755 /usr/sbin/policy-rc.d
            made_policy=1
            trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
        fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_slurm[@]}" >/dev/null
        [ -n "$made_policy" ] && { $SUDO rm -f /usr/sbin/policy-rc.d; trap - EXIT; }
        echo "setup: Slurm packages installed in $(( $(date +%s) - started )) s"
    fi
fi
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
