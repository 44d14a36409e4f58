# Helpers for the benchmark scripts (source it; not tests).
# timing_train_shard DIR: print the path of a train shard for runs that only time steps: the
# prepared tinyshakespeare shard if there is one, else DIR/train.bin, 200,000 random GPT-2 tokens
# in the llm.c shard format (header magic 20240520, version 1, token count; uint16 tokens).
timing_train_shard() {
    local train=data/tinyshakespeare/tiny_shakespeare_train.bin
    if [ ! -e "$train" ]; then # no prepared data: random tokens (timing does not care)
        python3 -c "
import numpy as np; h = np.zeros(256, '<i4'); h[:3] = 20240520, 1, 200000
open('$1/train.bin', 'wb').write(h.tobytes() + np.random.default_rng(0).integers(0, 50257, 200000).astype('<u2').tobytes())" || return 1
        train=$1/train.bin
    fi
    echo "$train"
}
