"""Shared code for the data preparation scripts (tinyshakespeare.py, prepare.py, fineweb.py, hellaswag.py).

What lives here:
  - ArgumentParser: argparse whose flag errors use die()'s format.
  - die(): the one-line user error, `error: <file or flag>: <what is wrong>; expected <what>`,
    then exit status 1 (never a Python traceback for bad input).
  - load_gpt2_encoding(): tiktoken's GPT-2 BPE, either online (tiktoken.get_encoding) or from a
    local directory holding encoder.json and vocab.bpe, checked against tiktoken's sha256.
  - read_utf8_text(): a whole text file, with the missing / empty / not-UTF-8 errors.
  - prepare_out_dir(): creates the output directory and proves it is writable before any work.
  - write_shard(): one token shard in llm.c's format.
  - write_tokenizer(): the decode table the C side reads (common/tokenizer.h).
  - tokenize_into_shards(): documents -> token shards on all cores (ShardWriter: shard 0 val,
    the rest train), with the shared output flags (add_shard_args, check_shard_args).

File formats (all integers little-endian):
  token shard      header 256 x int32: [0] 20240520 magic, [1] 1 version, [2] token count,
                   rest 0; then token count x uint16 token ids.
  tokenizer file   header 256 x int32: [0] 20240328 magic, [1] 2 version, [2] vocab size V,
                   [3] end-of-text token id, rest 0; then for each token id 0..V-1: one uint8
                   byte length n (1..255) and the token's n raw bytes (not necessarily UTF-8:
                   byte-level BPE tokens may hold part of a multi-byte character).
"""
import argparse
import hashlib
import os
import sys

import numpy as np

HEADER_INTS = 256                 # both file kinds start with 256 int32 (1024 bytes)
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
TOKENIZER_MAGIC = 20240328
TOKENIZER_VERSION = 2
MAX_SHARD_TOKENS = 2**31 - 1      # the header stores the token count as int32

GPT2_VOCAB_SIZE = 50257
GPT2_EOT = 50256                  # <|endoftext|>, the document separator
# sha256 of the GPT-2 BPE files, the values tiktoken itself expects for its "gpt2" encoding.
GPT2_FILE_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}


class DataError(Exception):
    """Bad user input found away from main (e.g. in a worker): carries die()'s three parts."""

    def __init__(self, subject, what, expected):
        super().__init__(subject, what, expected)
        self.subject, self.what, self.expected = subject, what, expected


def die(subject, what, expected):
    """Print the one-line user error to stderr and exit with status 1."""
    sys.stderr.write(f"error: {subject}: {what}; expected {expected}\n")
    sys.stderr.flush()
    sys.exit(1)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with flag errors in the house style (one line, exit 1) instead of usage + 2."""

    def error(self, message):
        die(self.prog, message, "flags as listed by --help")


def sha256_of_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_file_sha256(path, expected_sha256, what_it_is):
    """Exit with a user error if `path` is missing, unreadable or has another sha256."""
    if not os.path.isfile(path):
        die(path, "file not found", what_it_is)
    try:
        digest = sha256_of_file(path)
    except OSError as e:
        die(path, f"cannot read ({e.strerror})", what_it_is)
    if digest != expected_sha256:
        die(path, f"sha256 is {digest}, the file is corrupt or another version",
            f"{what_it_is} with sha256 {expected_sha256}")


def _gpt2_split_pattern():
    # The pre-tokenizer regex of GPT-2 ("r50k"). Take tiktoken's own string so the local
    # encoding is token-for-token identical to tiktoken.get_encoding("gpt2").
    try:
        from tiktoken_ext.openai_public import r50k_pat_str
        return r50k_pat_str
    except ImportError:
        return (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def load_gpt2_encoding(bpe_dir=None):
    """tiktoken's GPT-2 encoding (V = 50257, <|endoftext|> = 50256).

    bpe_dir None: tiktoken.get_encoding("gpt2"), which downloads (or reuses its cache of) the
    BPE files. bpe_dir given: build the same encoding from bpe_dir/encoder.json and
    bpe_dir/vocab.bpe, offline, after checking both files' sha256.
    """
    import tiktoken
    if bpe_dir is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # network errors come in many types; all mean the same here
            die("--bpe-dir", f"not given, and loading tiktoken's gpt2 encoding online failed "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
                "network access, or --bpe-dir DIR holding encoder.json and vocab.bpe")
    import tiktoken.load
    if not os.path.isdir(bpe_dir):
        die(f"--bpe-dir {bpe_dir}", "not a directory",
            "a directory holding GPT-2's encoder.json and vocab.bpe")
    paths = {}
    for name, digest in GPT2_FILE_SHA256.items():
        paths[name] = os.path.join(bpe_dir, name)
        check_file_sha256(paths[name], digest, f"GPT-2's {name}")
    # An empty TIKTOKEN_CACHE_DIR makes tiktoken read the local files directly instead of
    # copying them into its cache (and possibly answering from a stale cached copy).
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=paths["vocab.bpe"], encoder_json_file=paths["encoder.json"],
            vocab_bpe_hash=GPT2_FILE_SHA256["vocab.bpe"],
            encoder_json_hash=GPT2_FILE_SHA256["encoder.json"])
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    return tiktoken.Encoding(name="gpt2", pat_str=_gpt2_split_pattern(), mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": GPT2_EOT},
                             explicit_n_vocab=GPT2_VOCAB_SIZE)


def decode_utf8_or_error(data, subject, byte_offset=0):
    """bytes -> str; on invalid UTF-8 raise DataError naming the absolute byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(subject, f"not valid UTF-8 (byte 0x{data[e.start]:02x} at offset "
                        f"{byte_offset + e.start})", "UTF-8 text") from None


def read_utf8_text(path, subject):
    """The whole file as str; exits with a user error if missing, unreadable, empty or not
    UTF-8. `subject` is what the error line names (the flag and path)."""
    if not os.path.isfile(path):
        die(subject, "file not found", "an existing UTF-8 text file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(subject, f"cannot read ({e.strerror})", "a readable UTF-8 text file")
    if not data.strip():
        die(subject, "file is empty (or only whitespace)", "UTF-8 text")
    try:
        return decode_utf8_or_error(data, subject)
    except DataError as e:
        die(e.subject, e.what, e.expected)


def prepare_out_dir(out_dir):
    """Create out_dir if needed and prove it is writable, before spending time tokenizing."""
    subject = f"--out-dir {out_dir}"
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, f".write_probe.{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        die(subject, f"cannot create or write to it ({e.strerror})", "a writable directory")


def _write_atomically(path, chunks):
    """Write byte chunks to path via a temporary name + rename, so an interrupted run never
    leaves a half-written file that a later run would skip as done."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        die(path, f"cannot write ({e.strerror})", "a writable output directory with free space")


def write_shard(path, tokens):
    """Write a token shard (format in the module header). tokens: 1-D ints in [0, 65535]."""
    tokens = np.asarray(tokens)
    assert tokens.ndim == 1 and len(tokens) <= MAX_SHARD_TOKENS, "shard token count fits int32"
    assert len(tokens) == 0 or (tokens.min() >= 0 and tokens.max() < 2**16), "tokens fit uint16"
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, len(tokens)
    _write_atomically(path, [header.tobytes(), tokens.astype("<u2").tobytes()])


def write_tokenizer(path, enc):
    """Write the C side's decode table for `enc` (format in the module header)."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2], header[3] = (TOKENIZER_MAGIC, TOKENIZER_VERSION,
                                                  enc.n_vocab, enc.eot_token)
    body = bytearray()
    for token_id in range(enc.n_vocab):
        token_bytes = enc.decode_single_token_bytes(token_id)
        assert 1 <= len(token_bytes) <= 255, f"token {token_id} length fits the uint8 field"
        body.append(len(token_bytes))
        body += token_bytes
    _write_atomically(path, [header.tobytes(), bytes(body)])


# ---------------------------------------------------------------------------------------------
# Documents -> token shards, shared by data/prepare.py (local text) and data/fineweb.py (parquet,
# Hugging Face datasets): the same file names, split convention and last-shard rule for both.

TOKENIZER_NAME = "gpt2_tokenizer.bin"
_worker_encoding = None  # the GPT-2 encoding, set in each tokenizer process by _init_worker


def _init_worker(enc):
    global _worker_encoding
    _worker_encoding = enc


def document_tokens(text):
    """In a tokenizer process: one document's uint16 tokens, led by <|endoftext|> (50256)."""
    tokens = [_worker_encoding.eot_token] + _worker_encoding.encode_ordinary(text)
    return np.array(tokens, dtype=np.uint16)


def add_shard_args(parser):
    """The output flags every shard-writing script takes (checked by check_shard_args)."""
    parser.add_argument("--out-dir", required=True, help="where the shards and tokenizer go")
    parser.add_argument("--prefix", default="data", help="shard file name prefix (default: data)")
    parser.add_argument("--shard-size", type=int, default=100_000_000,
                        help="tokens per shard (default: 100,000,000 = 200 MB of uint16)")
    parser.add_argument("--bpe-dir", help="directory with GPT-2's encoder.json and vocab.bpe "
                        "(default: tiktoken.get_encoding('gpt2'), online)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="tokenizer processes (default: all cores)")
    parser.add_argument("--force", action="store_true", help="replace existing shards")


def check_shard_args(args):
    """One error line for an out-of-range --shard-size / --workers or an unusable --prefix."""
    if not 1 <= args.shard_size <= MAX_SHARD_TOKENS:
        die(f"--shard-size {args.shard_size}", "out of range",
            f"1..{MAX_SHARD_TOKENS} tokens (the header stores an int32 count)")
    if args.workers < 1:
        die(f"--workers {args.workers}", "out of range", "at least 1")
    if not args.prefix or os.sep in args.prefix or any(c in args.prefix for c in "*?[]"):
        die(f"--prefix {args.prefix}", "empty, or contains a path separator or a glob character",
            "a plain file name prefix")


def existing_shards(out_dir, prefix):
    """The <prefix>_val_N.bin / <prefix>_train_N.bin already in out_dir, sorted."""
    import glob
    d, p = glob.escape(out_dir), glob.escape(prefix)
    return sorted(glob.glob(os.path.join(d, f"{p}_val_[0-9]*.bin")) +
                  glob.glob(os.path.join(d, f"{p}_train_[0-9]*.bin")))


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
        write_shard(path, self.buffer[:self.filled])
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
                self.counts[-1] + self.filled <= MAX_SHARD_TOKENS):
            path = self.written.pop()
            previous = np.fromfile(path, dtype=np.uint16, offset=HEADER_INTS * 4)
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


def tokenize_into_shards(documents, tokenize, enc, out_dir, prefix, shard_size, workers, existing,
                         progress_total=None, progress_unit="B"):
    """Tokenize `documents` on `workers` processes and write them as shards in out_dir.

    documents: an iterable of picklable items, read lazily (a stream never sits in memory whole).
    tokenize: a module-level function item -> (uint16 tokens or None, progress amount, DataError
      or None); it calls document_tokens(text). Errors come back as values so that one bad
      document gives one error line here, not a traceback from inside the pool.
    existing: the old shards (--force) to delete once the new set is complete.
    New shards go to a staging directory first and replace the old ones only when all are
    written, so a failure half-way never loses the data that was there. Exits with the error
    line on bad input; prints what it wrote. Returns the list of (path, token count)."""
    import multiprocessing
    import shutil
    import tempfile
    from tqdm import tqdm
    staging = tempfile.mkdtemp(prefix=f".{prefix}_staging_", dir=out_dir)
    writer = ShardWriter(staging, prefix, shard_size)
    progress = tqdm(total=progress_total, unit=progress_unit, unit_scale=True, desc="tokenizing",
                    disable=None)  # None: only on a terminal, so stderr stays clean in logs
    error = None
    try:
        with multiprocessing.Pool(workers, initializer=_init_worker, initargs=(enc,)) as pool:
            for tokens, amount, error in pool.imap(tokenize, documents, chunksize=16):
                if error is not None:
                    break
                writer.add(tokens)
                progress.update(amount)
    except DataError as e:  # raised by the document reader itself (e.g. a parquet file)
        error = e
    except OSError as e:  # an input vanished or became unreadable after the checks
        error = DataError(e.filename or "input", f"cannot read ({e.strerror})", "readable input files")
    progress.close()
    if error is None and writer.total_tokens <= shard_size:
        error = DataError(f"--shard-size {shard_size}",
                          f"the inputs give only {writer.total_tokens} tokens, all in the val shard",
                          "a shard size below the token count, so that at least one train shard exists")
    if error is not None:
        shutil.rmtree(staging, ignore_errors=True)  # the old shards, if any, stay untouched
        die(error.subject, error.what, error.expected)
    note = writer.close()
    for path in existing:  # --force: stale shards would otherwise mix into a glob pattern
        os.remove(path)
    result = []
    for path, count in zip(writer.written, writer.counts):
        final = os.path.join(out_dir, os.path.basename(path))
        os.replace(path, final)
        print(f"wrote {count} tokens to {final}")
        result.append((final, count))
    shutil.rmtree(staging, ignore_errors=True)
    write_tokenizer(os.path.join(out_dir, TOKENIZER_NAME), enc)
    if note:
        print(note)
    print(f"{writer.total_tokens} tokens in {writer.shard_index} shards "
          f"(1 val, {writer.shard_index - 1} train) in {out_dir}")
    # The trainer needs one global batch per shard: say the bound this data set puts on it.
    print(f"shortest shard: {min(writer.counts)} tokens, so the trainer takes "
          f"B*T*ranks <= {min(writer.counts) - 1} on these shards (-b, -t, and ranks under mpirun)")
    return result
