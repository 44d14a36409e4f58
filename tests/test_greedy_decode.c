/*
 * test_greedy_decode.c: the CPU model's greedy continuation of a prompt, for a test that compares
 * it with another implementation (tests/t_70_hf.sh: transformers' GPT2LMHeadModel on the model
 * exported by scripts/export_hf.py).
 *   build/test_greedy_decode MODEL.bin N TOKEN...
 * prints `tokens:` and the N next token ids, each the argmax over the V real logits of the last
 * position (the lowest id wins a tie), with forward re-run over the whole sequence as the
 * trainer's sampler does (train_gpt2.c, gpt2_sample); then `margins:`, each step's gap between
 * the top two logits, so that a disagreement can be told apart from a near-tie.
 */
#define TESTING
#include "train_gpt2.c"

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "error: usage: %s MODEL.bin N TOKEN...; expected a model file, a count and at least one token id\n", argv[0]);
        return 1;
    }
    int n = atoi(argv[2]), prompt_len = argc - 3;
    if (n < 1) { fprintf(stderr, "error: N %s: not a positive count; expected N >= 1\n", argv[2]); return 1; }
    GPT2 model;
    gpt2_build(&model, argv[1], 1, prompt_len + n, 0, 0, 1, NULL);
    int V = model.config.vocab_size;
    int* tokens = (int*)zero_calloc((size_t)(prompt_len + n), sizeof(int), "tokens");
    for (int i = 0; i < prompt_len; i++) {
        tokens[i] = atoi(argv[3 + i]);
        if (tokens[i] < 0 || tokens[i] >= V) { fprintf(stderr, "error: token %s: out of range; expected 0..%d\n", argv[3 + i], V - 1); return 1; }
    }
    float* margins = (float*)zero_calloc((size_t)n, sizeof(float), "margins");
    for (int step = 0; step < n; step++) {
        int len = prompt_len + step;
        gpt2_forward(&model, tokens, NULL, 1, len);
        const float* logits = model.acts.logits_last; // row 0: the last position's logits (the chunked LM head keeps only these whole)
        int best = 0;
        for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
        float second = -INFINITY;
        for (int v = 0; v < V; v++) if (v != best && logits[v] > second) second = logits[v];
        tokens[len] = best;
        margins[step] = logits[best] - second;
    }
    printf("tokens:");
    for (int i = 0; i < n; i++) printf(" %d", tokens[prompt_len + i]);
    printf("\nmargins:");
    for (int i = 0; i < n; i++) printf(" %.6g", margins[i]);
    printf("\n");
    free(margins);
    free(tokens);
    gpt2_free(&model);
    return 0;
}
