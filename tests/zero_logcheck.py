#!/usr/bin/env python3
"""Checks on train_gpt2 logs (DIR/log.jsonl) for the ZeRO test groups. Exit 0 = pass; the one
line printed says what was compared. Independent of the C code: the padded parameter count is
recomputed here from the model config.

  losses REF RUN TOL [--kinds train,val] [--from-step S] [--norm-rtol R] [--relative 1]
      every train (and val) loss of RUN within TOL of REF's at the same step (steps >= S;
      relative to REF's loss with --relative 1), and every train grad norm within relative R
      (default 2e-5)
  same REF RUN [--from-step S]
      the train losses, as logged (%.9g: every digit of the float), are identical, and so are the gradient noise
      scale fields (gns_g2, gns_trace, b_simple) where both logs have them
  offload RUN STAGE
      the config record's RAM and NVMe bytes per rank equal the placement's formula, and every
      train record's NVMe bytes read and written equal the region table recomputed from the layout
  counts RUN STAGE
      each train record's sent_elements equals docs/design.md "Elements sent per rank" for STAGE (CPU stages 0-1 with
      N > 1: plus the encoder rows' all-gather, (BT+T)(C+1)(N-1)), the config record's
      world size N and accumulation A, with Ψ (and E, the units of the vocab-chunked wte) recomputed
      from L, C, Vp, maxT; and the config record's params+grads+optimizer bytes equal the stage's
      memory formula (for a GPU build's log, whose config record names a "device": 2Ψ bf16 params,
      grads as one bf16 micro-step (2Ψ, stages 0-1) plus their fp32 accumulation (4Ψ at stages
      0-1, 4Ψ/N at 2-3), 12Ψ fp32 master/m/v)
"""
import json
import sys

ALIGN = 64  # ZERO_ALIGN in zero.cuh


def records(run, kinds):
    out = {}
    for line in open(f"{run}/log.jsonl"):
        r = json.loads(line)
        if r["kind"] in kinds:
            out[(r["kind"], r["step"])] = r  # a resumed run appends: the last record of a step wins
    return out


def wte_chunk_rows(C, vp, max_t):
    """wte's vocab chunks, recomputed from the rule in common/gpt2_config.h (param_layout_wte_rows):
    a chunk is as many whole 64-row blocks as a layer unit (12C^2 + 13C) holds, the first one that
    minus maxT rows (wpe shares its unit, at least one block), the rest balanced."""
    block = 64
    per = max(block, (12 * C * C + 13 * C) // C // block * block)
    first = (per - max_t) // block * block if per > max_t + block else block
    if first >= vp:
        return [vp]
    rest = vp - first
    chunks = -(-rest // per)
    balanced = -(-(-(-rest // chunks)) // block) * block
    count = -(-rest // balanced)
    return [first] + [balanced] * (count - 1) + [rest - balanced * (count - 1)]


def layout_units(cfg, chunked):
    """Unit sizes in layout order and the indices of the units that hold wte."""
    C, L = cfg["C"], cfg["L"]
    vp = cfg.get("Vp", (cfg["V"] + 127) // 128 * 128)
    max_t = cfg.get("maxT", 1024)
    rows = wte_chunk_rows(C, vp, max_t) if chunked else [vp]
    units = [rows[0] * C + max_t * C] + [12 * C * C + 13 * C] * L + [2 * C] + [r * C for r in rows[1:]]
    return units, [0] + list(range(L + 2, L + 1 + len(rows)))


def padded(u, n):
    q = n * ALIGN
    return (u + q - 1) // q * q


def padded_psi(cfg, n):
    units, _ = layout_units(cfg, "wte_units" in cfg)
    return sum(padded(u, n) for u in units)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    opts = {}
    while len(args) >= 2 and args[-2].startswith("--"):
        opts[args[-2]] = args[-1]
        args = args[:-2]
    from_step = int(opts.get("--from-step", 0))
    if cmd in ("losses", "same"):
        ref, run = args[0], args[1]
        kinds = opts.get("--kinds", "train").split(",")
        a, b = records(ref, kinds), records(run, kinds)
        keys = sorted(k for k in a if k[1] >= from_step)
        missing = [k for k in keys if k not in b]
        if not keys or missing:
            print(f"{run}: missing records {missing[:3]} (of {len(keys)})")
            return 1
        if cmd == "same":
            # the loss, and the gradient noise scale meter's fields where the log has them (a
            # resume continues the meter's EMAs from the checkpoint)
            fields = ["loss"] + [f for f in ("gns_g2", "gns_trace", "b_simple", "batch_tokens", "tokens", "lr")
                                 if any(a[k].get(f) is not None and b[k].get(f) is not None for k in keys)]
            diff = [(k, f) for k in keys for f in fields if a[k].get(f) != b[k].get(f)]
            print(f"{len(keys)} records, fields {','.join(fields)}: {len(diff)} differ" +
                  (f", first {diff[0]}: {a[diff[0][0]].get(diff[0][1])} vs {b[diff[0][0]].get(diff[0][1])}" if diff else ""))
            return 1 if diff else 0
        tol = float(args[2])
        norm_rtol = float(opts.get("--norm-rtol", "2e-5"))
        scale = (lambda k: abs(a[k]["loss"])) if opts.get("--relative") == "1" else (lambda k: 1.0)
        worst = max(keys, key=lambda k: abs(a[k]["loss"] - b[k]["loss"]) / scale(k))
        d = abs(a[worst]["loss"] - b[worst]["loss"]) / scale(worst)
        # The grad norm too: AdamW is blind to a constant gradient scale (a missing 1/N), the norm is not.
        norms = [k for k in keys if k[0] == "train"]
        rel = max((abs(a[k]["grad_norm"] - b[k]["grad_norm"]) / max(abs(a[k]["grad_norm"]), 1e-12) for k in norms), default=0.0)
        what = "max |diff|/|ref|" if opts.get("--relative") == "1" else "max |diff|"
        print(f"{len(keys)} losses, {what} {d:.2e} at {worst} (tolerance {tol:g}); grad norm max rel diff {rel:.2e} (tolerance {norm_rtol:g})")
        return 0 if d <= tol and rel <= norm_rtol else 1
    if cmd == "counts":
        run, stage = args[0], int(args[1])
        cfg = next(r for r in map(json.loads, open(f"{run}/log.jsonl")) if r["kind"] == "config")
        n, a = cfg["world_size"], cfg["grad_accum_steps"]
        # A log that names "wte_units" comes from a build whose wte is split into vocab chunks:
        # stages 2-3 reduce-scatter those units twice per micro-step and stage 3 gathers them 3 times.
        chunked = "wte_units" in cfg
        units, wte = layout_units(cfg, chunked)
        psi = sum(padded(u, n) for u in units)
        e = sum(padded(units[i], n) for i in wte) if chunked else 0
        per, e_per = psi // n * (n - 1), e // n * (n - 1)
        sent = {0: 2 * per, 1: 2 * per, 2: (a + 1) * per + a * e_per, 3: 3 * a * per + 2 * a * e_per}[stage]
        # CPU stages 0-1, N > 1: wte's chunks are reduced after the LM head and the encoder's rows
        # (B*T token rows + T wpe rows, an id and C values each) all-gathered (zero/tied_rows/tied_rows_cpu.h)
        if stage <= 1 and n > 1 and "device" not in cfg:
            sent += (cfg["B"] * cfg["T"] + cfg["T"]) * (cfg["C"] + 1) * (n - 1)
        if chunked and cfg["wte_units"] != len(wte):
            print(f"wte units: log {cfg['wte_units']}, recomputed {len(wte)}")
            return 1
        if "device" in cfg:  # GPU build: bf16 params, bf16 + fp32 grads, fp32 master + m + v (ZeRO paper, K = 12)
            mem = {0: 20 * psi, 1: 8 * psi + 12 * psi // n, 2: 2 * psi + 16 * psi // n, 3: 18 * psi // n}[stage]
        else:  # CPU build: fp32 params and grads are the master copy, fp32 m + v
            mem = {0: 16 * psi, 1: 8 * psi + 8 * psi // n, 2: 4 * psi + 12 * psi // n, 3: 16 * psi // n}[stage]
        got_mem = cfg["bytes_params"] + cfg["bytes_grads"] + cfg["bytes_optimizer"]
        trains = [r for r in records(run, ["train"]).values()]
        bad = [r["sent_elements"] for r in trains if r["sent_elements"] != sent]
        ok = cfg["padded_parameters"] == psi and got_mem == mem and trains and not bad
        print(f"N={n} A={a} Ψ={psi} (log {cfg['padded_parameters']}): sent/step formula {sent}, counted {sorted(set(r['sent_elements'] for r in trains))}; "
              f"bytes formula {mem}, allocated {got_mem}")
        return 0 if ok else 1
    if cmd == "offload":
        # RAM and NVMe bytes per rank against ZeRO-Infinity's split (zero/offload/offload.h), and each
        # step's NVMe bytes against the region table recomputed here: one region per unit and
        # placed buffer (shard_numel fp32, rounded up to 4096 bytes); the optimizer reads and
        # writes each once per step, and -zp nvme also reads the parameter shard before each
        # all-gather (2 per micro-step, 3 for wte's units).
        run, stage = args[0], int(args[1])
        cfg = next(r for r in map(json.loads, open(f"{run}/log.jsonl")) if r["kind"] == "config")
        n, a = cfg["world_size"], cfg["grad_accum_steps"]
        zo, zp = cfg["offload_optimizer"] == "nvme", cfg["offload_params"] == "nvme"
        units, wte = layout_units(cfg, "wte_units" in cfg)
        psi = sum(padded(u, n) for u in units)
        ram = (0 if zp else (4 * psi // n if stage == 3 else 4 * psi)) + (4 * psi // n if stage >= 2 else 4 * psi) + (0 if zo else 8 * psi // n)
        nvme = (8 * psi // n if zo else 0) + (4 * psi // n if zp else 0)
        region = [(padded(u, n) // n * 4 + 4095) // 4096 * 4096 for u in units]
        per_unit = [r * ((2 if zo else 0) + (1 if zp else 0)) for r in region]
        written = sum(per_unit)
        read = written + (sum(a * (3 if i in wte else 2) * region[i] for i in range(len(units))) if zp else 0)
        trains = list(records(run, ["train"]).values())
        bad = [(r["step"], r.get("nvme_read_bytes"), r.get("nvme_written_bytes")) for r in trains
               if r.get("nvme_read_bytes") != read or r.get("nvme_written_bytes") != written]
        ok = cfg["bytes_ram"] == ram and cfg["bytes_nvme"] == nvme and trains and not bad
        print(f"RAM {cfg['bytes_ram']} (formula {ram}), NVMe {cfg['bytes_nvme']} (formula {nvme}); NVMe per step read {read} written {written}: "
              f"{len(trains)} steps, {len(bad)} differ{f', first {bad[0]}' if bad else ''}")
        return 0 if ok else 1
    print(f"unknown command {cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
