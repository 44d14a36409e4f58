#!/usr/bin/env bash
# tier: quick
# Test group: the data side of the trainer.
#   1. build/test_dataloader: C dataloader + tokenizer unit tests (prints its own PASS/FAIL lines)
#   2. bad input for the C dataloader / tokenizer (through build/test_dataloader_badinput)
#   3. bad input for data/tinyshakespeare.py and data/prepare.py
#   4. a real, offline run of data/tinyshakespeare.py and data/prepare.py, checked with tiktoken
#      and with the C side
# Every bad input must give exactly one stderr line `error: <file or flag>: <what>; expected
# <what>` and exit status 1. Needs `make unit_tests` first, and the offline files in
# ../shared/data (or $SHARED_DATA). Runs in about 10 s.
cd "$(dirname "$0")/.."
source tests/lib.sh

SHARED_DATA=$(shared_data)
TEXT=$SHARED_DATA/tinyshakespeare/input.txt
BPE=$SHARED_DATA/gpt2
# Without the local copies every check below would fail on its own; say once what is missing.
if [ ! -f "$TEXT" ] || [ ! -f "$BPE/encoder.json" ]; then
    echo "FAIL data_local_copies: $TEXT or $BPE/encoder.json missing; expected SHARED_DATA=dir holding tinyshakespeare/input.txt and gpt2/ (README: Run it)"
    exit 1
fi
BADINPUT=build/test_dataloader_badinput
tmp=$(mktemp -d /tmp/t_20_data.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# check_error_line NAME PATTERN CMD...: PASS if CMD exits 1 and its stderr is exactly one line
# in the house format (`error: ...; expected ...`) that contains PATTERN (no traceback).
check_error_line() {
    local name=$1 pattern=$2; shift 2
    local rc
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    local lines; lines=$(wc -l <"$tmp/err")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^error: .*: .*; expected ' "$tmp/err" \
        && grep -q -- "$pattern" "$tmp/err"; then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $rc, $lines stderr lines, wanted 1 and one error line with" \
             "'$pattern'; got: $(tail -2 "$tmp/err" | tr '\n' ' ')"
    fi
}

# ---------------------------------------------------------------------------------------------
# 1. unit tests
for binary in build/test_dataloader "$BADINPUT"; do
    if [ ! -x "$binary" ]; then echo "FAIL $binary: not built (run make unit_tests)"; exit 1; fi
done
build/test_dataloader >"$tmp/unit" 2>&1; rc=$?
cat "$tmp/unit"
if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$tmp/unit"; then
    echo "FAIL test_dataloader: exited $rc: $(tail -1 "$tmp/unit")"
fi

# ---------------------------------------------------------------------------------------------
# 2. bad input for the C side. Files made with numpy: shards of 100 tokens (0..99).
python3 - "$tmp" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
def shard(name, magic=20240520, version=1, count=100, tokens=100, header_bytes=1024):
    header = np.zeros(256, "<i4"); header[:3] = magic, version, count
    with open(f"{d}/{name}", "wb") as f:
        f.write(header.tobytes()[:header_bytes]); f.write(np.arange(tokens, dtype="<u2").tobytes())
shard("good_a.bin"); shard("good_b.bin")
shard("bad_magic.bin", magic=12345)
shard("bad_version.bin", version=2)
shard("truncated.bin", tokens=60)              # header says 100 tokens, file holds 60
shard("short_header.bin", tokens=0, header_bytes=40)
shard("few_tokens.bin", count=5, tokens=5)
def tokenizer(name, magic=20240328, version=2, vocab=3, eot=2, tokens=(b"a", b"bc", b"<eot>")):
    header = np.zeros(256, "<i4"); header[:4] = magic, version, vocab, eot
    with open(f"{d}/{name}", "wb") as f:
        f.write(header.tobytes())
        for t in tokens: f.write(bytes([len(t)]) + t)
tokenizer("tok_good.bin")
tokenizer("tok_bad_magic.bin", magic=1)
tokenizer("tok_bad_version.bin", version=1)
tokenizer("tok_truncated.bin", tokens=(b"a", b"bc"))
EOF
mkdir -p "$tmp/dir_shard.bin"
check "c_dataloader_accepts_good_shards" \
    bash -c "$BADINPUT dataloader '$tmp/good_*.bin' 1 8 0 1 | grep -q 'ok shards=2 tokens=200'"
check_error_line c_dataloader_glob_matches_nothing "no file matches" \
    $BADINPUT dataloader "$tmp/nothing_*.bin" 1 8 0 1
check_error_line c_dataloader_unreadable_file "dir_shard.bin: cannot read" \
    $BADINPUT dataloader "$tmp/dir_shard.bin" 1 8 0 1
check_error_line c_dataloader_truncated_header "short_header.bin: file shorter than the shard header" \
    $BADINPUT dataloader "$tmp/short_header.bin" 1 8 0 1
check_error_line c_dataloader_wrong_magic "bad_magic.bin: bad magic number 12345; expected 20240520" \
    $BADINPUT dataloader "$tmp/bad_magic.bin" 1 8 0 1
check_error_line c_dataloader_wrong_version "bad_version.bin: unsupported shard version 2" \
    $BADINPUT dataloader "$tmp/bad_version.bin" 1 8 0 1
check_error_line c_dataloader_file_shorter_than_header_count "truncated.bin: .*(truncated); expected 1224 bytes" \
    $BADINPUT dataloader "$tmp/truncated.bin" 1 8 0 1
check_error_line c_dataloader_shard_smaller_than_one_batch "few_tokens.bin: shard has 5 tokens" \
    $BADINPUT dataloader "$tmp/few_tokens.bin" 1 8 0 1
# 100 tokens: 3 ranks x B=1 x T=33 + 1 = 100 fits exactly; T=34 needs 103.
check "c_dataloader_shard_exactly_one_global_batch_ok" $BADINPUT dataloader "$tmp/good_a.bin" 1 33 2 3
check_error_line c_dataloader_shard_smaller_than_world_size_batch "expected at least 103 tokens" \
    $BADINPUT dataloader "$tmp/good_a.bin" 1 34 0 3
check_error_line c_dataloader_bad_shard_among_good_ones "bad_magic.bin: bad magic" \
    $BADINPUT dataloader "$tmp/*.bin" 1 8 0 1
check_error_line c_dataloader_rank_out_of_range "rank 3 of 3 processes" \
    $BADINPUT dataloader "$tmp/good_a.bin" 1 8 3 3
check "c_tokenizer_accepts_good_file" \
    bash -c "$BADINPUT tokenizer '$tmp/tok_good.bin' | grep -q 'init_ok=1 vocab=3 eot=2'"
check "c_tokenizer_missing_file_warns_and_continues" \
    bash -c "$BADINPUT tokenizer '$tmp/no_tokenizer.bin' 2>'$tmp/warn' | grep -q 'init_ok=0' &&
             [ \$(wc -l <'$tmp/warn') -eq 1 ] && grep -q '^warning: .*no_tokenizer.bin' '$tmp/warn'"
check_error_line c_tokenizer_wrong_magic "tok_bad_magic.bin: bad magic number 1; expected 20240328" \
    $BADINPUT tokenizer "$tmp/tok_bad_magic.bin"
check_error_line c_tokenizer_wrong_version "tok_bad_version.bin: unsupported tokenizer version 1" \
    $BADINPUT tokenizer "$tmp/tok_bad_version.bin"
check_error_line c_tokenizer_truncated "tok_truncated.bin: file ends at token 2 of 3 (truncated)" \
    $BADINPUT tokenizer "$tmp/tok_truncated.bin"

# ---------------------------------------------------------------------------------------------
# 3. bad input for the Python scripts. Inputs are checked before the BPE is loaded, so each
# case takes a fraction of a second.
printf '' >"$tmp/empty.txt"
printf 'good start \xff\xfe bad bytes\n' >"$tmp/latin1.txt"
printf 'Too short to fill the val split.\n' >"$tmp/short.txt"
printf '{"text": "fine"}\n{"txt": "no text field"}\n' >"$tmp/no_field.jsonl"
printf '{"text": "fine"}\n{"text": broken\n' >"$tmp/bad_json.jsonl"
printf '{"text": "bad \xff byte"}\n' >"$tmp/latin1.jsonl"
echo "a regular file" >"$tmp/not_a_dir"
mkdir -p "$tmp/bpe_corrupt" "$tmp/bpe_partial"
cp "$BPE/encoder.json" "$tmp/bpe_corrupt/"; cp "$BPE/encoder.json" "$tmp/bpe_partial/"
{ cat "$BPE/vocab.bpe"; echo "extra line"; } >"$tmp/bpe_corrupt/vocab.bpe"
TS="python3 data/tinyshakespeare.py"
PREP="python3 data/prepare.py"
check_error_line tinyshakespeare_missing_text "--text $tmp/missing.txt: file not found" \
    $TS --text "$tmp/missing.txt" --bpe-dir "$BPE" --out-dir "$tmp/o1"
check_error_line tinyshakespeare_empty_text "empty.txt: file is empty" \
    $TS --text "$tmp/empty.txt" --bpe-dir "$BPE" --out-dir "$tmp/o2"
check_error_line tinyshakespeare_non_utf8_text "latin1.txt: not valid UTF-8 (byte 0xff at offset 11)" \
    $TS --text "$tmp/latin1.txt" --bpe-dir "$BPE" --out-dir "$tmp/o3"
check_error_line tinyshakespeare_missing_bpe_dir "--bpe-dir $tmp/no_bpe: not a directory" \
    $TS --text "$TEXT" --bpe-dir "$tmp/no_bpe" --out-dir "$tmp/o4"
check_error_line tinyshakespeare_missing_bpe_file "bpe_partial/vocab.bpe: file not found" \
    $TS --text "$TEXT" --bpe-dir "$tmp/bpe_partial" --out-dir "$tmp/o5"
check_error_line tinyshakespeare_corrupt_bpe_checksum "bpe_corrupt/vocab.bpe: sha256 is .*expected .*1ce1664773c5" \
    $TS --text "$TEXT" --bpe-dir "$tmp/bpe_corrupt" --out-dir "$tmp/o6"
check_error_line tinyshakespeare_unwritable_out_dir "--out-dir $tmp/not_a_dir/sub: cannot create" \
    $TS --text "$TEXT" --bpe-dir "$BPE" --out-dir "$tmp/not_a_dir/sub"
check_error_line tinyshakespeare_text_too_short_for_val "short.txt: gives only .* tokens" \
    $TS --text "$tmp/short.txt" --bpe-dir "$BPE" --out-dir "$tmp/o7"
check_error_line tinyshakespeare_unknown_flag "unrecognized arguments: --bogus" $TS --bogus
check_error_line prepare_missing_input "missing.txt: file not found" \
    $PREP "$tmp/missing.txt" --bpe-dir "$BPE" --out-dir "$tmp/p1"
check_error_line prepare_empty_input "empty.txt: file is empty" \
    $PREP "$tmp/empty.txt" --bpe-dir "$BPE" --out-dir "$tmp/p2"
check_error_line prepare_non_utf8_txt "latin1.txt: not valid UTF-8" \
    $PREP "$tmp/latin1.txt" --bpe-dir "$BPE" --out-dir "$tmp/p3"
check_error_line prepare_non_utf8_jsonl "latin1.jsonl:1: not valid UTF-8" \
    $PREP "$tmp/latin1.jsonl" --bpe-dir "$BPE" --out-dir "$tmp/p4"
check_error_line prepare_jsonl_bad_json_names_line "bad_json.jsonl:2: not valid JSON" \
    $PREP "$tmp/bad_json.jsonl" --bpe-dir "$BPE" --out-dir "$tmp/p5"
check_error_line prepare_jsonl_missing_text_field "no_field.jsonl:2: no \"text\" string field" \
    $PREP "$tmp/no_field.jsonl" --bpe-dir "$BPE" --out-dir "$tmp/p6"
check_error_line prepare_corrupt_bpe_checksum "bpe_corrupt/vocab.bpe: sha256 is" \
    $PREP "$TEXT" --bpe-dir "$tmp/bpe_corrupt" --out-dir "$tmp/p7"
check_error_line prepare_unwritable_out_dir "--out-dir $tmp/not_a_dir/sub: cannot create" \
    $PREP "$TEXT" --bpe-dir "$BPE" --out-dir "$tmp/not_a_dir/sub"
check_error_line prepare_shard_size_out_of_range "--shard-size 0: out of range" \
    $PREP "$TEXT" --bpe-dir "$BPE" --out-dir "$tmp/p8" --shard-size 0
check_error_line prepare_no_train_shard "the inputs give only .* tokens, all in the val shard" \
    $PREP "$TEXT" --bpe-dir "$BPE" --out-dir "$tmp/p9" --shard-size 400000
# The bad line comes after the text has filled 3 shards (in a staging dir): nothing may be left
# behind, or the next run would skip the half-made output as done.
check_error_line prepare_error_after_shards_written "bad_json.jsonl:2: not valid JSON" \
    $PREP "$TEXT" "$tmp/bad_json.jsonl" --bpe-dir "$BPE" --out-dir "$tmp/p10" --shard-size 100000
check "prepare_error_leaves_no_shards_or_staging" \
    bash -c "! ls -A '$tmp'/p10 2>/dev/null | grep -q -E '\\.bin$|staging'"
# --force with a bad input must keep the shards that were there: they are replaced only at the end.
$PREP "$TEXT" --bpe-dir "$BPE" --out-dir "$tmp/p11" --shard-size 100000 >/dev/null 2>&1
before=$(cd "$tmp/p11" && sha256sum *.bin)
check_error_line prepare_force_with_bad_input_fails "bad_json.jsonl:2: not valid JSON" \
    $PREP "$TEXT" "$tmp/bad_json.jsonl" --bpe-dir "$BPE" --out-dir "$tmp/p11" --shard-size 100000 --force
check "prepare_force_failure_keeps_old_shards" bash -c "[ \"\$(cd '$tmp/p11' && sha256sum *.bin)\" = '$before' ] && ! ls -A '$tmp/p11' | grep -q staging"
check_error_line prepare_prefix_with_glob_character "--prefix x\\*: empty, or contains" \
    $PREP "$TEXT" --bpe-dir "$BPE" --out-dir "$tmp/p12" --prefix 'x*'

# ---------------------------------------------------------------------------------------------
# 4. real runs, offline
TS_OUT=$tmp/tinyshakespeare
check "tinyshakespeare_offline_run" $TS --text "$TEXT" --bpe-dir "$BPE" --out-dir "$TS_OUT"

# Headers and sizes, val = first 32768 tokens, starts with <|endoftext|> "First Citizen", and
# the tokens minus the separators decode back to the input text exactly (tiktoken, local BPE).
# 305,260 train tokens is what llm.c's own tinyshakespeare script reports for this text.
check_tinyshakespeare_shards() {
    python3 - "$TS_OUT" "$BPE" "$TEXT" <<'EOF'
import os, sys, numpy as np
out, bpe, text_path = sys.argv[1:]
sys.path.insert(0, "data"); import common
counts = {}
for split in ("val", "train"):
    path = f"{out}/tiny_shakespeare_{split}.bin"
    header = np.fromfile(path, "<i4", count=256)
    assert list(header[:2]) == [20240520, 1], f"{path}: magic/version {header[:2]}"
    assert not header[3:].any(), f"{path}: header ints 3..255 must be 0"
    assert os.path.getsize(path) == 1024 + 2 * header[2], f"{path}: size vs token count"
    counts[split] = np.fromfile(path, "<u2", offset=1024)
val, train = counts["val"], counts["train"]
assert len(val) == 32768, f"val has {len(val)} tokens, want 32768"
assert len(train) == 305260, f"train has {len(train)} tokens, want 305260"
assert val[0] == 50256, f"first token {val[0]}, want 50256"
enc = common.load_gpt2_encoding(bpe)
head = enc.decode(val[:4].tolist())
assert head == "<|endoftext|>First Citizen:", f"first tokens decode to {head!r}"
tokens = np.concatenate([val, train])
text = enc.decode(tokens[tokens != 50256].tolist())
assert text == open(text_path, encoding="utf-8").read(), "decoded text differs from input"
assert (tokens == 50256).sum() == 7222, "one <|endoftext|> per blank-line separated document"
EOF
}
check "tinyshakespeare_shards_headers_counts_and_decode_round_trip" check_tinyshakespeare_shards

# The tokenizer file holds exactly tiktoken's bytes for every token.
check_tokenizer_file() {
    python3 - "$TS_OUT/gpt2_tokenizer.bin" "$BPE" <<'EOF'
import sys, numpy as np
path, bpe = sys.argv[1:]
sys.path.insert(0, "data"); import common
enc = common.load_gpt2_encoding(bpe)
data = open(path, "rb").read()
header = np.frombuffer(data[:1024], "<i4")
assert list(header[:4]) == [20240328, 2, 50257, 50256], f"header {header[:4]}"
at = 1024
for token_id in range(50257):
    n = data[at]
    assert data[at + 1:at + 1 + n] == enc.decode_single_token_bytes(token_id), f"token {token_id}"
    at += 1 + n
assert at == len(data), "trailing bytes"
EOF
}
check "tokenizer_file_matches_tiktoken_bytes" check_tokenizer_file
check "c_tokenizer_loads_gpt2_tokenizer_file" \
    bash -c "$BADINPUT tokenizer '$TS_OUT/gpt2_tokenizer.bin' | grep -q 'init_ok=1 vocab=50257 eot=50256'"
check "c_dataloader_and_tokenizer_decode_first_citizen" \
    bash -c "$BADINPUT sample '$TS_OUT/tiny_shakespeare_val.bin' '$TS_OUT/gpt2_tokenizer.bin' 8 |
             grep -q '^<|endoftext|>First Citizen:'"
check "c_dataloader_reads_real_train_shard_np2" \
    bash -c "$BADINPUT dataloader '$TS_OUT/tiny_shakespeare_train.bin' 4 64 1 2 |
             grep -q 'ok shards=1 tokens=305260'"
check "tinyshakespeare_skips_existing_outputs" \
    bash -c "$TS --text '$TEXT' --bpe-dir '$BPE' --out-dir '$TS_OUT' | grep -q skipping"

# prepare.py: the same text with --split-blank-lines gives the same token stream as
# tinyshakespeare.py, then a jsonl file's documents follow, each led by <|endoftext|>;
# shards are 100,000 tokens (shard 0 val, 1.. train; the last 38,0xx tokens, under half a
# shard, join shard 2) and all use 2 worker processes.
printf '{"text": "Hello world"}\n\n{"text": "caf\\u00e9 \xf0\x9f\x98\x80"}\n' >"$tmp/extra.jsonl"
mkdir -p "$tmp/corpus"; cp "$TEXT" "$tmp/corpus/a_input.txt"; cp "$tmp/extra.jsonl" "$tmp/corpus/b.jsonl"
PREP_OUT=$tmp/prepared
mkdir -p "$PREP_OUT"; cp "$tmp/good_a.bin" "$PREP_OUT/ts_train_000009.bin"  # stale, for --force
check "prepare_offline_run_two_workers" $PREP "$tmp/corpus" --split-blank-lines --bpe-dir "$BPE" \
    --out-dir "$PREP_OUT" --prefix ts --shard-size 100000 --workers 2 --force
check_prepared_shards() {
    python3 - "$PREP_OUT" "$TS_OUT" "$BPE" <<'EOF'
import glob, os, sys, numpy as np
out, ts_out, bpe = sys.argv[1:]
sys.path.insert(0, "data"); import common
names = sorted(os.path.basename(p) for p in glob.glob(f"{out}/ts_*.bin"))
want = ["ts_train_000001.bin", "ts_train_000002.bin", "ts_val_000000.bin"]
assert names == want, f"shards {names}, want {want} (stale shard 9 removed by --force)"
tokens = []
for name in sorted(names, key=lambda n: n[-10:]):  # by shard number: val first
    header = np.fromfile(f"{out}/{name}", "<i4", count=256)
    body = np.fromfile(f"{out}/{name}", "<u2", offset=1024)
    assert list(header[:3]) == [20240520, 1, len(body)], f"{name}: header {header[:3]}"
    assert len(body) == 100000 or (name.endswith("02.bin") and 100000 < len(body) < 150000), \
        f"{name}: {len(body)} tokens"
    tokens.append(body)
tokens = np.concatenate(tokens)
ts = np.concatenate([np.fromfile(f"{ts_out}/tiny_shakespeare_{s}.bin", "<u2", offset=1024)
                     for s in ("val", "train")])
assert np.array_equal(tokens[:len(ts)], ts), "txt part differs from tinyshakespeare.py's tokens"
enc = common.load_gpt2_encoding(bpe)
tail = enc.decode(tokens[len(ts):].tolist())
assert tail == "<|endoftext|>Hello world<|endoftext|>caf\u00e9 \U0001F600", repr(tail)
assert os.path.getsize(f"{out}/gpt2_tokenizer.bin") == os.path.getsize(f"{ts_out}/gpt2_tokenizer.bin")
EOF
}
check "prepare_shards_headers_order_and_tokens" check_prepared_shards
check "c_dataloader_reads_prepared_train_shards" \
    bash -c "$BADINPUT dataloader '$PREP_OUT/ts_train_*.bin' 2 64 0 1 | grep -q 'ok shards=2 tokens='"

# A short rest after the last full shard joins the shard before it instead of making a shard
# too short for a batch: --shard-size 1000 leaves 26 tokens, which would refuse -b 2 -t 64
# (129 tokens a batch); prepare.py says where they went and the bound on B*T it leaves.
SMALL=$tmp/small_shards
check "prepare_folds_short_last_shard_and_says_so" bash -c "$PREP '$TEXT' --bpe-dir '$BPE' --out-dir '$SMALL' \
    --prefix ts --shard-size 1000 --workers 2 >'$tmp/small.txt' &&
    grep -q 'note: the last 26 tokens (under half of --shard-size 1000) went into ts_train_000337.bin, which holds 1026' '$tmp/small.txt' &&
    grep -q 'shortest shard: 1000 tokens, so the trainer takes B\*T\*ranks <= 999' '$tmp/small.txt' &&
    [ ! -e '$SMALL/ts_train_000338.bin' ]"
check "c_dataloader_takes_b2_t64_on_folded_shards" \
    bash -c "$BADINPUT dataloader '$SMALL/ts_train_*.bin' 2 64 0 1 | grep -q 'ok shards=337 tokens=337026'"
check_error_line c_dataloader_short_shard_says_how_to_fix "expected at least 1025 tokens in every shard: a smaller -b or -t, or the shards made again with a larger --shard-size" \
    $BADINPUT dataloader "$SMALL/ts_train_*.bin" 4 256 0 1
