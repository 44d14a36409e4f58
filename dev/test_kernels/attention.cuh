/*
 * test_kernels/attention.cuh: causal attention (kernels/attention.cuh: the flash kernels, and with
 * USE_CUDNN=1 the trainer's cuDNN path) against cpu/attention.h: out and lse (fp32, (B, NH, T),
 * against a double-precision reference) forward, dqkv backward; qkv is (B, T, 3C) bf16. Shapes
 * cover head sizes 16 and 64, partial and full tiles, T up to 1024.
 * Included by dev/test_kernels.cu (after the kernels, the CPU twins and its host helpers:
 * random_bf16, device_copy_of, download_*, close_enough, report, failures, BF16_RTOL); the
 * tolerances follow the rules in its header.
 */

// lse reference in double: log sum_{t2 <= t} exp(q.k / sqrt(HS)), layout (B,NH,T).
static void attention_lse_reference(float* lse, const float* qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                double m = -INFINITY, s = 0.0;
                double* dots = (double*)malloc((size_t)(t + 1) * sizeof(double));
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    double d = 0.0;
                    for (int i = 0; i < HS; i++) d += (double)q[i] * k[i];
                    dots[t2] = d / sqrt((double)HS);
                    if (dots[t2] > m) m = dots[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) s += exp(dots[t2] - m);
                lse[((size_t)b * NH + h) * T + t] = (float)(m + log(s));
                free(dots);
            }
}

// One attention implementation: forward, then backward (scratch: what it asks for, may be NULL).
typedef struct {
    const char* name;
    void (*forward)(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH, cudaStream_t stream);
    void (*backward)(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                     int B, int T, int C, int NH, cudaStream_t stream);
    size_t (*scratch_floats)(int B, int T, int C, int NH);
} AttentionImplementation;

static const AttentionImplementation attention_flash = {"flash", attention_forward_flash_cuda,
                                                        attention_backward_flash_cuda, attention_backward_scratch_floats};
#ifdef USE_CUDNN
// What the trainer runs with USE_CUDNN=1: cuDNN's SDPA where it is used (B > 1, T >= 64, a graph
// built), the flash kernels for the other shapes and for any graph cuDNN could not build.
static const AttentionImplementation attention_cudnn = {"cudnn", attention_forward_cuda, attention_backward_cuda,
                                                        attention_scratch_floats};
#endif

static void test_attention_case(const AttentionImplementation* impl, const char* shape, int B, int T, int C, int NH) {
    char name[96];
    snprintf(name, sizeof(name), "attention_%s_%s", impl->name, shape);
    size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    size_t n_lse = (size_t)B * NH * T;
    bf16 *qkv_b = (bf16*)malloc(n_qkv * 2), *dout_b = (bf16*)malloc(n_out * 2);
    float *qkv = (float*)malloc(n_qkv * 4), *dout = (float*)malloc(n_out * 4), *out = (float*)malloc(n_out * 4);
    float *att = (float*)malloc(n_att * 4), *dqkv = (float*)calloc(n_qkv, 4), *lse = (float*)malloc(n_lse * 4);
    float *g_out = (float*)malloc(n_out * 4), *g_lse = (float*)malloc(n_lse * 4), *g_dqkv = (float*)malloc(n_qkv * 4);
    // q, k scaled by 2 so scores spread over a few units and the softmax is far from uniform
    random_bf16(qkv_b, qkv, n_qkv, 2.0f);
    random_bf16(dout_b, dout, n_out, 1.0f);
    attention_forward(out, att, qkv, B, T, C, NH);
    // The GPU backward reads the forward's bf16 output; give the CPU twin nothing different:
    // its backward uses att (exact probabilities), which is what the GPU recomputes from lse.
    attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    attention_lse_reference(lse, qkv, B, T, C, NH);

    bf16* d_qkv = (bf16*)device_copy_of(qkv_b, n_qkv * 2);
    bf16* d_dout = (bf16*)device_copy_of(dout_b, n_out * 2);
    bf16 *d_out, *d_dqkv;
    float *d_lse, *d_scratch;
    CUDA_CHECK(cudaMalloc(&d_out, n_out * 2));
    CUDA_CHECK(cudaMalloc(&d_dqkv, n_qkv * 2));
    CUDA_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * 2)); // NaN pattern: every element must be written
    CUDA_CHECK(cudaMalloc(&d_lse, n_lse * 4));
    CUDA_CHECK(cudaMalloc(&d_scratch, impl->scratch_floats(B, T, C, NH) * 4));
    impl->forward(d_out, d_lse, d_qkv, B, T, C, NH, 0);
    impl->backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    download_bf16(g_out, d_out, n_out);
    download_f32(g_lse, d_lse, n_lse);
    download_bf16(g_dqkv, d_dqkv, n_qkv);

    int reported = 0, ok = 1;
    // out = sum_j P_j v_j / l with P_j rounded to bf16 (relative 2^-9 each) before the product:
    // error <= 2^-9 sum_j P_j |v_j| / l <= 2^-9 max|v|, plus the output's own rounding (2^-9 rel).
    // |v| <= 2: atol = 2^-8 * 2 covers the first with a factor of 2 margin. Measured needed
    // 1.9e-3 (hs64 T100): atol 7.8e-3 is 4x that; kept (mma's accumulation order is the device's).
    ok &= close_enough(name, "out", g_out, out, n_out, BF16_RTOL, 2.0f * BF16_RTOL, &reported);
    // lse: fp32 online max/sum, exp2f/log2f (few ulp), values ~1..10. Measured 1.43e-6 absolute
    // at most (exact and device math alike; 1.5 fp32 ulps at 8..16): atol 1e-5 (7x; was rtol
    // 1e-5 + atol 1e-4, chosen before measuring), no relative part.
    ok &= close_enough(name, "lse", g_lse, lse, n_lse, 0.0f, 1e-5f, &reported);
    // dqkv chains bf16 roundings: P and dS (2^-9 each), out (feeds D = rowsum(dO*out), 2^-9),
    // and the output (2^-9): ~4 * 2^-9 = 2^-7 relative to the *terms* of each sum, which cancel,
    // so the absolute part is taken against the tensor's largest magnitude. Measured needed
    // 1.6e-3 of max|dqkv| (hs16 T32; 1.2e-3 at T1024): atol 2^-7 * max|dqkv|, 5x that (was
    // 2^-6, 10x).
    float scale = max_abs(dqkv, n_qkv);
    ok &= close_enough(name, "dqkv", g_dqkv, dqkv, n_qkv, 2.0f * BF16_RTOL, 2.0f * BF16_RTOL * scale, &reported);
    // Measured errors, printed so the README and reviews can quote them (max |gpu - cpu|, and
    // for dqkv relative to max|dqkv|).
    float e_out = 0.0f, e_lse = 0.0f, e_dqkv = 0.0f;
    for (size_t i = 0; i < n_out; i++) e_out = fmaxf(e_out, fabsf(g_out[i] - out[i]));
    for (size_t i = 0; i < n_lse; i++) e_lse = fmaxf(e_lse, fabsf(g_lse[i] - lse[i]));
    for (size_t i = 0; i < n_qkv; i++) e_dqkv = fmaxf(e_dqkv, fabsf(g_dqkv[i] - dqkv[i]));
    printf("INFO %s: max abs error out %.3g, lse %.3g, dqkv %.3g (= %.3g of max|dqkv| %.3g)\n", name, e_out, e_lse,
           e_dqkv, e_dqkv / scale, scale);
    report(name, ok);

    cudaFree(d_qkv); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dqkv); cudaFree(d_lse); cudaFree(d_scratch);
    free(qkv_b); free(dout_b); free(qkv); free(dout); free(out); free(att); free(dqkv); free(lse);
    free(g_out); free(g_lse); free(g_dqkv);
}

static void test_attention(const AttentionImplementation* impl) {
    // HS = 64 with T = 100: a partial last tile, two query/key tiles, causal skipping
    test_attention_case(impl, "hs64_T100", 2, 100, 128, 2);
    // HS = 16 at the reference model's shape (C = 64, NH = 4, T = 32): one partial tile
    test_attention_case(impl, "hs16_T32", 4, 32, 64, 4);
    // HS = 16, T = 200: four tiles, the last partial (the reference model's head size, longer)
    test_attention_case(impl, "hs16_T200", 1, 200, 32, 2);
    // HS = 64, T = 256: four full tiles
    test_attention_case(impl, "hs64_T256", 1, 256, 192, 3);
    // HS = 64, T = 1024 (GPT-2's context, the d12 run's length): 16 key tiles of online softmax
    test_attention_case(impl, "hs64_T1024", 1, 1024, 64, 1);
}
