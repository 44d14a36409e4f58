#!/usr/bin/env bash
# tier: quick
# Reference state (dev/reference/, from dev/make_reference.py): internal consistency of the
# committed files, and the loader's one-line errors on damaged copies.
cd "$(dirname "$0")/.." && source tests/lib.sh
state=dev/reference/gpt2_ref_state.bin
if [ ! -x build/test_reference_state ]; then echo "FAIL reference_state_built: build/test_reference_state missing (make unit_tests)"; exit 1; fi
build/test_reference_state
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 100000 "$state" >"$tmp/truncated.bin"
check_fails reference_loader_rejects_truncated_file "file ends inside" build/test_reference_state "$tmp/truncated.bin"
{ printf '\001\000\000\000'; tail -c +5 "$state"; } >"$tmp/bad_magic.bin"
check_fails reference_loader_rejects_bad_magic "bad magic" build/test_reference_state "$tmp/bad_magic.bin"
{ cat "$state"; printf '\000'; } >"$tmp/extra.bin"
check_fails reference_loader_rejects_trailing_bytes "extra bytes" build/test_reference_state "$tmp/extra.bin"
check_fails reference_loader_rejects_missing_file "cannot open" build/test_reference_state "$tmp/missing.bin"
