/*
 * test_kernels/gelu_residual.cuh: the pointwise kernels, GELU (kernels/gelu.cuh) and the residual
 * add (kernels/residual.cuh), forward and backward, against cpu/gelu.h and cpu/residual.h (8000
 * bf16 elements).
 * Included by dev/test_kernels.cu (after the kernels, the CPU twins and its host helpers:
 * random_bf16, device_copy_of, download_*, close_enough, report, failures, BF16_RTOL); the
 * tolerances follow the rules in its header.
 */

static void test_gelu_residual(void) {
    const char* name = "gelu_residual_forward_backward";
    const size_t N = 8 * 1000;
    bf16 *x_b = (bf16*)malloc(N * 2), *y_b = (bf16*)malloc(N * 2), *d_b = (bf16*)malloc(N * 2);
    float *x = (float*)malloc(N * 4), *y = (float*)malloc(N * 4), *d = (float*)malloc(N * 4);
    float *gelu_ref = (float*)malloc(N * 4), *dgelu_ref = (float*)calloc(N, 4), *sum_ref = (float*)malloc(N * 4);
    float *da_ref = (float*)malloc(N * 4), *db_ref = (float*)malloc(N * 4);
    float *g1 = (float*)malloc(N * 4), *g2 = (float*)malloc(N * 4), *g3 = (float*)malloc(N * 4);
    float *g4 = (float*)malloc(N * 4), *g5 = (float*)malloc(N * 4);
    random_bf16(x_b, x, N, 4.0f); // GELU's curved part lives in [-4, 4]
    random_bf16(y_b, y, N, 1.0f);
    random_bf16(d_b, d, N, 1.0f);
    gelu_forward(gelu_ref, x, N);
    gelu_backward(dgelu_ref, x, d, N); // from zero: the GPU kernel overwrites
    residual_forward(sum_ref, x, y, N);
    memcpy(da_ref, x, N * 4);
    memcpy(db_ref, y, N * 4);
    residual_backward(da_ref, db_ref, d, N);

    bf16* d_x = (bf16*)device_copy_of(x_b, N * 2);
    bf16* d_y = (bf16*)device_copy_of(y_b, N * 2);
    bf16* d_d = (bf16*)device_copy_of(d_b, N * 2);
    bf16 *d_o1, *d_o2, *d_o3;
    CUDA_CHECK(cudaMalloc(&d_o1, N * 2));
    CUDA_CHECK(cudaMalloc(&d_o2, N * 2));
    CUDA_CHECK(cudaMalloc(&d_o3, N * 2));
    gelu_forward_cuda(d_o1, d_x, N, 0);
    gelu_backward_cuda(d_o2, d_x, d_d, N, 0);
    residual_forward_cuda(d_o3, d_x, d_y, N, 0);
    residual_backward_cuda(d_x, d_y, d_d, N, 0); // in place: x += d, y += d
    CUDA_CHECK(cudaDeviceSynchronize());
    download_bf16(g1, d_o1, N);
    download_bf16(g2, d_o2, N);
    download_bf16(g3, d_o3, N);
    download_bf16(g4, d_x, N);
    download_bf16(g5, d_y, N);

    int reported = 0, ok = 1;
    // each output is one fp32 expression of bf16 inputs, rounded once; device tanhf is within
    // 2 ulp of the host's, so only the rounding shows. GELU: measured needed 0 (out), 2.6e-7
    // (dinp: its few-term polynomial contracts on the device, not in the twin): atol 1e-6, 4x.
    // residual: the twin's fp32 add of the same bf16 values, one rounding: measured needed 0,
    // atol 0 (any fp32 difference would be a bug).
    ok &= close_enough(name, "gelu_out", g1, gelu_ref, N, BF16_RTOL, 1e-6f, &reported);
    ok &= close_enough(name, "gelu_dinp", g2, dgelu_ref, N, BF16_RTOL, 1e-6f, &reported);
    ok &= close_enough(name, "residual_out", g3, sum_ref, N, BF16_RTOL, 0.0f, &reported);
    ok &= close_enough(name, "residual_da", g4, da_ref, N, BF16_RTOL, 0.0f, &reported);
    ok &= close_enough(name, "residual_db", g5, db_ref, N, BF16_RTOL, 0.0f, &reported);
    report(name, ok);

    cudaFree(d_x); cudaFree(d_y); cudaFree(d_d); cudaFree(d_o1); cudaFree(d_o2); cudaFree(d_o3);
    free(x_b); free(y_b); free(d_b); free(x); free(y); free(d); free(gelu_ref); free(dgelu_ref); free(sum_ref);
    free(da_ref); free(db_ref); free(g1); free(g2); free(g3); free(g4); free(g5);
}
