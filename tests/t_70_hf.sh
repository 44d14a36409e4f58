#!/usr/bin/env bash
# Hugging Face in and out: scripts/export_hf.py, scripts/import_hf.py (scripts/hf_gpt2.py).
#   0. bf16 with numpy alone: the scripts run here with ml_dtypes hidden (a module of that name
#      first on PYTHONPATH that refuses to import); their rounding of fp32 to bf16 (uint16 bits)
#      is the trainer's, bit for bit: __float2bfloat16 of CUDA's cuda_bf16.hpp (its host path,
#      compiled here with g++), which the CUDA build applies to the fp32 weights it loads
#      (zero/gpu/state_io_gpu.cuh, zero_set_unit_params), on edge values (ties, the largest finite, Inf, NaN, subnormals,
#      -0), around every bf16 value and on random bits; widening back is __bfloat162float's.
#   1. round trip: a trainer checkpoint (fp32) and the same weights as a bf16 file, exported and
#      imported back, are byte-identical to what went in (also from the published checkpoints'
#      layout and from a sharded checkpoint), but for header slots 8-13: the trainer's checksum,
#      run id and step (common/model_file.h), which Hugging Face has no place for, come back 0
#      (llm.c's value there; a file without them loads unchecked); the exported safetensors hold the tensors with
#      save_pretrained's names, transformers' shapes, the file's dtype, and (BF16, which the
#      scripts write from the format's specification) the bf16 file's bits as safetensors reads
#      them; import --dtype bf16 of the fp32 export rounds the 14M weights as the trainer does.
#   2. bad input: a directory without model.safetensors, a config that is not GPT-2's, a vocab
#      other than 50257, a truncated safetensors file, an output path that exists, a bad model
#      file, a full disk: one error line each, exit 1, nothing written (no output, no temporary
#      file).
#   3. with transformers and PyTorch (PyPI; `bash scripts/setup.sh --hf` installs them, which
#      this group runs; HF_TESTS=0 skips this part off CI, and on CI it must run):
#      a 20-step d2 checkpoint, exported, gives in GPT2LMHeadModel the trainer's val loss on the
#      same val batches and the same 20-token greedy continuation of a prompt, and its tokenizer
#      loads with AutoTokenizer and encodes as tiktoken does; a random-init GPT2LMHeadModel with
#      an odd config (L 3, C 96, NH 3, n_positions 64) written by save_pretrained, imported and
#      trained 3 steps, has transformers' loss on that batch as its first step's loss, exports
#      back to the same tensors, and after the 3 steps, exported, continues the prompt greedily
#      as the CPU model does (20 tokens, many distinct: the d2 model's are one token repeated).
# Measured here once torch and transformers are installed: 92 s of CPU time (280 s wall with the
# 2 cores shared, load 12-20); installing them from an empty pip cache: 228-294 s.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
why=$(ensure_tinyshakespeare) || { echo "FAIL tinyshakespeare_data: $why"; exit 1; }
for binary in ./train_gpt2 build/test_greedy_decode; do
    [ -x "$binary" ] || { echo "FAIL $binary: not built (make train_gpt2 unit_tests)"; exit 1; }
done
BPE=$(shared_data)/gpt2
why=$(check_shared_data gpt2/encoder.json gpt2/vocab.bpe) || { echo "FAIL bpe_files: $why"; exit 1; }
TRAIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
tmp=$(mktemp -d /tmp/t_70_hf.XXXXXX)
trap 'umount "$tmp/full" 2>/dev/null; rm -rf "$tmp"' EXIT
# The scripts need numpy and safetensors only: they run with ml_dtypes hidden (installed or not).
mkdir -p "$tmp/no_ml_dtypes"
echo 'raise ImportError("ml_dtypes is hidden by tests/t_70_hf.sh: the conversion must not need it")' >"$tmp/no_ml_dtypes/ml_dtypes.py"
HIDE="env PYTHONPATH=$tmp/no_ml_dtypes${PYTHONPATH:+:$PYTHONPATH}"
EXPORT="$HIDE python3 scripts/export_hf.py"
IMPORT="$HIDE python3 scripts/import_hf.py"

# check_error_line NAME PATTERN CMD...: PASS if CMD exits 1 with exactly one stderr line in the
# house format (`error: ...: ...; expected ...`) containing PATTERN (no traceback).
check_error_line() {
    local name=$1 pattern=$2; shift 2
    local rc lines
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^error: .*: .*; expected ' "$tmp/err" \
        && grep -q -- "$pattern" "$tmp/err"; then
        echo "PASS $name"
    else
        echo "FAIL $name: exit $rc, $lines stderr lines, wanted 1 and one error line with '$pattern'; got: $(tail -2 "$tmp/err" | tr '\n' ' ')"
    fi
}
# nothing_written DIR NAME: DIR holds no NAME and no temporary file (.NAME.*.tmp) of ours.
nothing_written() { [ ! -e "$1/$2" ] && ! ls -A "$1" | grep -q -- "^\.$2\..*\.tmp$"; }

# ---------------------------------------------------------------------------------------------
# The trainer's checkpoint: d2, 20 steps, val loss on 4 batches of 4 x 64 at steps 0 and 20.
D2=$tmp/d2
./train_gpt2 -i "$TRAIN" -j "$VAL" -e d2 -b 4 -t 64 -x 20 -l 1e-3 -u 2 -v 20 -m 4 -s 0 -n 20 -o "$D2" >"$tmp/d2.txt" 2>&1
check "d2_20_step_checkpoint_written" test -f "$D2/model_00000020.bin"
CKPT=$D2/model_00000020.bin

# ---------------------------------------------------------------------------------------------
# 0. bf16 with numpy alone, rounded as the trainer rounds.
check_fails "ml_dtypes_hidden_from_the_scripts" "ml_dtypes is hidden" $HIDE python3 -c "import ml_dtypes"
# The trainer's conversions as a tool: `round` reads fp32 bits (uint32) and writes
# __float2bfloat16's bf16 bits (uint16); `widen` reads bf16 bits and writes __bfloat162float's.
[ -d /usr/local/cuda/include ] && CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
TRAINER_BF16=$tmp/trainer_bf16
if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_bf16.h" ]; then
    cat >"$tmp/trainer_bf16.cpp" <<'EOF'
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char** argv) {
    int widen = argc > 1 && strcmp(argv[1], "widen") == 0;
    uint32_t u;
    uint16_t h;
    float f;
    __nv_bfloat16 b;
    while (widen ? fread(&h, 2, 1, stdin) == 1 : fread(&u, 4, 1, stdin) == 1) {
        if (widen) {
            memcpy(&b, &h, 2);
            f = __bfloat162float(b);
            fwrite(&f, 4, 1, stdout);
        } else {
            memcpy(&f, &u, 4);
            b = __float2bfloat16(f);
            fwrite(&b, 2, 1, stdout);
        }
    }
    return 0;
}
EOF
    check "trainer_bf16_rounding_tool_builds" g++ -O2 -Wall -I"$CUDA_HOME/include" "$tmp/trainer_bf16.cpp" -o "$TRAINER_BF16"
fi
check_bf16_rounding() {
    $HIDE python3 - "$TRAINER_BF16" >"$tmp/bf16_measured.txt" <<'EOF'
import subprocess, sys, numpy as np
sys.path.insert(0, "scripts")
import hf_gpt2
tool = sys.argv[1]
def trainer(mode, data):
    return subprocess.run([tool, mode], input=data.tobytes(), capture_output=True, check=True).stdout
NAN = None  # any NaN (the trainer's is 0x7FFF, compared bit for bit below)
# fp32 bits -> bf16 bits, round to nearest, ties to even, worked out by hand.
edges = [
    (0x00000000, 0x0000, "+0"), (0x80000000, 0x8000, "-0 keeps its sign"), (0x3F800000, 0x3F80, "1"),
    (0x3F808000, 0x3F80, "tie, kept bit even: down"), (0x3F818000, 0x3F82, "tie, kept bit odd: up"),
    (0xBF818000, 0xBF82, "negative tie, odd: away from 0"), (0x3F808001, 0x3F81, "just above a tie"),
    (0x3F807FFF, 0x3F80, "just below a tie"), (0x3F7FFFFF, 0x3F80, "carry into the exponent"),
    (0x7F7F0000, 0x7F7F, "largest finite bf16"), (0x7F7F7FFF, 0x7F7F, "just below rounding to Inf"),
    (0x7F7F8000, 0x7F80, "tie above the largest finite: Inf"), (0x7F7FFFFF, 0x7F80, "largest fp32: Inf"),
    (0xFF7FFFFF, 0xFF80, "most negative fp32: -Inf"), (0x7F800000, 0x7F80, "+Inf"), (0xFF800000, 0xFF80, "-Inf"),
    (0x7FC00000, NAN, "quiet NaN"), (0x7F800001, NAN, "NaN of low bits only (a plain add: Inf)"),
    (0x7FFFFFFF, NAN, "NaN of all ones (a plain add carries into the sign)"),
    (0xFFFFFFFF, NAN, "negative NaN of all ones (a plain add wraps to +0)"), (0xFF800001, NAN, "negative NaN"),
    (0x00000001, 0x0000, "smallest subnormal: 0"), (0x00008000, 0x0000, "subnormal tie, even: 0"),
    (0x00018000, 0x0002, "subnormal tie, odd: up"), (0x007FFFFF, 0x0080, "largest subnormal: smallest normal"),
    (0x80008001, 0x8001, "negative subnormal"), (0x00800000, 0x0080, "smallest normal"),
]
x = np.array([e[0] for e in edges], dtype="<u4")
ours = hf_gpt2.bf16_bits(x.view("<f4"))
theirs = np.frombuffer(trainer("round", x), "<u2")
for (bits, want, what), got, t in zip(edges, ours, theirs):
    by_hand = np.isnan(hf_gpt2.bf16_to_fp32(np.array([got]))[0]) if want is NAN else got == want
    assert by_hand and got == t, f"{what}: fp32 {bits:#010x} -> numpy {got:#06x}, trainer {t:#06x}, by hand {want}"
# Around every bf16 value (each high half with low halves at and beside a tie) and random bits.
high = np.arange(1 << 16, dtype="<u4") << 16
near = (high[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype="<u4")).reshape(-1)
rand = np.random.default_rng(70).integers(0, 1 << 32, size=1 << 22, dtype=np.uint64).astype("<u4")
for name, x in (("around every bf16 value", near), ("random fp32 bits", rand)):
    ours, theirs = hf_gpt2.bf16_bits(x.view("<f4")), np.frombuffer(trainer("round", x), "<u2")
    assert np.array_equal(ours, theirs), f"{name}: {np.count_nonzero(ours != theirs)} of {x.size} differ"
# Widening: every bf16 bit pattern, NaNs included.
every = np.arange(1 << 16, dtype="<u2")
assert np.array_equal(hf_gpt2.bf16_to_fp32(every).view("<u4"), np.frombuffer(trainer("widen", every), "<u4"))
print(f"bf16 rounding: numpy = __float2bfloat16 on {len(edges)} edge values, {near.size} values around every "
      f"bf16 value, {rand.size} random fp32 bit patterns (0 differ); widening = __bfloat162float on all 65536")
EOF
}
if [ -x "$TRAINER_BF16" ]; then
    check "numpy_bf16_rounding_is_the_trainers_bit_for_bit" check_bf16_rounding
    sed 's/^/  /' "$tmp/bf16_measured.txt"
else
    echo "SKIP numpy_bf16_rounding_is_the_trainers_bit_for_bit: no CUDA headers (cuda_bf16.h) for the trainer's rounding"
fi

# ---------------------------------------------------------------------------------------------
# 1. Round trip. The bf16 file: the checkpoint's weights rounded as the trainer rounds them (the
# tool above; without CUDA headers hf_gpt2's rounding, which the check above equates with it).
python3 - "$CKPT" "$tmp/ckpt_bf16.bin" "$TRAINER_BF16" <<'EOF'
import os, subprocess, sys, numpy as np
sys.path.insert(0, "scripts")
import hf_gpt2
src, dst, tool = sys.argv[1:]
header = np.fromfile(src, "<i4", count=256).copy()
params = np.fromfile(src, "<f4", offset=1024)
header[1] = 5
bits = (subprocess.run([tool, "round"], input=params.tobytes(), capture_output=True, check=True).stdout
        if os.access(tool, os.X_OK) else hf_gpt2.bf16_bits(params).tobytes())
open(dst, "wb").write(header.tobytes() + bits)
EOF
check "export_fp32_checkpoint" $EXPORT "$CKPT" "$tmp/hf_fp32" --bpe-dir "$BPE"
check "export_creates_missing_parent_dirs" bash -c "$EXPORT \"$CKPT\" \"$tmp/new/parent/hf\" >/dev/null && test -f \"$tmp/new/parent/hf/config.json\""
check "import_fp32" $IMPORT "$tmp/hf_fp32" "$tmp/back_fp32.bin" --dtype fp32
# same_model A B: byte-identical llm.c files, but for A's header slots 8-13 (0 in B).
same_model() {
    python3 - "$1" "$2" <<'PY'
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:])
a = a[:32] + bytes(24) + a[56:]
sys.exit(0 if a == b else 1)
PY
}
export -f same_model # for the checks run through bash -c
check "round_trip_fp32_byte_identical" same_model "$CKPT" "$tmp/back_fp32.bin"
check "export_bf16_file" $EXPORT "$tmp/ckpt_bf16.bin" "$tmp/hf_bf16"
check "import_bf16_by_default_from_bf16_tensors" $IMPORT "$tmp/hf_bf16" "$tmp/back_bf16.bin"
check "round_trip_bf16_byte_identical" same_model "$tmp/ckpt_bf16.bin" "$tmp/back_bf16.bin"
check "trainer_loads_imported_bf16_file" ./train_gpt2 -i "$TRAIN" -j "$VAL" -e "$tmp/back_bf16.bin" -b 1 -t 16 -x 1 -v 0 -s 0
# The import's own rounding (F32 tensors to --dtype bf16) on the 14M weights: the trainer's.
check "import_fp32_as_bf16_rounds_as_the_trainer" bash -c "$IMPORT '$tmp/hf_fp32' '$tmp/rounded_bf16.bin' --dtype bf16 >/dev/null && same_model '$tmp/ckpt_bf16.bin' '$tmp/rounded_bf16.bin'"
# What the export wrote, read with safetensors alone: save_pretrained's names, Conv1D (in, out)
# weights equal to the llm.c weights transposed, wte without its 47 padded rows, dtype kept;
# BF16 data (which safetensors' numpy side reads only with ml_dtypes) by safetensors' own
# deserialize, as raw bytes: the bf16 file's bits.
check_export_layout() {
    $HIDE python3 - "$CKPT" "$tmp/ckpt_bf16.bin" "$tmp/hf_fp32" "$tmp/hf_bf16" <<'EOF'
import json, sys, numpy as np
from safetensors import deserialize, safe_open
ckpt, ckpt_bf16, fp32_dir, bf16_dir = sys.argv[1:]
C, V, Vp, maxT, L = 128, 50257, 50304, 1024, 2
def wte_qkvw0(params):
    return (params[:Vp * C].reshape(Vp, C),  # then wpe, ln1w, ln1b, then qkvw of layer 0
            params[Vp * C + maxT * C + 2 * L * C:][:3 * C * C].reshape(3 * C, C))
wte, qkvw0 = wte_qkvw0(np.fromfile(ckpt, "<f4", offset=1024))
wte_bits, qkvw0_bits = wte_qkvw0(np.fromfile(ckpt_bf16, "<u2", offset=1024))
bf16 = {name: np.frombuffer(t["data"], "<u2").reshape(t["shape"])
        for name, t in deserialize(open(f"{bf16_dir}/model.safetensors", "rb").read()) if t["dtype"] == "BF16"}
assert np.array_equal(bf16["transformer.wte.weight"], wte_bits[:V])
assert np.array_equal(bf16["transformer.h.0.attn.c_attn.weight"], qkvw0_bits.T)
for directory, dtype in ((fp32_dir, "F32"), (bf16_dir, "BF16")):
    with safe_open(f"{directory}/model.safetensors", framework="numpy") as f:
        names = set(f.keys())
        assert len(names) == 2 + 12 * L + 2, sorted(names)
        assert "transformer.h.1.mlp.c_proj.weight" in names and "lm_head.weight" not in names
        assert all(f.get_slice(n).get_dtype() == dtype for n in names), dtype
        assert f.get_slice("transformer.wte.weight").get_shape() == [V, C]
        assert f.get_slice("transformer.h.0.attn.c_attn.weight").get_shape() == [C, 3 * C]
        assert f.get_slice("transformer.h.0.mlp.c_fc.weight").get_shape() == [C, 4 * C]
        if dtype == "F32":
            assert np.array_equal(f.get_tensor("transformer.h.0.attn.c_attn.weight"), qkvw0.T)
            assert np.array_equal(f.get_tensor("transformer.wte.weight"), wte[:V])
            assert not wte[V:].any(), "the trainer's padded rows are zeros"
        else:
            assert len(bf16) == len(names), "every tensor BF16"
        assert f.metadata() == {"format": "pt"}
config = json.load(open(f"{fp32_dir}/config.json"))
want = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 2, "n_positions": 1024, "vocab_size": 50257,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
assert all(config[k] == v for k, v in want.items()), config
EOF
}
check "export_layout_names_shapes_dtypes_config" check_export_layout
# The other layouts import reads: the published GPT-2 files' (names without "transformer.", the
# causal-mask buffers h.N.attn.bias stored) and a sharded checkpoint (an index and 2 files).
python3 - "$tmp/hf_fp32" "$tmp/published" "$tmp/sharded" <<'EOF'
import json, os, shutil, sys, numpy as np
from safetensors.numpy import load_file, save_file
src, published, sharded = sys.argv[1:]
tensors = load_file(f"{src}/model.safetensors")
for d in (published, sharded):
    os.makedirs(d)
    shutil.copy(f"{src}/config.json", d)
plain = {k[len("transformer."):]: v for k, v in tensors.items()}
plain.update({f"h.{l}.attn.bias": np.tril(np.ones((1, 1, 1024, 1024), np.float32)) for l in range(2)})
save_file(plain, f"{published}/model.safetensors", metadata={"format": "pt"})
names = sorted(tensors)
parts = {"model-00001-of-00002.safetensors": names[:10], "model-00002-of-00002.safetensors": names[10:]}
for file, part in parts.items():
    save_file({k: tensors[k] for k in part}, f"{sharded}/{file}", metadata={"format": "pt"})
json.dump({"metadata": {}, "weight_map": {k: f for f, part in parts.items() for k in part}},
          open(f"{sharded}/model.safetensors.index.json", "w"))
EOF
check "import_published_layout_no_prefix_with_mask_buffers" bash -c "$IMPORT '$tmp/published' '$tmp/published.bin' >/dev/null && same_model '$CKPT' '$tmp/published.bin'"
check "import_sharded_checkpoint" bash -c "$IMPORT '$tmp/sharded' '$tmp/sharded.bin' >/dev/null && same_model '$CKPT' '$tmp/sharded.bin'"
check "export_tokenizer_files_are_gpt2_bpe_files" bash -c "cmp '$BPE/encoder.json' '$tmp/hf_fp32/vocab.json' && cmp '$BPE/vocab.bpe' '$tmp/hf_fp32/merges.txt'"

# ---------------------------------------------------------------------------------------------
# 2. Bad input. Directories made from the fp32 export.
make_bad_dir() { # NAME: a copy of the export to spoil
    rm -rf "$tmp/$1"; cp -r "$tmp/hf_fp32" "$tmp/$1"
}
set_config() { # DIR KEY JSON_VALUE
    python3 -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(p,'w'))" "$@"
}
make_bad_dir only_bin; mv "$tmp/only_bin/model.safetensors" "$tmp/only_bin/pytorch_model.bin"
check_error_line import_dir_without_safetensors "only_bin: no model.safetensors (it holds pytorch_model.bin); expected config.json and model.safetensors" \
    $IMPORT "$tmp/only_bin" "$tmp/out1.bin"
make_bad_dir llama; set_config "$tmp/llama" model_type '"llama"'
check_error_line import_non_gpt2_config "llama/config.json: model_type is 'llama'; expected 'gpt2'" \
    $IMPORT "$tmp/llama" "$tmp/out2.bin"
make_bad_dir erf_gelu; set_config "$tmp/erf_gelu" activation_function '"gelu"'
check_error_line import_other_activation "erf_gelu/config.json: activation_function is 'gelu'; expected 'gelu_new'" \
    $IMPORT "$tmp/erf_gelu" "$tmp/out3.bin"
make_bad_dir vocab; set_config "$tmp/vocab" vocab_size 50304
check_error_line import_vocab_not_50257 "vocab/config.json: vocab_size is 50304; expected 50257" \
    $IMPORT "$tmp/vocab" "$tmp/out4.bin"
make_bad_dir deeper; set_config "$tmp/deeper" n_layer 3
check_error_line import_config_and_tensors_disagree "deeper/model.safetensors: no tensor h.2.ln_1.weight (for ln1w of layer 2); expected every GPT-2 tensor for n_layer=3" \
    $IMPORT "$tmp/deeper" "$tmp/out5.bin"
# Truncated: the data cut short (header intact), and the header itself cut.
make_bad_dir truncated; truncate -s 1000000 "$tmp/truncated/model.safetensors"
check_error_line import_truncated_safetensors "truncated/model.safetensors: not a complete safetensors file" \
    $IMPORT "$tmp/truncated" "$tmp/out6.bin"
make_bad_dir truncated_header; truncate -s 100 "$tmp/truncated_header/model.safetensors"
check_error_line import_truncated_safetensors_header "truncated_header/model.safetensors: not a complete safetensors file" \
    $IMPORT "$tmp/truncated_header" "$tmp/out7.bin"
check_error_line import_missing_dir "no_such_dir: not a directory" $IMPORT "$tmp/no_such_dir" "$tmp/out8.bin"
check "import_failures_left_nothing" bash -c "for i in 1 2 3 4 5 6 7 8; do [ ! -e '$tmp/out'\$i.bin ] || exit 1; done; ! ls -A '$tmp' | grep -q '\\.tmp$'"
cp "$tmp/back_fp32.bin" "$tmp/exists.bin"; before=$(sha256sum <"$tmp/exists.bin")
check_error_line import_refuses_existing_output "exists.bin: already exists; expected a new path, or --force" \
    $IMPORT "$tmp/hf_bf16" "$tmp/exists.bin"
check "import_refusal_kept_existing_file" bash -c "[ \"\$(sha256sum <'$tmp/exists.bin')\" = '$before' ]"
check "import_force_replaces_existing_output" bash -c "$IMPORT '$tmp/hf_bf16' '$tmp/exists.bin' --force >/dev/null && same_model '$tmp/ckpt_bf16.bin' '$tmp/exists.bin' && ! ls -A '$tmp' | grep -q '\\.tmp$'"
check_error_line export_refuses_existing_dir "hf_fp32: already exists; expected a new path, or --force" \
    $EXPORT "$CKPT" "$tmp/hf_fp32"
check "export_force_replaces_existing_dir" bash -c "$EXPORT '$tmp/ckpt_bf16.bin' '$tmp/hf_force' >/dev/null && $EXPORT '$CKPT' '$tmp/hf_force' --force >/dev/null &&
    cmp '$tmp/hf_force/model.safetensors' '$tmp/hf_fp32/model.safetensors' && ! ls -A '$tmp' | grep -q -E '\\.(tmp|old)$'"
head -c 5000 "$CKPT" >"$tmp/short.bin"
check_error_line export_truncated_model_file "short.bin: file is 5000 bytes; expected" $EXPORT "$tmp/short.bin" "$tmp/hf_x1"
python3 -c "import numpy as np,sys; d=np.fromfile(sys.argv[1],'<i4').copy(); d[256+50304*128+1024*128+5]=np.float32('nan').view('<i4'); d.tofile(sys.argv[2])" "$CKPT" "$tmp/nan.bin"
check_error_line export_nan_weight_named "nan.bin: tensor ln1w of layer 0 holds nan at element 5; expected finite weights" \
    $EXPORT "$tmp/nan.bin" "$tmp/hf_x2"
check_error_line export_bad_bpe_dir "--bpe-dir $tmp/no_bpe: not a directory" $EXPORT "$CKPT" "$tmp/hf_x3" --bpe-dir "$tmp/no_bpe"
# A full disk: a 2 MB tmpfs (mounting needs root; CI runs as root) for a 27 MB model.
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=2m tmpfs "$tmp/full" 2>/dev/null; then
    check_error_line import_full_disk "full/d2.bin: cannot write (No space left on device); expected a writable directory with free space" \
        $IMPORT "$tmp/hf_fp32" "$tmp/full/d2.bin"
    check_error_line export_full_disk "full/hf/model.safetensors: cannot write (.*No space left on device" \
        $EXPORT "$CKPT" "$tmp/full/hf"
    check "full_disk_left_nothing" bash -c "[ -z \"\$(ls -A '$tmp/full')\" ]"
    umount "$tmp/full"
else
    echo "SKIP full_disk_checks: cannot mount a small tmpfs here (not root); the full-disk checks did not run"
fi
check "export_failures_left_nothing" bash -c "[ ! -e '$tmp/hf_x1' ] && [ ! -e '$tmp/hf_x2' ] && [ ! -e '$tmp/hf_x3' ] && ! ls -A '$tmp' | grep -q '\\.tmp$'"

# ---------------------------------------------------------------------------------------------
# 3. In transformers.
hf_ready() { python3 -c "import torch, transformers" >/dev/null 2>&1; }
if ! hf_ready && [ "${HF_TESTS:-1}" != 0 ]; then
    bash scripts/setup.sh --hf >"$tmp/setup.txt" 2>&1 || echo "FAIL hf_packages_install: $(tail -2 "$tmp/setup.txt" | tr '\n' ' ')"
    grep -h 'installed in' "$tmp/setup.txt"
fi
if ! hf_ready; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL hf_packages_present: torch and transformers cannot be imported; expected them on CI (scripts/setup.sh --hf)"
    else
        echo "SKIP hf_transformers_checks: torch/transformers not installed (HF_TESTS=0); the checks in transformers did not run"
    fi
    exit 0
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# The trainer's val loss at step 20 (4 batches of 4 x 64 from the val shard's start) and the CPU
# model's greedy continuation of a prompt; transformers must give the same on the export.
trainer_val=$(grep '^step    20/20 | val loss' "$tmp/d2.txt" | awk '{print $NF}')
PROMPT="First Citizen:
Before we proceed any further, hear me speak."
prompt_tokens=$(python3 -c "import sys; sys.path.insert(0,'data'); import common; print(*common.load_gpt2_encoding(sys.argv[1]).encode_ordinary(sys.argv[2]))" "$BPE" "$PROMPT")
build/test_greedy_decode "$CKPT" 20 $prompt_tokens >"$tmp/greedy.txt"
check_d2_in_transformers() {
    python3 - "$tmp/hf_fp32" "$tmp/hf_bf16" "$tmp/ckpt_bf16.bin" "$VAL" "$trainer_val" "$PROMPT" "$prompt_tokens" "$tmp/greedy.txt" \
        >"$tmp/d2_measured.txt" <<'EOF'
import sys, numpy as np, torch
from transformers import AutoTokenizer, GPT2LMHeadModel
hf_dir, bf16_dir, bf16_file, val_path, trainer_val, prompt, prompt_tokens, greedy_path = sys.argv[1:]
model = GPT2LMHeadModel.from_pretrained(hf_dir, local_files_only=True).eval()
# Val loss: the trainer's val loader reads batch i as tokens [i*B*T, i*B*T + B*T] of the val shard
# (inputs, then targets shifted by one) and averages the 4 batch means.
B, T, M = 4, 64, 4
val = np.fromfile(val_path, "<u2", offset=1024).astype(np.int64)
losses = []
with torch.no_grad():
    for i in range(M):
        chunk = torch.from_numpy(val[i * B * T:i * B * T + B * T + 1])
        logits = model(chunk[:-1].view(B, T)).logits
        losses.append(torch.nn.functional.cross_entropy(logits.view(B * T, -1), chunk[1:]).item())
hf_val = sum(losses) / M
rel = abs(hf_val - float(trainer_val)) / float(trainer_val)
print(f"val loss: trainer {trainer_val}, transformers {hf_val:.6f}, relative difference {rel:.2e}")
# Tolerance 1e-5 relative (the issue's): fp32 in both, summed in another order; the trainer prints
# 6 decimals (5e-7 absolute, 7e-8 relative).
assert rel < 1e-5, "val loss differs"
# Tokenizer: AutoTokenizer on the export encodes the prompt as tiktoken (the trainer's data) did.
tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
ids = tokenizer(prompt)["input_ids"]
assert ids == [int(t) for t in prompt_tokens.split()], (ids, prompt_tokens)
text = "caf\u00e9 \U0001F600  spaces\n\nand <|endoftext|> as text"
assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
# Greedy continuation: transformers' generate (with its KV cache) vs the CPU model.
out = model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False, pad_token_id=50256)
hf_tokens = out[0, len(ids):].tolist()
lines = open(greedy_path).read().split("\n")
c_tokens = [int(t) for t in lines[0].split()[1:]]
margins = [float(m) for m in lines[1].split()[1:]]
print(f"greedy: transformers {hf_tokens}\n        trainer      {c_tokens} (smallest top-2 logit gap {min(margins):.3g})")
print(f"continuation: {tokenizer.decode(hf_tokens)!r}")
assert hf_tokens == c_tokens, "greedy continuations differ"
# The bf16 export loads with its bf16 weights as they are.
bf16 = GPT2LMHeadModel.from_pretrained(bf16_dir, local_files_only=True, dtype=torch.bfloat16)
def bits(t):
    return t.detach().view(torch.int16).numpy().view(np.uint16)
C, V, Vp, maxT, L = 128, 50257, 50304, 1024, 2
params = np.fromfile(bf16_file, "<u2", offset=1024)
qkvw0 = params[Vp * C + maxT * C + 2 * L * C:][:3 * C * C].reshape(3 * C, C)  # after wte, wpe, ln1w, ln1b
assert np.array_equal(bits(bf16.transformer.wte.weight), params[:V * C].reshape(V, C))
assert np.array_equal(bits(bf16.transformer.h[0].attn.c_attn.weight), qkvw0.T)
EOF
}
check "d2_export_in_transformers_val_loss_greedy_tokenizer" check_d2_in_transformers
sed 's/^/  /' "$tmp/d2_measured.txt"  # the measured differences

# A random-init GPT2LMHeadModel with an odd config, from save_pretrained, trained by the trainer.
ODD=$tmp/odd_hf
python3 - "$ODD" "$TRAIN" >"$tmp/odd_hf_loss.txt" 2>"$tmp/odd_hf_err.txt" <<'EOF'
import sys, numpy as np, torch
from transformers import GPT2Config, GPT2LMHeadModel
out_dir, train_path = sys.argv[1:]
torch.manual_seed(1234)
# initializer_range 0.2, not GPT-2's 0.02: at 0.02 the random model's greedy continuation is one
# token repeated whatever the context; at 0.2 it varies, so the greedy check below can fail.
config = GPT2Config(n_layer=3, n_embd=96, n_head=3, n_positions=64, vocab_size=50257, initializer_range=0.2,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config).eval()
model.save_pretrained(out_dir)
# The trainer's first batch: B=2 x T=64 from the train shard's start, targets shifted by one.
B, T = 2, 64
chunk = torch.from_numpy(np.fromfile(train_path, "<u2", offset=1024, count=B * T + 1).astype(np.int64))
with torch.no_grad():
    logits = model(chunk[:-1].view(B, T)).logits
print(f"{torch.nn.functional.cross_entropy(logits.view(B * T, -1), chunk[1:]).item():.9f}")
EOF
check "odd_config_saved_by_save_pretrained" test -f "$ODD/model.safetensors"
check "odd_config_imports" $IMPORT "$ODD" "$tmp/odd.bin"
./train_gpt2 -i "$TRAIN" -j "$VAL" -e "$tmp/odd.bin" -b 2 -t 64 -x 3 -v 0 -s 0 -n 3 -o "$tmp/odd_run" >"$tmp/odd_train.txt" 2>&1
check "imported_padded_vocab_rows_stay_zero_in_training" python3 -c "
import sys, numpy as np
p = np.fromfile(sys.argv[1], '<f4', offset=1024)
assert p[50257 * 96:50304 * 96].size == 47 * 96 and not p[50257 * 96:50304 * 96].any() and p[:50257 * 96].any()" "$tmp/odd_run/model_00000003.bin"
check_odd_first_loss() {
    local hf_loss trainer_loss steps
    hf_loss=$(cat "$tmp/odd_hf_loss.txt")
    trainer_loss=$(grep '^step     1/3 | loss' "$tmp/odd_train.txt" | awk '{print $5}')
    steps=$(grep -c '^step     [123]/3 | loss [0-9]' "$tmp/odd_train.txt")
    python3 - "$hf_loss" "$trainer_loss" "$steps" >"$tmp/odd_measured.txt" <<'EOF'
import sys
hf, trainer, steps = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rel = abs(hf - trainer) / hf
print(f"first step loss: trainer {trainer:.6f}, transformers {hf:.6f}, relative difference {rel:.2e}; {steps} steps")
# Tolerance 1e-5 relative (the issue's); the trainer prints 6 decimals (5e-7 absolute).
assert rel < 1e-5 and steps == 3
EOF
}
check "odd_config_first_step_loss_matches_transformers" check_odd_first_loss
sed 's/^/  /' "$tmp/odd_measured.txt"
check_odd_export_same_tensors() {
    $EXPORT "$tmp/odd.bin" "$tmp/odd_back" >/dev/null && python3 - "$ODD" "$tmp/odd_back" <<'EOF'
import sys, numpy as np
from safetensors.numpy import load_file
a, b = (load_file(f"{d}/model.safetensors") for d in sys.argv[1:])
assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
assert all(np.array_equal(a[k], b[k]) for k in a)
EOF
}
check "odd_config_export_gives_back_save_pretrained_tensors" check_odd_export_same_tensors
# The 20-step d2 model's greedy continuation is one token repeated (what 20 steps learn: the most
# frequent token), so greedy decoding is checked again on the odd model after its 3 steps, whose
# continuation holds many different tokens: exported, in transformers, vs the CPU model.
check_odd_trained_greedy() {
    $EXPORT "$tmp/odd_run/model_00000003.bin" "$tmp/odd_trained_hf" >/dev/null || return 1
    build/test_greedy_decode "$tmp/odd_run/model_00000003.bin" 20 $prompt_tokens >"$tmp/odd_greedy.txt" || return 1
    python3 - "$tmp/odd_trained_hf" "$prompt_tokens" "$tmp/odd_greedy.txt" >"$tmp/odd_greedy_measured.txt" <<'EOF'
import sys, torch
from transformers import GPT2LMHeadModel
hf_dir, prompt_tokens, greedy_path = sys.argv[1:]
model = GPT2LMHeadModel.from_pretrained(hf_dir, local_files_only=True).eval()
ids = [int(t) for t in prompt_tokens.split()]
hf_tokens = model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False, pad_token_id=50256)[0, len(ids):].tolist()
lines = open(greedy_path).read().split("\n")
c_tokens = [int(t) for t in lines[0].split()[1:]]
margins = [float(m) for m in lines[1].split()[1:]]
print(f"greedy after 3 steps: transformers {hf_tokens}\n                      trainer      {c_tokens} "
      f"({len(set(c_tokens))} distinct; smallest top-2 logit gap {min(margins):.3g})")
assert hf_tokens == c_tokens, "greedy continuations differ"
assert len(set(c_tokens)) >= 5, "a continuation of few distinct tokens proves little"
EOF
}
check "odd_config_trained_export_greedy_matches_transformers" check_odd_trained_greedy
sed 's/^/  /' "$tmp/odd_greedy_measured.txt"
