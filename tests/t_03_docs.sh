#!/usr/bin/env bash
# tier: quick
# Docs that stay true (tests/docs_check.py): every path, make target, script and trainer flag that
# README.md and docs/*.md name exists, and every `sh quick` block runs; then the check itself must
# fail on a copy of the repository where a named script is missing, a flag is unknown, a link
# dangles, a quick block fails or a results table has lost its provenance line (so it cannot pass
# by checking nothing).
cd "$(dirname "$0")/.." && source tests/lib.sh
if [ ! -x ./train_gpt2 ]; then echo "FAIL docs_trainer_built: ./train_gpt2 missing (make train_gpt2)"; exit 1; fi
why=$(ensure_tinyshakespeare) || { echo "FAIL docs_data: $why"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # the blocks' mpirun, as root
python3 tests/docs_check.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A copy of the repository: the pages copied, scripts/ copied, everything else linked.
mkroot() {
    local r=$1; mkdir -p "$r"
    for e in * .git; do case "$e" in README.md | docs | scripts) ;; *) ln -s "$PWD/$e" "$r/$e" ;; esac; done
    cp README.md "$r/"; cp -r docs scripts "$r/"
}
mkroot "$tmp/a"; rm "$tmp/a/scripts/export_hf.py"
check_fails docs_check_fails_on_missing_script "scripts/export_hf.py" python3 tests/docs_check.py --root "$tmp/a" --no-run --trainer ./train_gpt2
mkroot "$tmp/b"; printf '\nUse `-nosuchflag 3` and [a page](docs/no_such_page.md).\n' >>"$tmp/b/README.md"
check_fails docs_check_fails_on_unknown_flag "not in ./train_gpt2 -h: -nosuchflag" python3 tests/docs_check.py --root "$tmp/b" --no-run --trainer ./train_gpt2
check_fails docs_check_fails_on_dangling_link "docs/no_such_page.md" python3 tests/docs_check.py --root "$tmp/b" --no-run --trainer ./train_gpt2
mkroot "$tmp/c"; printf '\n```sh quick\nmake no_such_target_here\n```\n' >>"$tmp/c/docs/data.md"
check_fails docs_check_fails_on_unknown_make_target "no such make target: no_such_target_here" python3 tests/docs_check.py --root "$tmp/c" --no-run --trainer ./train_gpt2
mkroot "$tmp/d"; printf '\n```sh quick\n./train_gpt2 -x nonsense\n```\n' >>"$tmp/d/docs/data.md"
sed -i 's/^```sh quick$/```sh/' "$tmp/d/README.md" # only the failing block runs
check_fails docs_check_fails_on_failing_quick_block "docs_runs_docs/data.md_block1: exit" python3 tests/docs_check.py --root "$tmp/d" --trainer ./train_gpt2
mkroot "$tmp/e"; sed -i '/^Provenance:/d' "$tmp/e/docs/results/vs_pytorch.md"
sed -i 's/^\(Provenance: .*\) · peer: .*$/\1/' "$tmp/e/docs/results/zero_memory.md" # a line without its peer
check_fails docs_check_fails_on_table_without_provenance "vs_pytorch.md: line 1[0-9]: table without a provenance paragraph" python3 tests/docs_check.py --root "$tmp/e" --no-run --trainer ./train_gpt2
check_fails docs_check_fails_on_provenance_without_peer "zero_memory.md: line [0-9]*: provenance without peer" python3 tests/docs_check.py --root "$tmp/e" --no-run --trainer ./train_gpt2
