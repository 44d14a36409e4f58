/*
 * emu_wmma.h: nvcuda::wmma for the emulation (see emu.h for the model; CUDA C++ Programming
 * Guide, "Warp Matrix Functions"): bf16 16x16x16 tiles with fp32 accumulate. A fragment holds
 * the whole tile per thread, row-major as floats (bf16 values are exact in fp32);
 * load_matrix_sync and store_matrix_sync check the documented 256-bit pointer alignment and an
 * ldm that is a multiple of 16 bytes; store_matrix_sync writes only the calling lane's share of
 * the elements, so reading the tile back before __syncwarp sees stale data, as it may on the GPU.
 * Included by emu.h after emu_device.h (it uses emu::state.current and emu::fail).
 */
#ifndef EMU_WMMA_H
#define EMU_WMMA_H
#ifndef EMU_H
#error "dev/emu/emu_wmma.h is part of the CPU emulation of CUDA; include dev/emu/emu.h"
#endif

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct fragment_shape;
template <int M, int N, int K> struct fragment_shape<matrix_a, M, N, K> { static const int rows = M, cols = K; };
template <int M, int N, int K> struct fragment_shape<matrix_b, M, N, K> { static const int rows = K, cols = N; };
template <int M, int N, int K> struct fragment_shape<accumulator, M, N, K> { static const int rows = M, cols = N; };

// The whole tile, row-major, as floats (bf16 values are exact in fp32).
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static const int rows = fragment_shape<Use, M, N, K>::rows, cols = fragment_shape<Use, M, N, K>::cols;
    float v[rows * cols];
};

static inline void check_pointer(const void* p, unsigned ldm, size_t element_bytes, const char* what) {
    if ((uintptr_t)p % 32 != 0) emu::fail("%s: pointer not 256-bit aligned", what);
    if ((ldm * element_bytes) % 16 != 0) emu::fail("%s: ldm not a multiple of 16 bytes", what);
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
static inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
    for (float& x : f.v) x = value;
}

// matrix_a / matrix_b from bf16 memory, layout from the fragment type.
template <typename Use, int M, int N, int K, typename Layout>
static inline void load_matrix_sync(fragment<Use, M, N, K, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
                                    unsigned ldm) {
    check_pointer(p, ldm, 2, "wmma::load_matrix_sync");
    typedef fragment<Use, M, N, K, __nv_bfloat16, Layout> F;
    for (int i = 0; i < F::rows; i++)
        for (int j = 0; j < F::cols; j++)
            f.v[i * F::cols + j] = __bfloat162float(std::is_same<Layout, row_major>::value ? p[(size_t)i * ldm + j]
                                                                                           : p[(size_t)j * ldm + i]);
}

template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                                    layout_t layout) {
    check_pointer(p, ldm, 4, "wmma::load_matrix_sync (accumulator)");
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            f.v[i * N + j] = layout == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
}

// Each lane writes elements lane, lane + 32, ...: the tile is complete only after __syncwarp.
template <int M, int N, int K>
static inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                                     layout_t layout) {
    check_pointer(p, ldm, 4, "wmma::store_matrix_sync");
    for (int e = emu::state.current->lane; e < M * N; e += 32) {
        int i = e / N, j = e % N;
        if (layout == mem_row_major) p[(size_t)i * ldm + j] = f.v[e];
        else p[(size_t)j * ldm + i] = f.v[e];
    }
}

template <int M, int N, int K, typename LayoutA, typename LayoutB>
static inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                            const fragment<matrix_a, M, N, K, __nv_bfloat16, LayoutA>& a,
                            const fragment<matrix_b, M, N, K, __nv_bfloat16, LayoutB>& b,
                            const fragment<accumulator, M, N, K, float>& c) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.v[i * N + j];
            for (int k = 0; k < K; k++) s += a.v[i * K + k] * b.v[k * N + j];
            out[i * N + j] = s;
        }
    memcpy(d.v, out, sizeof(out));
}
} // namespace wmma
} // namespace nvcuda

#endif // EMU_WMMA_H
