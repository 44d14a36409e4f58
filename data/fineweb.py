"""FineWeb / FineWeb-Edu into llm.c-format token shards with GPT-2's BPE (tiktoken).

Two sources of the same documents (each row's "text" is one document):
  online   (default) Hugging Face `datasets` in streaming mode: the corpus is read as it is
           tokenized and never sits on disk twice. --dataset fineweb | edu picks
           HuggingFaceFW/fineweb or HuggingFaceFW/fineweb-edu, --sample 10BT | 100BT its
           "sample-10BT" / "sample-100BT" subset (about 10e9 / 100e9 GPT-2 tokens).
  offline  --parquet PATH...: local parquet files, or directories of them (*.parquet, sorted),
           with a string column "text" (as the dataset's own parquet files have). Read with
           pyarrow in batches of rows, so a file never has to fit in memory.
Every document is led by <|endoftext|> (50256); documents are concatenated in order and cut into
shards of --shard-size tokens (default 100M, llm.c's), shard 0 the val split, the rest train:
  <out-dir>/<prefix>_val_000000.bin, <prefix>_train_000001.bin, ...   (prefix: fineweb or
  edu_fineweb, llm.c's names), and <out-dir>/gpt2_tokenizer.bin (common/tokenizer.h)
The file format, the last-shard rule and --force are data/prepare.py's (data/common.py,
tokenize_into_shards). Tokenization runs on --workers processes; the progress bar (documents)
shows only on a terminal. --max-documents N stops after N documents (a quick look at the data).

Examples:
  python3 data/fineweb.py --out-dir data/fineweb10B                        # sample-10BT, online
  python3 data/fineweb.py --dataset edu --sample 100BT --out-dir data/edu_fineweb100B
  python3 data/fineweb.py --parquet ~/fineweb/sample/10BT --bpe-dir ../shared/data/gpt2 \\
                          --out-dir data/fineweb10B                        # offline
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

DATASETS = {"fineweb": ("HuggingFaceFW/fineweb", "fineweb"),
            "edu": ("HuggingFaceFW/fineweb-edu", "edu_fineweb")}  # --dataset: (hub name, prefix)
TEXT_COLUMN = "text"
ROWS_PER_BATCH = 1024  # parquet rows read at a time


def tokenize_text(item):
    """Worker: (where, text) -> (tokens, 1 document, None), or a DataError for a null text."""
    where, text = item
    if not isinstance(text, str):
        return None, 1, common.DataError(where, f'"{TEXT_COLUMN}" is {type(text).__name__}',
                                         f'a string in column "{TEXT_COLUMN}"')
    return common.document_tokens(text), 1, None


def list_parquet_files(paths):
    """Expand directories (*.parquet, sorted); check each file exists and is a parquet file
    with a string column "text" (schema only: fast). Returns [(path, row count)]."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(glob.escape(path), "**", "*.parquet"), recursive=True))
            if not found:
                common.die(f"--parquet {path}", "directory has no .parquet files", "parquet files")
            files.extend(found)
        elif not os.path.isfile(path):
            common.die(f"--parquet {path}", "file not found", "an existing .parquet file or directory")
        else:
            files.append(path)
    result = []
    for path in files:
        try:
            meta = pq.ParquetFile(path)
            schema = meta.schema_arrow
        except (OSError, pa.ArrowException) as e:
            common.die(path, f"not a readable parquet file ({str(e).splitlines()[0]})",
                       f'a parquet file with a string column "{TEXT_COLUMN}"')
        if TEXT_COLUMN not in schema.names:
            common.die(path, f'no column "{TEXT_COLUMN}" (columns: {", ".join(schema.names)})',
                       f'a parquet file with a string column "{TEXT_COLUMN}"')
        kind = schema.field(TEXT_COLUMN).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            common.die(path, f'column "{TEXT_COLUMN}" is {kind}',
                       f'a parquet file with a string column "{TEXT_COLUMN}"')
        result.append((path, meta.metadata.num_rows))
    return result


def parquet_documents(files, max_documents):
    """Yield (where, text) per row of the "text" column, file by file, batch by batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    count = 0
    for path, _ in files:
        row = 0
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=ROWS_PER_BATCH, columns=[TEXT_COLUMN]):
                for text in batch.column(0).to_pylist():
                    if count == max_documents:
                        return
                    yield f"{path} row {row}", text
                    row += 1
                    count += 1
        except (OSError, pa.ArrowException) as e:  # a corrupt page after a good footer
            raise common.DataError(f"{path} row {row}", f"cannot read ({str(e).splitlines()[0]})",
                                   "a readable parquet file") from None


def open_hub_stream(dataset, sample):
    """The dataset's train split from the Hugging Face hub in streaming mode (opened here, in
    main, so that a network error is one line before any worker starts)."""
    try:
        import datasets
    except ImportError:
        common.die("--parquet", "not given, and the `datasets` package (online reading) is not installed",
                   "pip install datasets, or local files through --parquet PATH...")
    name = DATASETS[dataset][0]
    try:
        return datasets.load_dataset(name, name=f"sample-{sample}", split="train", streaming=True)
    except Exception as e:  # network and hub errors come in many types; all mean the same here
        common.die(f"{name} sample-{sample}", f"cannot open it online ({type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else ''})",
                   "network access to huggingface.co, or local files through --parquet PATH...")


def hub_documents(stream, where, max_documents):
    """Yield (where, text) per streamed record."""
    for index, record in enumerate(stream):
        if index == max_documents:
            return
        yield f"{where} document {index}", record.get(TEXT_COLUMN)


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="fineweb",
                        help="fineweb (HuggingFaceFW/fineweb) or edu (HuggingFaceFW/fineweb-edu)")
    parser.add_argument("--sample", choices=["10BT", "100BT"], default="10BT",
                        help="the dataset's sample-10BT or sample-100BT subset (online)")
    parser.add_argument("--parquet", nargs="+", metavar="PATH",
                        help="read these local parquet files / directories instead (offline)")
    parser.add_argument("--max-documents", type=int, default=-1, help="stop after N documents (-1: all)")
    common.add_shard_args(parser)
    parser.set_defaults(prefix=None)
    args = parser.parse_args()
    if args.prefix is None:
        args.prefix = DATASETS[args.dataset][1]
    common.check_shard_args(args)
    if args.max_documents < -1 or args.max_documents == 0:
        common.die(f"--max-documents {args.max_documents}", "out of range", "a positive count, or -1 for all")

    existing = common.existing_shards(args.out_dir, args.prefix)
    if existing and not args.force:
        print(f"{args.out_dir}: {len(existing)} {args.prefix}_* shards already exist, skipping "
              "(use --force to redo)")
        return
    # Inputs, output dir and tokenizer are checked before the slow part.
    if args.parquet:
        files = list_parquet_files(args.parquet)
        total = sum(rows for _, rows in files)
        if args.max_documents > 0:
            total = min(total, args.max_documents)
        documents = parquet_documents(files, args.max_documents)
    else:
        total = args.max_documents if args.max_documents > 0 else None
        stream = open_hub_stream(args.dataset, args.sample)
        documents = hub_documents(stream, f"{DATASETS[args.dataset][0]} sample-{args.sample}", args.max_documents)
    common.prepare_out_dir(args.out_dir)
    enc = common.load_gpt2_encoding(args.bpe_dir)
    common.tokenize_into_shards(documents, tokenize_text, enc, args.out_dir, args.prefix, args.shard_size,
                                args.workers, existing, progress_total=total, progress_unit="doc")


if __name__ == "__main__":
    main()
