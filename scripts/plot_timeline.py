#!/usr/bin/env python3
"""Draw one training step of every rank from the trainer's timeline trace (-tr FILE).

    python3 scripts/plot_timeline.py out/trace.json                 # reads out/trace.rank*.json
    python3 scripts/plot_timeline.py out/trace.json --step 3 --out step3.png
    python3 scripts/plot_timeline.py out/trace.json --merge all.json  # one file for Perfetto
    python3 scripts/plot_timeline.py out/trace.plan.stage3.json       # the planner's prediction

Each rank gets two lanes: compute (forward, backward and optimizer spans per unit; the waits on
a collective drawn over them in red: the exposed communication) and communication (each
collective from its start to its completion, coloured by kind). Time runs from the step's start
on the earliest rank. Prints per rank: step time, exposed wait, communication busy time, and the
bytes the step's collectives sent. Input: the Chrome trace-event files zero/trace/trace.h writes.
"""
import argparse
import glob
import json
import os
import sys


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load(paths):
    """(rank -> {events, other}) from the given files or from FILE.json's FILE.rank*.json."""
    files = []
    for p in paths:
        base = os.path.basename(p)
        if os.path.exists(p) and (".rank" in base or ".plan.stage" in base):
            files.append(p)  # one rank's file, or a predicted timeline
            continue
        stem = p[:-5] if p.endswith(".json") else p
        found = sorted(glob.glob(glob.escape(stem) + ".rank*.json"))
        if not found:
            fail(f"{p}: no trace files ({stem}.rank*.json); expected the -tr FILE a run wrote")
        files.extend(found)
    ranks = {}
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, ValueError) as e:
            fail(f"{f}: not a readable trace ({e}); expected a Chrome trace-event JSON from -tr")
        if "traceEvents" not in d or "otherData" not in d:
            fail(f"{f}: no traceEvents/otherData; expected a file written by the trainer's -tr")
        rank = d["otherData"].get("rank", 0)
        if d["otherData"].get("build") == "plan":
            rank = len(ranks)
        ranks[rank] = {"events": [e for e in d["traceEvents"] if e.get("ph") == "X"], "other": d["otherData"], "file": f}
    return ranks


def step_window(events, step):
    for e in events:
        if e["cat"] == "step" and e["args"]["step"] == step:
            return e["ts"], e["ts"] + e["dur"]
    return None


def summarize(ranks, step):
    rows = []
    for r in sorted(ranks):
        ev = ranks[r]["events"]
        w = step_window(ev, step)
        if w is None:
            continue
        t0, t1 = w
        waits = sum(e["dur"] for e in ev if e["cat"] == "wait" and e["args"]["step"] == step)
        comm = [e for e in ev if e["cat"] == "comm" and e["ts"] < t1 and e["ts"] + e["dur"] > t0]
        busy = sum(min(e["ts"] + e["dur"], t1) - max(e["ts"], t0) for e in comm)
        sent = sum(e["args"]["bytes"] for e in ev if e["cat"] == "comm" and e["args"]["step"] == step)
        rows.append((r, (t1 - t0) / 1e3, waits / 1e3, busy / 1e3, sent))
    return rows


COLORS = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#dd8452", "lm head f": "#8172b2", "lm head b": "#64b5cd",
          "all_reduce": "#6a3d9a", "reduce_scatter": "#1b9e77", "all_gather": "#d9a800", "scalar all_reduce": "#999999",
          "barrier": "#999999", "gather": "#999999"}


def draw(ranks, step, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    windows = {r: step_window(ranks[r]["events"], step) for r in ranks}
    windows = {r: w for r, w in windows.items() if w is not None}
    if not windows:
        fail(f"step {step}: not in the trace; expected one of the steps it holds (-ts)")
    origin = min(w[0] for w in windows.values())
    end = max(w[1] for w in windows.values())
    order = sorted(windows)
    fig, ax = plt.subplots(figsize=(14, 1.2 + 1.1 * len(order)))
    yticks, ylabels = [], []
    for i, r in enumerate(order):
        ev = ranks[r]["events"]
        y_comp = -(2.4 * i)
        y_comm = y_comp - 0.9
        yticks += [y_comp, y_comm]
        host = ranks[r]["other"].get("host", "")
        ylabels += [f"rank {r} ({host}) compute", f"rank {r} communication"]
        t0, t1 = windows[r]
        for e in ev:
            a = e["args"]
            if e["cat"] in ("forward", "backward", "optimizer") and a.get("step") == step:
                key = e["cat"]
                if a.get("unit", 0) <= -2:  # the LM head, on any of wte's vocab chunks
                    key = "lm head f" if e["cat"] == "forward" else "lm head b"
                x = (e["ts"] - origin) / 1e3
                ax.broken_barh([(x, e["dur"] / 1e3)], (y_comp - 0.35, 0.7), facecolors=COLORS[key], edgecolor="white", linewidth=0.4)
        exposed = 0.0
        for e in ev:
            if e["cat"] == "wait" and e["args"].get("step") == step and e["dur"] > 0:
                x = (e["ts"] - origin) / 1e3
                exposed += e["dur"] / 1e3
                ax.broken_barh([(x, e["dur"] / 1e3)], (y_comp - 0.42, 0.84), facecolors="#d62728", edgecolor="#d62728",
                               hatch="////", alpha=0.85)
        for e in ev:
            if e["cat"] != "comm" or e["ts"] > t1 or e["ts"] + e["dur"] < t0:
                continue
            x = (e["ts"] - origin) / 1e3
            kind = e["args"]["kind"]
            ax.broken_barh([(x, max(e["dur"] / 1e3, 1e-6))], (y_comm - 0.3, 0.6), facecolors=COLORS.get(kind, "#999999"),
                           edgecolor="white", linewidth=0.4)
            issued = (e["args"].get("issued_us", e["ts"]) - origin) / 1e3
            if issued < x - 1e-6:  # queued behind the collective before it
                ax.plot([issued, x], [y_comm, y_comm], color=COLORS.get(kind, "#999999"), linewidth=0.8, linestyle=":")
        ax.text((t1 - origin) / 1e3, y_comp + 0.45, f" step {(t1 - t0) / 1e3:.1f} ms, exposed {exposed:.1f} ms", fontsize=8,
                ha="right", va="bottom", color="#d62728")
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=8)
    ax.set_xlim(0, (end - origin) / 1e3 * 1.01)
    ax.set_xlabel(f"ms from the start of step {step}")
    ax.grid(axis="x", alpha=0.3)
    legend = [Patch(color=COLORS[k], label=k) for k in ("forward", "lm head f", "lm head b", "backward", "optimizer")]
    legend += [Patch(facecolor="#d62728", hatch="////", label="waiting on a collective (exposed)")]
    legend += [Patch(color=COLORS[k], label=k) for k in ("all_reduce", "reduce_scatter", "all_gather", "scalar all_reduce")]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(order) > 2 else -0.35 if len(order) == 2 else -0.6), ncol=5, fontsize=8,
              frameon=False)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="+", help="the -tr FILE.json of a run (its .rank*.json files are read), or trace files")
    ap.add_argument("--step", type=int, help="step to draw (default: the last traced step)")
    ap.add_argument("--out", help="PNG to write (default: FILE.step<S>.png beside the trace)")
    ap.add_argument("--title", help="plot title")
    ap.add_argument("--merge", help="also write every rank's events into this one JSON (Perfetto opens one file)")
    args = ap.parse_args()
    ranks = load(args.trace)
    if args.merge:
        merged = {"traceEvents": [], "displayTimeUnit": "ms", "otherData": {"ranks": len(ranks)}}
        for r in sorted(ranks):
            with open(ranks[r]["file"]) as fh:
                merged["traceEvents"] += json.load(fh)["traceEvents"]
        try:
            with open(args.merge + ".tmp", "w") as fh:
                json.dump(merged, fh)
            os.replace(args.merge + ".tmp", args.merge)
        except OSError as e:
            if os.path.exists(args.merge + ".tmp"):
                os.remove(args.merge + ".tmp")
            fail(f"--merge {args.merge}: cannot write it ({e.strerror}); expected a writable path")
        print(f"wrote {args.merge}")
    other = ranks[min(ranks)]["other"]
    step = args.step if args.step is not None else other["last_step"]
    stem = args.trace[0][:-5] if args.trace[0].endswith(".json") else args.trace[0]
    out = args.out or f"{stem}.step{step}.png"
    title = args.title or (f"{'predicted: ' if other.get('build') == 'plan' else ''}ZeRO stage {other['zero_stage']}, "
                           f"{other['world_size']} ranks, step {step} ({other['build']} build)")
    for r, ms, wait, busy, sent in summarize(ranks, step):
        print(f"rank {r}: step {step} {ms:.2f} ms | exposed wait {wait:.2f} ms | communication busy {busy:.2f} ms | "
              f"sent {sent} bytes")
    try:
        draw(ranks, step, out, title)
    except OSError as e:
        if os.path.exists(out + ".tmp.png"):
            os.remove(out + ".tmp.png")
        fail(f"--out {out}: cannot write it ({e.strerror}); expected a writable path")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
