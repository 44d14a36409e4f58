/*
 * test_kernels/optimizer.cuh: the optimizer step's kernels: AdamW over a plan of segments
 * (kernels/adamw.cuh, against cpu/adamw.h), gradient accumulation across micro-steps
 * (kernels/grad_accum.cuh: fp32 set, add, add and round to bf16), and the global norm's squared
 * sums (kernels/global_norm.cuh, against cpu/global_norm.h; bf16 and fp32 inputs).
 * Included by dev/test_kernels.cu (after the kernels, the CPU twins and its host helpers:
 * random_bf16, device_copy_of, download_*, close_enough, report, failures, BF16_RTOL); the
 * tolerances follow the rules in its header.
 */

// AdamW over a plan of segments (kernels/adamw.cuh): three segments of odd lengths at different
// offsets in each of the five buffers (so an offset mix-up shows), weight decay on two of them,
// the gradient scale from the device clip kernel; against cpu/adamw.h segment by segment.
static void test_adamw(void) {
    const char* name = "adamw_multi_tensor_update";
    enum { S = 3 };
    const size_t len[S] = {10007, 4097, 300};
    const int decay[S] = {1, 0, 1};
    const size_t n = 16384; // each buffer holds every segment, at its own offsets
    const size_t off_p[S] = {0, 10007, 14200}, off_w[S] = {5000, 100, 16000}, off_g[S] = {300, 12000, 10500};
    bf16 *grads_b = (bf16*)malloc(n * 2);
    float *grads = (float*)malloc(n * 4), *master = (float*)malloc(n * 4), *m = (float*)malloc(n * 4);
    float *v = (float*)malloc(n * 4), *g_master = (float*)malloc(n * 4), *g_m = (float*)malloc(n * 4);
    float *g_v = (float*)malloc(n * 4), *g_params = (float*)malloc(n * 4);
    random_bf16(grads_b, grads, n, 0.1f); // fp32 gradients with bf16 values: any fp32 would do
    for (size_t i = 0; i < n; i++) {
        master[i] = random_uniform();
        m[i] = 0.01f * random_uniform();
        v[i] = 1e-4f * (random_uniform() + 1.0f);
    }
    float* d_master = (float*)device_copy_of(master, n * 4);
    float* d_m = (float*)device_copy_of(m, n * 4);
    float* d_v = (float*)device_copy_of(v, n * 4);
    float* d_grads = (float*)device_copy_of(grads, n * 4);
    bf16* d_params;
    CUDA_CHECK(cudaMalloc(&d_params, n * 2));
    CUDA_CHECK(cudaMemset(d_params, 0xff, n * 2)); // NaN pattern: what the update does not own stays NaN
    AdamWSegment segments[S];
    for (int k = 0; k < S; k++) segments[k] = AdamWSegment{off_p[k], off_w[k], off_g[k], len[k], 1000u * k, decay[k]};
    AdamWPlan plan;
    adamw_plan_build(&plan, segments, S);
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    const int t = 3;
    // Gradient scale: norm 4 with clip 1 and 2 ranks (the summed gradient's squared norm is
    // (2 * 4)^2 = 64): min(1, 1/(4 + 1e-6)) / 2.
    float norm_sq_sum = 64.0f, *d_norm = (float*)device_copy_of(&norm_sq_sum, 4), *d_scale, g_scale;
    CUDA_CHECK(cudaMalloc(&d_scale, 4));
    adamw_grad_scale_cuda(d_scale, d_norm, 1.0f, 0.5f, 0);
    CUDA_CHECK(cudaMemcpy(&g_scale, d_scale, 4, cudaMemcpyDeviceToHost));
    float want_scale = adamw_grad_scale(64.0, 1.0f, 0.5f);
    // The offload optimizer's host update (cpu/adamw.h adamw_update_mixed, -zo cpu) from the same
    // state, with the kernel's seed and element indices: compared bit for bit below.
    float *h_master = (float*)malloc(n * 4), *h_m = (float*)malloc(n * 4), *h_v = (float*)malloc(n * 4);
    uint16_t* h_params = (uint16_t*)calloc(n, 2);
    memcpy(h_master, master, n * 4); memcpy(h_m, m, n * 4); memcpy(h_v, v, n * 4);
    for (int k = 0; k < S; k++)
        adamw_update_mixed(h_params + off_p[k], h_master + off_w[k], grads + off_g[k], h_m + off_w[k], h_v + off_w[k], len[k],
                           lr, beta1, beta2, eps, decay[k] ? wd : 0.0f, want_scale, t, 1234u, 1000u * k);
    for (int k = 0; k < S; k++) // CPU twin, segment by segment (the buffers keep the segments' offsets)
        adamw_update_scalar(master + off_w[k], grads + off_g[k], m + off_w[k], v + off_w[k], len[k], lr, beta1, beta2, eps,
                            decay[k] ? wd : 0.0f, want_scale, t); // the scalar reference: the kernel's operations in its order
    adamw_update_cuda(&plan, 0, plan.num_chunks, d_params, d_master, d_grads, d_m, d_v, lr, beta1, beta2, eps, wd, d_scale, t,
                      1234u, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    download_f32(g_master, d_master, n);
    download_f32(g_m, d_m, n);
    download_f32(g_v, d_v, n);
    download_bf16(g_params, d_params, n);

    // -zo cpu's host AdamW against the device kernel: bit-identical (the same explicit roundings
    // and the same stochastic-rounding bits); before the explicit fmaf/__fmaf_rn, nvcc's
    // contraction could make them differ on a GPU while the emulation agreed.
    size_t bad = n;
    for (int k = 0; k < S && bad == n; k++)
        for (size_t i = 0; i < len[k] && bad == n; i++) {
            size_t w = off_w[k] + i, p = off_p[k] + i;
            uint32_t pb = (uint32_t)h_params[p] << 16;
            float hp;
            memcpy(&hp, &pb, 4);
            if (memcmp(&h_master[w], &g_master[w], 4) != 0 || memcmp(&h_m[w], &g_m[w], 4) != 0 ||
                memcmp(&h_v[w], &g_v[w], 4) != 0 || memcmp(&hp, &g_params[p], 4) != 0) bad = w;
        }
    if (bad < n) {
        printf("FAIL adamw_offload_host_update_bit_identical: master/m/v element %zu: host %.9g/%.9g/%.9g, device "
               "%.9g/%.9g/%.9g\n", bad, h_master[bad], h_m[bad], h_v[bad], g_master[bad], g_m[bad], g_v[bad]);
        failures++;
    } else {
        printf("PASS adamw_offload_host_update_bit_identical\n");
    }
    free(h_master); free(h_m); free(h_v); free(h_params);

    int reported = 0, ok = 1;
    // The clip factor: one float expression each side (sqrt in double): relative 1e-7 (one
    // fp32 ulp; measured equal).
    ok &= close_enough(name, "grad_scale", &g_scale, &want_scale, 1, 1e-7f, 0.0f, &reported);
    // Bit-identical (tolerance 0): both sides spell out every rounding, the same fused
    // multiply-adds (__fmaf_rn / fmaf) and IEEE division and square root (nvcc's default
    // -prec-div/-prec-sqrt; __fdiv_rn, __fsqrt_rn), so no contraction is left to either compiler
    // (t_62's PTX check holds the kernel to it). Before, nvcc's own contraction of beta1*m + ...
    // could put m half an ulp of beta1*m off where m nearly cancels, past any relative bound.
    // Elements outside every segment are untouched on both sides.
    ok &= close_enough(name, "m", g_m, m, n, 0.0f, 0.0f, &reported);
    ok &= close_enough(name, "v", g_v, v, n, 0.0f, 0.0f, &reported);
    ok &= close_enough(name, "master", g_master, master, n, 0.0f, 0.0f, &reported);
    // bf16 params: stochastic rounding of master lands on one of the two neighbouring bf16
    // values, at most one bf16 ulp (<= 2^-7 relative) from master; elsewhere still NaN.
    // Structural bound (measured 7.0e-3 relative at most, under 2^-7 = 7.8e-3).
    for (int k = 0; k < S; k++) {
        float* pk = (float*)malloc(len[k] * 4);
        for (size_t i = 0; i < len[k]; i++) pk[i] = g_params[off_p[k] + i];
        ok &= close_enough(name, "params", pk, g_master + off_w[k], len[k], 2.0f * BF16_RTOL, 1e-30f, &reported);
        free(pk);
    }
    size_t written = 0;
    for (size_t i = 0; i < n; i++) written += !isnan(g_params[i]);
    if (written != len[0] + len[1] + len[2]) {
        if (!reported) printf("FAIL %s: %zu params written, expected %zu\n", name, written, len[0] + len[1] + len[2]);
        reported = 1;
        ok = 0;
    }

    // Stochastic rounding is unbiased: master = 1 + 2^-9 is a quarter ulp above 1.0 (bf16 ulp at 1
    // is 2^-7), so about 25% of roundings must go up; round-to-nearest would give 0%.
    // lr = 0 and weight_decay = 0 leave master unchanged; 64 seeds x 14404 samples: the count of
    // ups is binomial with sd 0.0018 of the fraction, so |fraction - 0.25| < 0.01 is a 5-sigma bound.
    for (size_t i = 0; i < n; i++) master[i] = 1.0f + 1.0f / 512.0f;
    CUDA_CHECK(cudaMemcpy(d_master, master, n * 4, cudaMemcpyHostToDevice));
    size_t ups = 0, samples = 0;
    for (uint32_t seed = 0; seed < 64; seed++) {
        adamw_update_cuda(&plan, 0, plan.num_chunks, d_params, d_master, d_grads, d_m, d_v, 0.0f, beta1, beta2, eps, 0.0f,
                          d_scale, 1, seed * 7919u, 0);
        download_bf16(g_params, d_params, n);
        for (int k = 0; k < S; k++)
            for (size_t i = 0; i < len[k]; i++) { ups += g_params[off_p[k] + i] > 1.0f; samples++; }
    }
    double fraction = (double)ups / (double)samples;
    if (fabs(fraction - 0.25) > 0.01) {
        if (!reported) printf("FAIL %s: stochastic rounding rounded up %.4f of the time, expected 0.25\n", name, fraction);
        reported = 1;
        ok = 0;
    }
    report(name, ok);

    adamw_plan_free(&plan);
    cudaFree(d_master); cudaFree(d_m); cudaFree(d_v); cudaFree(d_grads); cudaFree(d_params); cudaFree(d_norm); cudaFree(d_scale);
    free(grads_b); free(grads); free(master); free(m); free(v); free(g_master); free(g_m);
    free(g_v); free(g_params);
}

// Gradient accumulation across micro-steps (kernels/grad_accum.cuh): set, add, add and round,
// against the same three lines on the host.
static void test_grad_accumulate(void) {
    const char* name = "grad_accumulate_fp32";
    const size_t n = 8 * 1001;
    bf16 *g_b = (bf16*)malloc(n * 2), *g2_b = (bf16*)malloc(n * 2);
    float *g = (float*)malloc(n * 4), *g2 = (float*)malloc(n * 4), *acc = (float*)malloc(n * 4);
    float *got = (float*)malloc(n * 4), *got_round = (float*)malloc(n * 4), *want_round = (float*)malloc(n * 4);
    random_bf16(g_b, g, n, 1.0f);
    random_bf16(g2_b, g2, n, 1e-3f); // far below a bf16 ulp of the first: a bf16 running sum would drop it
    bf16* d_g = (bf16*)device_copy_of(g_b, n * 2);
    bf16* d_g2 = (bf16*)device_copy_of(g2_b, n * 2);
    float* d_acc;
    CUDA_CHECK(cudaMalloc(&d_acc, n * 4));
    grad_accumulate_cuda(d_acc, d_g, n, GRAD_SET, 0);
    grad_accumulate_cuda(d_acc, d_g2, n, GRAD_ADD, 0);
    grad_accumulate_cuda(d_acc, d_g2, n, GRAD_ADD_ROUND, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    download_f32(got, d_acc, n);
    download_bf16(got_round, d_g2, n);
    for (size_t i = 0; i < n; i++) {
        acc[i] = g[i] + g2[i] + g2[i];
        want_round[i] = __bfloat162float(__float2bfloat16(acc[i]));
    }
    int reported = 0, ok = 1;
    // fp32 sums of three terms in the same order: exact agreement; the rounded copy: one bf16
    // rounding of the same fp32 value, also exact.
    ok &= close_enough(name, "acc", got, acc, n, 0.0f, 0.0f, &reported);
    ok &= close_enough(name, "rounded", got_round, want_round, n, 0.0f, 0.0f, &reported);
    report(name, ok);
    cudaFree(d_g); cudaFree(d_g2); cudaFree(d_acc);
    free(g_b); free(g2_b); free(g); free(g2); free(acc); free(got); free(got_round); free(want_round);
}

static void test_global_norm(void) {
    const char* name = "global_norm_squared";
    const size_t n = 1000003; // not a multiple of any block size
    bf16* x_b = (bf16*)malloc(n * 2);
    float* x = (float*)malloc(n * 4);
    random_bf16(x_b, x, n, 1.0f);
    double want = norm_squared(x, n) + norm_squared(x, n / 3);
    bf16* d_x = (bf16*)device_copy_of(x_b, n * 2);
    float *d_out, *d_scratch, got;
    CUDA_CHECK(cudaMalloc(&d_out, 4));
    CUDA_CHECK(cudaMalloc(&d_scratch, GLOBAL_NORM_BLOCKS * 4));
    norm_squared_cuda(d_out, d_scratch, d_x, n, 0, 0);
    norm_squared_cuda(d_out, d_scratch, d_x, n / 3, 1, 0); // accumulates a second slice
    CUDA_CHECK(cudaMemcpy(&got, d_out, 4, cudaMemcpyDeviceToHost));
    // fp32 partial sums of ~8 terms per thread, then two tree reductions: relative error
    // ~30 * 2^-24 = 2e-6 against the fp64 CPU sum, the worst case. Measured (INFO): 4.3e-8
    // here and 4.8e-8 for the fp32 variant below, contracted or not (the tree keeps partial sums
    // small); the device runs the same fixed tree (no atomics): rtol 2e-7, 4x (was 1e-5).
    printf("INFO err %s: relative %.3g\n", name, fabs(got - want) / want);
    if (fabs(got - want) <= 2e-7 * want) printf("PASS %s\n", name);
    else { printf("FAIL %s: %.9g, expected %.9g (rtol 2e-7)\n", name, got, want); failures++; }
    // The fp32 variant (the optimizer's accumulated gradient): values off the bf16 grid.
    for (size_t i = 0; i < n; i++) x[i] = random_uniform() * 1e-3f;
    float* d_xf = (float*)device_copy_of(x, n * 4);
    norm_squared_cuda(d_out, d_scratch, d_xf, n, 0, 0);
    CUDA_CHECK(cudaMemcpy(&got, d_out, 4, cudaMemcpyDeviceToHost));
    want = norm_squared(x, n);
    printf("INFO err %s_fp32: relative %.3g\n", name, fabs(got - want) / want);
    if (fabs(got - want) <= 2e-7 * want) printf("PASS %s_fp32\n", name); // the same bound as above
    else { printf("FAIL %s_fp32: %.9g, expected %.9g (rtol 2e-7)\n", name, got, want); failures++; }
    cudaFree(d_x); cudaFree(d_xf); cudaFree(d_out); cudaFree(d_scratch);
    free(x_b); free(x);
}
