#!/usr/bin/env bash
# Pretraining for real, offline: FineWeb shards, HellaSwag during training, the 124M recipe.
#   1. data/fineweb.py --parquet: two local parquet files (one with several row groups, in a
#      directory) give shards whose tokens are tiktoken's on the same documents (<|endoftext|>
#      before each), llm.c's names and header, shard 0 val; the CPU trainer trains on them.
#   2. data/hellaswag.py: the eval file equals the bytes of llm.c's layout built here by hand from
#      tiktoken's tokens (header, 65535, record size, index, label, 4, context, 4 x (m, tokens)),
#      and reads back (data/hellaswag.py's reader).
#   3. the trainer's HellaSwag = transformers': a 20-step d2 checkpoint, exported to Hugging Face,
#      scores hand-made examples (one whose context must lose its start to fit T 64, one whose
#      completion cannot fit: skipped) with GPT2LMHeadModel; every summed completion loss and
#      pick equals the trainer's (tests/hellaswag_hf.py) for the CPU build on 1 rank, stage 3 on
#      3 ranks, and the CUDA build through the emulation (dev/emu) at stage 3 on 2 ranks.
#   4. scripts/gpt2_124M.sh: --dry-run prints the command; --smoke runs the recipe on the CPU
#      (d2, 6 steps) on the shards of part 1: val and HellaSwag logged, checkpoints written, and
#      a second run resumes from them (-y 1).
#   5. bad input, one error line each: a HellaSwag file cut short, one with another magic, a
#      parquet file without a "text" column, a file that is not parquet.
# Needs ./train_gpt2 and build/train_gpt2_z3 (make train_gpt2 zero_binaries), pyarrow, and for
# part 3 torch + transformers (scripts/setup.sh --hf; HF_TESTS=0 skips that part off CI) and, for the
# emulated GPU run, build/emu/train_gpt2cu_z3 (make emu_binaries; skipped without it).
# Measured: 28 checks, 5m49s wall (2m23s user CPU) on 2 shared cores, with torch installed.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
BPE=$(shared_data)/gpt2
why=$(check_shared_data gpt2/encoder.json gpt2/vocab.bpe) || { echo "FAIL bpe_files: $why"; exit 1; }
tmp=$(mktemp -d /tmp/t_72_pretrain.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for binary in ./train_gpt2 build/train_gpt2_z1 build/train_gpt2_z3; do
    [ -x "$binary" ] || { echo "FAIL $binary: not built (make train_gpt2 zero_binaries)"; exit 1; }
done
why=$(ensure_tinyshakespeare) || { echo "FAIL tinyshakespeare_data: $why"; exit 1; }

# check_error_line NAME PATTERN CMD...: CMD exits 1 with exactly one stderr line in the house
# format (`error: ...: ...; expected ...`) containing PATTERN.
check_error_line() {
    local name=$1 pattern=$2; shift 2
    local rc lines
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^error: .*: .*; expected ' "$tmp/err" && grep -q -- "$pattern" "$tmp/err"; then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $rc, $lines stderr lines, wanted 1 and one error line with '$pattern'; got: $(tail -2 "$tmp/err" | tr '\n' ' ')"
    fi
}

# ---------------------------------------------------------------------------------------------
# 1. FineWeb parquet -> shards.
mkdir -p "$tmp/parquet/sub"
python3 - "$tmp" <<'EOF'
import sys, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
words = "the of and to in a is that for it as was with be by on not he I this are or his from at which".split()
docs = []
for i in range(240):  # varied lengths, unicode, a doc of whitespace, one with <|endoftext|> as text
    n = 5 + (i * 37) % 90
    docs.append(" ".join(words[(i * 7 + k) % len(words)] for k in range(n)) + (" ünïcödé 🎉." if i % 5 == 0 else "."))
docs[3], docs[4] = "   \n\n  ", "literal <|endoftext|> stays text"
pq.write_table(pa.table({"id": [f"a{i}" for i in range(120)], "text": docs[:120]}), f"{d}/parquet/a.parquet", row_group_size=25)
pq.write_table(pa.table({"text": docs[120:], "score": [0.5] * 120}), f"{d}/parquet/sub/b.parquet")
open(f"{d}/docs.txt", "w").write("\n".join(repr(t) for t in docs))
pq.write_table(pa.table({"id": ["1"], "content": ["x"]}), f"{d}/no_text.parquet")
open(f"{d}/not_parquet.parquet", "wb").write(b"PAR1 this is not a parquet file")
EOF
FW=$tmp/fineweb
check "fineweb_parquet_to_shards" python3 data/fineweb.py --parquet "$tmp/parquet" --bpe-dir "$BPE" --out-dir "$FW" --shard-size 2000 --workers 2
check_fineweb_tokens() {
    python3 - "$tmp" "$FW" "$BPE" <<'EOF'
import ast, glob, sys, numpy as np
sys.path.insert(0, "data")
import common
d, fw, bpe = sys.argv[1:]
docs = [ast.literal_eval(line) for line in open(f"{d}/docs.txt").read().split("\n")]
enc = common.load_gpt2_encoding(bpe)
want = np.array([t for doc in docs for t in [50256] + enc.encode_ordinary(doc)], dtype=np.uint16)
shards = sorted(glob.glob(f"{fw}/fineweb_*.bin"), key=lambda p: p[-10:])
assert shards[0].endswith("fineweb_val_000000.bin") and all("_train_" in p for p in shards[1:]) and len(shards) >= 3, shards
got = []
for p in shards:
    h = np.fromfile(p, "<i4", count=256)
    assert h[0] == 20240520 and h[1] == 1, p
    t = np.fromfile(p, "<u2", offset=1024)
    assert len(t) == h[2], p
    got.append(t)
got = np.concatenate(got)
assert np.array_equal(got, want), f"{len(got)} tokens vs tiktoken's {len(want)}; first difference at {np.argmax(got[:len(want)] != want[:len(got)])}"
print(f"{len(docs)} documents, {len(want)} tokens in {len(shards)} shards: tiktoken's, in order")
EOF
}
check "fineweb_shards_equal_tiktoken_tokens" check_fineweb_tokens
check "trainer_trains_on_fineweb_shards" bash -c "./train_gpt2 -i '$FW/fineweb_train_*.bin' -j '$FW/fineweb_val_*.bin' -e d2 -b 2 -t 32 -x 4 -v 2 -m 2 -s 0 -o $tmp/fw_run >$tmp/fw_run.txt 2>&1 && grep -q 'final val loss [0-9]' $tmp/fw_run.txt"

# ---------------------------------------------------------------------------------------------
# 2. The HellaSwag file. Hand-made examples in HellaSwag's jsonl (a string label too).
python3 - "$tmp/hs.jsonl" <<'EOF'
import json, sys
long_ctx = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings and "
            "arrows of outrageous fortune, or to take arms against a sea of troubles and by opposing end them. To die, to sleep")
rows = [
    ("The man picks up the guitar and", ["plays a song for the crowd.", "eats the guitar.", "flies to the moon", "sits"], 0),
    ("A woman is cooking pasta in the kitchen. She", ["drains the water and adds sauce.", "throws the pot out of the window", "sings", "opens the fridge"], "0"),
    (long_ctx, ["no more; and by a sleep to say we end the heart-ache.", "of the dog.", "sleeps.", "and"], 0),  # > T+1: context cut
    ("KING HENRY: My lord,", ["I will.", "what say you to this?", "banana bread recipe online", "go"], 1),
    ("Then", ["he left.", "the", "it rained all day long in the city", "ok"], 2),
    ("She said", ["yes" + " and yes" * 70, "no.", "maybe.", "later."], 1),  # a completion over T tokens: skipped
    ("ROMEO: But soft, what light through yonder window breaks? It is the east, and", ["Juliet is the sun.", "the moon is cheese.", "a dog barks", "then"], 0),
]
with open(sys.argv[1], "w") as f:
    for ctx, endings, label in rows:
        f.write(json.dumps({"ctx": ctx, "endings": endings, "label": label, "ind": 7}) + "\n")
EOF
HS=$tmp/hs.bin
check "hellaswag_file_written" python3 data/hellaswag.py --jsonl "$tmp/hs.jsonl" --bpe-dir "$BPE" --out "$HS"
check_hellaswag_layout() {
    python3 - "$tmp/hs.jsonl" "$HS" "$BPE" <<'EOF'
import json, struct, sys
sys.path.insert(0, "data")
import common, hellaswag
src, path, bpe = sys.argv[1:]
enc = common.load_gpt2_encoding(bpe)
records, examples = [], []
for i, line in enumerate(open(src)):
    r = json.loads(line)
    ctx = enc.encode(r["ctx"])
    ends = [enc.encode(" " + e) for e in r["endings"]]
    words = [ctx] + [[len(e)] + e for e in ends]
    body = [i, int(r["label"]), 4, len(ctx)] + [t for w in words for t in w]
    rec = struct.pack(f"<{2 + len(body)}H", 65535, 2 * (2 + len(body)), *body)
    records.append(rec)
    examples.append((i, int(r["label"]), ctx, ends))
header = struct.pack("<4i", 20240522, 1, len(records), max(len(r) for r in records)) + bytes(1024 - 16)
assert open(path, "rb").read() == header + b"".join(records), "bytes differ from the layout built by hand"
assert hellaswag.read_eval_file(path) == examples, "read back differs"
print(f"{len(records)} examples: the layout's bytes, built by hand, and read back")
EOF
}
check "hellaswag_file_is_llmc_layout_and_reads_back" check_hellaswag_layout

# ---------------------------------------------------------------------------------------------
# 3. The trainer's HellaSwag against transformers'.
TRAIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
./train_gpt2 -i "$TRAIN" -j "$VAL" -e d2 -b 4 -t 64 -x 20 -l 1e-3 -u 2 -v 0 -s 0 -n 20 -o "$tmp/d2" >"$tmp/d2.txt" 2>&1
CKPT=$tmp/d2/model_00000020.bin
check "d2_checkpoint_written" test -f "$CKPT"
# hellaswag_run NAME CMD...: the trainer evaluates -hf at step 0 of the checkpoint (-x 0), rank 0
# writes the per-example losses to $tmp/NAME.txt.
hellaswag_run() {
    local name=$1; shift
    HELLASWAG_EXAMPLES_OUT=$tmp/$name.txt "$@" -i "$TRAIN" -j "$VAL" -e "$CKPT" -b 4 -t 64 -x 0 -v 0 -s 0 -hs 1 -hf "$HS" \
        -o "$tmp/$name" >"$tmp/$name.out" 2>&1 && grep -q '"kind":"hellaswag"' "$tmp/$name/log.jsonl"
}
check "hellaswag_cpu_np1_runs_and_logs" hellaswag_run cpu_np1 ./train_gpt2
check "hellaswag_cpu_z3_np3_runs" hellaswag_run cpu_z3_np3 mpirun --allow-run-as-root --oversubscribe -np 3 -x OMP_NUM_THREADS=1 build/train_gpt2_z3
# 3 ranks at stage 3 against 1 rank: the same examples, the same losses but for summation order.
check "hellaswag_cpu_z3_np3_equals_np1" python3 -c "
import numpy as np, sys
a, b = np.loadtxt('$tmp/cpu_np1.txt'), np.loadtxt('$tmp/cpu_z3_np3.txt')
assert a.shape == b.shape == (7, 11) and np.array_equal(a[:, [0, 1, 2, 7, 8, 9, 10]], b[:, [0, 1, 2, 7, 8, 9, 10]])
assert a[5, 2] == 1 and a[:, 2].sum() == 1, 'example 5 (a completion over T tokens) alone is skipped'
d = np.abs(a[:, 3:7] - b[:, 3:7]).max(); print(f'np3 stage 3 vs np1: largest difference {d:.3g} nats'); assert d < 1e-4"
EMU=build/emu/train_gpt2cu_z3
if [ -x "$EMU" ]; then
    check "hellaswag_emulated_gpu_z3_np2_runs" hellaswag_run emu_z3_np2 env EMU_DEVICE_COUNT=2 mpirun --allow-run-as-root --oversubscribe -np 2 \
        -x OMP_NUM_THREADS=1 -x EMU_DEVICE_COUNT "$EMU"
else
    echo "SKIP hellaswag_emulated_gpu_z3_np2_runs: $EMU not built (make emu_binaries, needs the CUDA headers)"
fi
if [ "${HF_TESTS:-1}" = 0 ] && [ "${CI:-}" != true ]; then
    echo "SKIP hellaswag_equals_transformers: HF_TESTS=0"
else
    python3 -c "import torch, transformers" 2>/dev/null || bash scripts/setup.sh --hf >/dev/null
    check "export_d2_to_hf" python3 scripts/export_hf.py "$CKPT" "$tmp/hf" --bpe-dir "$BPE"
    # Tolerances (nats, on a completion's summed loss, up to ~100 nats here), from measured error:
    # fp32 CPU vs transformers fp32 (scored in float64 after the logits): 3e-6 measured, summation
    # order only; 1e-4 leaves 30x. The CUDA build (bf16 weights and activations, fp32 losses) vs the
    # fp32 model: 0.037 measured (on sums up to 92 nats); TOL_EMU 0.4 is ~10x.
    # hf_check NAME RUN TOL: tests/hellaswag_hf.py on $tmp/RUN.txt; prints its measured difference.
    hf_check() {
        if python3 tests/hellaswag_hf.py "$tmp/hf" "$HS" 64 "$tmp/$2.txt" "$3" >"$tmp/$2.hf" 2>"$tmp/$2.hf_err"; then echo "PASS $1"
        else echo "FAIL $1: $(grep -v Loading "$tmp/$2.hf_err" | tail -2 | tr '\n' ' ')"; fi
        grep '^[0-9]* examples' "$tmp/$2.hf" | sed "s/^/  $2: /"
    }
    hf_check hellaswag_cpu_np1_equals_transformers cpu_np1 1e-4
    hf_check hellaswag_cpu_z3_np3_equals_transformers cpu_z3_np3 1e-4
    if [ -f "$tmp/emu_z3_np2.txt" ]; then
        TOL_EMU=0.4
        hf_check hellaswag_emulated_gpu_z3_np2_equals_transformers emu_z3_np2 $TOL_EMU
    fi
fi

# ---------------------------------------------------------------------------------------------
# 4. The recipe.
check "recipe_dry_run_prints_the_command" bash -c "bash scripts/gpt2_124M.sh --dry-run | grep -q '^command: mpirun -np 8 .*train_gpt2cu .*-e d12 -b [0-9]* -t 1024 -d 524288 -l 6e-4 -u 700 .*-c 0.1 .*-x 18865 .*-hs 250 .*-y 1'"
SMOKE=(bash scripts/gpt2_124M.sh --smoke --gpus 2 --data "$FW" --out "$tmp/smoke" --hellaswag "$HS")
check "recipe_smoke_runs" bash -c "${SMOKE[*]@Q} >$tmp/smoke.txt 2>&1"
check "recipe_smoke_planned_a_stage" grep -q '^plan: 2 ranks (--plan cpu.*ZeRO stage [0-3]' "$tmp/smoke.txt"
check "recipe_smoke_logged_val_and_hellaswag" bash -c "[ \$(grep -c '\"kind\":\"hellaswag\"' $tmp/smoke/log.jsonl) -eq 3 ] && [ \$(grep -c '\"kind\":\"val\"' $tmp/smoke/log.jsonl) -eq 3 ]"
check "recipe_smoke_checkpoints" test -f "$tmp/smoke/model_00000006.bin"
check "recipe_smoke_resumes" bash -c "${SMOKE[*]@Q} >$tmp/smoke2.txt 2>&1 && grep -q 'done: 0 steps' $tmp/smoke2.txt && ! grep -q 'from scratch' $tmp/smoke2.txt"
check "plot_log_draws_hellaswag" python3 scripts/plot_log.py "$tmp/smoke" -o "$tmp/smoke.png"

# ---------------------------------------------------------------------------------------------
# 5. Bad input.
head -c 1100 "$HS" >"$tmp/hs_cut.bin"
check_error_line "hellaswag_file_cut_short_one_line" "hs_cut.bin: example [0-9]* (byte [0-9]*): the file ends inside its record" \
    ./train_gpt2 -i "$TRAIN" -j "$VAL" -e d2 -b 4 -t 64 -x 1 -v 0 -s 0 -hs 1 -hf "$tmp/hs_cut.bin"
check_error_line "hellaswag_file_other_magic_one_line" "magic 20240520" \
    ./train_gpt2 -i "$TRAIN" -j "$VAL" -e d2 -b 4 -t 64 -x 1 -v 0 -s 0 -hs 1 -hf "$VAL"
check_error_line "hellaswag_file_missing_one_line" "cannot open" \
    ./train_gpt2 -i "$TRAIN" -j "$VAL" -e d2 -b 4 -t 64 -x 1 -v 0 -s 0 -hs 1 -hf "$tmp/none.bin"
check_error_line "fineweb_parquet_without_text_column_one_line" 'no column "text" (columns: id, content)' \
    python3 data/fineweb.py --parquet "$tmp/no_text.parquet" --bpe-dir "$BPE" --out-dir "$tmp/fw_bad"
check_error_line "fineweb_not_a_parquet_file_one_line" "not a readable parquet file" \
    python3 data/fineweb.py --parquet "$tmp/not_parquet.parquet" --bpe-dir "$BPE" --out-dir "$tmp/fw_bad"
check "fineweb_bad_input_wrote_no_shards" bash -c "! ls $tmp/fw_bad/*.bin 2>/dev/null"
check_error_line "hellaswag_jsonl_bad_label_one_line" 'hs_bad.jsonl:1: "label" is 7' \
    bash -c "echo '{\"ctx\": \"a\", \"endings\": [\"b\", \"c\", \"d\", \"e\"], \"label\": 7}' >$tmp/hs_bad.jsonl && python3 data/hellaswag.py --jsonl $tmp/hs_bad.jsonl --bpe-dir $BPE --out $tmp/x.bin"
