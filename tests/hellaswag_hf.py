"""The trainer's HellaSwag losses against transformers' (tests/t_72_pretrain.sh).

usage: hellaswag_hf.py HF_DIR EVAL_FILE T TRAINER_EXAMPLES TOLERANCE

HF_DIR: the trainer's checkpoint exported by scripts/export_hf.py; EVAL_FILE: written by
data/hellaswag.py; T: the trainer's sequence length (its row rule: a row keeps its last T+1
tokens, an example whose completion does not fit with one context token is skipped);
TRAINER_EXAMPLES: the trainer's HELLASWAG_EXAMPLES_OUT file (index, label, skipped, 4 summed
losses, 4 lengths). GPT2LMHeadModel in fp32 scores every completion as -sum log softmax of its
tokens; the check: the same skipped examples, every summed loss within TOLERANCE (nats,
absolute), and the same picks (summed and per-token) wherever transformers' best and second-best
differ by more than 2 x TOLERANCE (closer, either pick is within the error). Prints the largest
difference measured and the counts.
"""
import os
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
import hellaswag  # noqa: E402


def main():
    hf_dir, eval_file, T, trainer_file, tolerance = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    model = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    examples = hellaswag.read_eval_file(eval_file)
    trainer = np.loadtxt(trainer_file, ndmin=2)
    assert len(trainer) == len(examples), f"trainer wrote {len(trainer)} examples, the file has {len(examples)}"
    worst, checked_picks, skipped = 0.0, 0, 0
    for (index, label, context, completions), row in zip(examples, trainer):
        assert int(row[0]) == index and int(row[1]) == label, f"example {index}: index/label differ"
        fits = all(len(c) <= T for c in completions)
        assert bool(row[2]) == (not fits), f"example {index}: trainer skipped={int(row[2])}, the row rule says {not fits}"
        if not fits:
            skipped += 1
            continue
        losses = []
        for completion in completions:
            tokens = (context + completion)[-(T + 1):]
            first = len(tokens) - len(completion)
            with torch.no_grad():
                logits = model(torch.tensor([tokens[:-1]])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            targets = torch.tensor(tokens[1:])
            per_token = -logp[torch.arange(len(targets)), targets]
            losses.append(float(per_token[first - 1:].sum()))
        losses = np.array(losses)
        ours = row[3:7]
        diff = float(np.max(np.abs(losses - ours)))
        worst = max(worst, diff)
        assert diff <= tolerance, f"example {index}: trainer {ours.tolist()} vs transformers {losses.tolist()} (diff {diff:.3g} > {tolerance})"
        lengths = np.array([len(c) for c in completions])
        for theirs_scores, our_scores in ((losses, ours), (losses / lengths, ours / lengths)):
            order = np.sort(theirs_scores)
            if order[1] - order[0] > 2 * tolerance:
                assert int(np.argmin(theirs_scores)) == int(np.argmin(our_scores)), f"example {index}: picks differ"
                checked_picks += 1
    print(f"{len(examples)} examples ({skipped} skipped by both): largest |trainer - transformers| of a summed completion "
          f"loss {worst:.3g} nats (tolerance {tolerance}); {checked_picks} of {2 * (len(examples) - skipped)} picks "
          f"(summed, per-token) clear of the tolerance, all equal")


if __name__ == "__main__":
    main()
