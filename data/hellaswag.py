"""HellaSwag (Zellers et al. 2019, "HellaSwag: Can a Machine Really Finish Your Sentence?") into
the trainer's eval file, GPT-2 BPE tokens (tiktoken).

Input: HellaSwag's jsonl, one example per line with "ctx" (the context string), "endings" (a
list of 4 strings) and "label" (the index of the right ending, an int or a digit string).
  online   (default) the public validation split, hellaswag_val.jsonl from the authors'
           repository (10042 examples), fetched with urllib
  offline  --jsonl FILE: a local file in the same format
Each completion is " " + ending (GPT-2's tokens for a word after the context start with its
space), tokenized apart from the context, so context + completion is the row the model scores.

Output (--out, default data/hellaswag/hellaswag_val.bin): llm.c's HellaSwag eval layout, so
files from llm.c's own script load too (common/hellaswag.h reads it). Little-endian:
  header   256 x int32: [0] 20240522 magic, [1] 1 version, [2] number of examples,
           [3] the longest example's size in bytes (its record below), rest 0
  examples one record each, uint16 words:
           65535 (start of an example), the record's size in bytes (these words included),
           the example's index in the input, its label (0..3), the number of completions (4),
           the context's token count n, n context tokens, then for each of the 4 completions:
           its token count m, m tokens
Written to a temporary name, then renamed. Bad input: one error line, exit 1.

Examples:  python3 data/hellaswag.py                       # online, data/hellaswag/hellaswag_val.bin
           python3 data/hellaswag.py --jsonl hellaswag_val.jsonl --bpe-dir ../shared/data/gpt2
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HELLASWAG_MAGIC = 20240522
HELLASWAG_VERSION = 1
START_OF_EXAMPLE = 65535
NUM_COMPLETIONS = 4
VAL_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
EXPECTED = 'one JSON object per line with "ctx" (string), "endings" (4 strings), "label" (0-3)'


def parse_example(line, subject):
    """One jsonl line -> (ctx, endings, label), or a DataError naming file:line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise common.DataError(subject, f"not valid JSON ({e.msg})", EXPECTED)
    if not isinstance(record, dict):
        raise common.DataError(subject, "not a JSON object", EXPECTED)
    ctx, endings, label = record.get("ctx"), record.get("endings"), record.get("label")
    if not isinstance(ctx, str) or not ctx:
        raise common.DataError(subject, 'no "ctx" string', EXPECTED)
    if (not isinstance(endings, list) or len(endings) != NUM_COMPLETIONS or
            not all(isinstance(e, str) and e for e in endings)):
        raise common.DataError(subject, '"endings" is not a list of 4 non-empty strings', EXPECTED)
    if isinstance(label, str) and label.isdigit():
        label = int(label)
    if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < NUM_COMPLETIONS:
        raise common.DataError(subject, f'"label" is {label!r}', EXPECTED)
    return ctx, endings, label


def example_record(enc, index, ctx, endings, label):
    """The uint16 words of one example record (layout in the module header)."""
    context = enc.encode_ordinary(ctx)
    completions = [enc.encode_ordinary(" " + ending) for ending in endings]
    words = [START_OF_EXAMPLE, 0, index, label, NUM_COMPLETIONS, len(context)] + context
    for tokens in completions:
        words += [len(tokens)] + tokens
    words[1] = 2 * len(words)
    if words[1] > 65535 or index > 65535:
        raise ValueError(f"example {index} is {words[1]} bytes; the layout's uint16 fields hold at most 65535")
    return np.array(words, dtype="<u2")


def write_eval_file(path, records):
    """Header + records, through a temporary name and a rename."""
    header = np.zeros(common.HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = HELLASWAG_MAGIC, HELLASWAG_VERSION, len(records)
    header[3] = max(2 * len(r) for r in records)
    common._write_atomically(path, [header.tobytes()] + [r.tobytes() for r in records])


def read_eval_file(path):
    """The eval file back as [(index, label, context tokens, [4 completion token lists])]; for
    tests and inspection (the trainer's reader is common/hellaswag.h). Asserts the layout."""
    header = np.fromfile(path, dtype="<i4", count=common.HEADER_INTS)
    assert header[0] == HELLASWAG_MAGIC and header[1] == HELLASWAG_VERSION, f"{path}: not a HellaSwag eval file"
    words = np.fromfile(path, dtype="<u2", offset=4 * common.HEADER_INTS).tolist()
    examples, pos = [], 0
    for _ in range(header[2]):
        start = pos
        assert words[pos] == START_OF_EXAMPLE and words[pos + 4] == NUM_COMPLETIONS
        index, label, n = words[pos + 2], words[pos + 3], words[pos + 5]
        pos += 6
        context = words[pos:pos + n]
        pos += n
        completions = []
        for _ in range(NUM_COMPLETIONS):
            m = words[pos]
            completions.append(words[pos + 1:pos + 1 + m])
            pos += 1 + m
        assert 2 * (pos - start) == words[start + 1], f"{path}: record {index} size"
        examples.append((index, label, context, completions))
    assert pos == len(words), f"{path}: bytes after the last record"
    return examples


def read_lines(args):
    """(subject prefix, list of raw lines) from --jsonl or the public URL."""
    if args.jsonl:
        if not os.path.isfile(args.jsonl):
            common.die(f"--jsonl {args.jsonl}", "file not found", "HellaSwag's jsonl")
        with open(args.jsonl, "rb") as f:
            return args.jsonl, f.read().splitlines()
    import urllib.request
    try:
        with urllib.request.urlopen(VAL_URL, timeout=60) as response:
            return VAL_URL, response.read().splitlines()
    except Exception as e:  # URLError, timeouts, HTTP errors: all mean the same here
        common.die(VAL_URL, f"cannot download ({type(e).__name__}: {e})",
                   "network access, or a local copy through --jsonl FILE")


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jsonl", help="local HellaSwag jsonl (default: download the validation split)")
    parser.add_argument("--out", default="data/hellaswag/hellaswag_val.bin", help="the eval file to write")
    parser.add_argument("--bpe-dir", help="directory with GPT-2's encoder.json and vocab.bpe "
                        "(default: tiktoken.get_encoding('gpt2'), online)")
    args = parser.parse_args()
    subject, lines = read_lines(args)
    examples = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            text = common.decode_utf8_or_error(line, f"{subject}:{number}")
            examples.append(parse_example(text, f"{subject}:{number}"))
        except common.DataError as e:
            common.die(e.subject, e.what, e.expected)
    if not examples:
        common.die(subject, "no examples", EXPECTED)
    if len(examples) > 65536:
        common.die(subject, f"{len(examples)} examples", "at most 65536 (the layout's uint16 index)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    enc = common.load_gpt2_encoding(args.bpe_dir)
    try:
        records = [example_record(enc, i, *ex) for i, ex in enumerate(examples)]
    except ValueError as e:
        common.die(subject, str(e), "examples under 32767 tokens")
    write_eval_file(args.out, records)
    longest = max(len(r) for r in records)
    print(f"wrote {len(records)} examples to {args.out} (longest record {2 * longest} bytes)")


if __name__ == "__main__":
    main()
