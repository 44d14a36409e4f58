"""Tokenize local .txt / .jsonl files with GPT-2's BPE into llm.c-format token shards.

Inputs (positional; a directory stands for its *.txt and *.jsonl files, sorted):
  *.jsonl   one JSON object per line with a "text" string field; each line is one document
            (blank lines are skipped)
  *.txt     the whole file is one document, or with --split-blank-lines one document per
            blank-line ("\\n\\n") separated section (each keeps its trailing "\\n\\n")
Every document is led by <|endoftext|> (50256). Documents are concatenated in input order and
cut into shards of --shard-size tokens; documents may straddle two shards. The rest after the
last full shard becomes a shard of its own, or, when it is shorter than half a shard and a train
shard precedes it, joins that shard (said in the output): a tiny last shard would be too short
for most batch sizes, and the trainer refuses a shard shorter than one batch. Shard 0 is the val
split, shards 1.. are train:
  <out-dir>/<prefix>_val_000000.bin, <prefix>_train_000001.bin, <prefix>_train_000002.bin, ...
  <out-dir>/gpt2_tokenizer.bin      decode table for the C side (common/tokenizer.h)
Formats: see data/common.py. Tokenization runs on --workers processes (common.tokenize_into_shards);
the progress bar (tqdm, input bytes) shows only on a terminal.

Example:  python3 data/prepare.py corpus/*.jsonl --bpe-dir ../shared/data/gpt2 \\
                                  --out-dir data/mycorpus --prefix mycorpus --shard-size 100000000
Existing outputs are kept unless --force (which first deletes the old <prefix>_*_NNNNNN.bin).
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def tokenize_document(item):
    """Worker: one raw document -> (uint16 tokens with leading <|endoftext|>, input byte count,
    None), or (None, byte count, DataError) for bad input: errors come back as values so main
    can report them as one line instead of a traceback from inside the pool.

    item = (kind, path, where, data): kind "txt" or "jsonl"; `where` is the byte offset of
    data in the file (txt) or the 1-based line number (jsonl); data is raw bytes."""
    kind, path, where, data = item
    try:
        if kind == "txt":
            text = common.decode_utf8_or_error(data, path, byte_offset=where)
        else:
            subject = f"{path}:{where}"
            line = common.decode_utf8_or_error(data, subject)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise common.DataError(subject, f"not valid JSON ({e.msg})",
                                       'one JSON object per line, with a "text" string field')
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise common.DataError(subject, 'no "text" string field',
                                       'one JSON object per line, with a "text" string field')
            text = record["text"]
    except common.DataError as e:
        return None, len(data), e
    return common.document_tokens(text), len(data), None


def iter_documents(files, split_blank_lines):
    """Yield (kind, path, where, raw bytes) per document, streaming jsonl line by line."""
    for path in files:
        if path.endswith(".jsonl"):
            with open(path, "rb") as f:
                for line_number, line in enumerate(f, start=1):
                    if line.strip():
                        yield "jsonl", path, line_number, line
        else:
            with open(path, "rb") as f:
                data = f.read()
            if not split_blank_lines:
                yield "txt", path, 0, data
                continue
            offset = 0
            sections = data.split(b"\n\n")
            for i, section in enumerate(sections):
                document = section if i == len(sections) - 1 else section + b"\n\n"
                if section.strip():
                    yield "txt", path, offset, document
                offset += len(section) + 2


def list_input_files(inputs):
    """Expand directories, check every file exists, is .txt/.jsonl, and is not empty."""
    files = []
    for path in inputs:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, "*.txt")) +
                           glob.glob(os.path.join(path, "*.jsonl")))
            if not found:
                common.die(path, "directory has no .txt or .jsonl files", "text inputs")
            files.extend(found)
        else:
            files.append(path)
    for path in files:
        if not path.endswith((".txt", ".jsonl")):
            common.die(path, "unknown input type", "a .txt or .jsonl file (or a directory)")
        if not os.path.isfile(path):
            common.die(path, "file not found", "an existing .txt or .jsonl file")
        if not os.access(path, os.R_OK):
            common.die(path, "cannot read (permission denied)", "a readable file")
        if os.path.getsize(path) == 0:
            common.die(path, "file is empty", "UTF-8 text (.txt) or JSON lines (.jsonl)")
    return files


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help=".txt / .jsonl files or directories of them")
    parser.add_argument("--split-blank-lines", action="store_true",
                        help="in .txt files, every blank-line separated section is a document")
    common.add_shard_args(parser)
    args = parser.parse_args()

    common.check_shard_args(args)
    existing = common.existing_shards(args.out_dir, args.prefix)
    if existing and not args.force:
        print(f"{args.out_dir}: {len(existing)} {args.prefix}_* shards already exist, skipping "
              "(use --force to redo)")
        return

    # Check every input before the slow steps, so bad input fails in well under a second.
    files = list_input_files(args.inputs)
    common.prepare_out_dir(args.out_dir)
    enc = common.load_gpt2_encoding(args.bpe_dir)
    total_bytes = sum(os.path.getsize(p) for p in files)
    common.tokenize_into_shards(iter_documents(files, args.split_blank_lines), tokenize_document, enc,
                                args.out_dir, args.prefix, args.shard_size, args.workers, existing,
                                progress_total=total_bytes)


if __name__ == "__main__":
    main()
