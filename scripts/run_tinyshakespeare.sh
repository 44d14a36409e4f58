#!/usr/bin/env bash
# The main job on a CPU box: install what is needed, prepare tinyshakespeare (from the local
# copies in ../shared/data when present, else downloaded), build, train a small GPT-2 (d4:
# L=4, C=256) from scratch for a few minutes, and print the val loss and a text sample. The run
# writes its log and a checkpoint at the last step into OUT and says so at the end.
# Environment: SHARED_DATA (dir with tinyshakespeare/input.txt and gpt2/), STEPS, OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
shared=${SHARED_DATA:-$(cd .. && pwd)/shared/data} # default: beside the checkout
if [ ! -f data/tinyshakespeare/tiny_shakespeare_train.bin ]; then
    if [ -f "$shared/tinyshakespeare/input.txt" ] && [ -f "$shared/gpt2/encoder.json" ]; then
        python3 data/tinyshakespeare.py --text "$shared/tinyshakespeare/input.txt" --bpe-dir "$shared/gpt2"
    else
        # online: downloads the text and the GPT-2 BPE files; offline, say which variable to set
        # (the data script's own error, about its --bpe-dir, is kept out of sight: one line says it all)
        python3 data/tinyshakespeare.py 2>/tmp/run_tinyshakespeare.$$ || {
            echo "error: data: no local copy at $shared/tinyshakespeare/input.txt and $shared/gpt2/, and the download failed; expected SHARED_DATA=dir holding tinyshakespeare/input.txt and gpt2/{encoder.json,vocab.bpe}, or network access" >&2
            rm -f /tmp/run_tinyshakespeare.$$; exit 1
        }
        cat /tmp/run_tinyshakespeare.$$ >&2; rm -f /tmp/run_tinyshakespeare.$$
    fi
fi
make -s train_gpt2
steps=${STEPS:-200}
out=${OUT:-out/tinyshakespeare_d4_$(date +%Y%m%d_%H%M%S)}
# -n "$steps": one checkpoint, at the last step (llm.c's model file plus the optimizer state).
./train_gpt2 -e d4 -b 8 -t 128 -x "$steps" -l 1e-3 -u 20 -q 0.1 -c 0.1 -v 50 -m 10 -s "$steps" -g 64 \
    -n "$steps" -o "$out" "$@"
model=$(printf '%s/model_%08d.bin' "$out" "$steps")
echo "output: $out (log.jsonl; checkpoint $model)"
echo "next: python3 scripts/plot_log.py $out   # draws $out/log.png"
