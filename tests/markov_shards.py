#!/usr/bin/env python3
"""markov_shards.py DIR VOCAB TRAIN_TOKENS VAL_TOKENS SEED: DIR/train.bin and DIR/val.bin in the
llm.c shard format (256 x int32 header: magic 20240520, version 1, token count; then uint16
tokens) holding a noisy Markov chain over token ids [0, VOCAB): the next id is (7 t + 13) mod
VOCAB with probability 0.7, else a uniform jump. Learnable, so losses move and a wrong gradient
shows; fixed by SEED (numpy default_rng), train drawn before val."""
import sys

import numpy as np


def main():
    out, vocab, n_train, n_val, seed = sys.argv[1], *map(int, sys.argv[2:6])
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("val", n_val)):
        jumps, noise = rng.integers(0, vocab, size=n), rng.random(n)
        toks, t = np.empty(n, dtype="<u2"), 0
        for i in range(n):
            t = (t * 7 + 13) % vocab if noise[i] < 0.7 else jumps[i]
            toks[i] = t
        header = np.zeros(256, "<i4")
        header[:3] = 20240520, 1, n
        with open(f"{out}/{name}.bin", "wb") as f:
            f.write(header.tobytes())
            f.write(toks.tobytes())


if __name__ == "__main__":
    main()
