/*
 * Command-line driver for the bad-input and end-to-end checks of tests/t_20_data.sh: it runs
 * the real dataloader / tokenizer code on files the shell test prepares, so the error paths
 * (which exit the process) can be checked one process per case.
 *
 *   test_dataloader_badinput dataloader PATTERN B T RANK NUM_PROCESSES
 *       init + one next_batch; prints "ok shards=<n> tokens=<total>", exit 0
 *   test_dataloader_badinput tokenizer FILE
 *       init; prints "init_ok=<0|1> vocab=<V> eot=<id>", exit 0 (errors exit 1)
 *   test_dataloader_badinput sample PATTERN TOKENIZER_FILE T
 *       the first B=1 x T batch of PATTERN decoded with tokenizer_decode_utf8, printed raw
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dataloader.h"
#include "common/tokenizer.h"

int main(int argc, char** argv) {
    if (argc == 7 && strcmp(argv[1], "dataloader") == 0) {
        DataLoader loader;
        dataloader_init(&loader, argv[2], (size_t)atol(argv[3]), (size_t)atol(argv[4]),
                        atoi(argv[5]), atoi(argv[6]));
        dataloader_next_batch(&loader);
        printf("ok shards=%zu tokens=%zu\n", loader.num_shards, loader.num_tokens_total);
        dataloader_free(&loader);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "tokenizer") == 0) {
        Tokenizer tokenizer;
        tokenizer_init(&tokenizer, argv[2]);
        printf("init_ok=%d vocab=%u eot=%u\n", tokenizer.init_ok, tokenizer.vocab_size,
               tokenizer.eot_token);
        tokenizer_free(&tokenizer);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "sample") == 0) {
        size_t T = (size_t)atol(argv[4]);
        DataLoader loader;
        dataloader_init(&loader, argv[2], 1, T, 0, 1);
        Tokenizer tokenizer;
        tokenizer_init(&tokenizer, argv[3]);
        dataloader_next_batch(&loader);
        size_t cap = T * 256 + 1;  // a GPT-2 token is at most 128 bytes
        char* text = (char*)malloc(cap);
        size_t n = tokenizer_decode_utf8(&tokenizer, loader.inputs, (int)T, text, cap);
        fwrite(text, 1, n, stdout);
        printf("\n");
        free(text);
        tokenizer_free(&tokenizer);
        dataloader_free(&loader);
        return 0;
    }
    fprintf(stderr, "error: arguments: unknown mode or wrong count; expected dataloader PATTERN "
                    "B T RANK NUM_PROCESSES | tokenizer FILE | sample PATTERN TOKENIZER T\n");
    return 1;
}
