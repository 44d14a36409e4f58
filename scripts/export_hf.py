"""Export an llm.c model file (fp32 version 3 or bf16 version 5) as a Hugging Face GPT-2 directory.

    python3 scripts/export_hf.py out/run/model_00000200.bin hf/my_gpt2 --bpe-dir ../shared/data/gpt2

OUT_DIR then holds what GPT2LMHeadModel.from_pretrained(OUT_DIR) and, with --bpe-dir,
AutoTokenizer.from_pretrained(OUT_DIR) load offline:
  config.json        GPT-2 config: n_layer, n_embd, n_head, n_positions from the file's header,
                     vocab 50257, gelu_new, layer_norm_epsilon 1e-5, no dropout, tied embeddings
  model.safetensors  the weights in the file's dtype (F32 or BF16), named as save_pretrained names
                     them, Conv1D weights (in, out), wte without the padded vocab rows
  vocab.json, merges.txt, tokenizer_config.json   (--bpe-dir: GPT-2's encoder.json, vocab.bpe)
The directory is written under a temporary name beside OUT_DIR and renamed when complete; an
existing OUT_DIR is refused unless --force (then replaced only once the new one is complete).
Tensor layouts and names: scripts/hf_gpt2.py.
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2  # noqa: E402
from hf_gpt2 import die  # noqa: E402
import common  # noqa: E402  (data/common.py: argparse in the house style, the BPE checksums)


def hf_tensors(cfg, tensors):
    """llm.c tensors -> {Hugging Face name: contiguous array}, dtype kept (float32, or uint16
    bf16 bits)."""
    out = {}
    order = hf_gpt2.llmc_tensor_order(cfg)
    for (kind, layer, values), (_, _, hf_name, transposed) in zip(tensors, order):
        if kind == "wte":
            values = values[:cfg["V"]]  # rows V..Vp-1 are the trainer's padding
        out[hf_gpt2.HF_PREFIX + hf_name] = np.ascontiguousarray(values.T if transposed else values)
    return out


TOKENIZER_FILES = (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt"))  # GPT-2's name, HF's


def check_bpe_dir(bpe_dir):
    """Exit with one error line unless bpe_dir holds GPT-2's BPE files (tiktoken's sha256)."""
    if not os.path.isdir(bpe_dir):
        die(f"--bpe-dir {bpe_dir}", "not a directory", "a directory holding GPT-2's encoder.json and vocab.bpe")
    for name, _ in TOKENIZER_FILES:
        common.check_file_sha256(os.path.join(bpe_dir, name), common.GPT2_FILE_SHA256[name], f"GPT-2's {name}")


def write_tokenizer_files(directory, bpe_dir, max_length):
    """GPT-2's BPE files (checked by check_bpe_dir) under the names transformers'
    GPT2Tokenizer reads, and its config: <|endoftext|> as bos, eos and unk, as in GPT-2."""
    for name, target in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(bpe_dir, name), os.path.join(directory, target))
    eot = "<|endoftext|>"
    tokenizer_config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": max_length,
                        "bos_token": eot, "eos_token": eot, "unk_token": eot,
                        "add_prefix_space": False, "clean_up_tokenization_spaces": False}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f, indent=2)


def main():
    parser = common.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="llm.c model file (fp32 version 3 or bf16 version 5)")
    parser.add_argument("out_dir", help="directory to create")
    parser.add_argument("--bpe-dir", help="directory with GPT-2's encoder.json and vocab.bpe: "
                        "also write the tokenizer files")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT_DIR")
    args = parser.parse_args()

    hf_gpt2.refuse_existing(args.out_dir, args.force)
    if args.bpe_dir:
        check_bpe_dir(args.bpe_dir)
    cfg, version, tensors = hf_gpt2.read_llmc(args.model)
    if args.bpe_dir and cfg["V"] != hf_gpt2.GPT2_VOCAB_SIZE:
        die(f"--bpe-dir {args.bpe_dir}", f"the model's vocab is {cfg['V']}, not GPT-2's",
            f"a model with vocab {hf_gpt2.GPT2_VOCAB_SIZE} for GPT-2's tokenizer (or no --bpe-dir)")
    wte = tensors[0][2]
    if np.any(wte[cfg["V"]:].view(np.uint16 if version == hf_gpt2.VERSION_BF16 else np.uint32)):
        print(f"warning: {args.model}: padded vocab rows {cfg['V']}..{cfg['Vp'] - 1} of wte are not zero; "
              "they are dropped (no token reaches them)", file=sys.stderr)

    from safetensors.numpy import save_file

    def fill(directory):
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(hf_gpt2.hf_config(cfg, version), f, indent=2)
        # "format": "pt" tells transformers the layout is PyTorch's (it refuses files without it).
        path, metadata = os.path.join(directory, "model.safetensors"), {"format": "pt"}
        try:
            if version == hf_gpt2.VERSION_FP32:
                save_file(hf_tensors(cfg, tensors), path, metadata=metadata)
            else:  # uint16 bf16 bits, which safetensors.numpy would store as U16
                hf_gpt2.write_safetensors_bf16(path, hf_tensors(cfg, tensors), metadata)
        except OSError as e:  # a full disk
            die(os.path.join(args.out_dir, "model.safetensors"), f"cannot write ({e.strerror})",
                "a writable directory with free space")
        except Exception as e:  # safetensors reports I/O errors (a full disk) as SafetensorError
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            die(os.path.join(args.out_dir, "model.safetensors"), f"cannot write ({message})",
                "a writable directory with free space")
        if args.bpe_dir:
            write_tokenizer_files(directory, args.bpe_dir, cfg["maxT"])

    hf_gpt2.make_dir_atomically(args.out_dir, args.force, fill)
    dtype = "fp32" if version == hf_gpt2.VERSION_FP32 else "bf16"
    print(f"wrote {args.out_dir}: GPT-2 L {cfg['L']} C {cfg['C']} NH {cfg['NH']} maxT {cfg['maxT']} "
          f"V {cfg['V']}, {dtype}" + (", with tokenizer" if args.bpe_dir else ", no tokenizer (no --bpe-dir)"))


if __name__ == "__main__":
    main()
