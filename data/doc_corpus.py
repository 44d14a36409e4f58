"""Build an English corpus of documentation that Debian packages ship, tokenized into llm.c shards.

The texts: the Linux kernel's documentation (linux-doc: reStructuredText and plain-text files),
the Python documentation's reStructuredText sources (python3-doc: html/_sources/*.rst.txt), Perl's
manual pages in POD (perl-doc), git's manual pages and guides in AsciiDoc (git-doc), and the
manuals of PostgreSQL (postgresql-doc), bash (bash-doc) and the Debian Reference
(debian-reference-en), their HTML reduced to its text. One file is one document; a file reached
twice (python3-doc's html sits behind four symlinked directories) or with the same text as another
counts once. Measured here (Debian 12): 7306 documents, 58.4 M characters, 19.96 million GPT-2
tokens (1 M val, 18.96 M train): a corpus a small model does not see twice in the tokens a CPU
batch-size sweep trains on (tinyshakespeare's 305K train tokens are overfit within about an epoch).

    python3 data/doc_corpus.py --bpe-dir ../shared/data/gpt2            # installs the packages (root, apt)
    ./train_gpt2 -i 'data/doc_corpus/docs_train_*.bin' -j 'data/doc_corpus/docs_val_*.bin' -e d2 ...

Steps: apt-get install the packages whose files are missing (--no-install: only use
what is there); gather every document; shuffle them with a fixed seed (--seed), so that the val
shard is a sample of all the sources rather than the first one; write them to one .jsonl in
--work-dir; run data/prepare.py on it: shard 0 (docs_val_000000.bin, --val-tokens tokens) is the
val split, the rest train shards of --shard-size tokens, plus gpt2_tokenizer.bin. Measured here
(2 cores shared with other jobs): the install 1-2 minutes (about 65 MB download), the rest 3 minutes.
Bad input or a failed step prints one error line and exits 1.
"""
import argparse
import glob
import gzip
import hashlib
import html.parser
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))



def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


class HTMLText(html.parser.HTMLParser):
    """The visible text of an HTML page: no script, style or head; blocks end in newlines."""
    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd", "table", "title"}
    SKIP = {"script", "style", "head"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP: self.skip += 1
        elif tag in self.BLOCKS: self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP: self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCKS: self.parts.append("\n")

    def handle_data(self, data):
        if not self.skip: self.parts.append(data)

    def text(self):
        lines = [" ".join(line.split()) for line in "".join(self.parts).split("\n")]
        out, blank = [], False
        for line in lines:  # collapse runs of blank lines to one
            if line or not blank: out.append(line)
            blank = not line
        return "\n".join(out).strip() + "\n"


def sources():
    """(name, glob patterns) per source: what each package installs, release-independent."""
    return [
        ("linux-doc", ["/usr/share/doc/linux-doc-*/Documentation/**/*.rst.gz", "/usr/share/doc/linux-doc-*/Documentation/**/*.txt.gz"]),
        ("python3-doc", ["/usr/share/doc/python3.*/html/_sources/**/*.rst.txt"]),
        ("perl-doc", ["/usr/share/perl/5.*/pod/*.pod"]),
        ("git-doc", ["/usr/share/doc/git-doc/**/*.txt"]),
        ("postgresql-doc", ["/usr/share/doc/postgresql-doc-*/html/*.html"]),
        ("bash-doc", ["/usr/share/doc/bash/bashref.html"]),
        ("debian-reference-en", ["/usr/share/debian-reference/*.en.html"]),
    ]


def find_files(patterns):
    """The files the patterns match, each once: by real path (python3-doc's html is reached through
    four symlinked directories)."""
    files = set()
    for pattern in patterns:
        files.update(os.path.realpath(f) for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
    return sorted(files)


def install_missing():
    missing = [name for name, patterns in sources() if not find_files(patterns)]
    if not missing:
        return
    if os.geteuid() != 0:
        fail(f"packages {' '.join(missing)}: not installed and not root; expected root (apt-get install) or --no-install with them installed")
    print(f"doc_corpus: installing {' '.join(missing)} (apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            fail(f"{' '.join(cmd)}: exit {result.returncode} ({last}); expected Debian's package registry reachable")


def read_document(path):
    """One file's text (gzip and HTML handled); None when it has none."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    if path.endswith(".html"):
        parser = HTMLText()
        parser.feed(text)
        text = parser.text()
    return text if text.strip() else None


def main():
    parser = argparse.ArgumentParser(description="Debian documentation corpus -> llm.c token shards")
    parser.add_argument("--out-dir", default="data/doc_corpus", help="shards and tokenizer (default data/doc_corpus)")
    parser.add_argument("--work-dir", default=None, help="where the .jsonl goes (default: OUT_DIR/text)")
    parser.add_argument("--bpe-dir", help="GPT-2's encoder.json and vocab.bpe (offline); passed to data/prepare.py")
    parser.add_argument("--val-tokens", type=int, default=1_000_000, help="tokens in the val shard (default 1000000)")
    parser.add_argument("--shard-size", type=int, default=None, help="tokens per shard (default: --val-tokens)")
    parser.add_argument("--seed", type=int, default=1234, help="document shuffle seed (default 1234)")
    parser.add_argument("--no-install", action="store_true", help="do not apt-get install missing packages")
    parser.add_argument("--force", action="store_true", help="replace existing shards")
    args = parser.parse_args()
    if args.val_tokens < 1:
        fail(f"--val-tokens {args.val_tokens}: not positive; expected a number of tokens, e.g. 1000000")
    if not args.no_install:
        install_missing()
    documents, counts, seen = [], [], set()
    for name, patterns in sources():
        files = find_files(patterns)
        if not files:
            fail(f"{name}: no files match {' or '.join(patterns)}; expected the package installed (drop --no-install)")
        chars = kept = 0
        for path in files:
            text = read_document(path)
            digest = hashlib.sha256(text.encode("utf-8")).digest() if text is not None else None
            if text is not None and digest not in seen:  # the same text twice would leak into val
                seen.add(digest)
                documents.append(text)
                chars += len(text)
                kept += 1
        counts.append(f"{name} {kept} documents {chars / 1e6:.1f}M chars")
    print("doc_corpus: " + "; ".join(counts))
    random.Random(args.seed).shuffle(documents)
    work_dir = args.work_dir or os.path.join(args.out_dir, "text")
    os.makedirs(work_dir, exist_ok=True)
    jsonl = os.path.join(work_dir, "docs.jsonl")
    with open(jsonl + ".tmp", "w", encoding="utf-8") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + "\n")
    os.replace(jsonl + ".tmp", jsonl)
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "prepare.py"), jsonl,
           "--out-dir", args.out_dir, "--prefix", "docs", "--shard-size", str(args.shard_size or args.val_tokens)]
    if args.bpe_dir: cmd += ["--bpe-dir", args.bpe_dir]
    if args.force: cmd += ["--force"]
    if subprocess.run(cmd).returncode != 0:
        fail(f"{' '.join(cmd)}: failed (its error line is above); expected shards in {args.out_dir}")


if __name__ == "__main__":
    main()
