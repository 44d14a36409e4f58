"""Import a Hugging Face GPT-2 directory as an llm.c model file, to start training from it (-e).

    python3 scripts/import_hf.py ~/models/gpt2 gpt2_124M.bin            # then ./train_gpt2 -e gpt2_124M.bin
    python3 scripts/import_hf.py ~/models/gpt2-xl gpt2_1558M_bf16.bin --dtype bf16

HF_DIR is a local directory as save_pretrained writes it (or a download of a GPT-2 checkpoint):
config.json plus model.safetensors (or model.safetensors.index.json and its shards). The config
must be GPT-2's architecture as the trainer computes it (model_type gpt2, vocab 50257, gelu_new,
layer_norm_epsilon 1e-5, 4 * n_embd MLP, tied LM head); anything else, and other weight formats
(pytorch_model.bin, TensorFlow, Flax), is refused with one error line. --dtype: fp32 (llm.c
version 3) or bf16 (version 5, rounded to nearest even); default: bf16 when every tensor is BF16,
else fp32. wte gets the trainer's padded vocab rows (Vp = 50304), zeros. OUT.bin is written under a
temporary name and renamed; an existing OUT.bin is refused unless --force.
Tensor layouts and names: scripts/hf_gpt2.py.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2  # noqa: E402
from hf_gpt2 import die  # noqa: E402
import common  # noqa: E402  (data/common.py: argparse in the house style)

SAFETENSORS_DTYPES = ("F32", "BF16", "F16")
BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers in older checkpoints
OTHER_FORMATS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack",
                 "model.ckpt.index")


def weight_files(hf_dir):
    """The safetensors files of a checkpoint directory, or one error line saying what is there."""
    single = os.path.join(hf_dir, "model.safetensors")
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        try:
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as e:
            die(index, f"not a readable safetensors index ({type(e).__name__}: {e})",
                'JSON with a "weight_map" of tensor name -> shard file')
        return [os.path.join(hf_dir, shard) for shard in shards]
    found = [name for name in OTHER_FORMATS if os.path.exists(os.path.join(hf_dir, name))]
    what = f"no model.safetensors (it holds {', '.join(found)})" if found else "no model.safetensors"
    die(hf_dir, what, "config.json and model.safetensors (load the model in transformers and "
        "save_pretrained it: safetensors is its default)")


def safetensors_error(path, e):
    """safetensors' SafetensorError, an OSError, ...: one line, no traceback."""
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    die(path, f"not a complete safetensors file ({message})", "the model.safetensors that save_pretrained wrote, whole")


class Checkpoint:
    """The tensors of every safetensors file: names, dtypes and shapes from the headers at once,
    the data one tensor at a time (get), so a 1.5B model is never twice in memory. safe_open checks
    each file and reads its F32 and F16 tensors; BF16 tensors (which safetensors' numpy side reads
    only with ml_dtypes) come as uint16 bits from hf_gpt2.read_safetensors_bf16."""

    def __init__(self, files):
        from safetensors import safe_open
        self.handles, self.headers, self.where, self.dtypes, self.shapes = {}, {}, {}, {}, {}
        for path in files:
            if not os.path.isfile(path):
                die(path, "file not found", "every shard the index names")
            try:
                handle = safe_open(path, framework="numpy")
                for name in handle.keys():
                    tensor = handle.get_slice(name)
                    self.where[name], self.dtypes[name] = path, tensor.get_dtype()
                    self.shapes[name] = tuple(tensor.get_shape())
                if "BF16" in (self.dtypes[name] for name in handle.keys()):
                    self.headers[path] = hf_gpt2.safetensors_header(path)
            except Exception as e:
                safetensors_error(path, e)
            self.handles[path] = handle
        for name, dtype in self.dtypes.items():
            if dtype not in SAFETENSORS_DTYPES:
                die(self.where[name], f"tensor {name} is {dtype}", "F32, BF16 or F16 weights")

    def get(self, name):
        """The tensor's data: float32 or float16, or uint16 bits for BF16."""
        path = self.where[name]
        try:
            if self.dtypes[name] == "BF16":
                return hf_gpt2.read_safetensors_bf16(path, *self.headers[path], name)
            return self.handles[path].get_tensor(name)
        except Exception as e:
            safetensors_error(self.where[name], e)


def plan_tensors(cfg, checkpoint, where):
    """The checkpoint's name for every llm.c tensor, in llm.c's file order, checked before any
    data is read: one error line for a missing, unexpected or misshapen tensor, or an untied head."""
    names = {}
    for name in checkpoint.shapes:  # save_pretrained's names carry "transformer.", the published files none
        short = name[len(hf_gpt2.HF_PREFIX):] if name.startswith(hf_gpt2.HF_PREFIX) else name
        if not short.endswith(BUFFERS):
            names[short] = name
    plan = []
    for kind, layer, hf_name, transposed in hf_gpt2.llmc_tensor_order(cfg):
        if hf_name not in names:
            die(where, f"no tensor {hf_name} (for {hf_gpt2.tensor_label(kind, layer)})",
                f"every GPT-2 tensor for n_layer={cfg['L']}")
        name = names.pop(hf_name)
        want = (cfg["V"], cfg["C"]) if kind == "wte" else hf_gpt2.llmc_shape(kind, cfg)
        want = want[::-1] if transposed else want
        if checkpoint.shapes[name] != want:
            die(where, f"tensor {name} has shape {list(checkpoint.shapes[name])}",
                f"{list(want)} for the config (n_embd {cfg['C']}, n_positions {cfg['maxT']})")
        plan.append((kind, layer, name, transposed))
    lm_head = names.pop("lm_head.weight", None)
    if lm_head is not None and not np.array_equal(checkpoint.get(lm_head), checkpoint.get(plan[0][2])):
        die(where, "lm_head.weight differs from wte.weight", "a tied LM head (the trainer's is wte)")
    if names:
        die(where, f"unexpected tensor {sorted(names.values())[0]} ({len(names)} in all)",
            "a GPT2LMHeadModel checkpoint (no other heads or modules)")
    return plan


def llmc_tensors(cfg, checkpoint, plan, dtype):
    """Yield (kind, layer, array in llm.c's shape and `dtype`: "fp32" as float32, "bf16" as
    uint16 bits, rounded to nearest even as the trainer rounds) in file order, one at a time;
    one error line for a NaN or Inf (also one that rounding to bf16 made)."""
    for kind, layer, name, transposed in plan:
        values = checkpoint.get(name)
        hf_gpt2.check_finite(values, checkpoint.where[name], name)
        values = values.T if transposed else values
        if kind == "wte":  # the trainer's padded vocab rows: zeros
            padded = np.zeros((cfg["Vp"], cfg["C"]), dtype=values.dtype)
            padded[:cfg["V"]] = values
            values = padded
        if dtype == "fp32":  # F32 kept; F16 and BF16 widen exactly
            values = hf_gpt2.bf16_to_fp32(values) if values.dtype == np.uint16 else values.astype("<f4")
        elif values.dtype != np.uint16:  # to bf16 from F32 or F16: one rounding (F16 -> fp32 is exact)
            values = hf_gpt2.bf16_bits(values)
        values = np.ascontiguousarray(values)
        hf_gpt2.check_finite(values, checkpoint.where[name], f"{name} (as {dtype})")
        yield kind, layer, values


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hf_dir", help="local directory with config.json and model.safetensors")
    parser.add_argument("out", help="llm.c model file to write")
    parser.add_argument("--dtype", choices=["fp32", "bf16"],
                        help="fp32 (version 3) or bf16 (version 5); default: bf16 if all tensors are BF16, else fp32")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    args = parser.parse_args()

    hf_gpt2.refuse_existing(args.out, args.force)
    if not os.path.isdir(args.hf_dir):
        die(args.hf_dir, "not a directory", "a local directory with config.json and model.safetensors")
    config_path = os.path.join(args.hf_dir, "config.json")
    if not os.path.isfile(config_path):
        die(args.hf_dir, "no config.json", "config.json and model.safetensors, as save_pretrained writes them")
    try:
        with open(config_path) as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        die(config_path, f"not readable as JSON ({e})", "a transformers config.json")
    cfg = hf_gpt2.check_hf_config(config_path, config)
    files = weight_files(args.hf_dir)
    checkpoint = Checkpoint(files)
    where = files[0] if len(files) == 1 else os.path.join(args.hf_dir, "model.safetensors.index.json")
    plan = plan_tensors(cfg, checkpoint, where)
    dtype = args.dtype or ("bf16" if all(checkpoint.dtypes[name] == "BF16" for _, _, name, _ in plan) else "fp32")
    version = hf_gpt2.VERSION_FP32 if dtype == "fp32" else hf_gpt2.VERSION_BF16
    hf_gpt2.write_llmc(args.out, cfg, version, llmc_tensors(cfg, checkpoint, plan, dtype))
    print(f"wrote {args.out}: llm.c model file version {version} ({dtype}), GPT-2 L {cfg['L']} C {cfg['C']} "
          f"NH {cfg['NH']} maxT {cfg['maxT']} V {cfg['V']} (Vp {cfg['Vp']})")


if __name__ == "__main__":
    main()
