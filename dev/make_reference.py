#!/usr/bin/env python3
"""
make_reference.py: the PyTorch reference state that test_gpt2 (CPU) and test_gpt2cu (GPU) are
checked against.

A small GPT-2 (V=1000 padded to Vp=1024, maxT=64, L=2, NH=4, C=64), written out here with plain
tensor ops so every formula is visible, initialised GPT-2 style from a fixed seed, run in float64
on one batch (B=4, T=32) of random tokens: forward, backward, then 10 AdamW steps with global-norm
gradient clipping on the same batch. Everything is computed in float64 from the float32-rounded
initial weights, so the reference's own rounding error is negligible next to a float32 trainer's;
results are stored as float32.

Outputs (in dev/reference/, layouts in dev/reference/FORMAT.md and common/reference_state.h):
  gpt2_ref_model.bin  initial weights, llm.c model-file format (fp32)
  gpt2_ref_state.bin  inputs, targets, logits, loss, all gradients, 10 step losses and
                      pre-clip grad norms, parameters after the 10 steps

Self-checks before writing (the script stops if one fails):
  - the hand-written ops against torch.nn.functional (layer_norm, gelu, attention, cross-entropy)
  - the autograd gradient against a central finite difference along a random direction
  - the hand-written AdamW + clipping trajectory against torch.optim.AdamW + clip_grad_norm_

Usage: pip install torch numpy; python dev/make_reference.py  (deterministic: same bytes each run)
"""
import hashlib
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# Configuration (keep FORMAT.md in step with these)

V, VP, MAX_T, L, NH, C = 1000, 1024, 64, 2, 4, 64
B, T = 4, 32
SEED = 1337            # weights: torch.Generator seeded with SEED; tokens: seeded with SEED + 1
NUM_STEPS = 10
LR, BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.95, 1e-8, 0.1
GRAD_CLIP, CLIP_EPS = 1.0, 1e-6  # clip coefficient min(1, GRAD_CLIP / (norm + CLIP_EPS))
LN_EPS = 1e-5

MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3
STATE_MAGIC, STATE_VERSION = 20241107, 1

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")

# llm.c tensor order; per-layer kinds hold L tensors stacked along a leading axis.
KINDS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
SHAPES = {
    "wte": (VP, C), "wpe": (MAX_T, C),
    "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
    "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
    "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
    "lnfw": (C,), "lnfb": (C,),
}
# Weight decay goes to the matrices only (2-D per tensor), never to biases or LayerNorm.
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}

torch.set_num_threads(1)  # one fixed reduction order, so the float64 results (and bytes) repeat
DTYPE = torch.float64


# ----------------------------------------------------------------------------------------------
# Parameters

def init_params():
    """GPT-2 initialisation: matrices N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)),
    biases 0, LayerNorm weight 1 / bias 0; wte rows V..Vp-1 (vocabulary padding) are 0. Drawn in
    llm.c order from one generator, rounded to float32 (the values the trainers start from), and
    returned as float64 leaves."""
    gen = torch.Generator().manual_seed(SEED)
    residual_std = 0.02 / math.sqrt(2 * L)
    params = {}
    for kind in KINDS:
        shape = SHAPES[kind]
        if kind in ("ln1w", "ln2w", "lnfw"):
            t = torch.ones(shape, dtype=DTYPE)
        elif kind.endswith("b"):
            t = torch.zeros(shape, dtype=DTYPE)
        else:
            std = residual_std if kind in ("attprojw", "fcprojw") else 0.02
            t = torch.randn(shape, generator=gen, dtype=DTYPE) * std
            if kind == "wte":
                t[V:] = 0.0
        params[kind] = t.float().double().requires_grad_(True)
    return params


def flatten(tensors):
    """Concatenate per-kind tensors in llm.c order into one float64 numpy vector."""
    return np.concatenate([tensors[k].detach().reshape(-1).numpy() for k in KINDS])


# ----------------------------------------------------------------------------------------------
# Model: written out with plain tensor ops (checked against torch.nn.functional below)

def layernorm(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance, as LayerNorm uses
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    # GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def causal_self_attention(qkv):
    """qkv (B, T, 3C) with q, k, v in that order; head h uses channels h*HS .. h*HS+HS-1 of each.
    Returns (B, T, C), heads concatenated in the same channel order."""
    b, t, _ = qkv.shape
    hs = C // NH
    q, k, v = qkv.split(C, dim=-1)
    q, k, v = (z.reshape(b, t, NH, hs).transpose(1, 2) for z in (q, k, v))  # (B, NH, T, HS)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    att = torch.softmax(scores, dim=-1)
    return (att @ v).transpose(1, 2).reshape(b, t, C)


def forward(p, inputs, targets, ops=None):
    """Returns (logits (B, T, V), mean cross-entropy). ops swaps in alternative primitives."""
    ln = ops["layernorm"] if ops else layernorm
    gelu = ops["gelu"] if ops else gelu_tanh
    attention = ops["attention"] if ops else causal_self_attention
    t = inputs.shape[1]
    x = p["wte"][inputs] + p["wpe"][:t]
    for l in range(L):
        h = ln(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        x = x + attention(qkv) @ p["attprojw"][l].T + p["attprojb"][l]
        h = ln(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = ln(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"][:V].T  # LM head tied to wte, real vocabulary only
    if ops:
        loss = ops["cross_entropy"](logits.reshape(-1, V), targets.reshape(-1))
    else:
        logprobs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        loss = -logprobs.gather(-1, targets.unsqueeze(-1)).mean()
    return logits, loss


def functional_ops():
    """The same primitives from torch.nn.functional: a second code path for the self-check."""
    def attention(qkv):
        b, t, _ = qkv.shape
        q, k, v = (z.reshape(b, t, NH, C // NH).transpose(1, 2) for z in qkv.split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, C)
    return {
        "layernorm": lambda x, w, b: F.layer_norm(x, (C,), w, b, eps=LN_EPS),
        "gelu": lambda x: F.gelu(x, approximate="tanh"),
        "attention": attention,
        "cross_entropy": F.cross_entropy,
    }


# ----------------------------------------------------------------------------------------------
# Optimizer: AdamW (Loshchilov & Hutter 2019, Alg. 2; torch.optim.AdamW semantics) with
# global-norm clipping, written out; checked against torch.optim.AdamW below.

def train_steps(params, inputs, targets):
    """NUM_STEPS updates on the same batch. Returns (losses, pre-clip grad norms), each a list of
    float64, and leaves the updated parameters in params."""
    m = {k: torch.zeros_like(v) for k, v in params.items()}
    s = {k: torch.zeros_like(v) for k, v in params.items()}
    losses, norms = [], []
    for step in range(1, NUM_STEPS + 1):
        for v in params.values():
            v.grad = None
        _, loss = forward(params, inputs, targets)
        loss.backward()
        norm = math.sqrt(sum(float((v.grad ** 2).sum()) for v in params.values()))
        clip = min(1.0, GRAD_CLIP / (norm + CLIP_EPS))
        losses.append(loss.item())
        norms.append(norm)
        with torch.no_grad():
            for k, p in params.items():
                g = p.grad * clip
                m[k].mul_(BETA1).add_((1 - BETA1) * g)
                s[k].mul_(BETA2).add_((1 - BETA2) * g * g)
                m_hat = m[k] / (1 - BETA1 ** step)
                s_hat = s[k] / (1 - BETA2 ** step)
                decay = WEIGHT_DECAY if k in DECAYED else 0.0
                p.sub_(LR * (m_hat / (s_hat.sqrt() + ADAM_EPS) + decay * p))
    return losses, norms


def train_steps_torch(params, inputs, targets):
    """The same trajectory with torch.optim.AdamW and clip_grad_norm_ (second code path)."""
    decayed = [v for k, v in params.items() if k in DECAYED]
    others = [v for k, v in params.items() if k not in DECAYED]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY},
                             {"params": others, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=ADAM_EPS, foreach=False)
    losses = []
    for _ in range(NUM_STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(params, inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), GRAD_CLIP)
        losses.append(loss.item())
        opt.step()
    return losses


# ----------------------------------------------------------------------------------------------
# Self-checks

def check(name, ok, detail):
    print(f"  check {name}: {'ok' if ok else 'FAILED'} ({detail})")
    if not ok:
        raise SystemExit(f"error: dev/make_reference.py: self-check {name} failed; expected it to hold")


def self_checks(inputs, targets, logits, loss, grads):
    # Hand-written ops vs torch.nn.functional: float64, so agreement to ~1e-12.
    p = init_params()
    with torch.no_grad():
        logits_f, loss_f = forward(p, inputs, targets, ops=functional_ops())
    diff = float((logits_f - logits).abs().max())
    check("ops_match_functional", diff < 1e-10 and abs(float(loss_f) - loss) < 1e-12,
          f"max |dlogits| {diff:.2e}, |dloss| {abs(float(loss_f) - loss):.2e}")

    # Central difference along a random unit direction d: (f(p+hd) - f(p-hd)) / 2h = g.d + O(h^2).
    gen = torch.Generator().manual_seed(SEED + 2)
    direction = {k: torch.randn(v.shape, generator=gen, dtype=DTYPE) for k, v in p.items()}
    direction["wte"][V:] = 0.0
    scale = math.sqrt(sum(float((d ** 2).sum()) for d in direction.values()))
    h = 1e-5
    with torch.no_grad():
        plus = {k: v + h * direction[k] / scale for k, v in p.items()}
        minus = {k: v - h * direction[k] / scale for k, v in p.items()}
        numeric = (float(forward(plus, inputs, targets)[1]) - float(forward(minus, inputs, targets)[1])) / (2 * h)
    analytic = sum(float((grads[k] * direction[k]).sum()) for k in KINDS) / scale
    rel = abs(numeric - analytic) / max(abs(analytic), 1e-12)
    check("grad_matches_finite_difference", rel < 1e-6,
          f"analytic {analytic:.10e}, numeric {numeric:.10e}, rel {rel:.1e}")


# ----------------------------------------------------------------------------------------------
# Output

def header(values_int, values_float):
    """256 int32 slots: values_int from slot 0, values_float (float32 bits) from slot 32."""
    h = np.zeros(256, dtype=np.int32)
    h[: len(values_int)] = values_int
    h[32: 32 + len(values_float)] = np.array(values_float, dtype=np.float32).view(np.int32)
    return h


def write_file(path, arrays):
    with open(path, "wb") as f:
        for a in arrays:
            f.write(np.ascontiguousarray(a).tobytes())
    data = open(path, "rb").read()
    print(f"{os.path.relpath(path)}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


def main():
    num_parameters = sum(int(np.prod(SHAPES[k])) for k in KINDS)
    print(f"config: V={V} Vp={VP} maxT={MAX_T} L={L} NH={NH} C={C} B={B} T={T}, "
          f"{num_parameters} parameters")

    gen = torch.Generator().manual_seed(SEED + 1)
    sequence = torch.randint(0, V, (B, T + 1), generator=gen)
    inputs, targets = sequence[:, :T].contiguous(), sequence[:, 1:].contiguous()

    params = init_params()
    initial = flatten(params)
    logits, loss = forward(params, inputs, targets)
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in params.items()}
    logits, loss = logits.detach(), loss.item()
    print(f"loss {loss:.8f} (ln V = {math.log(V):.8f})")

    self_checks(inputs, targets, logits, loss, grads)

    losses, norms = train_steps(params, inputs, targets)
    final = flatten(params)
    torch_params = init_params()
    torch_losses = train_steps_torch(torch_params, inputs, targets)
    param_diff = float(np.abs(flatten(torch_params) - final).max())
    loss_diff = max(abs(a - b) for a, b in zip(losses, torch_losses))
    check("adamw_matches_torch_optim", param_diff < 1e-12 and loss_diff < 1e-12,
          f"max |dparam| {param_diff:.1e}, max |dloss| {loss_diff:.1e}")
    check("first_step_loss_is_reference_loss", losses[0] == loss, f"{losses[0]} vs {loss}")
    for i, (l_, n_) in enumerate(zip(losses, norms), 1):
        print(f"step {i:2d}: loss {l_:.8f}  grad norm {n_:.8f}")

    os.makedirs(OUT_DIR, exist_ok=True)
    model_header = header([MODEL_MAGIC, MODEL_VERSION_FP32, MAX_T, V, L, NH, C, VP], [])
    write_file(os.path.join(OUT_DIR, "gpt2_ref_model.bin"),
               [model_header, initial.astype(np.float32)])

    state_header = header(
        [STATE_MAGIC, STATE_VERSION, B, T, V, VP, L, NH, C, MAX_T, NUM_STEPS, num_parameters, SEED],
        [LR, BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY, GRAD_CLIP, CLIP_EPS, LN_EPS])
    write_file(os.path.join(OUT_DIR, "gpt2_ref_state.bin"), [
        state_header,
        inputs.numpy().astype(np.int32),
        targets.numpy().astype(np.int32),
        logits.numpy().astype(np.float32),
        np.array([loss], dtype=np.float32),
        flatten(grads).astype(np.float32),
        np.array(losses, dtype=np.float32),
        np.array(norms, dtype=np.float32),
        final.astype(np.float32),
    ])


if __name__ == "__main__":
    main()
