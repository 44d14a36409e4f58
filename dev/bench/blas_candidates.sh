#!/usr/bin/env bash
# BLAS candidates side by side (not a test): the trainer's sgemm shapes (dev/bench/blas_bench.c)
# under each library this project could link, interleaved round by round (A B C D E, A B C D E,
# ...), printing each library's kernel and the median GFLOP/s. Candidates:
#   openblas-debian       Debian's libopenblas-openmp (0.3.21), as the CPU detects itself
#   openblas-debian+core  the same with OPENBLAS_CORETYPE forced (SkylakeX with AVX-512, else Haswell)
#   blis-debian           Debian's libblis-openmp (0.9.0)
#   mkl-pypi              Intel oneMKL from PyPI (mkl), GNU OpenMP threading layer
#   openblas-pypi         a current OpenBLAS from PyPI (scipy-openblas32), sequential, each sgemm
#                         split over the trainer's OpenMP threads (what the Makefile links)
#   openblas-pypi-pthreads  the same library on its own pthreads (against the OpenMP loops)
# Installs what is missing (apt: libblis-openmp-dev; pip into build/blas_venv: mkl,
# scipy-openblas32; about 1.1 GB, 30 s here). Takes about 1.5 minutes on an idle machine (ROUNDS=3, SECONDS_EACH=2; 3.5 when loaded).
# Usage: dev/bench/blas_candidates.sh [rows (default 256: d12 B 4 x T 64)] [C (default 768)]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-256}
C=${2:-768}
rounds=${ROUNDS:-3}
secs=${SECONDS_EACH:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
bash scripts/setup.sh >/dev/null
arch=$(gcc -print-multiarch)
[ -d /usr/lib/$arch/blis-openmp ] || { apt-get install -y -qq libblis-openmp-dev >/dev/null; }
venv=build/blas_venv
[ -x $venv/bin/python ] || python3 -m venv $venv
$venv/bin/python -c "import scipy_openblas32" 2>/dev/null && ls $venv/lib/libmkl_gnu_thread.so.* >/dev/null 2>&1 \
    || $venv/bin/pip install -q mkl scipy-openblas32
mkl=$(cd $venv/lib && pwd)
so32=$($venv/bin/python -c "import scipy_openblas32 as s; print(s.get_lib_dir())")
so() { basename "$(ls "$mkl"/$1.so.* | head -1)"; }
src=dev/bench/blas_bench.c
F=(-O3 -march=native -fopenmp -I.)
ob=/usr/lib/$arch/openblas-openmp
bl=/usr/lib/$arch/blis-openmp
gcc "${F[@]}" $src -o build/bb_openblas -L$ob -Wl,-rpath,$ob -lopenblas
gcc "${F[@]}" -DBLAS_BLIS $src -o build/bb_blis -L$bl -Wl,-rpath,$bl -lblis
gcc "${F[@]}" -DBLAS_MKL $src -o build/bb_mkl -L"$mkl" -Wl,-rpath,"$mkl" -Wl,--no-as-needed \
    -l:"$(so libmkl_intel_lp64)" -l:"$(so libmkl_gnu_thread)" -l:"$(so libmkl_core)" -lgomp -lpthread -lm -ldl
gcc "${F[@]}" -DBLAS_SCIPY_OPENBLAS $src -o build/bb_scipy -L"$so32" -Wl,-rpath,"$so32" -lscipy_openblas
gcc "${F[@]}" -DBLAS_SCIPY_OPENBLAS -DBLAS_OWN_THREADS $src -o build/bb_scipy_pthreads -L"$so32" -Wl,-rpath,"$so32" -lscipy_openblas
core=Haswell; grep -q avx512f /proc/cpuinfo && core=SkylakeX
names=(openblas-debian "openblas-debian+$core" blis-debian mkl-pypi openblas-pypi openblas-pypi-pthreads)
cmds=("build/bb_openblas" "env OPENBLAS_CORETYPE=$core build/bb_openblas" "build/bb_blis" "build/bb_mkl" "build/bb_scipy" "build/bb_scipy_pthreads")
tmp=$(mktemp -d /tmp/blas_candidates.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) | flags: $(grep -o -w -m1 -E 'avx512f|amx_tile|avx2' /proc/cpuinfo | sort -u | xargs) | threads $OMP_NUM_THREADS | rows $rows C $C"
for r in $(seq "$rounds"); do
    echo "round $r | load: $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in "${!names[@]}"; do
        # OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE may be set by the environment: only the +core row forces one.
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${cmds[$i]} "$rows" "$secs" "$C" > "$tmp/$i.$r"
    done
done
printf "| candidate | library, version, kernel | layer sgemms GFLOP/s | LM head GFLOP/s | all GFLOP/s (median of %d) |\n|---|---|---|---|---|\n" "$rounds"
for i in "${!names[@]}"; do
    python3 - "${names[$i]}" "$tmp"/$i.* <<'PY'
import re, statistics, sys
name, files = sys.argv[1], sys.argv[2:]
info = open(files[0]).readline().strip()
vals = [[float(x) for x in re.findall(r"([0-9.]+) GFLOP/s", open(f).read())] for f in files]
med = [statistics.median(v[k] for v in vals) for k in range(3)]
print(f"| {name} | {info} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} |")
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
