#!/usr/bin/env python3
"""Checks on ZeRO++ runs of train_gpt2 (DIR/log.jsonl) for tests/t_38_zeropp.sh and the cluster
test. Exit 0 = pass; the one line printed says what was compared.

  bytes RUN
      every "zeropp" record's bytes_sent (the engine's count of this step, rank 0) equals the
      formula recomputed here from the config (L, C, Vp, maxT, N, A, stage) and the zeropp_config
      flags: zero/zeropp/zeropp.h's header, written again independently of the C code; and its split
      into bytes within the host and to other hosts (counted message by message) equals the
      engine's formula split
  gap REF RUN TOL [--kind val|train] [--last K] [--progress P]
      mean loss of the last K records (default 1) of RUN within relative TOL of REF's; with
      --progress, RUN's loss must also have fallen from REF's first record by at least P times
      REF's fall (a run that does not learn fails even when the losses barely move)
  formula RUN
      prints the per-step words of the formula parts (forward, backward, gradients) and bytes
  gpu_sent RUN
      a GPU build's ZeRO++ run (zero/zeropp/zeropp_gpu.cuh, any of -qw/-hp/-qg): every train record's
      sent_elements (bf16 elements: a packet of W bytes counts W/2) times 2 equals the header's
      formula in bytes with 2-byte elements where the CPU build moves 4 (the same formula as
      `bytes`, recomputed here from the config and the zeropp_config flags), and so does the
      engine's own formula in the zeropp_config record
The unit sizes (wte in vocab chunks) come from tests/zero_logcheck.py's independent rule.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_logcheck import layout_units  # noqa: E402 (wte's vocab chunks, recomputed from the config)

ALIGN = 64  # ZERO_ALIGN in zero.cuh


def load(run):
    recs = [json.loads(line) for line in open(f"{run}/log.jsonl")]
    cfg = next(r for r in recs if r["kind"] == "config")
    pp = next((r for r in recs if r["kind"] == "zeropp_config"), None)
    return recs, cfg, pp


def units(cfg, n):
    """Padded unit sizes in layout order and the set of the indices holding wte's chunks."""
    raw, wte = layout_units(cfg, "wte_units" in cfg)
    q = n * ALIGN
    return [(u + q - 1) // q * q for u in raw], set(wte)


def packet_words(s, bits, block):
    code_bytes = s if bits == 8 else (s + 1) // 2
    return math.ceil(s / block) + math.ceil(code_bytes / 4)


def weight_packet_words(pp, s):
    """qwZ: int8 codes in -qb's blocks."""
    return packet_words(s, 8, pp["zeropp_block"])


def grad_packet_words(pp, s):
    """qgZ: -qgb's codes in -qbg's blocks (zeropp_grad_block; logs before -qbg used -qb's)."""
    return packet_words(s, pp["zeropp_qg_bits"], pp.get("zeropp_grad_block", pp["zeropp_block"]))


def formula_words(cfg, pp):
    """Words (4 bytes) per rank per step of the CPU build: formula_bytes with fp32 elements, / 4."""
    return tuple(x // 4 for x in formula_bytes(cfg, pp, 4))


def formula_bytes(cfg, pp, elem):
    """Bytes per rank per step: forward gathers, backward gathers, gradients; elem = the bytes of
    an unquantized element (CPU fp32 4, GPU bf16 2), packets (scales + codes) 4 W bytes."""
    n, a, stage = cfg["world_size"], cfg["grad_accum_steps"], cfg["zero_stage"]
    qw, hp, qg = pp["zeropp_qw"], pp["zeropp_hp"], pp["zeropp_qg"]
    g = pp["zeropp_group_size"]
    h = n // g
    fwd = bwd = grad = 0
    sizes, wte = units(cfg, n)
    for i, p in enumerate(sizes):
        s = p // n
        plain = elem * s * (n - 1)
        r = 2 if i in wte else 1  # wte's chunks: gathered twice in forward, reduced twice
        if stage == 3:
            gathered = 4 * weight_packet_words(pp, s) * (n - 1) if qw else plain
            fwd += a * r * gathered  # wte's chunks: encoder and LM head
            # backward: every unit once (wte's chunks for the LM head's recompute, as forward's weights)
            bwd += a * (elem * (hp - 1) * (p // hp) if hp > 1 else gathered if i in wte else plain)
        else:
            fwd += plain  # stage 2: the all-gather after AdamW
        grad += a * r * (((g - 1) * h + (h - 1)) * 4 * grad_packet_words(pp, s) if qg and n > 1 else plain)
    return fwd, bwd, grad


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    opts = {}
    while len(args) >= 2 and args[-2].startswith("--"):
        opts[args[-2]] = args[-1]
        args = args[:-2]
    if cmd in ("bytes", "formula"):
        recs, cfg, pp = load(args[0])
        fwd, bwd, grad = formula_words(cfg, pp)
        total = 4 * (fwd + bwd + grad)
        if cmd == "formula":
            print(f"words per rank per step: forward {fwd}, backward {bwd}, gradients {grad}; bytes {total}")
            return 0
        steps = [r for r in recs if r["kind"] == "zeropp"]
        # and the engine's count split by host (counted per message) equals its formula's split
        bad = [r for r in steps if r["bytes_sent"] != total or r["bytes_formula"] != total
               or r["bytes_within_host"] != r["bytes_within_host_formula"] or r["bytes_across_hosts"] != r["bytes_across_hosts_formula"]]
        print(f"{len(steps)} steps: formula {total} B per rank per step (forward {4 * fwd}, backward {4 * bwd}, gradients {4 * grad}); "
              f"counted {sorted(set(r['bytes_sent'] for r in steps))}, engine's formula {sorted(set(r['bytes_formula'] for r in steps))}")
        return 0 if steps and not bad else 1
    if cmd == "gpu_sent":
        recs, cfg, pp = load(args[0])
        fwd, bwd, grad = formula_bytes(cfg, pp, 2)
        total = fwd + bwd + grad
        engine = pp["zeropp_formula_forward_bytes"] + pp["zeropp_formula_backward_bytes"] + pp["zeropp_formula_gradient_bytes"]
        trains = [2 * r["sent_elements"] for r in recs if r["kind"] == "train"]
        print(f"{len(trains)} steps: formula {total} B per rank per step (forward {fwd}, backward {bwd}, gradients {grad}; "
              f"engine's {engine}); counted 2 x sent elements {sorted(set(trains))}")
        return 0 if trains and engine == total and all(t == total for t in trains) else 1
    if cmd == "gap":
        ref, run, tol = args[0], args[1], float(args[2])
        kind, last = opts.get("--kind", "val"), int(opts.get("--last", "1"))
        la = [r["loss"] for r in load(ref)[0] if r["kind"] == kind][-last:]
        lb = [r["loss"] for r in load(run)[0] if r["kind"] == kind][-last:]
        if not la or len(la) != len(lb):
            print(f"{run}: {len(lb)} {kind} records, reference {len(la)}")
            return 1
        a, b = sum(la) / len(la), sum(lb) / len(lb)
        gap = (b - a) / a
        first = [r["loss"] for r in load(ref)[0] if r["kind"] == kind][0]
        progress = (first - b) / (first - a) if first != a else 1.0
        need = float(opts.get("--progress", "-inf"))
        print(f"{kind} loss (mean of last {last}): reference {a:.6f}, run {b:.6f}, gap {gap:+.3%} (tolerance {tol:.2%}); "
              f"fall from {first:.6f}: {progress:.1%} of the reference's" + (f" (at least {need:.0%})" if "--progress" in opts else ""))
        return 0 if abs(gap) <= tol and progress >= need else 1
    print(f"unknown command {cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
