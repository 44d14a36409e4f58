#!/usr/bin/env python3
"""
zeropp_convergence_plot.py: val loss (and train loss) vs step of dev/bench/zeropp_convergence.sh's runs in one
PNG, and a Markdown table of each run's val loss at the last val step all runs reached (the
final one when all finished), its gap to plain stage 3 there, and its wall time.

    python3 dev/bench/zeropp_convergence_plot.py OUT [-o file.png] [NAME ...]

OUT holds one log directory per run (OUT/NAME/log.jsonl, format common/logger.h) and
OUT/NAME.wall (the script's wall time and load line). NAMEs default to plain off qw hp qg all
(those present). Bad input prints one error line and exits 1 (scripts/train_log.py).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from train_log import LogError, fail, load_log  # noqa: E402

LABELS = {"plain": "plain stage 3", "off": "all off (-qw 0 -hp 1 -qg 0)", "qw": "qwZ (-qw 1)", "hp": "hpZ (-hp 2)",
          "qg": "qgZ (-qg 1, int4)", "all": "all three"}
STYLES = {"plain": ("k", "-", 2.5), "off": ("0.6", ":", 1.5), "qw": ("C0", "-", 1.2), "hp": ("C1", "--", 1.2),
          "qg": ("C2", "-", 1.2), "all": ("C3", "-", 1.2)}


def main():
    p = argparse.ArgumentParser(description="ZeRO++ convergence runs: val loss vs step")
    p.add_argument("out")
    p.add_argument("names", nargs="*")
    p.add_argument("-o", dest="png", default=None)
    a = p.parse_intermixed_args()
    names = a.names or [n for n in LABELS if os.path.exists(os.path.join(a.out, n, "log.jsonl"))]
    try:
        logs = {n: load_log(os.path.join(a.out, n)) for n in names if os.path.exists(os.path.join(a.out, n, "log.jsonl"))}
    except LogError as e:
        fail(str(e))
    if "plain" not in logs:
        fail(f"{a.out}/plain/log.jsonl: missing; expected plain stage 3's run beside the others")
    # The last val step every run has reached (runs cut short compare there; off's short run left out).
    ref_val = dict(zip(logs["plain"]["val"]["step"], logs["plain"]["val"]["loss"]))
    common = set(ref_val)
    for n, log in logs.items():
        if n != "off":
            common &= set(log["val"]["step"])
    at = int(max(common)) if common else None
    print(f"| run | val loss at step {at} | gap to plain | last step logged | last val loss | wall time, load (1 min avg) start -> end |")
    print("|---|---|---|---|---|---|")
    for n, log in logs.items():
        val = dict(zip(log["val"]["step"], log["val"]["loss"]))
        wall_path = os.path.join(a.out, n + ".wall")
        wall = open(wall_path).read().strip() if os.path.exists(wall_path) else "still running"
        here = f"{val[at]:.6f} | {(val[at] - ref_val[at]) / ref_val[at]:+.3%}" if at in val else "- | -"
        last = f"{log['val']['loss'][-1]:.6f} (step {int(log['val']['step'][-1])})" if log["val"]["loss"] else "-"
        print(f"| {LABELS.get(n, n)} | {here} | {int(log['train']['step'][-1])} | {last} | {wall} |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, axt) = plt.subplots(1, 2, figsize=(10, 4.0))
    for n, log in logs.items():
        color, style, width = STYLES.get(n, ("C4", "-", 1.0))
        ax.plot(log["val"]["step"], log["val"]["loss"], style, color=color, linewidth=width, marker="o", markersize=3,
                label=LABELS.get(n, n))
        axt.plot(log["train"]["step"], log["train"]["loss"], style, color=color, linewidth=width * 0.7, label=LABELS.get(n, n))
    cfg = logs["plain"]["config"]
    ax.set_title(f"ZeRO++, stage 3 on {cfg.get('world_size', '?')} ranks: d{cfg.get('L', '?')}, tinyshakespeare", fontsize=10)
    axt.set_title("train loss (every step)", fontsize=10)
    for x, label in ((ax, "val loss"), (axt, "train loss")):
        x.set_xlabel("step")
        x.set_ylabel(label)
        x.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = a.png or os.path.join(a.out, "zeropp_convergence.png")
    fig.savefig(png, dpi=80)
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
