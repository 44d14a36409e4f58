"""Map GPT-2 token shards onto a small vocabulary, for experiments with the small reference model.

    python3 data/shrink_vocab.py 'data/tinyshakespeare/tiny_shakespeare_*.bin' --vocab 1000 --out-dir data/ts_v1000

The V - 1 token ids most frequent in the train shards (the inputs whose name has "_train") become
ids 0 .. V-2 by falling frequency (ties: the lower GPT-2 id first); every other token becomes V-1
(one "rare token" id). Each input shard is written under the same name into --out-dir, in llm.c's
format (data/common.py), with ids < V, so a model with vocabulary V trains on it: the PyTorch
reference model (dev/reference/gpt2_ref_model.bin: V 1000, C 64, 2 layers, context 64) costs about
1 MFLOP per token against d2's 40 (its LM head over 50304 ids dominates), which is what made the
batch-size experiments of docs/results/batch_schedule/ affordable on 2 shared cores. The mapping is
printed with the share of tokens it keeps. Text is not decodable from the result (no tokenizer
file is written; train with -s 0).
"""
import argparse
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HEADER_INTS, MAGIC, VERSION = 256, 20240520, 1


def read_shard(path):
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    if len(header) != HEADER_INTS or header[0] != MAGIC or header[1] != VERSION:
        common.die(path, "not an llm.c token shard (magic/version)", f"a shard with magic {MAGIC}, version {VERSION}")
    tokens = np.fromfile(path, dtype=np.uint16, offset=4 * HEADER_INTS)
    if len(tokens) != header[2]:
        common.die(path, f"{len(tokens)} tokens, header says {header[2]}", "a complete shard")
    return tokens


def main():
    parser = common.ArgumentParser(description="GPT-2 token shards -> shards over the V most frequent tokens")
    parser.add_argument("pattern", help="shard glob (quoted); names with _train are counted for the mapping")
    parser.add_argument("--vocab", type=int, default=1000, help="new vocabulary size V (default 1000)")
    parser.add_argument("--out-dir", required=True, help="where the mapped shards go")
    args = parser.parse_args()
    paths = sorted(glob.glob(args.pattern))
    train = [p for p in paths if "_train" in os.path.basename(p)]
    if not train:
        common.die(args.pattern, "no shard whose name has _train", "train and val shards (data/prepare.py names)")
    if not 2 <= args.vocab <= 65536:
        common.die("--vocab", f"{args.vocab} out of range", "2 <= V <= 65536")
    counts = np.zeros(65536, dtype=np.int64)
    for p in train:
        counts += np.bincount(read_shard(p), minlength=65536)
    order = np.lexsort((np.arange(65536), -counts))  # by falling count, then id
    mapping = np.full(65536, args.vocab - 1, dtype=np.uint16)
    mapping[order[:args.vocab - 1]] = np.arange(args.vocab - 1, dtype=np.uint16)
    kept = counts[order[:args.vocab - 1]].sum() / max(counts.sum(), 1)
    common.prepare_out_dir(args.out_dir)
    for p in paths:
        out = os.path.join(args.out_dir, os.path.basename(p))
        common.write_shard(out, mapping[read_shard(p)])
    print(f"shrink_vocab: V {args.vocab}: the top {args.vocab - 1} train tokens are {100 * kept:.1f}% of {counts.sum()} train tokens; "
          f"wrote {len(paths)} shards to {args.out_dir}")


if __name__ == "__main__":
    main()
