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
Formats: see data/common.py. Tokenization runs on --workers processes (multiprocessing.Pool);
the progress bar (tqdm, input bytes) shows only on a terminal.

Example:  python3 data/prepare.py corpus/*.jsonl --bpe-dir ../shared/data/gpt2 \\
                                  --out-dir data/mycorpus --prefix mycorpus --shard-size 100000000
Existing outputs are kept unless --force (which first deletes the old <prefix>_*_NNNNNN.bin).
"""
import glob
import shutil
import tempfile
import json
import multiprocessing
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TOKENIZER_NAME = "gpt2_tokenizer.bin"
_worker_encoding = None  # set in each worker by _init_worker


def _init_worker(enc):
    global _worker_encoding
    _worker_encoding = enc


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
    tokens = [_worker_encoding.eot_token] + _worker_encoding.encode_ordinary(text)
    return np.array(tokens, dtype=np.uint16), len(data), None


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


class ShardWriter:
    """Collects document tokens into a fixed buffer of shard_size tokens and writes each full
    shard: shard 0 is val, the rest train. close() writes the final partial shard."""

    def __init__(self, out_dir, prefix, shard_size):
        self.out_dir, self.prefix, self.shard_size = out_dir, prefix, shard_size
        self.buffer = np.empty(shard_size, dtype=np.uint16)
        self.filled = 0
        self.shard_index = 0
        self.total_tokens = 0
        self.written = []  # paths of the shards written so far
        self.counts = []   # their token counts

    def add(self, tokens):
        self.total_tokens += len(tokens)
        while len(tokens) > 0:
            take = min(len(tokens), self.shard_size - self.filled)
            self.buffer[self.filled:self.filled + take] = tokens[:take]
            self.filled += take
            tokens = tokens[take:]
            if self.filled == self.shard_size:
                self._write()

    def _write(self):
        split = "val" if self.shard_index == 0 else "train"
        path = os.path.join(self.out_dir, f"{self.prefix}_{split}_{self.shard_index:06d}.bin")
        common.write_shard(path, self.buffer[:self.filled])
        self.written.append(path)
        self.counts.append(self.filled)
        self.shard_index += 1
        self.filled = 0

    def close(self):
        """Write the rest: its own shard, or appended to the last train shard when shorter than
        half a shard (and the sum still fits the int32 count). Returns a note, or None."""
        if self.filled == 0:
            return None
        last_is_train = self.shard_index >= 2
        if (last_is_train and self.filled < self.shard_size // 2 and
                self.counts[-1] + self.filled <= common.MAX_SHARD_TOKENS):
            path = self.written.pop()
            previous = np.fromfile(path, dtype=np.uint16, offset=common.HEADER_INTS * 4)
            self.counts.pop()
            self.shard_index -= 1
            rest = self.filled
            self.buffer = np.concatenate([previous, self.buffer[:self.filled]])
            self.filled = len(self.buffer)
            self._write()
            return (f"note: the last {rest} tokens (under half of --shard-size {self.shard_size}) "
                    f"went into {os.path.basename(path)}, which holds {self.counts[-1]}")
        self._write()
        return None


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help=".txt / .jsonl files or directories of them")
    parser.add_argument("--out-dir", required=True, help="where the shards and tokenizer go")
    parser.add_argument("--prefix", default="data", help="shard file name prefix (default: data)")
    parser.add_argument("--shard-size", type=int, default=100_000_000,
                        help="tokens per shard (default: 100,000,000 = 200 MB of uint16)")
    parser.add_argument("--split-blank-lines", action="store_true",
                        help="in .txt files, every blank-line separated section is a document")
    parser.add_argument("--bpe-dir", help="directory with GPT-2's encoder.json and vocab.bpe "
                        "(default: tiktoken.get_encoding('gpt2'), online)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="tokenizer processes (default: all cores)")
    parser.add_argument("--force", action="store_true", help="replace existing shards")
    args = parser.parse_args()

    if not 1 <= args.shard_size <= common.MAX_SHARD_TOKENS:
        common.die(f"--shard-size {args.shard_size}", "out of range",
                   f"1..{common.MAX_SHARD_TOKENS} tokens (the header stores an int32 count)")
    if args.workers < 1:
        common.die(f"--workers {args.workers}", "out of range", "at least 1")
    if not args.prefix or os.sep in args.prefix or any(c in args.prefix for c in "*?[]"):
        common.die(f"--prefix {args.prefix}", "empty, or contains a path separator or a glob character",
                   "a plain file name prefix")
    prefix_glob = glob.escape(args.prefix)
    existing = sorted(glob.glob(os.path.join(glob.escape(args.out_dir), f"{prefix_glob}_val_[0-9]*.bin")) +
                      glob.glob(os.path.join(glob.escape(args.out_dir), f"{prefix_glob}_train_[0-9]*.bin")))
    if existing and not args.force:
        print(f"{args.out_dir}: {len(existing)} {args.prefix}_* shards already exist, skipping "
              "(use --force to redo)")
        return

    # Check every input before the slow steps, so bad input fails in well under a second.
    files = list_input_files(args.inputs)
    common.prepare_out_dir(args.out_dir)
    enc = common.load_gpt2_encoding(args.bpe_dir)

    # New shards go to a staging dir first: the old ones (--force) are replaced only once the
    # new set is complete, so a failure half-way never loses the data that was there.
    staging = tempfile.mkdtemp(prefix=f".{args.prefix}_staging_", dir=args.out_dir)
    from tqdm import tqdm
    writer = ShardWriter(staging, args.prefix, args.shard_size)
    total_bytes = sum(os.path.getsize(p) for p in files)
    progress = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenizing",
                    disable=None)  # None: only on a terminal, so stderr stays clean in logs
    error = None
    try:
        with multiprocessing.Pool(args.workers, initializer=_init_worker, initargs=(enc,)) as pool:
            documents = iter_documents(files, args.split_blank_lines)
            for tokens, num_bytes, error in pool.imap(tokenize_document, documents, chunksize=16):
                if error is not None:
                    break
                writer.add(tokens)
                progress.update(num_bytes)
    except OSError as e:  # an input vanished or became unreadable after the checks above
        error = common.DataError(e.filename or "input", f"cannot read ({e.strerror})",
                                 "readable input files")
    progress.close()
    if error is None and writer.total_tokens <= args.shard_size:
        error = common.DataError(f"--shard-size {args.shard_size}",
            f"the inputs give only {writer.total_tokens} tokens, all in the val shard",
            "a shard size below the token count, so that at least one train shard exists")
    if error is not None:
        shutil.rmtree(staging, ignore_errors=True)  # the old shards, if any, stay untouched
        common.die(error.subject, error.what, error.expected)
    note = writer.close()
    for path in existing:  # --force: stale shards would otherwise mix into a glob pattern
        os.remove(path)
    for path, count in zip(writer.written, writer.counts):
        final = os.path.join(args.out_dir, os.path.basename(path))
        os.replace(path, final)
        print(f"wrote {count} tokens to {final}")
    shutil.rmtree(staging, ignore_errors=True)
    common.write_tokenizer(os.path.join(args.out_dir, TOKENIZER_NAME), enc)
    if note:
        print(note)
    print(f"{writer.total_tokens} tokens in {writer.shard_index} shards "
          f"(1 val, {writer.shard_index - 1} train) in {args.out_dir}")
    # The trainer needs one global batch per shard: say the bound this data set puts on it.
    print(f"shortest shard: {min(writer.counts)} tokens, so the trainer takes "
          f"B*T*ranks <= {min(writer.counts) - 1} on these shards (-b, -t, and ranks under mpirun)")


if __name__ == "__main__":
    main()
