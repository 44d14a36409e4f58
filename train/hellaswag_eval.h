/*
 * hellaswag_eval.h: HellaSwag accuracy during training (-hs N every N steps, -hf FILE, -hm the
 * first M examples), shared by train_gpt2.c and train_gpt2.cu. Include after zero.cuh and
 * train/train_setup.h.
 *
 * Each example is a context and 4 completions; the model scores completion k by its loss
 * -sum log p(completion token | the tokens before), in nats, over the completion's tokens. Two
 * accuracies, as in the HellaSwag paper's and llm.c's evals: `acc` picks the smallest summed
 * loss, `acc_norm` the smallest loss per token (length-normalized). Ties: the first.
 *
 * Rows: context + completion k is one row; its inputs are its tokens but the last, its targets
 * the tokens but the first, so the completion's losses sit at positions start-1 .. len-2. Rows
 * are packed B to a forward (the micro-batch the model was built for, T positions each; the
 * rest of a row is <|endoftext|>, which the causal mask keeps from the scored positions). A row
 * longer than T+1 tokens keeps its last T+1 (the context loses its start); an example whose
 * completion cannot keep a token of context is skipped (counted, not scored).
 * Ranks: example e goes to rank e % world_size; every rank runs the same number of forwards
 * (padding rows when it has fewer: ZeRO-3's forward all-gathers need every rank), then one
 * all-reduce (sum) of the per-example losses, 5 doubles each (4 summed losses, skipped), gives
 * every rank every example's losses and so the same counts.
 * HELLASWAG_EXAMPLES_OUT=FILE (tests): rank 0 writes one line per example: index, label,
 * skipped, the 4 summed losses, the 4 completion lengths.
 */
#ifndef TRAIN_HELLASWAG_EVAL_H
#define TRAIN_HELLASWAG_EVAL_H
#ifndef ZERO_CUH
#error "include zero.cuh before train/hellaswag_eval.h"
#endif
#include <math.h>
#include "common/hellaswag.h"
#include "common/logger.h"

// One forward of the model over inputs/targets (B,T) int32; losses (B,T) fp32 per position, host.
typedef void (*HellaSwagForward)(void* model, const int* inputs, const int* targets, float* losses);

typedef struct {
    int every;         // -hs (0: off)
    HellaSwagSet set;  // the first -hm examples of -hf
    int B, T, eot;
    int* inputs;       // (B,T)
    int* targets;      // (B,T)
    float* losses;     // (B,T)
    double* results;   // 5 per example: 4 summed completion losses, skipped (1) or scored (0)
} HellaSwagEval;

// Load -hf when -hs > 0 (every rank; a bad file: rank 0's one line, every rank exits 1).
static void hellaswag_eval_init(HellaSwagEval* ev, const TrainRun* run, int vocab_size, int B, int T) {
    memset(ev, 0, sizeof(*ev));
    ev->every = run->args.hellaswag_every;
    if (ev->every == 0) return;
    char err[1024];
    if (hellaswag_load(&ev->set, run->args.hellaswag_file, vocab_size, err, sizeof(err)) != 0) train_run_fail(run, "%s", err);
    if (run->args.hellaswag_max_examples > 0 && run->args.hellaswag_max_examples < ev->set.num_examples)
        ev->set.num_examples = run->args.hellaswag_max_examples;
    ev->B = B, ev->T = T;
    ev->eot = vocab_size > 50256 ? 50256 : vocab_size - 1; // GPT-2's <|endoftext|> (any valid token pads)
    ev->inputs = (int*)malloc((size_t)B * T * sizeof(int));
    ev->targets = (int*)malloc((size_t)B * T * sizeof(int));
    ev->losses = (float*)malloc((size_t)B * T * sizeof(float));
    ev->results = (double*)malloc((size_t)ev->set.num_examples * 5 * sizeof(double));
}

static int hellaswag_eval_due(const HellaSwagEval* ev, int step, int last_step) {
    return ev->every > 0 && (step % ev->every == 0 || last_step);
}

static void hellaswag_eval_free(HellaSwagEval* ev) {
    if (ev->every == 0) return;
    hellaswag_free(&ev->set);
    free(ev->inputs), free(ev->targets), free(ev->losses), free(ev->results);
}

// Row (example e, completion k) as tokens: the context's last tokens and the completion, at
// most T+1 in all. Returns the row's length, or 0 when the completion leaves no context token.
// *first: the row index of the completion's first token.
static int hellaswag_row(const HellaSwagEval* ev, int e, int k, int* row, int* first) {
    const HellaSwagExample* ex = &ev->set.examples[e];
    int m = ex->completion_len[k], keep = ex->context_len;
    if (m + 1 > ev->T + 1) return 0;
    if (keep + m > ev->T + 1) keep = ev->T + 1 - m;
    memcpy(row, ev->set.tokens + ex->context_start + ex->context_len - keep, (size_t)keep * sizeof(int));
    memcpy(row + keep, ev->set.tokens + ex->completion_start[k], (size_t)m * sizeof(int));
    *first = keep;
    return keep + m;
}

/*
 * Evaluate this rank's share of the examples, all-reduce the losses, and (rank 0) print the
 * line and log {"kind":"hellaswag","step","acc","acc_norm","examples","skipped","tokens"}.
 */
static void hellaswag_eval_run(HellaSwagEval* ev, HellaSwagForward forward, void* model, ZeroEngine* z, int step,
                               int max_steps, long long tokens_seen, Logger* logger) {
    int n = ev->set.num_examples, B = ev->B, T = ev->T, rank = z->rank, world_size = z->world_size;
    int mine = n / world_size + (rank < n % world_size), most = (n + world_size - 1) / world_size;
    int forwards = (most * HELLASWAG_COMPLETIONS + B - 1) / B; // the same on every rank
    memset(ev->results, 0, (size_t)n * 5 * sizeof(double));
    int* row = (int*)malloc((size_t)(T + 1) * sizeof(int));
    int* row_info = (int*)malloc((size_t)B * 4 * sizeof(int)); // per packed row: example, completion, first, length
    int *row_example = row_info, *row_completion = row_info + B, *row_first = row_info + 2 * B, *row_len = row_info + 3 * B;
    int next = 0; // this rank's next row: example rank + world_size * (next / 4), completion next % 4
    for (int f = 0; f < forwards; f++) {
        int rows = 0;
        for (int i = 0; i < B * T; i++) ev->inputs[i] = ev->targets[i] = ev->eot;
        while (rows < B && next < mine * HELLASWAG_COMPLETIONS) {
            int e = rank + world_size * (next / HELLASWAG_COMPLETIONS), k = next % HELLASWAG_COMPLETIONS, first = 0;
            int len = hellaswag_row(ev, e, k, row, &first);
            next++;
            if (len == 0) { ev->results[5 * e + 4] = 1.0; continue; }
            memcpy(ev->inputs + (size_t)rows * T, row, (size_t)(len - 1) * sizeof(int));
            memcpy(ev->targets + (size_t)rows * T, row + 1, (size_t)(len - 1) * sizeof(int));
            row_example[rows] = e, row_completion[rows] = k, row_first[rows] = first, row_len[rows] = len;
            rows++;
        }
        forward(model, ev->inputs, ev->targets, ev->losses); // also with rows == 0: the other ranks' all-gathers
        for (int r = 0; r < rows; r++) {
            double sum = 0.0; // the completion's tokens are targets at positions first-1 .. len-2
            for (int t = row_first[r] - 1; t <= row_len[r] - 2; t++) sum += ev->losses[(size_t)r * T + t];
            ev->results[5 * row_example[r] + row_completion[r]] = sum;
        }
    }
    free(row);
    free(row_info);
    zero_all_reduce_sum_doubles(z, ev->results, 5 * n, "hellaswag losses"); // each example is one rank's: a gather
    int correct = 0, correct_norm = 0, skipped = 0;
    FILE* out = NULL;
    const char* out_path = getenv("HELLASWAG_EXAMPLES_OUT");
    if (rank == 0 && out_path != NULL && (out = fopen(out_path, "w")) == NULL)
        fprintf(stderr, "warning: HELLASWAG_EXAMPLES_OUT %s: cannot write (%s)\n", out_path, strerror(errno));
    for (int e = 0; e < n; e++) {
        const HellaSwagExample* ex = &ev->set.examples[e];
        const double* l = ev->results + 5 * e;
        if (l[4] != 0.0) { skipped++; }
        else {
            int pick = 0, pick_norm = 0;
            for (int k = 1; k < HELLASWAG_COMPLETIONS; k++) {
                if (l[k] < l[pick]) pick = k;
                if (l[k] / ex->completion_len[k] < l[pick_norm] / ex->completion_len[pick_norm]) pick_norm = k;
            }
            correct += pick == ex->label;
            correct_norm += pick_norm == ex->label;
        }
        if (out) fprintf(out, "%d %d %d %.9g %.9g %.9g %.9g %d %d %d %d\n", ex->index, ex->label, l[4] != 0.0, l[0], l[1], l[2], l[3],
                         ex->completion_len[0], ex->completion_len[1], ex->completion_len[2], ex->completion_len[3]);
    }
    if (out) fclose(out);
    int scored = n - skipped;
    double acc = scored > 0 ? (double)correct / scored : NAN, acc_norm = scored > 0 ? (double)correct_norm / scored : NAN;
    if (rank == 0) printf("step %5d/%d | hellaswag acc %.4f acc_norm %.4f (%d examples, %d skipped: longer than T+1)\n", step, max_steps,
                          acc, acc_norm, scored, skipped);
    char acc_text[32], norm_text[32];
    logger_record(logger, "hellaswag", "\"step\":%d,\"acc\":%s,\"acc_norm\":%s,\"examples\":%d,\"skipped\":%d,\"tokens\":%lld", step,
                  json_number(acc_text, sizeof(acc_text), acc), json_number(norm_text, sizeof(norm_text), acc_norm), scored, skipped,
                  tokens_seen);
}
#endif
