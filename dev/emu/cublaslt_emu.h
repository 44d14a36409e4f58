/*
 * cublaslt_emu.h: host (CPU) model of the cuBLASLt subset that kernels/matmul.cuh uses, for the
 * CPU emulation of the CUDA build. "Device" pointers are plain host pointers; cublasLtMatmul
 * computes synchronously on the calling thread and ignores the stream.
 *
 * INCLUDE FROM EXACTLY ONE TRANSLATION UNIT, and do not link libcublasLt: this header *defines*
 * (non-inline, extern "C") the functions that <cublasLt.h> declares, so a second includer gives
 * duplicate symbols at link time. The real <cublasLt.h> supplies the declarations, so any
 * signature drift here is a compile error ("conflicting declaration of C function").
 *
 * Operation, column-major as in all of cuBLAS (docs "cublasLtMatmul()"):
 *   D (m,n) = epilogue(alpha * op(A) op(B) + beta * C)    op(A) (m,k), op(B) (k,n), C (m,n)
 *   A is stored (m,k), or (k,m) when DESC_TRANSA = CUBLAS_OP_T; B likewise with (k,n) / (n,k).
 *   Shapes come from cublasLtMatrixLayoutCreate(type, rows, cols, ld): element (r,c) at r + c*ld.
 *   Epilogues ("cublasLtEpilogue_t"): DEFAULT; BIAS: x += bias[row] on every column (bias length
 *   m, packed); GELU_AUX: aux = x, D = gelu(x); GELU_AUX_BIAS: bias first, then as GELU_AUX;
 *   DGELU: D = x * gelu'(aux), aux an input (the GELU input a GELU_AUX forward stored);
 *   DGELU_BGRAD: as DGELU, and the bias pointer receives the bias gradient of D, bias[row] = the
 *   sum over the n columns of D (length m, "bias gradient ... of the matmul output");
 *   BGRADB: the bias pointer receives the bias gradient based on B, bias[col] = sum over k of
 *   op(B)[k, col] (length n, "the reduction happens over the GEMM's k dimension"); D as DEFAULT.
 *   aux (m,n) has leading dimension DESC_EPILOGUE_AUX_LD, in elements. A bias gradient is written
 *   (overwritten), never accumulated, as the docs say ("store ... in the bias buffer").
 * Dtypes: A, B, C, D, bias, aux bf16 (CUDA_R_16BF); CUBLAS_COMPUTE_32F with scale type
 *   CUDA_R_32F, so alpha and beta are host floats (pointer mode HOST, the default).
 * Numerics: each output is a dot product accumulated in double (in fp32 with EMU_DEVICE_MATH=1),
 *   scaled and offset in double,
 *   and rounded once to bf16 with round-to-nearest-even (__double2bfloat16; its host path is a
 *   single correct rounding). The GPU accumulates in fp32 in a kernel-dependent order, which can
 *   move a result that sits near a bf16 rounding boundary by one bf16 ulp.
 * Order inside one element: x = alpha*acc + beta*C (C not read when beta == 0, the BLAS rule),
 *   then + bias, then aux = x, then gelu (or x * gelu'(aux)). The docs say the bias is added
 *   "before applying final postprocessing"; that beta*C comes before the bias is an assumption
 *   (matmul.cuh combines beta != 0 only with BGRADB, whose bias output does not depend on C).
 *   A bias gradient is summed in double from the unrounded values (DGELU_BGRAD: x * gelu'(aux)
 *   before its bf16 rounding; BGRADB: the bf16 elements of B) and rounded once: an assumption
 *   (the docs do not say at which precision the reduction runs).
 * GELU: tanh form 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), as cpu/gelu.h, and its exact
 *   derivative for DGELU. ASSUMPTION: the cuBLASLt docs ("cublasLtEpilogue_t",
 *   CUBLASLT_EPILOGUE_GELU) only say "x := GELU(x)". PyTorch (aten/src/ATen/native/cuda/Blas.cpp)
 *   replaces this epilogue with gelu(..., "tanh") when it cannot use it, i.e. it treats cuBLASLt's
 *   GELU as the tanh form; test_kernels checks on a GPU.
 * EMU_CUBLASLT_NO_FUSED=1: the heuristic answers NOT_SUPPORTED for every epilogue other than
 *   DEFAULT and BIAS, as cuBLASLt may for some shapes, so the callers' fallbacks get tested.
 * Strictness: misuse returns an error status and prints one "cublaslt_emu:" line to stderr.
 *   Documented checks (sizeInBytes of SetAttribute, ld >= rows, aux ld >= rows and % 8,
 *   requestedAlgoCount > 0; and in-place C == D needing Cdesc == Ddesc, from the cublasLtMatmul()
 *   section, not re-checked against the CUDA 13 page) return what the docs name. Beyond the
 *   real library (marked "emulation" below): unmodelled types/attributes/epilogues are
 *   NOT_SUPPORTED; a bias or aux pointer the epilogue ignores, an output overlapping an input, an
 *   algo reused for another problem, or an operand less aligned than the heuristic was told are
 *   INVALID_VALUE, because in this project each of those is a caller bug.
 * Docs: https://docs.nvidia.com/cuda/cublas/ sections "cublasLtMatmul()",
 *   "cublasLtMatmulDescAttributes_t", "cublasLtEpilogue_t", "cublasLtMatrixLayoutCreate()",
 *   "cublasLtMatrixLayoutAttribute_t", "cublasLtMatmulPreferenceAttributes_t",
 *   "cublasLtMatmulAlgoGetHeuristic()", and the comments of CUDA 13.0's cublasLt.h.
 */
#ifndef DEV_EMU_CUBLASLT_EMU_H
#define DEV_EMU_CUBLASLT_EMU_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

// EMU_DEVICE_MATH=1 (as dev/emu/emu_device.h reads it): each dot product accumulates in fp32, as the
// tensor cores do, in k order (one rounding per product added), instead of in double.
static bool cublaslt_emu_fp32_accumulate(void) {
    const char* e = getenv("EMU_DEVICE_MATH");
    return e != NULL && atoi(e) != 0;
}

// Handle types are opaque pointers in <cublasLt.h>; the emulation owns what they point at.
struct cublasLtContext { uint32_t magic; };

namespace cublaslt_emu {

enum : uint32_t { HANDLE_MAGIC = 0x4c74480a, DESC_MAGIC = 0x4c74440a, LAYOUT_MAGIC = 0x4c744c0a,
                  PREF_MAGIC = 0x4c74500a, ALGO_MAGIC = 0x4c74410a };

struct Desc {
    uint32_t magic;
    int32_t transa, transb; // cublasOperation_t, stored as int32_t per the attribute docs
    uint32_t epilogue;      // cublasLtEpilogue_t, uint32_t
    const void* bias;       // DESC_BIAS_POINTER
    int32_t bias_type;      // DESC_BIAS_DATA_TYPE; -1 (the default) means "type of D"
    void* aux;              // DESC_EPILOGUE_AUX_POINTER
    int64_t aux_ld;         // DESC_EPILOGUE_AUX_LD, in elements
};
struct Layout { uint32_t magic; cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct Pref { uint32_t magic; uint64_t max_workspace; uint32_t align[4]; }; // A, B, C, D bytes
struct Problem { int64_t m, n, k; };
// What an emulated algo remembers, in cublasLtMatmulAlgo_t::data slots.
enum { ALGO_MAGIC_SLOT, ALGO_ALIGN, ALGO_M, ALGO_N, ALGO_K, ALGO_OPS };

// Prints the one stderr line that says what was wrong and returns the status to report.
static cublasStatus_t fail(cublasStatus_t status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static cublasStatus_t fail(cublasStatus_t status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "cublaslt_emu: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    return status;
}
static const cublasStatus_t INVALID = CUBLAS_STATUS_INVALID_VALUE, UNSUPPORTED = CUBLAS_STATUS_NOT_SUPPORTED;

// The opaque handle, or NULL when it is NULL or not a live object of the expected kind.
template <typename T> static T* as(const void* handle, uint32_t magic) {
    T* obj = (T*)handle;
    return (obj != NULL && obj->magic == magic) ? obj : NULL;
}

template <typename T> static cublasStatus_t destroy(void* handle, uint32_t magic, const char* fn) {
    if (handle == NULL) return CUBLAS_STATUS_SUCCESS; // Destroy docs name no error for NULL
    T* obj = as<T>(handle, magic);
    if (obj == NULL) return fail(INVALID, "%s: not a live object of this kind", fn);
    obj->magic = 0;
    delete obj;
    return CUBLAS_STATUS_SUCCESS;
}

// SetAttribute docs: INVALID_VALUE if buf is NULL or sizeInBytes is not the attribute's size.
template <typename T>
static cublasStatus_t set_field(T* field, const void* buf, size_t size, const char* fn, const char* name) {
    if (buf == NULL) return fail(INVALID, "%s(%s): buf is NULL", fn, name);
    if (size != sizeof(T)) return fail(INVALID, "%s(%s): sizeInBytes %zu, expected %zu", fn, name, size, sizeof(T));
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

// Largest power of two (capped at 256, the preference default) dividing the address.
static uint32_t alignment_of(const void* p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p % a) != 0) a /= 2;
    return a;
}

static bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }      // input
static bool has_bgrad(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADB; } // output
static bool has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }   // output
static bool has_daux(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }     // input
static bool is_fused(uint32_t e) { return e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS; }
static uint64_t algo_ops(const Desc* d) { return (uint64_t)d->transa | (uint64_t)d->transb << 8 | (uint64_t)d->epilogue << 16; }

static double gelu_tanh(double x) {
    const double s = 0.7978845608028654; // sqrt(2/pi)
    return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}

static double gelu_tanh_derivative(double x) {
    const double s = 0.7978845608028654;
    double th = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

static cublasStatus_t check_layout(const Layout* l, const char* fn, const char* name) {
    typedef unsigned long long ull;
    if (l == NULL) return fail(INVALID, "%s: %s is NULL or not a layout", fn, name);
    if (l->type != CUDA_R_16BF) return fail(UNSUPPORTED, "%s: %s type %d, only CUDA_R_16BF is modelled", fn, name, (int)l->type);
    if (l->rows > INT32_MAX || l->cols > INT32_MAX) // LAYOUT_ROWS/COLS docs: "usually" int32 only
        return fail(UNSUPPORTED, "%s: %s is %llu x %llu, beyond int32", fn, name, (ull)l->rows, (ull)l->cols);
    // LAYOUT_LD docs (column order): non-negative and >= rows, so that columns do not overlap.
    if (l->ld < 1 || (uint64_t)l->ld < l->rows)
        return fail(INVALID, "%s: %s ld %lld < rows %llu", fn, name, (long long)l->ld, (ull)l->rows);
    return CUBLAS_STATUS_SUCCESS;
}

// Everything AlgoGetHeuristic and Matmul can check without the data pointers.
static cublasStatus_t check_problem(const Desc* d, const void* a, const void* b, const void* c, const void* dd,
                                    const char* fn, Problem* p) {
    typedef long long ll;
    if (d == NULL) return fail(INVALID, "%s: matmul desc is NULL or not a desc", fn);
    const Layout *lA = as<Layout>(a, LAYOUT_MAGIC), *lB = as<Layout>(b, LAYOUT_MAGIC);
    const Layout *lC = as<Layout>(c, LAYOUT_MAGIC), *lD = as<Layout>(dd, LAYOUT_MAGIC);
    cublasStatus_t s;
    if ((s = check_layout(lA, fn, "Adesc")) || (s = check_layout(lB, fn, "Bdesc")) ||
        (s = check_layout(lC, fn, "Cdesc")) || (s = check_layout(lD, fn, "Ddesc"))) return s;
    for (int32_t op : {d->transa, d->transb}) // emulation: real types need only N and T
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return fail(UNSUPPORTED, "%s: transa/transb %d not modelled", fn, op);
    const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
    p->m = (ll)lD->rows; p->n = (ll)lD->cols; p->k = (ll)(ta ? lA->rows : lA->cols);
    const ll a_m = (ll)(ta ? lA->cols : lA->rows), b_k = (ll)(tb ? lB->cols : lB->rows), b_n = (ll)(tb ? lB->rows : lB->cols);
    if (a_m != p->m || b_k != p->k || b_n != p->n)
        return fail(INVALID, "%s: op(A) is %lld x %lld and op(B) %lld x %lld, but D is %lld x %lld (need (m,k) (k,n) -> (m,n))",
                    fn, a_m, (ll)p->k, b_k, b_n, (ll)p->m, (ll)p->n);
    if (lC->rows != lD->rows || lC->cols != lD->cols) // cublasLtMatmul docs: same rows and columns
        return fail(INVALID, "%s: C is %lld x %lld but D is %lld x %lld", fn, (ll)lC->rows, (ll)lC->cols, (ll)p->m, (ll)p->n);
    const uint32_t e = d->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(e) && !has_aux(e) && !has_daux(e) && !has_bgrad(e)) // emulation
        return fail(UNSUPPORTED, "%s: epilogue %u not modelled (DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, "
                    "BGRADB are)", fn, e);
    // Emulation: cuBLASLt ignores a bias or aux pointer its epilogue does not use; here it is a bug.
    const bool bias_used = has_bias(e) || has_bgrad(e), aux_used = has_aux(e) || has_daux(e);
    if (bias_used != (d->bias != NULL))
        return fail(INVALID, "%s: epilogue %u %s a bias pointer, but it is %s", fn, e, bias_used ? "needs" : "ignores",
                    d->bias ? "set" : "NULL");
    if (bias_used && d->bias_type != -1 && d->bias_type != CUDA_R_16BF)
        return fail(UNSUPPORTED, "%s: bias data type %d, only CUDA_R_16BF is modelled", fn, d->bias_type);
    if (aux_used != (d->aux != NULL))
        return fail(INVALID, "%s: epilogue %u %s an aux pointer, but it is %s", fn, e, aux_used ? "needs" : "ignores",
                    d->aux ? "set" : "NULL");
    if (aux_used && (d->aux_ld < p->m || d->aux_ld % 8 != 0)) // EPILOGUE_AUX_LD docs, GELU case
        return fail(INVALID, "%s: EPILOGUE_AUX_LD %lld must be >= rows of D (%lld) and divisible by 8", fn,
                    (ll)d->aux_ld, (ll)p->m);
    return CUBLAS_STATUS_SUCCESS;
}

// Bytes spanned by a column-major (rows, cols, ld) bf16 matrix; 0 if empty.
static size_t span_bytes(uint64_t rows, uint64_t cols, int64_t ld) {
    return (rows == 0 || cols == 0) ? 0 : ((cols - 1) * (uint64_t)ld + rows) * sizeof(__nv_bfloat16);
}
static bool overlap(const void* p, size_t pn, const void* q, size_t qn) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return p != NULL && q != NULL && pn > 0 && qn > 0 && a < b + qn && b < a + pn;
}

} // namespace cublaslt_emu

extern "C" {

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized (NULL or destroyed handle)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was passed (see the cublaslt_emu line above)";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported by the CPU emulation (see the cublaslt_emu line above)";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    default: return "unknown cuBLAS status";
    }
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
    if (lightHandle == NULL) return cublaslt_emu::fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: lightHandle is NULL");
    *lightHandle = new cublasLtContext{cublaslt_emu::HANDLE_MAGIC};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
    using namespace cublaslt_emu;
    if (as<cublasLtContext>(lightHandle, HANDLE_MAGIC) == NULL)
        return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: handle is NULL or not a handle");
    return destroy<cublasLtContext>(lightHandle, HANDLE_MAGIC, "cublasLtDestroy");
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
    using namespace cublaslt_emu;
    if (matmulDesc == NULL) return fail(INVALID, "cublasLtMatmulDescCreate: matmulDesc is NULL");
    if (computeType != CUBLAS_COMPUTE_32F || scaleType != CUDA_R_32F) // emulation
        return fail(UNSUPPORTED, "cublasLtMatmulDescCreate: compute type %d / scale type %d, only CUBLAS_COMPUTE_32F / "
                    "CUDA_R_32F are modelled", (int)computeType, (int)scaleType);
    // Defaults from cublasLtMatmulDescAttributes_t.
    Desc* d = new Desc{DESC_MAGIC, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, -1, NULL, 0};
    *matmulDesc = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    return cublaslt_emu::destroy<cublaslt_emu::Desc>(matmulDesc, cublaslt_emu::DESC_MAGIC, "cublasLtMatmulDescDestroy");
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t sizeInBytes) {
    using namespace cublaslt_emu;
    const char* fn = "cublasLtMatmulDescSetAttribute";
    Desc* d = as<Desc>(matmulDesc, DESC_MAGIC);
    if (d == NULL) return fail(INVALID, "%s: not a matmul desc", fn);
    switch (attr) { // storage types from the cublasLtMatmulDescAttributes_t docs
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_field(&d->transa, buf, sizeInBytes, fn, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_field(&d->transb, buf, sizeInBytes, fn, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_field(&d->epilogue, buf, sizeInBytes, fn, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_field(&d->bias, buf, sizeInBytes, fn, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_field(&d->bias_type, buf, sizeInBytes, fn, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_field(&d->aux, buf, sizeInBytes, fn, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_field(&d->aux_ld, buf, sizeInBytes, fn, "EPILOGUE_AUX_LD");
    // Emulation: cuBLASLt knows more attributes; accepting one without modelling it would lie.
    default: return fail(UNSUPPORTED, "%s: attribute %d is not modelled", fn, (int)attr);
    }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
    using namespace cublaslt_emu;
    if (matLayout == NULL) return fail(INVALID, "cublasLtMatrixLayoutCreate: matLayout is NULL");
    // Its docs name no validation error; type and ld are checked by heuristic and matmul.
    *matLayout = (cublasLtMatrixLayout_t) new Layout{LAYOUT_MAGIC, type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    return cublaslt_emu::destroy<cublaslt_emu::Layout>(matLayout, cublaslt_emu::LAYOUT_MAGIC, "cublasLtMatrixLayoutDestroy");
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    using namespace cublaslt_emu;
    if (pref == NULL) return fail(INVALID, "cublasLtMatmulPreferenceCreate: pref is NULL");
    // Defaults from cublasLtMatmulPreferenceAttributes_t: no workspace, 256-byte alignment.
    *pref = (cublasLtMatmulPreference_t) new Pref{PREF_MAGIC, 0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    return cublaslt_emu::destroy<cublaslt_emu::Pref>(pref, cublaslt_emu::PREF_MAGIC, "cublasLtMatmulPreferenceDestroy");
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
    using namespace cublaslt_emu;
    const char* fn = "cublasLtMatmulPreferenceSetAttribute";
    Pref* p = as<Pref>(pref, PREF_MAGIC);
    if (p == NULL) return fail(INVALID, "%s: not a preference", fn);
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_field(&p->max_workspace, buf, sizeInBytes, fn, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_field(&p->align[0], buf, sizeInBytes, fn, "MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_field(&p->align[1], buf, sizeInBytes, fn, "MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_field(&p->align[2], buf, sizeInBytes, fn, "MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_field(&p->align[3], buf, sizeInBytes, fn, "MIN_ALIGNMENT_D_BYTES");
    default: return fail(UNSUPPORTED, "%s: attribute %d is not modelled", fn, (int)attr); // emulation
    }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                           cublasLtMatmulDesc_t operationDesc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference,
                                                           int requestedAlgoCount,
                                                           cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                           int* returnAlgoCount) {
    using namespace cublaslt_emu;
    const char* fn = "cublasLtMatmulAlgoGetHeuristic";
    if (as<cublasLtContext>(lightHandle, HANDLE_MAGIC) == NULL) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: bad handle", fn);
    const Pref* pref = as<Pref>(preference, PREF_MAGIC);
    if (pref == NULL) return fail(INVALID, "%s: preference is NULL or not a preference", fn);
    if (requestedAlgoCount <= 0 || heuristicResultsArray == NULL || returnAlgoCount == NULL)
        return fail(INVALID, "%s: requestedAlgoCount %d must be > 0, results and count non-NULL", fn, requestedAlgoCount);
    const Desc* d = as<Desc>(operationDesc, DESC_MAGIC);
    Problem p;
    cublasStatus_t s = check_problem(d, Adesc, Bdesc, Cdesc, Ddesc, fn, &p);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const char* no_fused = getenv("EMU_CUBLASLT_NO_FUSED");
    if (no_fused != NULL && strcmp(no_fused, "1") == 0 && is_fused(d->epilogue)) { // as cuBLASLt may answer
        *returnAlgoCount = 0;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    // The algo may assume every operand is as aligned as promised here: the preferences, and the
    // bias/aux pointers in the desc now (the docs say the heuristic reads them for alignment).
    uint64_t align = 256;
    for (uint32_t a : pref->align) align = a < align ? a : align;
    if (d->bias != NULL && alignment_of(d->bias) < align) align = alignment_of(d->bias);
    if (d->aux != NULL && alignment_of(d->aux) < align) align = alignment_of(d->aux);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof(r));
    const uint64_t slots[] = {ALGO_MAGIC, align, (uint64_t)p.m, (uint64_t)p.n, (uint64_t)p.k, algo_ops(d)};
    memcpy(r.algo.data, slots, sizeof(slots));
    r.workspaceSize = 0; // the CPU model needs none, so any MAX_WORKSPACE_BYTES fits
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    heuristicResultsArray[0] = r;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                           void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
    using namespace cublaslt_emu;
    typedef unsigned long long ull;
    (void)workspace; (void)workspaceSizeInBytes; // synchronous and workspace-free
#ifdef EMU_H
    emu::stream_issue(stream); // in the CUDA emulation: after the stream's pending work
#else
    (void)stream;
#endif
    const char* fn = "cublasLtMatmul";
    if (as<cublasLtContext>(lightHandle, HANDLE_MAGIC) == NULL) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: bad handle", fn);
    const Desc* d = as<Desc>(computeDesc, DESC_MAGIC);
    Problem p;
    cublasStatus_t s = check_problem(d, Adesc, Bdesc, Cdesc, Ddesc, fn, &p);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const Layout *lA = (const Layout*)Adesc, *lB = (const Layout*)Bdesc, *lC = (const Layout*)Cdesc, *lD = (const Layout*)Ddesc;
    if (alpha == NULL || beta == NULL || A == NULL || B == NULL || D == NULL)
        return fail(INVALID, "%s: alpha, beta, A, B and D must be non-NULL", fn);
    const float alpha_f = *(const float*)alpha, beta_f = *(const float*)beta; // CUDA_R_32F, host pointer mode
    if (beta_f != 0.0f && C == NULL) return fail(INVALID, "%s: beta != 0 but C is NULL", fn);
    if (C == D && lC->ld != lD->ld) // cublasLtMatmul docs: in place (C == D) needs Cdesc == Ddesc
        return fail(INVALID, "%s: C == D (in place) but ldc %lld != ldd %lld", fn, (long long)lC->ld, (long long)lD->ld);

    // Emulation: an output overlapping an input (other than C == D) is undefined on a GPU.
    const uint32_t ep = d->epilogue;
    const size_t bias_bytes = d->bias ? (size_t)(ep == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m) * sizeof(__nv_bfloat16) : 0;
    const size_t aux_bytes = d->aux ? span_bytes((uint64_t)p.m, (uint64_t)p.n, d->aux_ld) : 0;
    struct Span { const char* name; const void* p; size_t bytes; };
    const Span ins[5] = {{"A", A, span_bytes(lA->rows, lA->cols, lA->ld)},
                         {"B", B, span_bytes(lB->rows, lB->cols, lB->ld)},
                         {"bias", has_bias(ep) ? d->bias : NULL, bias_bytes},
                         {"aux", has_daux(ep) ? d->aux : NULL, aux_bytes},
                         {"C", (beta_f != 0.0f && C != D) ? C : NULL, span_bytes(lC->rows, lC->cols, lC->ld)}};
    const Span outs[3] = {{"D", D, span_bytes(lD->rows, lD->cols, lD->ld)},
                          {"aux", has_aux(ep) ? d->aux : NULL, aux_bytes},
                          {"bias gradient", has_bgrad(ep) ? d->bias : NULL, bias_bytes}};
    for (const Span& o : outs)
        for (const Span& i : ins)
            if (overlap(o.p, o.bytes, i.p, i.bytes)) return fail(INVALID, "%s: output %s overlaps input %s", fn, o.name, i.name);
    for (int x = 0; x < 3; x++)
        for (int y = x + 1; y < 3; y++)
            if (overlap(outs[x].p, outs[x].bytes, outs[y].p, outs[y].bytes))
                return fail(INVALID, "%s: output %s overlaps output %s", fn, outs[x].name, outs[y].name);

    if (algo != NULL) { // a NULL algo makes the library run its own heuristic (cublasLtMatmul docs)
        const uint64_t* a = algo->data;
        if (a[ALGO_MAGIC_SLOT] != ALGO_MAGIC) return fail(INVALID, "%s: algo was not produced by AlgoGetHeuristic", fn);
        // Emulation: an algo reused for another problem means a plan-cache key bug in the caller.
        if (a[ALGO_M] != (uint64_t)p.m || a[ALGO_N] != (uint64_t)p.n || a[ALGO_K] != (uint64_t)p.k || a[ALGO_OPS] != algo_ops(d))
            return fail(INVALID, "%s: algo was chosen for m=%llu n=%llu k=%llu ops=%#llx, used for m=%lld n=%lld k=%lld ops=%#llx",
                        fn, (ull)a[ALGO_M], (ull)a[ALGO_N], (ull)a[ALGO_K], (ull)a[ALGO_OPS], (long long)p.m, (long long)p.n,
                        (long long)p.k, (ull)algo_ops(d));
        const void* ptrs[6] = {A, B, beta_f != 0.0f ? C : NULL, D, d->bias, d->aux};
        static const char* const names[6] = {"A", "B", "C", "D", "bias", "aux"};
        for (int i = 0; i < 6; i++) // emulation: the algo may rely on the alignment it was chosen for
            if (ptrs[i] != NULL && alignment_of(ptrs[i]) < a[ALGO_ALIGN])
                return fail(INVALID, "%s: %s %p is %u-byte aligned, but the algo was chosen for %llu", fn, names[i], ptrs[i],
                            alignment_of(ptrs[i]), (ull)a[ALGO_ALIGN]);
    }

    const int64_t m = p.m, n = p.n, k = p.k;
    const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T, bias = has_bias(ep), gelu = has_aux(ep);
    const bool dgelu = has_daux(ep), dgelu_bgrad = ep == CUBLASLT_EPILOGUE_DGELU_BGRAD, bgradb = ep == CUBLASLT_EPILOGUE_BGRADB;
    const __nv_bfloat16 *a = (const __nv_bfloat16*)A, *b = (const __nv_bfloat16*)B, *c = (const __nv_bfloat16*)C;
    const __nv_bfloat16* bias_v = (const __nv_bfloat16*)d->bias;
    __nv_bfloat16 *out = (__nv_bfloat16*)D, *aux = (__nv_bfloat16*)d->aux;
    // Pack op(A) rows and op(B) columns contiguously over k (bf16 -> float is exact).
    std::vector<float> pa((size_t)(m * k)), pb((size_t)(n * k));
    for (int64_t i = 0; i < m; i++)
        for (int64_t l = 0; l < k; l++) pa[i * k + l] = __bfloat162float(a[ta ? l + i * lA->ld : i + l * lA->ld]);
    for (int64_t j = 0; j < n; j++)
        for (int64_t l = 0; l < k; l++) pb[j * k + l] = __bfloat162float(b[tb ? j + l * lB->ld : l + j * lB->ld]);
    std::vector<double> dvalue(dgelu_bgrad ? (size_t)(m * n) : 0); // D before rounding, for DGELU_BGRAD
    const bool fp32_accumulate = cublaslt_emu_fp32_accumulate();
#ifdef _OPENMP
#pragma omp parallel for
#endif
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < m; i++) {
            double acc = 0.0;
            if (fp32_accumulate) { // EMU_DEVICE_MATH=1: the tensor cores' fp32 accumulator
                float acc_f = 0.0f;
                for (int64_t l = 0; l < k; l++) acc_f += pa[i * k + l] * pb[j * k + l];
                acc = acc_f;
            } else {
                for (int64_t l = 0; l < k; l++) acc += (double)pa[i * k + l] * (double)pb[j * k + l];
            }
            double x = (double)alpha_f * acc;
            // C[i,j] is read before D[i,j] is written: with C == D (same ld) it is the same element.
            if (beta_f != 0.0f) x += (double)beta_f * (double)__bfloat162float(c[i + j * lC->ld]);
            if (bias) x += (double)__bfloat162float(bias_v[i]);
            if (gelu) {
                aux[i + j * d->aux_ld] = __double2bfloat16(x);
                x = gelu_tanh(x);
            }
            if (dgelu) x *= gelu_tanh_derivative((double)__bfloat162float(aux[i + j * d->aux_ld]));
            if (dgelu_bgrad) dvalue[(size_t)(i + j * m)] = x;
            out[i + j * lD->ld] = __double2bfloat16(x);
        }
    }
    // Bias gradients, after the GEMM (single-threaded: each is one fixed-order sum).
    __nv_bfloat16* grad = (__nv_bfloat16*)d->bias;
    if (dgelu_bgrad)
        for (int64_t i = 0; i < m; i++) {
            double sum = 0.0;
            for (int64_t j = 0; j < n; j++) sum += dvalue[(size_t)(i + j * m)];
            grad[i] = __double2bfloat16(sum);
        }
    if (bgradb)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0.0;
            for (int64_t l = 0; l < k; l++) sum += (double)pb[j * k + l];
            grad[j] = __double2bfloat16(sum);
        }
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

#endif // DEV_EMU_CUBLASLT_EMU_H
