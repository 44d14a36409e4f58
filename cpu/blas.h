/*
 * blas.h: the one place the CPU build touches its BLAS library: row-major sgemm, and what the
 * start-up report says about the library (name, version, the kernel it runs on this CPU).
 * The library is chosen at build time (the Makefile defines one of the BLAS_* macros, see
 * there and README "Benchmark (CPU)" for the measurements behind the choice):
 *   BLAS_OPENBLAS (default)  OpenBLAS through its cblas.h (Debian's libopenblas-openmp-dev)
 *   BLAS_SCIPY_OPENBLAS      a current OpenBLAS from PyPI (scipy-openblas32: symbols prefixed scipy_)
 *   BLAS_MKL                 Intel oneMKL from PyPI, GNU OpenMP threading layer (mkl_gnu_thread)
 *   BLAS_BLIS                BLIS (Debian's libblis-openmp-dev)
 * The prototypes below are the standard CBLAS ones (enums passed as their int values), declared
 * here so that no library's own header is needed.
 */
#ifndef CPU_BLAS_H
#define CPU_BLAS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <omp.h>

#if !defined(BLAS_OPENBLAS) && !defined(BLAS_SCIPY_OPENBLAS) && !defined(BLAS_MKL) && !defined(BLAS_BLIS)
#define BLAS_OPENBLAS
#endif

#ifdef __cplusplus // the CUDA build's tests compile the CPU twins as C++
extern "C" {
#endif
enum { BLAS_ROW_MAJOR = 101, BLAS_NO_TRANS = 111, BLAS_TRANS = 112 }; // CBLAS's enum values

#if defined(BLAS_SCIPY_OPENBLAS)
#define BLAS_SYM(name) scipy_##name
#else
#define BLAS_SYM(name) name
#endif

void BLAS_SYM(cblas_sgemm)(int order, int transa, int transb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc);

#if defined(BLAS_SCIPY_OPENBLAS) && !defined(BLAS_OWN_THREADS) // BLAS_OWN_THREADS: for the benchmark only
// PyPI's OpenBLAS threads with its own pthreads, whose idle threads spin against the trainer's
// OpenMP threads for the cores (Debian's pthread build measured 4x slower on 2 cores). So it runs
// sequential (one thread per call) and the trainer's OpenMP pool splits each sgemm into blocks.
#define BLAS_SPLIT_IN_OPENMP 1
#else
#define BLAS_SPLIT_IN_OPENMP 0 // the library threads with the trainer's OpenMP runtime (libgomp)
#endif
#if defined(BLAS_OPENBLAS) || defined(BLAS_SCIPY_OPENBLAS)
void BLAS_SYM(openblas_set_num_threads)(int n);
char* BLAS_SYM(openblas_get_config)(void);
char* BLAS_SYM(openblas_get_corename)(void);
int BLAS_SYM(openblas_get_parallel)(void); // 0 sequential, 1 pthreads, 2 OpenMP
#elif defined(BLAS_MKL)
typedef struct { int MajorVersion, MinorVersion, UpdateVersion, PatchVersion; char* ProductStatus; char* Build; char* Processor; char* Platform; } MKLVersion;
void MKL_Get_Version(MKLVersion* ver);
#elif defined(BLAS_BLIS)
const char* bli_info_get_version_str(void);
int bli_arch_query_id(void);
const char* bli_arch_string(int id);
#endif
#ifdef __cplusplus
}
#endif

static inline void blas_sgemm_call(int transa, int transb, int M, int N, int K, const float* A, int lda,
                                   const float* B, int ldb, float beta, float* C, int ldc) {
    BLAS_SYM(cblas_sgemm)(BLAS_ROW_MAJOR, transa ? BLAS_TRANS : BLAS_NO_TRANS, transb ? BLAS_TRANS : BLAS_NO_TRANS,
                          M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/*
 * C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta * C, all row-major fp32; op transposes when trans*
 * is nonzero (A is then stored (K,M), B (N,K)). lda/ldb/ldc: row strides in elements. Called
 * outside a parallel region it uses every thread; inside one, the calling thread only.
 */
static inline void blas_sgemm_row_major(int transa, int transb, int M, int N, int K, const float* A, int lda,
                                        const float* B, int ldb, float beta, float* C, int ldc) {
#if BLAS_SPLIT_IN_OPENMP
    static int sequential = 0;
    if (!sequential && !omp_in_parallel()) { BLAS_SYM(openblas_set_num_threads)(1); sequential = 1; }
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (threads > 1 && (double)M * N * K > 1e6) {
        // Split C along its longer side into one block per thread, in multiples of 16 (whole
        // micro-kernel tiles); each block is an independent sgemm on the same op(A), op(B).
        int split_rows = M >= N;
        int len = split_rows ? M : N;
        int chunk = ((len + threads - 1) / threads + 15) / 16 * 16;
        #pragma omp parallel for num_threads(threads) schedule(static, 1)
        for (int begin = 0; begin < len; begin += chunk) {
            int n = len - begin < chunk ? len - begin : chunk;
            if (split_rows) // rows of op(A): A's rows (no trans) or columns (trans)
                blas_sgemm_call(transa, transb, n, N, K, transa ? A + begin : A + (size_t)begin * lda, lda, B, ldb, beta,
                                C + (size_t)begin * ldc, ldc);
            else // columns of op(B): B's columns (no trans) or rows (trans)
                blas_sgemm_call(transa, transb, M, n, K, A, lda, transb ? B + (size_t)begin * ldb : B + begin, ldb, beta,
                                C + begin, ldc);
        }
        return;
    }
#endif
    blas_sgemm_call(transa, transb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// ---- what runs: library, version, kernel ----
#if defined(BLAS_OPENBLAS) || defined(BLAS_SCIPY_OPENBLAS)
static const char* blas_kernel(void) { return BLAS_SYM(openblas_get_corename)(); }
static void blas_describe(char* buf, size_t cap) {
#if BLAS_SPLIT_IN_OPENMP
    const char* threads = "scipy-openblas32 from PyPI, sequential calls split over the trainer's OpenMP threads";
#else
    const char* threads = BLAS_SYM(openblas_get_parallel)() == 2 ? "OpenMP threads" : "its own threads";
#endif
    snprintf(buf, cap, "%s (%s) | kernel: %s", BLAS_SYM(openblas_get_config)(), threads, blas_kernel());
}
// OpenBLAS's kernels for CPUs without AVX2 (what DYNAMIC_ARCH falls back to on a CPU it does
// not know; OpenBLAS 0.3.21 reports Prescott on Sapphire/Emerald Rapids).
static int blas_kernel_is_generic(const char* k) {
    static const char* old[] = {"Prescott", "Katmai", "Coppermine", "Northwood", "Banias", "Core2", "Penryn",
                                "Dunnington", "Nehalem", "Atom", "Athlon", "Opteron", "Barcelona", "Bobcat",
                                "Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator", "generic", "Unknown"};
    for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++)
        if (strncasecmp(k, old[i], strlen(old[i])) == 0) return 1;
    return 0;
}
#elif defined(BLAS_MKL)
// MKL loads one kernel library per instruction set at its first call (libmkl_def: generic,
// libmkl_mc3: SSE4.2, libmkl_avx2, libmkl_avx512, libmkl_avx10): the one mapped is the kernel.
static const char* blas_kernel(void) {
    static char kernel[32] = "";
    if (kernel[0] != 0) return kernel;
    float a[4] = {0}, c[4];
    blas_sgemm_call(0, 0, 2, 2, 2, a, 2, a, 2, 0.0f, c, 2); // loads the kernel library
    snprintf(kernel, sizeof(kernel), "unknown");
    FILE* maps = fopen("/proc/self/maps", "r");
    char line[4096];
    static const char* kernels[] = {"def", "mc3", "avx2", "avx512", "avx10"};
    while (maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
        const char* lib = strstr(line, "/libmkl_");
        for (size_t i = 0; lib != NULL && i < sizeof(kernels) / sizeof(kernels[0]); i++) {
            size_t n = strlen(kernels[i]);
            if (strncmp(lib + 8, kernels[i], n) == 0 && lib[8 + n] == '.') snprintf(kernel, sizeof(kernel), "%s", kernels[i]);
        }
    }
    if (maps != NULL) fclose(maps);
    return kernel;
}
static void blas_describe(char* buf, size_t cap) {
    MKLVersion v;
    MKL_Get_Version(&v);
    snprintf(buf, cap, "Intel oneMKL %d update %d build %s (GNU OpenMP threads) | kernel: %s", v.MajorVersion,
             v.UpdateVersion, v.Build, blas_kernel());
}
static int blas_kernel_is_generic(const char* k) { return strcmp(k, "def") == 0 || strcmp(k, "mc3") == 0; }
#elif defined(BLAS_BLIS)
static const char* blas_kernel(void) { return bli_arch_string(bli_arch_query_id()); }
static void blas_describe(char* buf, size_t cap) {
    snprintf(buf, cap, "BLIS %s (OpenMP threads) | kernel: %s", bli_info_get_version_str(), blas_kernel());
}
static int blas_kernel_is_generic(const char* k) { return strcmp(k, "generic") == 0 || strncmp(k, "penryn", 6) == 0; }
#endif

/*
 * The start-up line: "blas: <library, version, kernel>", and one warning line when the library
 * runs a kernel for an older CPU than this one (AVX2 or AVX-512 present, a pre-AVX2 kernel
 * chosen): matmuls then run several times slower (issue 10 measured 4x on a Xeon).
 */
static void blas_print_report(FILE* f) {
    char info[512];
    blas_describe(info, sizeof(info));
    fprintf(f, "blas: %s\n", info);
    const char* isa = __builtin_cpu_supports("avx512f") ? "AVX-512" : __builtin_cpu_supports("avx2") ? "AVX2" : NULL;
    const char* kernel = blas_kernel();
    if (isa == NULL || !blas_kernel_is_generic(kernel)) return;
    const char* forced = getenv("OPENBLAS_CORETYPE");
#if defined(BLAS_OPENBLAS) || defined(BLAS_SCIPY_OPENBLAS)
    if (forced != NULL && forced[0] != 0) {
        fprintf(f, "warning: blas: this CPU has %s but OPENBLAS_CORETYPE=%s forces OpenBLAS's '%s' kernel, so matmuls "
                "run several times slower; fix: unset OPENBLAS_CORETYPE\n", isa, forced, kernel);
        return;
    }
#endif
    fprintf(f, "warning: blas: this CPU has %s but the BLAS runs its generic '%s' kernel (it does not know this CPU), "
            "so matmuls run several times slower; fix: %s\n", isa, kernel,
#if defined(BLAS_SCIPY_OPENBLAS)
            "python3 -m pip install -U scipy-openblas32, then make clean && make"
#else
            "bash scripts/setup.sh, then make clean && make (links the current OpenBLAS from PyPI it installs)"
#endif
    );
}

#endif
