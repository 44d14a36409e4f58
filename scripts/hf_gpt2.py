"""hf_gpt2.py: llm.c model files <-> Hugging Face GPT-2 directories, shared by
scripts/export_hf.py and scripts/import_hf.py. Uses numpy and safetensors only; transformers is
needed only to load what the export writes. numpy has no bfloat16: bf16 values are held as their
uint16 bit patterns (the high half of the fp32 bits), rounded as the trainer rounds (bf16_bits below).

llm.c model file (common/model_file.h, common/gpt2_config.h): 256 x int32 header, [0] magic
20240326, [1] version 3 (fp32) or 5 (bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp, the rest
0; then the 16 tensor kinds in kind-major order: wte (Vp, C), wpe (maxT, C), for each per-layer
kind its L tensors one after the other (ln1w, ln1b (C); qkvw (3C, C); qkvb (3C); attprojw (C, C);
attprojb, ln2w, ln2b (C); fcw (4C, C); fcb (4C); fcprojw (C, 4C); fcprojb (C)), then lnfw, lnfb
(C). Weights are (out, in), as torch.nn.Linear stores them; rows V..Vp-1 of wte are padding
(zeros: the trainer never reads or updates them).

Hugging Face GPT2LMHeadModel (transformers' models/gpt2/modeling_gpt2.py): the same tensors
under the names in KINDS below, with the prefix "transformer." (what save_pretrained writes; the
published GPT-2 checkpoints have none; both are read). Its Conv1D layers store weights as
(in, out), so the four matmul weights are transposed; wte has V rows; lm_head.weight is wte (tied)
and not stored. The math is the trainer's: GELU with the tanh approximation ("gelu_new"),
LayerNorm eps 1e-5, attention scores scaled by 1/sqrt(C/NH), no dropout at eval.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
from common import die  # noqa: E402  (the one-line user error, data/common.py)

MODEL_MAGIC = 20240326
VERSION_FP32, VERSION_BF16 = 3, 5
HEADER_INTS = 256
GPT2_VOCAB_SIZE = 50257
LAYERNORM_EPS = 1e-5
HF_PREFIX = "transformer."

# llm.c tensor kind, one per layer?, Hugging Face name ({} = layer), stored transposed by HF?
KINDS = [
    ("wte", False, "wte.weight", False),
    ("wpe", False, "wpe.weight", False),
    ("ln1w", True, "h.{}.ln_1.weight", False),
    ("ln1b", True, "h.{}.ln_1.bias", False),
    ("qkvw", True, "h.{}.attn.c_attn.weight", True),
    ("qkvb", True, "h.{}.attn.c_attn.bias", False),
    ("attprojw", True, "h.{}.attn.c_proj.weight", True),
    ("attprojb", True, "h.{}.attn.c_proj.bias", False),
    ("ln2w", True, "h.{}.ln_2.weight", False),
    ("ln2b", True, "h.{}.ln_2.bias", False),
    ("fcw", True, "h.{}.mlp.c_fc.weight", True),
    ("fcb", True, "h.{}.mlp.c_fc.bias", False),
    ("fcprojw", True, "h.{}.mlp.c_proj.weight", True),
    ("fcprojb", True, "h.{}.mlp.c_proj.bias", False),
    ("lnfw", False, "ln_f.weight", False),
    ("lnfb", False, "ln_f.bias", False),
]


# --- bf16 as uint16 bit patterns (bf16 is the high 16 bits of an IEEE-754 fp32) -----------------

def bf16_bits(values):
    """float32 (or float16) array -> uint16 bf16 bit patterns, rounded to nearest, ties to even,
    as the trainer rounds its fp32 weights to bf16 (__float2bfloat16 from CUDA's cuda_bf16.hpp,
    zero/gpu/state_io_gpu.cuh zero_set_unit_params): add 0x7FFF plus the lowest kept bit to the uint32
    view and keep the high half. Finite values from 0x7F7F8000 up round to Inf, as in IEEE;
    subnormals round like any value (no flush to zero); every NaN becomes 0x7FFF, the quiet NaN
    CUDA returns (the plain add would carry a NaN into Inf or, with the sign bit, wrap it to 0)."""
    u = np.asarray(values, dtype="<f4").view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    rounded[(u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)] = 0x7FFF
    return rounded


def bf16_to_fp32(bits):
    """uint16 bf16 bit patterns -> float32 (exact: the bits become the high half; the CPU build's
    bf16_bits_to_float in common/model_file.h)."""
    return (np.asarray(bits, dtype="<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)


# --- safetensors' BF16 tensors with numpy alone ------------------------------------------------
# safetensors' numpy side (safetensors.numpy, safe_open(framework="numpy")) has no numpy dtype for
# BF16 without a further package (ml_dtypes); F32 and F16 it reads and writes itself. BF16
# tensors are written and read here from the format's specification (github.com/huggingface/
# safetensors, "Format"): an 8-byte little-endian header size N, N bytes of JSON {name: {"dtype",
# "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} (padded with spaces), then
# the tensors' little-endian bytes, row-major, back to back, offsets counted from the header's end.

def write_safetensors_bf16(path, tensors, metadata):
    """Write {name: uint16 array of bf16 bits} as a safetensors file of BF16 tensors, in the
    dict's order. OSError (a full disk) goes to the caller."""
    header, begin = {"__metadata__": metadata}, 0
    for name, bits in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(bits.shape), "data_offsets": [begin, begin + bits.nbytes]}
        begin += bits.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the tensors start 8-byte aligned, as safetensors writes them
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for bits in tensors.values():
            f.write(np.ascontiguousarray(bits, dtype="<u2").tobytes())


def safetensors_header(path):
    """(header dict, byte offset of the tensor data) of a safetensors file."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(size)), 8 + size


def read_safetensors_bf16(path, header, data_start, name):
    """A BF16 tensor as a read-only uint16 memory map of its bits, from safetensors_header's
    (header, data_start). For files that safe_open has checked (header, offsets, size), as
    import_hf's Checkpoint does; a ValueError if the entry does not describe a BF16 tensor."""
    info = header[name]
    begin, end = info["data_offsets"]
    shape = tuple(info["shape"])
    if info["dtype"] != "BF16" or end - begin != 2 * int(np.prod(shape)):
        raise ValueError(f"tensor {name}: {info['dtype']} with {end - begin} bytes for shape {list(shape)}")
    return np.memmap(path, dtype="<u2", mode="r", offset=data_start + begin, shape=shape)


def llmc_shape(kind, cfg):
    """Shape of one tensor of `kind` in an llm.c file, (out, in) for weights."""
    C, Vp, maxT = cfg["C"], cfg["Vp"], cfg["maxT"]
    return {"wte": (Vp, C), "wpe": (maxT, C), "qkvw": (3 * C, C), "qkvb": (3 * C,),
            "attprojw": (C, C), "fcw": (4 * C, C), "fcb": (4 * C,),
            "fcprojw": (C, 4 * C)}.get(kind, (C,))


def llmc_tensor_order(cfg):
    """(kind, layer or None, hf name without prefix, transposed) in llm.c's file order."""
    order = []
    for kind, per_layer, hf_name, transposed in KINDS:
        for layer in (range(cfg["L"]) if per_layer else [None]):
            order.append((kind, layer, hf_name.format(layer), transposed))
    return order


def tensor_label(kind, layer):
    return kind if layer is None else f"{kind} of layer {layer}"


def check_finite(values, where, name):
    """One error line naming the tensor if it holds a NaN or Inf (float32, float16, or uint16
    bf16 bits)."""
    if values.dtype == np.uint16:
        bad = np.flatnonzero((values & np.uint16(0x7F80)) == 0x7F80)  # all-ones exponent: Inf or NaN
        first = float(bf16_to_fp32(values.reshape(-1)[bad[:1]])[0]) if bad.size else 0.0
    else:
        bad = np.flatnonzero(~np.isfinite(values))
        first = float(values.reshape(-1)[bad[0]]) if bad.size else 0.0
    if bad.size:
        die(where, f"tensor {name} holds {first} at element {bad[0]}", "finite weights")


def read_llmc(path):
    """An llm.c model file -> (cfg dict, version, [(kind, layer, array in llm.c's shape)]).
    The arrays are read-only views of a memory map (float32, or uint16 bf16 bits). Bad input:
    one error line naming the file."""
    if not os.path.isfile(path):
        die(path, "model file not found", "an llm.c model file (fp32 version 3 or bf16 version 5)")
    size = os.path.getsize(path)
    if size < HEADER_INTS * 4:
        die(path, f"file is {size} bytes, shorter than the 1024-byte header", "an llm.c model file")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != MODEL_MAGIC:
        die(path, f"bad magic {header[0]}", f"{MODEL_MAGIC} (llm.c model file)")
    version = int(header[1])
    if version not in (VERSION_FP32, VERSION_BF16):
        die(path, f"unsupported version {version}", "3 (fp32) or 5 (bf16)")
    cfg = dict(zip(["maxT", "V", "L", "NH", "C", "Vp"], (int(x) for x in header[2:8])))
    if min(cfg.values()) < 1 or cfg["C"] % cfg["NH"] or cfg["Vp"] < cfg["V"]:
        die(path, f"invalid config in header {cfg}", "positive sizes, C divisible by NH, Vp >= V")
    order = llmc_tensor_order(cfg)
    numels = [int(np.prod(llmc_shape(kind, cfg))) for kind, _, _, _ in order]
    dtype = np.dtype("<f4") if version == VERSION_FP32 else np.dtype("<u2")  # bf16 bits
    expected = HEADER_INTS * 4 + sum(numels) * dtype.itemsize
    if size != expected:
        die(path, f"file is {size} bytes", f"{expected} for the config in its header")
    flat = np.memmap(path, dtype=dtype, mode="r", offset=HEADER_INTS * 4, shape=(sum(numels),))
    tensors, at = [], 0
    for (kind, layer, _, _), n in zip(order, numels):
        values = flat[at:at + n].reshape(llmc_shape(kind, cfg))
        check_finite(values, path, tensor_label(kind, layer))
        tensors.append((kind, layer, values))
        at += n
    return cfg, version, tensors


def refuse_existing(path, force):
    if os.path.lexists(path) and not force:
        die(path, "already exists", "a new path, or --force to replace it")


def write_llmc(path, cfg, version, tensors):
    """Write an llm.c model file from tensors in llm.c's order and shapes (float32 for version 3,
    uint16 bf16 bits for 5), to a temporary name in the same directory, then rename."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except OSError as e:
        die(path, f"cannot create a file in {directory} ({e.strerror})", "a writable directory")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header.tobytes())
            for _, _, values in tensors:
                f.write(np.ascontiguousarray(values).tobytes())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's mode is owner-only
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        die(path, f"cannot write ({e.strerror})", "a writable directory with free space")
    except BaseException:
        os.unlink(tmp)
        raise


def make_dir_atomically(out_dir, force, fill):
    """Build a directory under a temporary name beside out_dir (fill(tmp_dir) writes its files),
    then rename it to out_dir. With force, an existing out_dir is replaced only after the new one
    is complete, so a failure leaves the old one as it was. Missing parent directories are
    created (as `mkdir -p` would: hf/d6 works in a fresh clone)."""
    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        die(out_dir, f"cannot create its parent directory {parent} ({e.strerror})", "a path under a writable directory")
    try:
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.", suffix=".tmp", dir=parent)
    except OSError as e:
        die(out_dir, f"cannot create a directory in {parent} ({e.strerror})", "a writable directory")
    try:
        fill(tmp)
        umask = os.umask(0)
        os.umask(umask)
        for name in os.listdir(tmp):  # mkdtemp and safetensors create owner-only modes
            os.chmod(os.path.join(tmp, name), 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)
        if os.path.lexists(out_dir):  # --force (refuse_existing ran first)
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.", suffix=".old", dir=parent)
            os.replace(out_dir, os.path.join(old, "previous"))
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        die(out_dir, f"cannot write ({e.strerror})", "a writable directory with free space")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def hf_config(cfg, version):
    """config.json for GPT2LMHeadModel with the trainer's architecture and no dropout."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg["V"],
        "n_positions": cfg["maxT"],
        "n_ctx": cfg["maxT"],
        "n_embd": cfg["C"],
        "n_layer": cfg["L"],
        "n_head": cfg["NH"],
        "n_inner": None,  # 4 * n_embd
        "activation_function": "gelu_new",
        "layer_norm_epsilon": LAYERNORM_EPS,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": GPT2_VOCAB_SIZE - 1,
        "eos_token_id": GPT2_VOCAB_SIZE - 1,
        "torch_dtype": "float32" if version == VERSION_FP32 else "bfloat16",
    }


def check_hf_config(path, config):
    """A config.json dict -> the llm.c cfg, or one error line if the model is not the trainer's
    GPT-2 (missing keys take GPT2Config's defaults)."""
    def get(key, default):
        return config.get(key, default)
    model_type = get("model_type", None)
    if model_type != "gpt2":
        die(path, f"model_type is {model_type!r}", "'gpt2' (a GPT2LMHeadModel checkpoint)")
    vocab = get("vocab_size", GPT2_VOCAB_SIZE)
    if vocab != GPT2_VOCAB_SIZE:
        die(path, f"vocab_size is {vocab}", f"{GPT2_VOCAB_SIZE} (GPT-2's BPE, which the trainer's data uses)")
    activation = get("activation_function", "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        die(path, f"activation_function is {activation!r}", "'gelu_new' (GELU, tanh approximation, as the trainer)")
    eps = get("layer_norm_epsilon", LAYERNORM_EPS)
    if not isinstance(eps, (int, float)) or abs(eps - LAYERNORM_EPS) > 1e-12:
        die(path, f"layer_norm_epsilon is {eps}", f"{LAYERNORM_EPS} (the trainer's LayerNorm)")
    C, L, NH = get("n_embd", 768), get("n_layer", 12), get("n_head", 12)
    maxT = get("n_positions", 1024)
    for key, value in (("n_embd", C), ("n_layer", L), ("n_head", NH), ("n_positions", maxT)):
        if not isinstance(value, int) or value < 1:
            die(path, f"{key} is {value!r}", "a positive integer")
    if C % NH:
        die(path, f"n_embd {C} is not divisible by n_head {NH}", "n_embd a multiple of n_head")
    inner = get("n_inner", None)
    if inner not in (None, 4 * C):
        die(path, f"n_inner is {inner}", f"null or 4 * n_embd = {4 * C} (the trainer's MLP)")
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("tie_word_embeddings", True), ("add_cross_attention", False)):
        if get(key, want) != want:
            die(path, f"{key} is {get(key, want)}", f"{json.dumps(want)} (as in GPT-2 and the trainer)")
    return {"maxT": maxT, "V": vocab, "L": L, "NH": NH, "C": C, "Vp": (vocab + 127) // 128 * 128}
