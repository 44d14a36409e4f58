/*
 * test_kernels/encoder.cuh: the token and position embedding kernels (kernels/encoder.cuh,
 * kernels/rows.cuh) against cpu/encoder.h. test_encoder: the whole-table forward and the bucketed
 * backward (B 4, T 100, C 128, Vp 256; bf16 tables, fp32 twins). test_encoder_chunks: the same
 * over wte's vocab chunks (Vp 320 in chunks of 128, 128, 64 rows) and the rows kernels.
 * Included by dev/test_kernels.cu (after the kernels, the CPU twins and its host helpers:
 * random_bf16, device_copy_of, download_*, close_enough, report, failures, BF16_RTOL); the
 * tolerances follow the rules in its header.
 */

static void test_encoder(void) {
    const char* name = "encoder_forward_backward";
    const int B = 4, T = 100, C = 128, Vp = 256, maxT = 128, BT = B * T;
    size_t n_wte = (size_t)Vp * C, n_wpe = (size_t)maxT * C, n_out = (size_t)BT * C;
    bf16 *wte_b = (bf16*)malloc(n_wte * 2), *wpe_b = (bf16*)malloc(n_wpe * 2), *dout_b = (bf16*)malloc(n_out * 2);
    bf16 *dwte_b = (bf16*)malloc(n_wte * 2), *dwpe_b = (bf16*)malloc(n_wpe * 2);
    float *wte = (float*)malloc(n_wte * 4), *wpe = (float*)malloc(n_wpe * 4), *dout = (float*)malloc(n_out * 4);
    float *dwte = (float*)malloc(n_wte * 4), *dwpe = (float*)malloc(n_wpe * 4);
    float *out_ref = (float*)malloc(n_out * 4), *out_gpu = (float*)malloc(n_out * 4);
    float *dwte_gpu = (float*)malloc(n_wte * 4), *dwpe_gpu = (float*)malloc(n_wpe * 4);
    int* inp = (int*)malloc(BT * sizeof(int));
    random_bf16(wte_b, wte, n_wte, 1.0f);
    random_bf16(wpe_b, wpe, n_wpe, 1.0f);
    random_bf16(dout_b, dout, n_out, 1.0f);
    random_bf16(dwte_b, dwte, n_wte, 1.0f); // non-zero: the backward must accumulate
    random_bf16(dwpe_b, dwpe, n_wpe, 1.0f);
    // tokens from [0, 40): many repeats, so the grouped dwte path sums long buckets
    for (int i = 0; i < BT; i++) inp[i] = (int)((random_uniform() + 1.0f) * 20.0f) % 40;

    encoder_forward(out_ref, inp, wte, wpe, B, T, C);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);

    int* d_inp = (int*)device_copy_of(inp, BT * sizeof(int));
    bf16* d_wte = (bf16*)device_copy_of(wte_b, n_wte * 2);
    bf16* d_wpe = (bf16*)device_copy_of(wpe_b, n_wpe * 2);
    bf16* d_dout = (bf16*)device_copy_of(dout_b, n_out * 2);
    bf16* d_dwte = (bf16*)device_copy_of(dwte_b, n_wte * 2);
    bf16* d_dwpe = (bf16*)device_copy_of(dwpe_b, n_wpe * 2);
    bf16* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, n_out * 2));
    int *tokens = (int*)malloc(BT * sizeof(int)), *starts = (int*)malloc((BT + 1) * sizeof(int));
    int *positions = (int*)malloc(BT * sizeof(int)), *counts = (int*)malloc(Vp * sizeof(int));
    int num_buckets = encoder_backward_plan(tokens, starts, positions, counts, inp, BT, Vp);
    int* d_tokens = (int*)device_copy_of(tokens, BT * sizeof(int));
    int* d_starts = (int*)device_copy_of(starts, (BT + 1) * sizeof(int));
    int* d_positions = (int*)device_copy_of(positions, BT * sizeof(int));

    encoder_forward_cuda(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
    encoder_backward_cuda(d_dwte, d_dwpe, d_dout, d_starts, d_tokens, d_positions, num_buckets, B, T, C, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    download_bf16(out_gpu, d_out, n_out);
    download_bf16(dwte_gpu, d_dwte, n_wte);
    download_bf16(dwpe_gpu, d_dwpe, n_wpe);

    int reported = 0, ok = 1;
    // forward: the twin's fp32 add of the same two bf16 values, then one rounding: atol 0
    // (measured needed 0; any fp32 difference here would be a bug)
    ok &= close_enough(name, "out", out_gpu, out_ref, n_out, BF16_RTOL, 0.0f, &reported);
    // backward: fp32 sums of <= BT unit-size terms in another order (see header), one rounding.
    // Measured needed 0 (largest error 1.6e-2 = the rounding): no fp32 difference surfaced past
    // the rounding, so nothing measured bounds it tighter and the reordering bound stays.
    ok &= close_enough(name, "dwte", dwte_gpu, dwte, n_wte, BF16_RTOL, 1e-3f, &reported);
    ok &= close_enough(name, "dwpe", dwpe_gpu, dwpe, n_wpe, BF16_RTOL, 1e-3f, &reported);
    report(name, ok);

    cudaFree(d_inp); cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_dout); cudaFree(d_dwte); cudaFree(d_dwpe);
    cudaFree(d_out); cudaFree(d_tokens); cudaFree(d_starts); cudaFree(d_positions);
    free(wte_b); free(wpe_b); free(dout_b); free(dwte_b); free(dwpe_b); free(wte); free(wpe); free(dout);
    free(dwte); free(dwpe); free(out_ref); free(out_gpu); free(dwte_gpu); free(dwpe_gpu); free(inp);
    free(tokens); free(starts); free(positions); free(counts);
}

/*
 * The encoder over vocab chunks: each chunk's forward writes its tokens' rows (wpe from a copy),
 * each chunk's backward sums its tokens' buckets into its own (rows, C) gradient; against the
 * whole-table CPU twin, whose results the chunks must reproduce; and the rows kernels that set a
 * chunk's token rows aside and put them back (rows.cuh) against plain copies.
 */
static void test_encoder_chunks(void) {
    const char* name = "encoder_chunks_and_rows";
    const int B = 4, T = 50, C = 64, Vp = 320, maxT = 64, BT = B * T, width = 128; // chunks of 128, 128, 64 rows
    size_t n_wte = (size_t)Vp * C, n_wpe = (size_t)maxT * C, n_out = (size_t)BT * C;
    bf16 *wte_b = (bf16*)malloc(n_wte * 2), *wpe_b = (bf16*)malloc(n_wpe * 2), *dout_b = (bf16*)malloc(n_out * 2);
    float *wte = (float*)malloc(n_wte * 4), *wpe = (float*)malloc(n_wpe * 4), *dout = (float*)malloc(n_out * 4);
    float *dwte = (float*)calloc(n_wte, 4), *dwpe = (float*)calloc(n_wpe, 4), *out_ref = (float*)malloc(n_out * 4);
    float *out_gpu = (float*)malloc(n_out * 4), *dwte_gpu = (float*)malloc(n_wte * 4);
    int* inp = (int*)malloc(BT * sizeof(int));
    random_bf16(wte_b, wte, n_wte, 1.0f);
    random_bf16(wpe_b, wpe, n_wpe, 1.0f);
    random_bf16(dout_b, dout, n_out, 1.0f);
    for (int i = 0; i < BT; i++) inp[i] = (int)((random_uniform() + 1.0f) * 0.5f * 300) % 300; // every chunk gets tokens
    encoder_forward(out_ref, inp, wte, wpe, B, T, C);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    int *tokens = (int*)malloc(BT * sizeof(int)), *starts = (int*)malloc((BT + 1) * sizeof(int));
    int *positions = (int*)malloc(BT * sizeof(int)), *counts = (int*)malloc(Vp * sizeof(int));
    int num_buckets = encoder_backward_plan(tokens, starts, positions, counts, inp, BT, Vp);
    int* d_inp = (int*)device_copy_of(inp, BT * sizeof(int));
    bf16* d_wte = (bf16*)device_copy_of(wte_b, n_wte * 2);
    bf16* d_wpe = (bf16*)device_copy_of(wpe_b, n_wpe * 2);
    bf16* d_dout = (bf16*)device_copy_of(dout_b, n_out * 2);
    int* d_tokens = (int*)device_copy_of(tokens, BT * sizeof(int));
    int* d_starts = (int*)device_copy_of(starts, (BT + 1) * sizeof(int));
    int* d_positions = (int*)device_copy_of(positions, BT * sizeof(int));
    bf16 *d_out, *d_dwte, *d_kept;
    CUDA_CHECK(cudaMalloc(&d_out, n_out * 2));
    CUDA_CHECK(cudaMalloc(&d_dwte, n_wte * 2));
    CUDA_CHECK(cudaMalloc(&d_kept, n_wte * 2));
    CUDA_CHECK(cudaMemset(d_dwte, 0, n_wte * 2));
    int b = 0, rows_ok = 1;
    for (int row0 = 0; row0 < Vp; row0 += width) {
        int rows = Vp - row0 < width ? Vp - row0 : width, first = b;
        while (b < num_buckets && tokens[b] < row0 + rows) b++;
        bf16* dchunk = d_dwte + (size_t)row0 * C;
        encoder_forward_chunk_cuda(d_out, d_inp, d_wte + (size_t)row0 * C, d_wpe, row0, rows, B, T, C, 0);
        encoder_backward_chunk_cuda(dchunk, d_dout, d_starts, d_tokens, d_positions, first, b - first, row0, C, 0);
        // rows: take the chunk's token rows aside (zeroing them), check, put them back
        rows_take_cuda(d_kept, dchunk, d_tokens + first, row0, b - first, C, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        float* after = (float*)malloc((size_t)rows * C * 4);
        float* kept = (float*)malloc((size_t)(b - first + 1) * C * 4);
        download_bf16(after, dchunk, (size_t)rows * C);
        download_bf16(kept, d_kept, (size_t)(b - first) * C);
        for (int i = first; i < b; i++)
            for (int c = 0; c < C; c++)
                rows_ok &= after[(size_t)(tokens[i] - row0) * C + c] == 0.0f &&
                           fabsf(kept[(size_t)(i - first) * C + c] - dwte[(size_t)tokens[i] * C + c]) <= BF16_RTOL * fabsf(dwte[(size_t)tokens[i] * C + c]) + 1e-3f;
        rows_put_cuda(dchunk, d_kept, d_tokens + first, row0, b - first, C, 0);
        free(after); free(kept);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    download_bf16(out_gpu, d_out, n_out);
    download_bf16(dwte_gpu, d_dwte, n_wte);
    int reported = 0, ok = rows_ok;
    if (!rows_ok) printf("  %s: rows_take did not set aside exactly the chunk's token rows\n", name);
    // forward: one fp32 add of two bf16 values, one rounding, whichever chunk the token is in:
    // atol 0 as in test_encoder (measured needed 0)
    ok &= close_enough(name, "out", out_gpu, out_ref, n_out, BF16_RTOL, 0.0f, &reported);
    // backward: fp32 sums of <= BT unit-size terms (header), one rounding; after take + put
    // (measured needed 0; atol 1e-3 as in test_encoder, also for the rows set aside above)
    ok &= close_enough(name, "dwte", dwte_gpu, dwte, n_wte, BF16_RTOL, 1e-3f, &reported);
    report(name, ok);
    cudaFree(d_inp); cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_dout); cudaFree(d_tokens); cudaFree(d_starts);
    cudaFree(d_positions); cudaFree(d_out); cudaFree(d_dwte); cudaFree(d_kept);
    free(wte_b); free(wpe_b); free(dout_b); free(wte); free(wpe); free(dout); free(dwte); free(dwpe); free(out_ref);
    free(out_gpu); free(dwte_gpu); free(inp); free(tokens); free(starts); free(positions); free(counts);
}
