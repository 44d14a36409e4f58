#!/usr/bin/env python3
"""Checks on the timeline trace (-tr, zero/trace/trace.h) and the planner (--plan, plan/plan.h) against
a run's own log (DIR/log.jsonl). Exit 0 = pass; the line printed says what was compared. The unit
sizes and ring counts are recomputed here from the model config (not read from the C code).

  trace RUN TRACE [--wait-tol-ms X]
      TRACE is the -tr FILE of RUN (FILE.rank<R>.json for every rank R of the run):
      - one file per rank, each one process (pid = rank) named "rank R", with a "compute" (tid 0)
        and a "communication" (tid 1) track, every event on one of them;
      - every traced step has one step span per rank; each forward/backward/optimizer span lies
        inside its step, they do not overlap, and every wait lies inside one of them; per
        micro-step, forward and backward each have one span per wte vocab-chunk unit in the
        encoder and one per chunk in the LM head (K = the log's wte_units), one per layer and the
        final LayerNorm;
      - every collective's elements equal the ring count for its kind and unit (all-reduce
        2n(N-1)/N, reduce-scatter and all-gather n(N-1)/N, n = the unit padded to N x 64, the
        units recomputed from the model config with wte's vocab chunks as zero_logcheck.py does),
        its bytes = elements x element_bytes, and the collectives of each traced step add up to
        the step's sent_elements in the log (rank 0's) and to docs/design.md "Elements sent per rank" (with E, the
        wte units' second reduction and third gather at stages 2, 3);
      - rank 0's waits in each step add up to the log's comm_wait_ms (within X ms, default 0.05:
        both sum the same intervals, the log printing 3 decimals; measured on the CPU build at
        most 0.0005 ms; a GPU build adds each wait's float-ms event resolution, see below).
  early RUN TRACE
      CPU stages 0-1, N > 1: each wte unit's reduction is issued right after its LM-head backward
      (after that span starts, before the encoder's first backward span), and the encoder rows'
      all-gather (unit -1) once, after the encoder (zero/tied_rows/tied_rows_cpu.h)
  plan PLAN_OUT RUN
      PLAN_OUT is the stdout of --plan for RUN's model, batch and world: the plan_json line of
      RUN's stage has the run's bytes per rank (params, grads, optimizer, working units, the
      rings' receive buffer, activations: the config record) and sent elements per step (every train record) exactly.
  offload_plan PLAN_OUT RUN
      RUN ran with -zo/-zp: PLAN_OUT's plan_offload_json row for its stage and placements has the
      run's bytes (CPU: RAM, NVMe state, NVMe file, staging, working units; GPU: the start-up
      line's device and host bytes, NVMe state, file, staging) and NVMe bytes per step (config)
      exactly, and every train record's counted NVMe read/written bytes (GPU: and host<->device
      d2h/h2d bytes) equal the plan's per-step values
  zeropp_trace RUN TRACE
      RUN is a CPU-build stage-3 ZeRO++ run (zeropp_config record) traced to TRACE: on every rank
      each traced step has the collectives ZeRO++ issues, by kind ("all_gather int8" qwZ: every
      unit in forward, wte's K vocab-chunk units twice (encoder, LM head), and without hpZ those
      K once more in backward for the LM head's recompute; "all_gather (group)" hpZ: every unit
      in backward, wte's chunks included; "all_to_all int4"/"int8" qgZ: every unit within the
      group and across groups, wte's chunks twice (LM head's part, encoder's rows)), each one's
      bytes recomputed here per unit (packets of ceil(S/b) scales + codes in 4-byte words, b = -qb
      for the weights, -qbg for the gradients; the unquantized collectives in the trace's
      element_bytes: 4 CPU, 2 GPU), and they add up to the formula's bytes per step (and, rank 0,
      the log's count: the CPU build's "zeropp" records, the GPU build's 2 x sent elements).
      Either build: the GPU build's config record carries the formula in bytes, the CPU's in words
  zeropp_plan PLAN_OUT RUN
      the plan_zeropp_json line of PLAN_OUT for RUN's ZeRO++ flags has the run's bytes per step
      (every "zeropp" record: the count, within the host and to other hosts, rank 0's split; a
      GPU-build run, which has no such records: every train record's 2 x sent elements), its hpZ
      secondary shard (config) and ZeRO++ buffers (the start-up line) exactly
"""
import math
import re
import glob
import json
import sys

from zero_logcheck import layout_units

ALIGN = 64  # ZERO_ALIGN in zero.cuh
KIND_FACTOR = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}


def log_records(run):
    recs = [json.loads(line) for line in open(f"{run}/log.jsonl")]
    cfg = next(r for r in recs if r["kind"] == "config")
    train = {r["step"]: r for r in recs if r["kind"] == "train"}
    return cfg, train


def unit_numels(cfg, n):
    """Each unit's padded element count in layout order (embedding with wte's first chunk, layers,
    final LayerNorm, wte's other chunks) for n ranks, and the indices of the units holding wte."""
    units, wte = layout_units(cfg, "wte_units" in cfg)
    q = n * ALIGN
    return [(u + q - 1) // q * q for u in units], wte


def tied_block(cfg, stage, n, gpu):
    # CPU stages 0-1, N > 1 (zero/tied_rows/tied_rows_cpu.h): one rank's block of the encoder's wte rows,
    # B*T token rows and T wpe rows, each a float id and C values; all-gathered once per step
    if stage > 1 or n == 1 or gpu:
        return 0
    return (cfg["B"] * cfg["T"] + cfg["T"]) * (cfg["C"] + 1)


def sent_formula(stage, psi, e, n, a, tied=0):
    # docs/design.md "Elements sent per rank" (zero/layout.h: zero_elements_sent_formula), per rank per step; e = E
    if n == 1:
        return 0
    per, emb = psi // n * (n - 1), e // n * (n - 1)
    return {0: 2 * per + tied * (n - 1), 1: 2 * per + tied * (n - 1), 2: (a + 1) * per + a * emb, 3: 3 * a * per + 2 * a * emb}[stage]


def check_trace(run, stem, wait_tol_ms):
    cfg, train = log_records(run)
    n, stage, a = cfg["world_size"], cfg["zero_stage"], cfg["grad_accum_steps"]
    numels, wte = unit_numels(cfg, n)
    psi, e_wte, K = sum(numels), sum(numels[i] for i in wte), len(wte)
    if cfg.get("wte_units", 1) != K:
        return f"wte units: log {cfg.get('wte_units')}, recomputed {K}"
    files = sorted(glob.glob(glob.escape(stem[:-5]) + ".rank*.json"))
    if len(files) != n:
        return f"{len(files)} trace files for {n} ranks ({stem[:-5]}.rank*.json)"
    problems, n_comm, n_wait = [], 0, 0
    step_sums = {}
    for path in files:
        d = json.load(open(path))
        other, events = d["otherData"], d["traceEvents"]
        r = other["rank"]
        if path != f"{stem[:-5]}.rank{r}.json" or other["world_size"] != n or other["zero_stage"] != stage:
            problems.append(f"{path}: rank {r}, world {other['world_size']}, stage {other['zero_stage']}")
        if other.get("dropped", 0):
            problems.append(f"{path}: {other['dropped']} events dropped")
        meta = {(e["name"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
        if meta.get(("thread_name", 0), {}).get("name") != "compute" or \
           meta.get(("thread_name", 1), {}).get("name") != "communication" or \
           not meta.get(("process_name", 0), {}).get("name", "").startswith(f"rank {r} "):
            problems.append(f"{path}: process/track names {meta}")
        spans = [e for e in events if e["ph"] == "X"]
        if any(e["pid"] != r for e in events) or any(e["tid"] not in (0, 1) for e in spans):
            problems.append(f"{path}: an event outside process {r} or its two tracks")
        steps = {e["args"]["step"]: e for e in spans if e["cat"] == "step"}
        want = list(range(other["first_step"], other["last_step"] + 1))
        if sorted(steps) != want:
            problems.append(f"{path}: step spans {sorted(steps)}, expected {want}")
            continue
        # Resolution of the times, in us: the file prints 3 decimals; a GPU build's device times
        # come from cudaEventElapsedTime against one anchor, a float of milliseconds (24-bit
        # mantissa: 2^-23 of the time since the anchor, 5 us at 45 s), beside host clock times.
        gpu = other.get("build") == "gpu"
        eps_at = lambda t: 0.002 + (2 * t * 2.0 ** -23 if gpu else 0.0)
        inside = lambda x, y: x["ts"] >= y["ts"] - eps_at(y["ts"]) and \
            x["ts"] + x["dur"] <= y["ts"] + y["dur"] + eps_at(y["ts"] + y["dur"])
        compute = sorted((e for e in spans if e["cat"] in ("forward", "backward", "optimizer")), key=lambda e: e["ts"])
        for e in compute:
            s = steps.get(e["args"]["step"])
            if s is None or not inside(e, s):
                problems.append(f"{path}: '{e['name']}' at {e['ts']} outside its step {e['args']['step']}")
        for x, y in zip(compute, compute[1:]):
            if x["ts"] + x["dur"] > y["ts"] + eps_at(y["ts"]):
                problems.append(f"{path}: '{x['name']}' overlaps '{y['name']}'")
        for s in want:  # each step: forward and backward of every unit per micro-step, and the optimizer
            names = [e["name"] for e in compute if e["args"]["step"] == s]
            expect = a * (2 * (cfg["L"] + 1 + 2 * K)) + 1  # encoder and LM head: one span per chunk
            if len(names) != expect or names[-1] != "optimizer":
                problems.append(f"{path}: step {s}: {len(names)} compute spans, expected {expect} ending in the optimizer")
        waits = [e for e in spans if e["cat"] == "wait"]
        n_wait += len(waits)
        for w in waits:
            if not any(inside(w, c) for c in compute):
                problems.append(f"{path}: '{w['name']}' at {w['ts']} inside no compute span")
        if r == 0:
            for s in want:
                mine = [w for w in waits if w["args"]["step"] == s]
                waited = sum(w["dur"] for w in mine) / 1e3
                logged = train[s]["comm_wait_ms"]
                # GPU: each wait's two device times carry the float resolution above
                tol = wait_tol_ms + sum(2 * (eps_at(w["ts"]) - 0.002) for w in mine) / 1e3
                if abs(waited - logged) > tol:
                    problems.append(f"rank 0 step {s}: waits add up to {waited:.4f} ms, the log says {logged:.3f} ms")
        for c in (e for e in spans if e["cat"] == "comm"):
            n_comm += 1
            kind, unit, el = c["args"]["kind"], c["args"]["unit"], c["args"]["elements"]
            tied = tied_block(cfg, stage, n, other.get("build") == "gpu")
            if kind == "all_gather" and unit == -1 and tied:  # the encoder's wte rows
                want_el = tied * (n - 1)
            else:
                want_el = 0 if kind == "scalar all_reduce" else KIND_FACTOR[kind] * numels[unit] * (n - 1) // n
            if el != want_el or c["args"]["bytes"] != el * other["element_bytes"]:
                problems.append(f"{path}: '{c['name']}' {el} elements, {c['args']['bytes']} bytes; expected {want_el}")
            key = (r, c["args"]["step"])
            step_sums[key] = step_sums.get(key, 0) + el
        for s in want:
            got = step_sums.get((r, s), 0)
            want_sent = sent_formula(stage, psi, e_wte, n, a, tied_block(cfg, stage, n, other.get("build") == "gpu"))
            if got != train[s]["sent_elements"] or got != want_sent:
                problems.append(f"{path}: step {s}: collectives send {got} elements; log {train[s]['sent_elements']}, "
                                f"formula {want_sent}")
    print(f"{n} ranks, stage {stage}: {n_comm} collectives, {n_wait} waits; " +
          (f"{len(problems)} problems, first: {problems[0]}" if problems else "tracks, nesting, bytes and waits as the log says"))
    return 1 if problems else 0


def check_plan(plan_out, run):
    cfg, train = log_records(run)
    plans = [json.loads(line[len("plan_json "):]) for line in open(plan_out) if line.startswith("plan_json ")]
    p = next((p for p in plans if p["stage"] == cfg["zero_stage"]), None)
    if p is None or p["world_size"] != cfg["world_size"] or p["grad_accum_steps"] != cfg["grad_accum_steps"]:
        print(f"{plan_out}: no plan for stage {cfg['zero_stage']}, N {cfg['world_size']}, A {cfg['grad_accum_steps']}")
        return 1
    fields = ["bytes_params", "bytes_grads", "bytes_optimizer", "bytes_working", "bytes_ring", "bytes_activations"]
    diff = [f"{f} plan {p[f]} run {cfg[f]}" for f in fields if p[f] != cfg[f]]
    diff += [f"step {s} sent plan {p['sent_elements']} run {t['sent_elements']}" for s, t in sorted(train.items())
             if t["sent_elements"] != p["sent_elements"]]
    if p["padded_parameters"] != cfg["padded_parameters"]:
        diff.append(f"padded parameters plan {p['padded_parameters']} run {cfg['padded_parameters']}")
    print(f"stage {p['stage']} N {p['world_size']}: {len(fields)} byte counts and {len(train)} steps' sent elements: " +
          (f"{len(diff)} differ: {'; '.join(diff[:3])}" if diff else "equal"))
    return 1 if diff else 0


def check_offload_plan(plan_out, run):
    """The plan_offload_json row of RUN's stage against what RUN's engine counted: the log's config
    record (RAM or the start-up line's device and host bytes, NVMe state, file, staging, working
    units, NVMe bytes per step) and every train record's counted NVMe and host<->device bytes."""
    cfg, train = log_records(run)
    rows = [json.loads(line[len("plan_offload_json "):]) for line in open(plan_out) if line.startswith("plan_offload_json ")]
    p = next((p for p in rows if p["stage"] == cfg["zero_stage"] and p["offload_optimizer"] == cfg["offload_optimizer"]
              and p["offload_params"] == cfg["offload_params"]), None)
    if p is None or p["world_size"] != cfg["world_size"] or p["grad_accum_steps"] != cfg["grad_accum_steps"]:
        print(f"{plan_out}: no offload row for stage {cfg['zero_stage']} -zo {cfg['offload_optimizer']} -zp {cfg['offload_params']}, "
              f"N {cfg['world_size']}, A {cfg['grad_accum_steps']}")
        return 1
    gpu = p["element_bytes"] == 2
    pairs = [("bytes_nvme", "bytes_nvme"), ("nvme_file_bytes", "nvme_file_bytes"), ("offload_staging_bytes", "offload_staging_bytes"),
             ("nvme_read_per_step", "nvme_read_per_step"), ("nvme_written_per_step", "nvme_written_per_step")]
    if not gpu:
        pairs += [("bytes_ram", "bytes_ram"), ("bytes_working", "bytes_working")]
    diff = [f"{a} plan {p[a]} run {cfg[b]}" for a, b in pairs if p[a] != cfg[b]]
    counted = [("nvme_read_per_step", "nvme_read_bytes"), ("nvme_written_per_step", "nvme_written_bytes")]
    if gpu:
        counted += [("d2h_bytes", "d2h_bytes"), ("h2d_bytes", "h2d_bytes")]
        # the start-up line: "bytes per rank: device N, formula ... host N, formula ..."
        text = open(f"{run}.out").read()
        m = re.search(r"^offload: optimizer .* bytes per rank: device (\d+),.* host (\d+), formula", text, re.M)
        if m is None:
            diff.append("no GPU offload start-up line")
        else:
            for key, got in (("bytes_device_counted", int(m.group(1))), ("bytes_host_counted", int(m.group(2)))):
                if p[key] != got:
                    diff.append(f"{key} plan {p[key]} run {got}")
    checked = 0
    for s, t in sorted(train.items()):
        for a, b in counted:
            if b not in t and p[a] == 0:
                continue
            checked += 1
            if t.get(b) != p[a]:
                diff.append(f"step {s} {b} plan {p[a]} run {t.get(b)}")
    print(f"stage {p['stage']} N {p['world_size']} A {p['grad_accum_steps']} -zo {p['offload_optimizer']} -zp {p['offload_params']}: "
          f"{len(pairs)} config byte counts{' and the start-up line' if gpu else ''}, {checked} counted per-step values: " +
          (f"{len(diff)} differ: {'; '.join(diff[:3])}" if diff else "equal"))
    return 1 if diff or checked == 0 else 0


def packet_words(s, bits, block):
    """One packet of s elements: ceil(s/block) fp32 scales, then the codes, padded to 4 bytes."""
    return math.ceil(s / block) + math.ceil((s if bits == 8 else (s + 1) // 2) / 4)


def check_zeropp_trace(run, stem):
    recs = [json.loads(line) for line in open(f"{run}/log.jsonl")]
    cfg = next(r for r in recs if r["kind"] == "config")
    pp = next(r for r in recs if r["kind"] == "zeropp_config")
    gpu = "zeropp_formula_forward_bytes" in pp
    if gpu:  # bf16 elements: the log's sent elements x 2 are the bytes
        counted = {r["step"]: 2 * r["sent_elements"] for r in recs if r["kind"] == "train"}
        formula = pp["zeropp_formula_forward_bytes"] + pp["zeropp_formula_backward_bytes"] + pp["zeropp_formula_gradient_bytes"]
    else:
        counted = {r["step"]: r["bytes_sent"] for r in recs if r["kind"] == "zeropp"}
        formula = 4 * (pp["zeropp_formula_forward_words"] + pp["zeropp_formula_backward_words"] + pp["zeropp_formula_gradient_words"])
    e = 2 if gpu else 4  # bytes of an unquantized element
    n, a = cfg["world_size"], cfg["grad_accum_steps"]
    qw, hp, qg, bits, block = pp["zeropp_qw"], pp["zeropp_hp"], pp["zeropp_qg"], pp["zeropp_qg_bits"], pp["zeropp_block"]
    grad_block = pp["zeropp_grad_block"]
    g = pp["zeropp_group_size"]
    h = n // g
    numels, wte = unit_numels(cfg, n)
    U, K = len(numels), len(wte)
    # (kind, scope) -> [count per step, bytes of one collective of unit u]
    want = {}
    if qw:  # forward: every unit, wte's chunks twice; backward (hpZ off): wte's chunks for the LM head's recompute
        want[("all_gather int8", "")] = (a * (U + K + (K if hp <= 1 else 0)), lambda u: 4 * (n - 1) * packet_words(numels[u] // n, 8, block))
    if hp > 1:
        want[("all_gather (group)", "")] = (a * U, lambda u: e * (hp - 1) * (numels[u] // hp))
    if qg and g > 1:
        want[(f"all_to_all int{bits}", "within")] = (a * (U + K), lambda u: 4 * (g - 1) * h * packet_words(numels[u] // n, bits, grad_block))
    if qg and h > 1:
        want[(f"all_to_all int{bits}", "across")] = (a * (U + K), lambda u: 4 * (h - 1) * packet_words(numels[u] // n, bits, grad_block))
    plain = {"all_gather": 1, "reduce_scatter": 1}
    files = sorted(glob.glob(glob.escape(stem[:-5]) + ".rank*.json"))
    problems, n_comm = [], 0
    if len(files) != n:
        problems.append(f"{len(files)} trace files for {n} ranks")
    for path in files:
        d = json.load(open(path))
        other = d["otherData"]
        comm = [e for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "comm"]
        for s in range(other["first_step"], other["last_step"] + 1):
            mine = [c for c in comm if c["args"]["step"] == s]
            n_comm += len(mine)
            seen, total = {}, 0
            for c in mine:
                kind, unit, b = c["args"]["kind"], c["args"]["unit"], c["args"]["bytes"]
                scope = "within" if "within" in c["args"].get("what", "") else "across" if "across" in c["args"].get("what", "") else ""
                total += b
                if kind == "scalar all_reduce":
                    expect = 0
                elif (kind, scope) in want:
                    seen[(kind, scope)] = seen.get((kind, scope), 0) + 1
                    expect = want[(kind, scope)][1](unit)
                elif kind in plain:
                    expect = e * numels[unit] * (n - 1) // n
                else:
                    problems.append(f"{path}: step {s}: unexpected collective '{c['name']}' ({kind}, {c['args'].get('what')})")
                    continue
                if b != expect:
                    problems.append(f"{path}: step {s}: '{c['name']}' {b} bytes, expected {expect}")
            for key, (count, _) in want.items():
                if seen.get(key, 0) != count:
                    problems.append(f"{path}: step {s}: {seen.get(key, 0)} x {key}, expected {count}")
            if total != formula or (other["rank"] == 0 and counted.get(s) != total):
                problems.append(f"{path}: step {s}: collectives send {total} bytes; formula {formula}, log {counted.get(s)}")
    print(f"{n} ranks, {'GPU' if gpu else 'CPU'} build, ZeRO++ qw {qw} hp {hp} qg {qg} (int{bits}): {n_comm} collectives, kinds {sorted(k for k, _ in want)}: " +
          (f"{len(problems)} problems, first: {problems[0]}" if problems else "kinds, counts, bytes and per-step sums as the formula and the log"))
    return 1 if problems else 0


def check_zeropp_plan(plan_out, run):
    recs = [json.loads(line) for line in open(f"{run}/log.jsonl")]
    pp = next(r for r in recs if r["kind"] == "zeropp_config")
    steps = [r for r in recs if r["kind"] == "zeropp"]
    gpu = not steps and "zeropp_formula_forward_bytes" in pp  # the GPU build: no "zeropp" records, bf16 sent elements
    if gpu:
        steps = [{"step": r["step"], "bytes_sent": 2 * r["sent_elements"]} for r in recs if r["kind"] == "train"]
    m = re.search(r"\| buffers (\d+) bytes", open(f"{run}.out").read())
    plans = [json.loads(line[len("plan_zeropp_json "):]) for line in open(plan_out) if line.startswith("plan_zeropp_json ")]
    key = lambda p: (p["qw"], p["hp"], p["qg"], p["qg_bits"] if p["qg"] else 0)
    run_key = (pp["zeropp_qw"], pp["zeropp_hp"], pp["zeropp_qg"], pp["zeropp_qg_bits"] if pp["zeropp_qg"] else 0)
    p = next((p for p in plans if key(p) == run_key and p["label"] != "plain"), None)
    if p is None or not steps or m is None:
        print(f"{plan_out}: no ZeRO++ row for {run_key} (rows {[key(q) for q in plans]}), or the run has no zeropp records / buffers line")
        return 1
    diff = []
    for r in steps:
        for field, got in (("bytes_sent", p["sent_elements"] * p["element_bytes"]), ("bytes_sent", p["formula_bytes"]),
                           ("bytes_within_host", p["rank0_within_bytes"]), ("bytes_across_hosts", p["rank0_across_bytes"])):
            if field in r and r[field] != got:
                diff.append(f"step {r['step']} {field}: run {r[field]}, plan {got}")
    if p["bytes_secondary"] != pp["zeropp_bytes_secondary"]:
        diff.append(f"secondary shard: run {pp['zeropp_bytes_secondary']}, plan {p['bytes_secondary']}")
    if p["bytes_buffers"] != int(m.group(1)):
        diff.append(f"buffers: run {m.group(1)}, plan {p['bytes_buffers']}")
    print(f"{p['label']} N {p['world_size']} ({p['ranks_per_node']} per node): {len(steps)} steps' bytes (total, within, across), "
          f"secondary, buffers: " + (f"{len(diff)} differ: {'; '.join(diff[:3])}" if diff else
                                     f"equal ({p['formula_bytes']} B, {p['rank0_across_bytes']} B to the other node)"))
    return 1 if diff else 0


def check_early(run, stem):
    """CPU stages 0-1, N > 1 (zero/tied_rows/tied_rows_cpu.h): in every traced step on every rank, each wte
    unit's reduction (stage 0 all-reduce, stage 1 reduce-scatter) is issued after its LM-head
    backward span starts and before the encoder's first backward span starts, and one all-gather
    of the encoder's rows (unit -1) is issued after the last encoder span starts."""
    cfg, _ = log_records(run)
    n, stage, a = cfg["world_size"], cfg["zero_stage"], cfg["grad_accum_steps"]
    _, wte = unit_numels(cfg, n)
    kind = {0: "all_reduce", 1: "reduce_scatter"}[stage]
    files = sorted(glob.glob(glob.escape(stem[:-5]) + ".rank*.json"))
    problems, checked, lead = [], 0, []
    for path in files:
        d = json.load(open(path))
        spans = [e for e in d["traceEvents"] if e["ph"] == "X"]
        for s in range(d["otherData"]["first_step"], d["otherData"]["last_step"] + 1):
            bwd = [e for e in spans if e["cat"] == "backward" and e["args"]["step"] == s and e["args"]["micro_step"] == a - 1]
            encoder = sorted((e for e in bwd if e["args"]["unit"] in wte), key=lambda e: e["ts"])
            head = {-2 - e["args"]["unit"]: e for e in bwd if e["args"]["unit"] <= -2}  # zero_trace_lm_head(k) = -2 - k
            comm = [e for e in spans if e["cat"] == "comm" and e["args"]["step"] == s]
            if len(encoder) != len(wte) or len(head) != len(wte):
                problems.append(f"{path} step {s}: {len(encoder)} encoder and {len(head)} LM-head spans for {len(wte)} wte units")
                continue
            for k, u in enumerate(wte):
                ops = [e for e in comm if e["args"]["kind"] == kind and e["args"]["unit"] == u]
                issued = ops[0]["args"]["issued_us"] if len(ops) == 1 else None
                if issued is None or not head[k]["ts"] <= issued < encoder[0]["ts"]:
                    problems.append(f"{path} step {s}: wte unit {u}: {len(ops)} {kind}, issued at {issued}; LM head {k} at "
                                    f"{head[k]['ts']}, encoder from {encoder[0]['ts']}")
                else:
                    checked += 1
                    lead.append(encoder[0]["ts"] - issued)
            rows = [e for e in comm if e["args"]["kind"] == "all_gather" and e["args"]["unit"] == -1]
            if len(rows) != 1 or rows[0]["args"]["issued_us"] < encoder[-1]["ts"]:
                problems.append(f"{path} step {s}: {len(rows)} all-gathers of the encoder's rows, expected 1 after the encoder")
    print(f"{n} ranks, stage {stage}: {checked} wte {kind}s issued before the encoder's backward "
          f"(by {min(lead, default=0) / 1e3:.1f}-{max(lead, default=0) / 1e3:.1f} ms), the rows' all-gather after it: " +
          (f"{len(problems)} problems, first: {problems[0]}" if problems else "as built"))
    return 1 if problems or checked == 0 else 0


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "trace":
        tol = float(args[args.index("--wait-tol-ms") + 1]) if "--wait-tol-ms" in args else 0.05
        res = check_trace(args[0], args[1], tol)
        if isinstance(res, str):
            print(res)
            return 1
        return res
    if cmd == "plan":
        return check_plan(args[0], args[1])
    if cmd == "offload_plan":
        return check_offload_plan(args[0], args[1])
    if cmd == "early":
        return check_early(args[0], args[1])
    if cmd == "zeropp_trace":
        return check_zeropp_trace(args[0], args[1])
    if cmd == "zeropp_plan":
        return check_zeropp_plan(args[0], args[1])
    print(f"usage: {sys.argv[0]} trace RUN TRACE | plan PLAN_OUT RUN")
    return 2


if __name__ == "__main__":
    sys.exit(main())
