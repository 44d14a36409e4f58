#!/usr/bin/env bash
# dev/device_deps.sh: bundle what the GPU machine lacks for building and running the CUDA build,
# from this machine's Debian packages, into build/device_deps/ (ignored by git; the device tool
# carries it: `carry: ["build/device_deps"]`). Run it here before a device session.
#
#   bash dev/device_deps.sh               make build/device_deps/ (about 30 s; needs mpicc, ldd, xz)
#   bash dev/device_deps.sh unpack DIR    unpack the compressed OpenBLAS into DIR (used by
#                                         dev/gpu_check.sh there; needs tar+xz or python3)
#
# What goes in, and why:
#   mpi/include            Open MPI's C headers (zero.cuh includes <mpi.h> in every binary)
#   mpi/lib                libmpi.so.40 and its ldd closure (libopen-rte, libopen-pal, hwloc, libevent,
#                          ...) minus glibc, libstdc++, libgcc and libgomp (those come with the
#                          device's compiler), plus libmpi.so for -lmpi. This is all a single-rank
#                          run needs: run without mpirun, the trainer never calls MPI_Init.
#   mpi/lib/openmpi, mpi/share/openmpi, mpi/bin, mpi/lib/pmix
#                          the rest of the Open MPI runtime, for the optional 2-rank mpirun check:
#                          the MCA components (minus the network fabrics: UCX, libfabric, verbs,
#                          PSM, and OpenSHMEM), help texts, orterun/orted, and PMIx's plug-ins
#   mpi/env.sh             source it to point Open MPI and PMIx at this folder (OPAL_*, PMIX_*)
#   openblas/include       cblas.h, openblas_config.h, f77blas.h (Debian's OpenMP variant)
#   openblas/lib.tar.xz    libopenblas.so.0 (OpenMP variant), libopenblas.so, libgfortran.so.5,
#                          libquadmath.so.0, xz-compressed: the library is 36 MB, 4 MB packed, and
#                          the device tool carries at most 64 MiB with the working tree
#   cudnn_frontend/include the cuDNN frontend's C++ headers (scripts/cudnn_frontend.sh, from PyPI;
#                          3 MB), for the USE_CUDNN=1 build
#   MANIFEST               versions, sizes, the newest glibc symbol version the bundle needs
# Debian 12 libraries run on a newer glibc (the device image's Python 3.12.3 suggests Ubuntu
# 24.04, glibc 2.39); gpu_check.sh prints both versions.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1

LIMIT=$((64 * 1024 * 1024))
DEST=build/device_deps

die() { echo "device_deps: FAIL: $*" >&2; exit 1; }

# ---- unpack mode (runs on the device machine; keep it dependency-free)
if [ "${1:-}" = "unpack" ]; then
    src=$DEST/openblas/lib.tar.xz
    out=${2:?usage: dev/device_deps.sh unpack DIR}
    [ -f "$src" ] || die "$src missing (run dev/device_deps.sh here and carry build/device_deps)"
    mkdir -p "$out"
    if command -v xz >/dev/null 2>&1 && tar -xJf "$src" -C "$out" 2>/dev/null; then :
    else
        python3 - "$src" "$out" <<'PY' || die "could not unpack $src (no xz, and python3's tarfile failed)"
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    t.extractall(sys.argv[2])
PY
    fi
    [ -e "$out/libopenblas.so.0" ] || die "unpacked $src but $out/libopenblas.so.0 is missing"
    exit 0
fi

# ---- what this machine must have
command -v mpicc >/dev/null 2>&1 || die "mpicc not found (apt-get install libopenmpi-dev)"
command -v ldd >/dev/null 2>&1 || die "ldd not found"
command -v xz >/dev/null 2>&1 || die "xz not found (apt-get install xz-utils)"
MPI_INCDIR=$(mpicc --showme:incdirs | awk '{print $1}')
MPI_LIBDIR=$(mpicc --showme:libdirs | awk '{print $1}')
[ -f "$MPI_INCDIR/mpi.h" ] || die "mpi.h not in $MPI_INCDIR (from mpicc --showme:incdirs)"
LIBMPI=$(readlink -f "$MPI_LIBDIR/libmpi.so") || die "libmpi.so not in $MPI_LIBDIR"
OMPI_VERSION=$(ompi_info --version 2>/dev/null | head -1 || echo "Open MPI (version unknown)")
OMPI_PKGLIBDIR=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
OMPI_PKGDATADIR=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
OMPI_BINDIR=$(ompi_info --path bindir --parsable 2>/dev/null | sed -n 's/^path:bindir://p')
first_dir() { local d; for d in "$@"; do [ -d "$d" ] && { echo "$d"; return 0; }; done; return 1; }
OPENBLAS_DIR=${OPENBLAS_OPENMP_DIR:-$(first_dir /usr/lib/*/openblas-openmp)}
if [ -z "$OPENBLAS_DIR" ] || [ ! -e "$OPENBLAS_DIR/libopenblas.so.0" ]; then
    die "OpenBLAS (OpenMP variant) not found (apt-get install libopenblas-openmp-dev)"
fi
OPENBLAS_INCDIR=$(first_dir /usr/include/*/"$(basename "$OPENBLAS_DIR")")
if [ -z "$OPENBLAS_INCDIR" ] || [ ! -f "$OPENBLAS_INCDIR/cblas.h" ]; then
    die "cblas.h for $OPENBLAS_DIR not found (expected /usr/include/<triplet>/openblas-openmp/cblas.h)"
fi

# Libraries the device machine's own toolchain provides (and that must not be shadowed there).
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libstdc\+\+\.so|libgcc_s\.so|libgomp\.so)'
# MCA components for fabrics a single machine without InfiniBand has no use for (and their
# libraries are large); also OpenSHMEM. Components missing a library are skipped by Open MPI.
SKIP_COMPONENTS='(ucx|ofi|openib|verbs|psm|psm2|oshmem|memheap|scoll|spml|sshmem|atomic_|monitoring|pmix_flux|schizo_flux|schizo_jsm|slurm|gridengine)'

# libs_of FILE...: the resolved paths of every library the files need (ldd gives the closure),
# minus SYSTEM_LIBS; fails on a library ldd cannot find.
libs_of() {
    local f
    for f in "$@"; do
        ldd "$f" | awk -v f="$f" '
            /not found/ { print "MISSING " $1 " (needed by " f ")"; next }
            $2 == "=>" && $3 ~ /^\// { print $1, $3 }'
    done | sort -u | grep -Ev "$SYSTEM_LIBS" || true
}

# copy_libs DIR FILE...: copy each needed library into DIR under its soname.
copy_libs() {
    local dir=$1; shift
    local name path
    while read -r name path; do
        [ "$name" = MISSING ] && die "ldd: $path"
        [ -e "$dir/$name" ] || cp -L "$path" "$dir/$name"
    done < <(libs_of "$@")
}

rm -rf "$DEST"
mkdir -p "$DEST"/mpi/{include,lib/openmpi,lib/pmix,share/openmpi,share/pmix,bin} "$DEST"/openblas/include
echo "device_deps: $OMPI_VERSION from $MPI_LIBDIR; OpenBLAS from $OPENBLAS_DIR"

# ---- Open MPI: headers (C and the C++ bindings' headers mpi.h pulls in under nvcc; no Fortran)
top=$PWD
(cd "$MPI_INCDIR" && find . -name '*.h' -exec cp --parents -t "$top/$DEST/mpi/include/" {} +)
[ -f "$DEST/mpi/include/mpi.h" ] || die "copying the MPI headers failed"

# ---- Open MPI: libmpi and its closure, and the link-time name
cp -L "$LIBMPI" "$DEST/mpi/lib/$(objdump -p "$LIBMPI" | awk '/SONAME/ {print $2}')"
copy_libs "$DEST/mpi/lib" "$LIBMPI"
ln -sf "$(objdump -p "$LIBMPI" | awk '/SONAME/ {print $2}')" "$DEST/mpi/lib/libmpi.so"

# ---- Open MPI runtime for mpirun (optional on the device, so problems here only warn)
runtime_note="mpirun runtime: included"
if [ -d "$OMPI_PKGLIBDIR" ] && [ -x "$OMPI_BINDIR/orterun" ]; then
    comps=()
    for c in "$OMPI_PKGLIBDIR"/*.so; do
        [[ $(basename "$c") =~ $SKIP_COMPONENTS ]] && continue
        ldd "$c" | grep -q 'not found' && continue
        comps+=("$c")
    done
    cp -L "${comps[@]}" "$DEST/mpi/lib/openmpi/"
    cp -L "$OMPI_BINDIR/orterun" "$OMPI_BINDIR/orted" "$DEST/mpi/bin/"
    ln -sf orterun "$DEST/mpi/bin/mpirun"
    copy_libs "$DEST/mpi/lib" "${comps[@]}" "$OMPI_BINDIR/orterun" "$OMPI_BINDIR/orted"
    [ -d "$OMPI_PKGDATADIR" ] && cp -r "$OMPI_PKGDATADIR"/. "$DEST/mpi/share/openmpi/"
    # PMIx (external, Debian's pmix2): its own plug-ins and help texts, located through PMIX_*.
    pmix=$(ldd "$DEST"/mpi/lib/openmpi/mca_pmix_*.so 2>/dev/null | awk '/libpmix/ {print $3; exit}')
    if [ -n "$pmix" ]; then
        pmix_prefix=$(dirname "$(dirname "$(readlink -f "$pmix")")")
        if [ -d "$pmix_prefix/lib/pmix" ]; then cp -L "$pmix_prefix"/lib/pmix/*.so "$DEST/mpi/lib/pmix/" 2>/dev/null; fi
        [ -d "$pmix_prefix/share/pmix" ] && cp -r "$pmix_prefix"/share/pmix/. "$DEST/mpi/share/pmix/"
        copy_libs "$DEST/mpi/lib" "$DEST"/mpi/lib/pmix/*.so
    fi
    echo "device_deps: Open MPI runtime: ${#comps[@]} MCA components, orterun, orted"
else
    runtime_note="mpirun runtime: NOT included ($OMPI_PKGLIBDIR or $OMPI_BINDIR/orterun missing)"
    echo "device_deps: warning: $runtime_note; the 2-rank check will be skipped there"
fi

cat >"$DEST/mpi/env.sh" <<'SH'
# Source this to use the bundled Open MPI (made by dev/device_deps.sh): it relocates Open MPI's
# and PMIx's install paths to this folder and puts its mpirun first on PATH.
_d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$_d OPAL_EXEC_PREFIX=$_d OPAL_BINDIR=$_d/bin OPAL_LIBDIR=$_d/lib \
    OPAL_INCLUDEDIR=$_d/include OPAL_PKGLIBDIR=$_d/lib/openmpi OPAL_DATAROOTDIR=$_d/share \
    OPAL_DATADIR=$_d/share OPAL_PKGDATADIR=$_d/share/openmpi OPAL_SYSCONFDIR=$_d/etc
export OMPI_MCA_mca_base_component_path=$_d/lib/openmpi
export PMIX_PREFIX=$_d PMIX_INSTALL_PREFIX=$_d PMIX_LIBDIR=$_d/lib PMIX_PKGLIBDIR=$_d/lib/pmix \
    PMIX_DATADIR=$_d/share PMIX_PKGDATADIR=$_d/share/pmix PMIX_MCA_mca_base_component_path=$_d/lib/pmix
# No fabrics here; the device runs as root (mpirun refuses that unless told).
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH=$_d/bin:$PATH LD_LIBRARY_PATH=$_d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset _d
SH
mkdir -p "$DEST/mpi/etc"

# ---- OpenBLAS (OpenMP variant): headers, and the library closure packed with xz
cp "$OPENBLAS_INCDIR"/*.h "$DEST/openblas/include/"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -L "$OPENBLAS_DIR/libopenblas.so.0" "$stage/libopenblas.so.0"
copy_libs "$stage" "$OPENBLAS_DIR/libopenblas.so.0"
rm -f "$stage"/libopenblas.so.0.* 2>/dev/null || true
ln -s libopenblas.so.0 "$stage/libopenblas.so"
tar -C "$stage" -cf - . | xz -T0 -6 >"$DEST/openblas/lib.tar.xz"
openblas_libs=$(cd "$stage" && echo *)

# ---- the cuDNN frontend's headers (header-only, 3 MB), for the USE_CUDNN=1 build: the device
# machine has no network to fetch them. Optional: without them gpu_check skips cuDNN's attention.
if [ -f build/cudnn_frontend/include/cudnn_frontend.h ] || bash scripts/cudnn_frontend.sh build/cudnn_frontend; then
    rm -rf "$DEST/cudnn_frontend"; mkdir -p "$DEST/cudnn_frontend"
    cp -r build/cudnn_frontend/include "$DEST/cudnn_frontend/include"
else echo "device_deps: warning: no cuDNN frontend headers (scripts/cudnn_frontend.sh failed): gpu_check will skip cuDNN's attention" >&2; fi

# ---- manifest and the size check
glibc_needed=$(find "$DEST/mpi/lib" "$DEST/mpi/bin" "$stage" -type f \( -name '*.so*' -o -perm -u+x \) \
    -exec objdump -T {} + 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -1)
bytes=$(du -sb "$DEST" | awk '{print $1}')
tree_bytes=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 du -cb 2>/dev/null |
    awk '$2 == "total" {s += $1} END {print s + 0}')
{
    echo "made by dev/device_deps.sh on $(hostname) at $(date -u +%FT%TZ)"
    echo "$OMPI_VERSION ($MPI_LIBDIR); $runtime_note"
    echo "OpenBLAS: $OPENBLAS_DIR ($(readlink -f "$OPENBLAS_DIR/libopenblas.so.0" | xargs basename)); packed: $openblas_libs"
    echo "built against: $(ldd --version | head -1)"
    echo "needs at least: ${glibc_needed:-GLIBC (unknown)}"
    echo "mpi/lib: $(cd "$DEST/mpi/lib" && find . -maxdepth 1 ! -type d -printf '%f ' | tr ' ' '\n' | sort | tr '\n' ' ')"
} >"$DEST/MANIFEST"
for d in mpi/include mpi/lib mpi/lib/openmpi mpi/lib/pmix mpi/bin mpi/share openblas $([ -d "$DEST/cudnn_frontend" ] && echo cudnn_frontend); do
    echo "device_deps: size $(du -sh "$DEST/$d" | cut -f1) $DEST/$d"
done
echo "device_deps: $DEST is $bytes bytes ($((bytes / 1024 / 1024)) MiB); working tree $((tree_bytes / 1024 / 1024)) MiB; limit 64 MiB together; needs ${glibc_needed:-?}"
[ "$bytes" -le "$LIMIT" ] || die "$DEST is $((bytes / 1024 / 1024)) MiB, over the device tool's 64 MiB carry limit"
[ $((bytes + tree_bytes)) -le "$LIMIT" ] ||
    die "$DEST ($((bytes / 1024 / 1024)) MiB) plus the working tree ($((tree_bytes / 1024 / 1024)) MiB) is over the device tool's 64 MiB limit"

# ---- self-check: an MPI program built from the bundle alone (gcc, no mpicc) finds every MPI
# library in the bundle, and a cblas program links against the unpacked OpenBLAS.
check=$(mktemp -d)
trap 'rm -rf "$stage" "$check"' EXIT
cat >"$check/hello.c" <<'C'
#include <mpi.h>
#include <cblas.h>
#include <stdio.h>
int main(int argc, char** argv) {
    int rank = 0, size = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0};
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    int sum = rank;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d: sgemm %g %g %g %g, allreduce %d\n", rank, size, c[0], c[1], c[2], c[3], sum);
    MPI_Finalize();
    return !(c[0] == 1 && c[3] == 4 && sum == size * (size - 1) / 2);
}
C
bash "$0" unpack "$check/openblas"
M=$PWD/$DEST/mpi
# Debian's libmpi and libopen-rte carry a RUNPATH to /usr/lib/<triplet>/openmpi/lib, which
# overrides the executable's own paths for their dependencies; so at run time the bundle's lib
# folders go on LD_LIBRARY_PATH (env.sh does it for MPI; gpu_check.sh adds OpenBLAS's).
gcc -O1 -fopenmp -I"$M/include" -I"$DEST/openblas/include" "$check/hello.c" -o "$check/hello" \
    -L"$M/lib" -Wl,-rpath,"$M/lib" -lmpi -L"$check/openblas" -Wl,-rpath,"$check/openblas" -lopenblas ||
    die "self-check: compiling an MPI + cblas program against the bundle failed"
# bundle_env CMD...: run CMD with the bundle's environment (what gpu_check.sh sets there).
bundle_env() (
    # shellcheck disable=SC1091 # made above
    source "$M/env.sh"
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$check/openblas
    "$@"
)
outside=$(bundle_env ldd "$check/hello" | grep -E 'libmpi|libopen-|libhwloc|libevent|libopenblas|libgfortran|libquadmath|libpmix' |
    grep -v -e "$M/lib" -e "$check/openblas" || true)
[ -z "$outside" ] || die "self-check: libraries resolved outside the bundle: $outside"
OMPI_MCA_ess_singleton_isolated=1 bundle_env timeout 20 "$check/hello" ||
    die "self-check: the bundled MPI program failed as a singleton"
if [[ $runtime_note == *included ]]; then
    bundle_env timeout 30 mpirun --oversubscribe -x LD_LIBRARY_PATH -np 2 "$check/hello" ||
        echo "device_deps: warning: self-check: bundled mpirun -np 2 failed (the 2-rank check may fail there too)"
fi
echo "device_deps: OK: $DEST ($((bytes / 1024 / 1024)) MiB); carry [\"$DEST\"]"
