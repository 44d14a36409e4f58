/*
 * bench_cpu.c: CPU training-step benchmark (not a test). For one model and (B, T): times full
 * training steps (forward, backward, AdamW) on random tokens, and prints tokens/s, ms/step, the
 * share of step time spent in matmuls (the BLAS's sgemm), achieved GFLOP/s, the peak resident
 * memory, and the tokens/s bound that the measured sgemm rate alone would allow.
 *
 * FLOPs per token (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1):
 * 6 N for the matmul weights (N = non-embedding params + the LM head Vp*C), plus attention
 * 6 * 2 * L * T_eff * C with T_eff = (T+1)/2 causal positions on average (forward 2 matmuls
 * of T_eff*C per token, backward twice that).
 *
 * usage: build/bench_cpu d12 B T [steps]
 */
#define TESTING
#include "train_gpt2.c"

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s dN B T [steps]\n", argv[0]);
        return 1;
    }
    const char* depth = argv[1];
    int B = atoi(argv[2]), T = atoi(argv[3]);
    int steps = argc > 4 ? atoi(argv[4]) : 6;
    GPT2Config probe;
    if (gpt2_config_from_descriptor(depth, &probe) != 0 || B < 1 || T < 1 || steps < 2) {
        fprintf(stderr, "error: arguments: expected dN B T [steps >= 2]\n");
        return 1;
    }
    blas_print_report(stdout);
    GPT2 model;
    gpt2_build(&model, depth, B, T, 42, 0, 1, NULL);
    const GPT2Config* c = &model.config;
    int* tokens = (int*)malloc(sizeof(int) * (size_t)(B * T + 1));
    Rng rng;
    rng_seed(&rng, 1);
    for (int i = 0; i < B * T + 1; i++) tokens[i] = (int)(rng_next(&rng) % (uint64_t)c->vocab_size);
    AdamWConfig opt = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};

    double C = c->channels, L = c->num_layers;
    double matmul_params = L * 12.0 * C * C + (double)c->padded_vocab_size * C;
    double flops_per_token = 6.0 * matmul_params + 6.0 * 2.0 * L * ((T + 1) / 2.0) * C;

    // Measure the sgemm rate on the step's most common shape (B*T x C x 4C), for the bound.
    int N = B * T, K = c->channels, M = 4 * c->channels;
    float* x = (float*)calloc((size_t)N * K, sizeof(float));
    float* w = (float*)calloc((size_t)M * K, sizeof(float));
    float* y = (float*)calloc((size_t)N * M, sizeof(float));
    matmul_forward(y, x, w, NULL, N, K, M);
    double t0 = omp_get_wtime();
    int reps = 0;
    while (omp_get_wtime() - t0 < 1.0) { matmul_forward(y, x, w, NULL, N, K, M); reps++; }
    double sgemm_gflops = 2.0 * N * K * M * reps / (omp_get_wtime() - t0) / 1e9;
    free(x); free(w); free(y);

    double step_seconds = 0.0, matmul_in_steps = 0.0, phase[4] = {0};
    double* step_ms = (double*)calloc((size_t)steps, sizeof(double));
    for (int s = 0; s < steps; s++) {
        double m0 = matmul_seconds;
        double s0 = omp_get_wtime();
        zero_grads_zero(&model.zero);
        double s1 = omp_get_wtime();
        gpt2_forward(&model, tokens, tokens + 1, B, T);
        double s2 = omp_get_wtime();
        gpt2_backward(&model, tokens + 1, B, T, 1.0f / (B * T), 1);
        double s3 = omp_get_wtime();
        zero_optimizer_step(&model.zero, &opt, 1e-4f, s + 1);
        double dt = omp_get_wtime() - s0;
        if (s > 0) { phase[0] += s1 - s0; phase[1] += s2 - s1; phase[2] += s3 - s2; phase[3] += omp_get_wtime() - s3; }
        if (s > 0) { step_seconds += dt; matmul_in_steps += matmul_seconds - m0; step_ms[s - 1] = 1000.0 * dt; } // step 0 warms up
    }
    double ms = 1000.0 * step_seconds / (steps - 1);
    double tokens_per_s = B * T * (steps - 1) / step_seconds;
    printf("%-4s B=%-3d T=%-4d params %6.1fM | %8.1f ms/step | %7.1f tok/s | matmul share %4.1f%% | %6.1f GFLOP/s "
           "| sgemm %6.1f GFLOP/s -> bound %7.1f tok/s | peak mem %7.1f MiB | threads %d\n",
           depth, B, T, model.layout.num_parameters / 1e6, ms, tokens_per_s, 100.0 * matmul_in_steps / step_seconds,
           flops_per_token * tokens_per_s / 1e9, sgemm_gflops, sgemm_gflops * 1e9 / flops_per_token, peak_rss_mib(),
           omp_get_max_threads());
    printf("     phases per step (ms): zero grads %.1f | forward %.1f | backward %.1f | optimizer %.1f\n",
           1000 * phase[0] / (steps - 1), 1000 * phase[1] / (steps - 1), 1000 * phase[2] / (steps - 1), 1000 * phase[3] / (steps - 1));
    // Median step (timed steps sorted), and one JSON line for scripts (dev/bench/vs_pytorch.py).
    for (int i = 1; i < steps - 1; i++)
        for (int j = i; j > 0 && step_ms[j - 1] > step_ms[j]; j--) { double t = step_ms[j]; step_ms[j] = step_ms[j - 1]; step_ms[j - 1] = t; }
    int n = steps - 1;
    double median_ms = n % 2 ? step_ms[n / 2] : 0.5 * (step_ms[n / 2 - 1] + step_ms[n / 2]);
    printf("json: {\"median_ms\": %.3f, \"tokens_per_s\": %.2f, \"sgemm_gflops\": %.3f, \"bound_tokens_per_s\": %.2f, "
           "\"matmul_share\": %.4f, \"peak_mib\": %.1f, \"threads\": %d}\n", median_ms, B * T * 1000.0 / median_ms,
           sgemm_gflops, sgemm_gflops * 1e9 / flops_per_token, matmul_in_steps / step_seconds, peak_rss_mib(), omp_get_max_threads());
    free(step_ms);
    free(tokens);
    gpt2_free(&model);
    return 0;
}
