#!/usr/bin/env python3
"""Checks on the batch schedule in train_gpt2 logs (DIR/log.jsonl) for tests/t_57_batch_schedule.sh.
Exit 0 = pass; the line printed says what was compared. Independent of the C code: it reads the
log's records only.

  grows RUN MIN_CHANGES MAX_TOKENS LR BASE_TOKENS
      RUN changed its batch at least MIN_CHANGES times, the first after step 2 or later and
      before the last step (mid-run; a change after the last step is the batch a resume would
      continue with); batches never shrink, at most double per change, stay whole multiples of B*T*N (the
      config record) and within MAX_TOKENS; each train record's batch_tokens is the batch the
      latest batch record (or the config) set, its "tokens" the running sum of them, and its lr
      float32(LR * sqrt(batch / BASE_TOKENS)) (the sqrt rule; the log prints 6 significant digits: 5e-6
      relative; measured at most 2.6e-6 in the emulated GPU trainer's log)
  ds RUN          print RUN's batch sequence as a -ds value (its batch records, from step 0)
  segments RUN LR BASE_TOKENS
                  print "FIRST_STEP LAST_STEP BATCH LR" per constant-batch stretch of RUN, LR
                  as float32(LR * sqrt(batch / BASE_TOKENS)) with 9 digits (strtof reads it back
                  exactly)
  exact REF RUN [--from-step S] [--no-batch-records]
      every train record of REF (steps >= S) is in RUN with the same loss, grad norm, lr, batch,
      tokens and meter fields, as logged; the val losses too; and the batch records agree (not
      with --no-batch-records: a run of fixed batches resumed segment by segment has none)
"""
import json
import math
import sys

import numpy as np

FIELDS = ("loss", "grad_norm", "lr", "batch_tokens", "tokens", "gns_small_sq", "gns_big_sq", "gns_g2", "gns_trace", "b_simple")


def load(run):
    config, train, val, batch = {}, {}, {}, {}
    for line in open(f"{run}/log.jsonl"):
        r = json.loads(line)
        kind = r["kind"]
        if kind == "config": config = r
        elif kind == "train": train[r["step"]] = r  # a resumed run appends: the last record of a step wins
        elif kind == "val": val[r["step"]] = r
        elif kind == "batch": batch[r["step"]] = r
    return config, train, val, batch


def lr_at(lr, batch, base):
    return float(np.float32(float(np.float32(lr)) * math.sqrt(batch / base)))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "grows":
        run, min_changes, max_tokens, lr0, base = args[0], int(args[1]), int(args[2]), float(args[3]), int(args[4])
        config, train, val, batch = load(run)
        unit = config["B"] * config["T"] * config["world_size"]
        steps = sorted(train)
        changes = sorted(batch)
        problems = []
        if len(changes) < min_changes: problems.append(f"{len(changes)} changes, expected >= {min_changes}")
        if changes and not (2 <= changes[0] < steps[-1]): problems.append(f"changes after steps {changes}: not mid-run")
        current, tokens = config["batch_tokens"], 0
        for s in steps:
            r = train[s]
            if s - 1 in batch:
                new = batch[s - 1]["batch_tokens"]
                if new <= current: problems.append(f"after step {s - 1}: {current} -> {new} does not grow")
                if new > 2 * current: problems.append(f"after step {s - 1}: {current} -> {new} more than doubles")
                if batch[s - 1]["previous_batch_tokens"] != current: problems.append(f"after step {s - 1}: previous {batch[s - 1]['previous_batch_tokens']} != {current}")
                current = new
            tokens += current
            if r["batch_tokens"] != current: problems.append(f"step {s}: batch_tokens {r['batch_tokens']}, the schedule's {current}")
            if current % unit or current > max_tokens: problems.append(f"step {s}: batch {current} not a multiple of {unit} within {max_tokens}")
            if r["tokens"] != tokens: problems.append(f"step {s}: tokens {r['tokens']}, the sum of batches {tokens}")
            want = lr_at(lr0, current, base)
            if abs(r["lr"] - want) > 5e-6 * want: problems.append(f"step {s}: lr {r['lr']}, the sqrt rule's {want:.9g}")
        seq = [(0, config["batch_tokens"])] + [(k, batch[k]["batch_tokens"]) for k in changes]
        print(f"{len(steps)} steps, batch after step: {seq}; unit {unit}, max {max_tokens}: {len(problems)} problems"
              + (f", first: {problems[0]}" if problems else ""))
        return 1 if problems else 0
    if cmd == "ds":
        config, _, _, batch = load(args[0])
        print(",".join([f"0:{config['batch_tokens']}"] + [f"{k}:{batch[k]['batch_tokens']}" for k in sorted(batch)]))
        return 0
    if cmd == "segments":
        run, lr0, base = args[0], float(args[1]), int(args[2])
        config, train, _, batch = load(run)
        starts = [0] + sorted(batch)
        sizes = [config["batch_tokens"]] + [batch[k]["batch_tokens"] for k in sorted(batch)]
        ends = starts[1:] + [max(train)]
        for first, last, b in zip(starts, ends, sizes):
            print(first, last, b, f"{lr_at(lr0, b, base):.9g}")
        return 0
    if cmd == "exact":
        ref, run = args[0], args[1]
        from_step = int(args[args.index("--from-step") + 1]) if "--from-step" in args else 0
        batch_records = "--no-batch-records" not in args
        _, a_train, a_val, a_batch = load(ref)
        _, b_train, b_val, b_batch = load(run)
        diffs, compared = [], 0
        for s in sorted(a_train):
            if s < from_step: continue
            if s not in b_train: diffs.append((s, "missing")); continue
            for f in FIELDS:
                compared += 1
                if a_train[s].get(f) != b_train[s].get(f): diffs.append((s, f, a_train[s].get(f), b_train[s].get(f)))
        for s in sorted(a_val):
            if s >= from_step and a_val[s]["loss"] != b_val.get(s, {}).get("loss"): diffs.append((s, "val", a_val[s]["loss"], b_val.get(s, {}).get("loss")))
        seq_a = [(k, a_batch[k]["batch_tokens"]) for k in sorted(a_batch) if k >= from_step]
        seq_b = [(k, b_batch[k]["batch_tokens"]) for k in sorted(b_batch) if k >= from_step]
        if batch_records and seq_a != seq_b: diffs.append(("batch records", seq_a, seq_b))
        print(f"{compared} train fields, {len(a_val)} val losses, batch changes {seq_a}: {len(diffs)} differ"
              + (f", first {diffs[0]}" if diffs else ""))
        return 1 if diffs else 0
    print(f"unknown command {cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
