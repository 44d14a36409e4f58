#!/usr/bin/env python3
"""docs_check.py: the docs stay true. Checks README.md and docs/*.md (not docs/results/, which
records what was measured then):

  paths    every repository path they name (in `code` spans, fenced blocks and markdown links)
           exists: paths under the source folders, top-level files, relative links between pages;
           outputs (build/, out/, DIR/..., globs, placeholders) are not paths to check;
  targets  every `make TARGET` names a rule the Makefile (with cuda.mk, emu.mk) has (`make -n`);
  flags    every flag given to a trainer (./train_gpt2, train_gpt2cu, build/train_gpt2_zN, ...) and
           every flag named alone in a `code` span is in `./train_gpt2 -h`'s list (or is one of a
           few other tools' flags, listed below);
  blocks   every fenced block whose info string is `sh quick` runs under bash -e from the
           repository root and exits 0 (keep them small: -h, a d1 two-step run, a plan);
  results  every table in docs/results/ (its *.md files, subfolders included) follows a
           provenance paragraph, "Provenance: date: ... · commit: ... · machine: ... · command:
           ... · peer: ...", each field non-empty ("not recorded" where it is not known); one
           paragraph covers the tables after it up to the next heading of its level or above, or
           the next provenance paragraph; a results file without tables still needs one.

Usage: python3 tests/docs_check.py [--root DIR] [--no-run] [--trainer PATH]
Prints one PASS/FAIL line per check (tests/lib.sh style) and exits 1 on any FAIL.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

# Folders whose paths name sources (a path under another first folder is an output or external).
SOURCE_DIRS = ("zero", "common", "cpu", "kernels", "plan", "train", "model", "scripts", "tests", "dev", "docs", "data")
TOP_FILES = re.compile(r"^[\w.-]+\.(c|cu|cuh|h|py|sh|mk|md)$|^Makefile$")
EXTERNAL_NAMES = {"llm.c", "cuda_occupancy.h"}  # cuda_occupancy.h: the CUDA toolkit's  # names of other projects' files, not this repository's
PLACEHOLDER = re.compile(r"[*?<>$%{}]|\bDIR\b|\bOUT\b|\.\.\.|/$|^~")
# Trainers whose flags are checked against -h (the CPU build's list is the union of both builds').
TRAINER = re.compile(r"(^|/)(train_gpt2|train_gpt2cu|train_gpt2_z[0-3]|train_gpt2cu_z[0-3])$")
# Flags of other tools that pages name alone in a code span: mpirun, srun, sbatch, zero_consolidate,
# the data, recipe (scripts/gpt2_124M.sh) and Hugging Face scripts.
OTHER_FLAGS = {"-np", "-x", "-H", "-N", "-n", "-to", "-from", "-z", "-o", "--force", "--dtype", "--bpe-dir",
               "--allow-run-as-root", "--oversubscribe", "--mpi", "--hostfile", "--plan", "--merge", "--step",
               "--slurm", "--hf", "--build-only", "--split-blank-lines", "--shard-size", "--target-loss",
               "--ranks", "--mca", "--map-by", "-lcudnn", "--requeue", "--batch", "--machine", "--stage",
               "--dataset", "--sample", "--parquet", "--workers", "--jsonl", "--ntasks-per-node", "--nodes", "--signal"}


def md_files(root):
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [f for f in files if os.path.isfile(f)]


def split_page(text):
    """(fenced blocks as (info, body), code spans, links, prose lines) of one markdown page."""
    blocks, spans, links = [], [], []
    prose = []
    fence, info, body = False, "", []
    for line in text.split("\n"):
        if line.startswith("```"):
            if not fence:
                fence, info, body = True, line[3:].strip(), []
            else:
                blocks.append((info, "\n".join(body)))
                fence = False
            continue
        if fence:
            body.append(line)
        else:
            prose.append(line)
    joined = "\n".join(prose)
    spans = re.findall(r"`([^`\n]+)`", joined)
    links = re.findall(r"\]\(([^)\s]+)\)", joined)
    return blocks, spans, links


def path_candidates(s):
    for tok in re.split(r"[\s,;:()'\"=\[\]]+", s):
        tok = tok.strip(".").rstrip("`")
        if not tok or PLACEHOLDER.search(tok) or tok.startswith(("-", "http", "/")):
            continue
        first = tok.split("/")[0]
        if "/" in tok and first in SOURCE_DIRS:
            yield tok
        elif "/" not in tok and TOP_FILES.match(tok) and tok not in EXTERNAL_NAMES:
            yield tok


def tracked_basenames():
    """Names of the repository's files (a bare file name in a page must be one of them)."""
    p = subprocess.run(["git", "ls-files"], capture_output=True, text=True)
    names = {os.path.basename(f) for f in p.stdout.split()}
    for dirpath, _, files in os.walk(".", followlinks=True):  # untracked files of a working tree count too
        if "/.git" not in dirpath and "/build" not in dirpath:
            names.update(files)
    return names


def exists(path, basenames):
    if "/" in path:
        return os.path.exists(path)
    return os.path.exists(path) or path in basenames


def is_generated(path):
    # data/<corpus>/ shards, dev/reference outputs and build products are made by scripts, not tracked.
    parts = path.split("/")
    if parts[0] == "data" and not path.endswith(".py"):
        return True
    return path.endswith((".bin", ".jsonl", ".png", ".json", ".txt", ".tgz")) and not os.path.exists(path)


def shell_commands(block):
    """Logical command lines of a shell block (continuations joined, comments cut)."""
    out, cur = [], ""
    for line in block.split("\n"):
        line = re.sub(r"(^|\s)#.*$", "", line)
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    return out


def trainer_flags(trainer):
    h = subprocess.run([trainer, "-h"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"^\s+(-{1,2}[A-Za-z][\w-]*)", h.stdout + h.stderr, re.M))


PROVENANCE_FIELDS = ("date", "commit", "machine", "command", "peer")


def provenance_problems(text):
    """What a results page lacks: a list of 'line N: why' (empty when every table has its
    provenance). A table is a '|' line followed by a '|---' separator line."""
    lines = text.split("\n")
    problems, current, cur_level, seen_any, fence = [], None, 0, False, False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = not fence
        elif fence:
            pass
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            if current is not None and level <= cur_level:
                current = None
        elif line.startswith("Provenance:"):
            para = [line]
            while i + 1 < len(lines) and lines[i + 1].strip():
                i += 1
                para.append(lines[i])
            body = " ".join(para)[len("Provenance:"):]
            parts = re.split(r"\b(" + "|".join(PROVENANCE_FIELDS) + r"):", body)
            values = {parts[k]: parts[k + 1].strip(" ·;,.") for k in range(1, len(parts) - 1, 2)}
            missing = [f for f in PROVENANCE_FIELDS if not values.get(f)]
            seen_any = True
            if missing:
                problems.append(f"line {i + 1}: provenance without " + ", ".join(missing))
                current = None
            else:
                current = i
                last = [n for n, l in enumerate(lines[:i + 1]) if l.startswith("#")]
                cur_level = (len(lines[last[-1]]) - len(lines[last[-1]].lstrip("#"))) if last else 0
        elif line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|\s*:?-{3}", lines[i + 1]):
            if current is None:
                problems.append(f"line {i + 1}: table without a provenance paragraph before it")
            while i + 1 < len(lines) and lines[i + 1].startswith("|"):
                i += 1
        i += 1
    if not seen_any and not problems:
        problems.append("no provenance paragraph (a results file without tables needs one too)")
    return problems


def check_results(root, r):
    pages = sorted(glob.glob(os.path.join(root, "docs", "results", "**", "*.md"), recursive=True))
    if not pages:
        r.fail("docs_results_provenance", "no docs/results/*.md found")
    for page in pages:
        rel = os.path.relpath(page, root)
        problems = provenance_problems(open(page, encoding="utf-8").read())
        if problems:
            r.fail(f"docs_results_provenance_{rel}", "; ".join(problems[:4]) + ("; ..." if len(problems) > 4 else ""))
        else:
            r.ok(f"docs_results_provenance_{rel}")


class Report:
    def __init__(self):
        self.failed = 0

    def ok(self, name):
        print(f"PASS {name}")

    def fail(self, name, why):
        self.failed += 1
        print(f"FAIL {name}: {why}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--no-run", action="store_true", help="skip running the `sh quick` blocks")
    ap.add_argument("--trainer", default=None, help="trainer for -h (default ROOT/train_gpt2)")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    os.chdir(root)
    r = Report()
    flags = trainer_flags(a.trainer or os.path.join(root, "train_gpt2"))
    if len(flags) < 20:
        r.fail("docs_trainer_help", f"./train_gpt2 -h listed {len(flags)} flags; expected the trainer's flag list")
        return 1
    make_targets = None

    def make_target_ok(t):
        # One read of make's database (make -pq: rules after the Makefile and its includes are
        # read, nothing built), then every target looked up in it; pattern rules match by stem.
        nonlocal make_targets
        if make_targets is None:
            p = subprocess.run(["make", "-rRpq", "--no-print-directory", "__docs_check_nothing__"], capture_output=True, text=True, timeout=300)
            make_targets = set()
            for line in p.stdout.split("\n"):
                m = re.match(r"^([^#\s=:][^=:]*?):(?!=)", line)
                if m:
                    make_targets.update(m.group(1).split())
        if t in make_targets:
            return True
        return any("%" in pat and pat != "%" and re.fullmatch(re.escape(pat).replace("%", ".+"), t) for pat in make_targets)

    basenames = tracked_basenames()
    check_results(root, r)

    for page in md_files(root):
        rel = os.path.relpath(page, root)
        blocks, spans, links = split_page(open(page, encoding="utf-8").read())
        missing, bad_links = set(), set()
        texts = spans + [b for info, b in blocks if info in ("", "sh", "bash", "sh quick", "c")]
        for t in texts:
            for p in path_candidates(t):
                if not exists(p, basenames) and not is_generated(p):
                    missing.add(p)
        for link in links:
            if link.startswith(("http://", "https://", "#", "mailto:")):
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(rel), link.split("#")[0]))
            if not os.path.exists(target):
                bad_links.add(link)
        if missing or bad_links:
            r.fail(f"docs_paths_{rel}", "named but missing: " + ", ".join(sorted(missing | bad_links)))
        else:
            r.ok(f"docs_paths_{rel}")

        bad_targets, bad_flags = set(), set()
        for info, body in blocks:
            if info not in ("", "sh", "bash", "sh quick"):
                continue
            for cmd in shell_commands(body):
                for seg in re.split(r"\s*(?:&&|\|\||;|\|)\s*", cmd):
                    words = seg.split()
                    while words and ("=" in words[0] or words[0] in ("nice", "-n", "10", "env", "time")):
                        words = words[1:]
                    if not words:
                        continue
                    if words[0] == "make":
                        for w in words[1:]:
                            if w.startswith("-") or "=" in w or w in ("10",):
                                continue
                            if not make_target_ok(w):
                                bad_targets.add(w)
                    # a trainer, run directly or under mpirun/srun: its flags come after its path
                    for i, w in enumerate(words):
                        if i > 0 and words[i - 1].startswith("-"):
                            continue  # a path given as another flag's value (--binary build/train_gpt2_z2)
                        if TRAINER.search(w) and not w.endswith((".c", ".cu")):
                            for f in words[i + 1:]:
                                if re.match(r"^-{1,2}[A-Za-z][\w-]*$", f) and f not in flags:
                                    bad_flags.add(f)
                            break
        for s in spans:
            m = re.match(r"^(-{1,2}[A-Za-z][\w-]*)( \S+)?$", s.strip())
            if m and m.group(1) not in flags and m.group(1) not in OTHER_FLAGS:
                bad_flags.add(m.group(1))
        if bad_targets:
            r.fail(f"docs_make_targets_{rel}", "no such make target: " + ", ".join(sorted(bad_targets)))
        else:
            r.ok(f"docs_make_targets_{rel}")
        if bad_flags:
            r.fail(f"docs_flags_{rel}", "not in ./train_gpt2 -h: " + ", ".join(sorted(bad_flags)))
        else:
            r.ok(f"docs_flags_{rel}")

        if a.no_run:
            continue
        for k, (info, body) in enumerate(b for b in blocks if b[0] == "sh quick"):
            name = f"docs_runs_{rel}_block{k + 1}"
            try:
                p = subprocess.run(["bash", "-e", "-c", body], capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                r.fail(name, "did not finish in 600 s")
                continue
            if p.returncode != 0:
                tail = (p.stdout + p.stderr).strip().split("\n")[-3:]
                r.fail(name, f"exit {p.returncode}: " + " | ".join(tail))
            else:
                r.ok(name)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
