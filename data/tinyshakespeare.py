"""Tokenize tinyshakespeare with GPT-2's BPE into llm.c-format token shards.

Output (in --out-dir, default data/tinyshakespeare/):
  tiny_shakespeare_val.bin     the first 32,768 tokens
  tiny_shakespeare_train.bin   all the remaining tokens (~305k)
  gpt2_tokenizer.bin           the decode table for the C side (common/tokenizer.h)
Shard and tokenizer formats: see data/common.py.

Documents: the text is split on blank lines ("\\n\\n"); every document starts with the
<|endoftext|> token (50256) and keeps its trailing "\\n\\n" (except the last), so removing the
50256s and decoding gives back the input text exactly.

Offline:  python3 data/tinyshakespeare.py --text ../shared/data/tinyshakespeare/input.txt \\
                                           --bpe-dir ../shared/data/gpt2
Online:   python3 data/tinyshakespeare.py   (downloads input.txt; tiktoken fetches the BPE files)
Existing outputs are kept unless --force.
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TEXT_URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/"
            "data/tinyshakespeare/input.txt")
TEXT_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
VAL_TOKENS = 32768
VAL_NAME, TRAIN_NAME, TOKENIZER_NAME = ("tiny_shakespeare_val.bin", "tiny_shakespeare_train.bin",
                                        "gpt2_tokenizer.bin")


def download_text(out_dir):
    """Fetch the canonical input.txt into out_dir (reused if already there and intact)."""
    path = os.path.join(out_dir, "input.txt")
    if os.path.isfile(path) and common.sha256_of_file(path) == TEXT_SHA256:
        return path
    import urllib.request
    print(f"downloading {TEXT_URL}")
    try:
        with urllib.request.urlopen(TEXT_URL, timeout=60) as response:
            data = response.read()
    except Exception as e:  # URLError, timeouts, HTTP errors: one message for all
        common.die(TEXT_URL, f"download failed ({e})",
                   "network access, or --text PATH to a local tinyshakespeare input.txt")
    digest = hashlib.sha256(data).hexdigest()
    if digest != TEXT_SHA256:
        common.die(TEXT_URL, f"downloaded data has sha256 {digest}",
                   f"sha256 {TEXT_SHA256} (the canonical tinyshakespeare input.txt)")
    with open(path, "wb") as f:
        f.write(data)
    return path


def tokenize_documents(text, enc):
    """Token ids of the whole text: documents split on blank lines, each led by <|endoftext|>."""
    sections = text.split("\n\n")
    documents = [s + "\n\n" for s in sections[:-1]] + [sections[-1]]
    tokens = []
    for document_tokens in enc.encode_ordinary_batch(documents):
        tokens.append(enc.eot_token)
        tokens.extend(document_tokens)
    return tokens


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", help="local tinyshakespeare input.txt (default: download it)")
    parser.add_argument("--bpe-dir", help="directory with GPT-2's encoder.json and vocab.bpe "
                        "(default: tiktoken.get_encoding('gpt2'), online)")
    default_out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tinyshakespeare")
    parser.add_argument("--out-dir", default=default_out_dir,
                        help="where the shards and tokenizer go (default: data/tinyshakespeare)")
    parser.add_argument("--force", action="store_true", help="rewrite outputs that already exist")
    args = parser.parse_args()

    outputs = [os.path.join(args.out_dir, name) for name in (VAL_NAME, TRAIN_NAME, TOKENIZER_NAME)]
    if not args.force and all(os.path.isfile(p) for p in outputs):
        print(f"{args.out_dir}: shards and tokenizer already exist, skipping (use --force to redo)")
        return

    # Check every input before the slow steps, so bad input fails in well under a second.
    if args.text is not None:
        text = common.read_utf8_text(args.text, f"--text {args.text}")
    common.prepare_out_dir(args.out_dir)
    enc = common.load_gpt2_encoding(args.bpe_dir)
    if args.text is None:
        path = download_text(args.out_dir)
        text = common.read_utf8_text(path, path)

    tokens = tokenize_documents(text, enc)
    if len(tokens) <= VAL_TOKENS:
        common.die(f"--text {args.text}", f"gives only {len(tokens)} tokens",
                   f"more than {VAL_TOKENS} tokens (the val split) so that train is not empty")
    common.write_shard(outputs[0], tokens[:VAL_TOKENS])
    common.write_shard(outputs[1], tokens[VAL_TOKENS:])
    common.write_tokenizer(outputs[2], enc)
    print(f"wrote {VAL_TOKENS} val tokens to {outputs[0]}")
    print(f"wrote {len(tokens) - VAL_TOKENS} train tokens to {outputs[1]}")
    print(f"wrote tokenizer (vocab {enc.n_vocab}, eot {enc.eot_token}) to {outputs[2]}")


if __name__ == "__main__":
    main()
