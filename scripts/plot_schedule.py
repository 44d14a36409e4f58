#!/usr/bin/env python3
"""
plot_schedule.py: a batch-size schedule run (-d auto, -ds) against a sweep of fixed batch sizes,
at several target losses, on the sweep's frontier (McCandlish et al. 2018, eq. 2.11).

    python3 scripts/plot_schedule.py SWEEP_DIR --targets 7.0,6.5 [-o OUTDIR]

SWEEP_DIR holds one subdirectory per run with a log.jsonl (scripts/batch_size_sweep.sh makes the
fixed ones; put the schedule runs beside them). A run whose batch_tokens change, or whose config
record names a batch schedule other than "fixed", is a schedule run; the others are fixed runs.

Per run and target: the steps S and tokens E at which the val loss first reaches the target,
interpolated linearly between the two val records around the crossing (E from the records'
cumulative "tokens", so a run whose batch changes is counted exactly; for a fixed batch E = S B).
The frontier is fitted over the fixed runs as in plot_sweep.py: S_min/S + E_min/E = 1, B_crit =
E_min/S_min. For each schedule run it reports, per target:
  - knee ratios S / (2 S_min) and E / (2 E_min): the distance in steps and in tokens from the
    frontier's efficient point (B = B_crit, where S = 2 S_min and E = 2 E_min). A fixed batch
    B = r B_crit sits at ((1 + 1/r)/2, (1 + r)/2): within 20% of the knee in both only for r in
    [0.71, 1.4], so as B_crit grows during training no fixed batch is near it at two targets far
    apart; "within_20pct_of_knee" is both ratios <= 1.2.
  - frontier excess S / S_frontier(E) - 1 and E / E_frontier(S) - 1: how far off the fitted curve
    (negative: better than any fixed batch).
  - steps against the fixed run that needs the fewest tokens to that target.
Writes frontier_schedule.png (every target's frontier, fixed runs, the knee's 20% box, schedule
runs), loss_vs_tokens_schedule.png, loss_vs_steps_schedule.png, batch_schedule.png (each schedule
run's batch and B_simple over tokens) and schedule_summary.json in OUTDIR (default SWEEP_DIR).
Bad input prints one error line and exits 1.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_sweep import fit_frontier  # noqa: E402
from train_log import LogError, fail, load_log, one_line_usage  # noqa: E402


class Parser(argparse.ArgumentParser):
    def error(self, message):  # house style: one line, exit 1
        fail(f"{self.prog}: {message}; expected: {one_line_usage(self)}")


def load_runs(sweep_dir):
    if not os.path.isdir(sweep_dir):
        fail(f"{sweep_dir}: not a directory; expected a sweep dir with one subdir (holding log.jsonl) per run")
    runs = []
    for name in sorted(os.listdir(sweep_dir)):
        path = os.path.join(sweep_dir, name, "log.jsonl")
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            continue
        try:
            log = load_log(path)
        except LogError as e:
            fail(str(e))
        train, val = log["train"], log["val"]
        batches = [int(b) for b in train["batch_tokens"] if math.isfinite(b)]
        points = [(s, l, t) for s, l, t in zip(val["step"], val["loss"], val["tokens"]) if math.isfinite(l) and math.isfinite(t)]
        if len(points) < 2 or not batches:
            print(f"warning: {path}: fewer than 2 val records with tokens, or no batch_tokens: run skipped", file=sys.stderr)
            continue
        schedule = log["config"].get("batch_schedule", "fixed")
        is_schedule = schedule != "fixed" or len(set(batches)) > 1
        runs.append({"name": name, "schedule": schedule if is_schedule else "fixed", "batch_tokens": batches[0] if not is_schedule else None,
                     "first_batch": batches[0], "last_batch": batches[-1],
                     "steps": np.array([p[0] for p in points]), "loss": np.array([p[1] for p in points]),
                     "tokens": np.array([p[2] for p in points]), "train": train})
    if not [r for r in runs if r["schedule"] == "fixed"]:
        fail(f"{sweep_dir}: no fixed-batch run with val records; expected the sweep's runs (scripts/batch_size_sweep.sh)")
    runs.sort(key=lambda r: (r["schedule"] != "fixed", r["batch_tokens"] or 0, r["name"]))
    return runs


def crossing(run, target):
    """(S, E) where the val loss first reaches target, interpolated; None if never (or at step 0)."""
    below = np.nonzero(run["loss"] <= target)[0]
    if len(below) == 0 or below[0] == 0:
        return None
    i = below[0]
    f = (run["loss"][i - 1] - target) / (run["loss"][i - 1] - run["loss"][i])
    return (float(run["steps"][i - 1] + f * (run["steps"][i] - run["steps"][i - 1])),
            float(run["tokens"][i - 1] + f * (run["tokens"][i] - run["tokens"][i - 1])))


def analyse(runs, target):
    out = {"target_loss": target, "fixed": [], "schedule": []}
    fixed = [r for r in runs if r["schedule"] == "fixed"]
    for r in fixed:
        c = crossing(r, target)
        out["fixed"].append({"name": r["name"], "batch_tokens": r["batch_tokens"], "steps": c[0] if c else None, "tokens": c[1] if c else None})
    reached = [f for f in out["fixed"] if f["steps"] is not None]
    fit = fit_frontier([f["steps"] for f in reached], [f["tokens"] for f in reached]) if len({f["batch_tokens"] for f in reached}) >= 2 else None
    if fit is not None:
        s_min, e_min, rms = fit
        out.update({"S_min": s_min, "E_min": e_min, "B_crit": e_min / s_min, "fit_rms_relative": rms, "fit_runs": len(reached)})
        for f in reached:  # where each fixed batch sits relative to the knee
            f["knee_steps_ratio"], f["knee_tokens_ratio"] = f["steps"] / (2 * s_min), f["tokens"] / (2 * e_min)
            f["within_20pct_of_knee"] = f["knee_steps_ratio"] <= 1.2 and f["knee_tokens_ratio"] <= 1.2
    fewest = min(reached, key=lambda f: f["tokens"]) if reached else None
    out["fixed_fewest_tokens"] = fewest
    for r in runs:
        if r["schedule"] == "fixed":
            continue
        c = crossing(r, target)
        entry = {"name": r["name"], "schedule": r["schedule"], "steps": c[0] if c else None, "tokens": c[1] if c else None}
        if c and fit is not None:
            s, e = c
            s_min, e_min = fit[0], fit[1]
            entry["knee_steps_ratio"], entry["knee_tokens_ratio"] = s / (2 * s_min), e / (2 * e_min)
            entry["within_20pct_of_knee"] = entry["knee_steps_ratio"] <= 1.2 and entry["knee_tokens_ratio"] <= 1.2
            entry["frontier_steps_excess"] = s / (s_min / (1 - e_min / e)) - 1 if e > e_min else None
            entry["frontier_tokens_excess"] = e / (e_min / (1 - s_min / s)) - 1 if s > s_min else None
            batches = [b for st, b in zip(r["train"]["step"], r["train"]["batch_tokens"]) if st <= s and math.isfinite(b)]
            entry["batch_at_target"] = int(batches[-1]) if batches else None
        if c and fewest:
            entry["fewer_steps_than_fewest_tokens_fixed"] = c[0] < fewest["steps"]
            entry["steps_vs_fewest_tokens_fixed"] = c[0] / fewest["steps"]
        out["schedule"].append(entry)
    return out


def print_target(a):
    t = a["target_loss"]
    if "S_min" in a:
        print(f"target {t:g}: fit over {a['fit_runs']} fixed runs S_min {a['S_min']:.4g} steps, E_min {a['E_min']:.4g} tokens, "
              f"B_crit {a['B_crit']:.4g} (rms miss {a['fit_rms_relative']:.3g}); knee (2 S_min, 2 E_min) = ({2 * a['S_min']:.4g}, {2 * a['E_min']:.4g})")
    else:
        print(f"target {t:g}: no fit (fewer than 2 fixed runs reach it)")
    for f in a["fixed"]:
        extra = f" knee ratios steps {f['knee_steps_ratio']:.3f} tokens {f['knee_tokens_ratio']:.3f}" if "knee_steps_ratio" in f else ""
        s = f"{f['steps']:.1f}" if f["steps"] is not None else "-"
        e = f"{f['tokens']:.0f}" if f["tokens"] is not None else "-"
        print(f"  fixed {f['batch_tokens']:>6}: steps {s:>7} tokens {e:>8}{extra}")
    for r in a["schedule"]:
        if r["steps"] is None:
            print(f"  {r['name']}: does not reach {t:g}")
            continue
        line = f"  {r['name']} ({r['schedule']}): steps {r['steps']:.1f} tokens {r['tokens']:.0f}"
        if "knee_steps_ratio" in r:
            fs = r["frontier_steps_excess"]; fe = r["frontier_tokens_excess"]
            line += (f" batch {r['batch_at_target']} | knee ratios steps {r['knee_steps_ratio']:.3f} tokens {r['knee_tokens_ratio']:.3f}"
                     f" (within 20%: {r['within_20pct_of_knee']}) | off the frontier: steps "
                     f"{'%+.1f%%' % (100 * fs) if fs is not None else '-'} tokens {'%+.1f%%' % (100 * fe) if fe is not None else '-'}")
        if "steps_vs_fewest_tokens_fixed" in r:
            line += f" | steps / fewest-token fixed run's {r['steps_vs_fewest_tokens_fixed']:.3f}"
        print(line)


def draw(runs, analyses, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fixed = [r for r in runs if r["schedule"] == "fixed"]
    sched = [r for r in runs if r["schedule"] != "fixed"]
    colors = plt.cm.viridis(np.linspace(0.0, 0.9, len(fixed)))
    markers = ["*", "P", "X", "D"]
    tcolors = ["tab:blue", "tab:red", "tab:green", "tab:purple"]

    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    for k, a in enumerate(analyses):
        tc = tcolors[k % len(tcolors)]
        pts = [f for f in a["fixed"] if f["steps"] is not None]
        ax.plot([f["tokens"] for f in pts], [f["steps"] for f in pts], "o", color=tc, ms=5)
        for f in pts:
            ax.annotate(str(f["batch_tokens"]), (f["tokens"], f["steps"]), textcoords="offset points", xytext=(4, 3), fontsize=7, color=tc)
        if "S_min" in a:
            s_min, e_min, bc = a["S_min"], a["E_min"], a["B_crit"]
            b = np.geomspace(min(f["batch_tokens"] for f in pts) / 4, max(f["batch_tokens"] for f in pts) * 4, 200)
            ax.plot(e_min * (1 + b / bc), s_min * (1 + bc / b), "-", color=tc, lw=1.0,
                    label=f"loss {a['target_loss']:g}: frontier fit, B_crit {bc:.0f}")
            ax.add_patch(plt.Rectangle((2 * e_min, 2 * s_min), 0.4 * e_min, 0.4 * s_min, fill=False, ls="--", ec=tc, lw=1.0))
        for j, r in enumerate(a["schedule"]):
            if r["steps"] is not None:
                ax.plot(r["tokens"], r["steps"], markers[j % len(markers)], color=tc, ms=13, mec="black",
                        label=f"loss {a['target_loss']:g}: {r['name']}")
    ax.plot([], [], "s", mfc="none", mec="gray", ls="none", label="knee (2 E_min, 2 S_min) + 20% box")
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlabel("tokens to target E"); ax.set_ylabel("steps to target S")
    ax.set_title("steps vs tokens to reach each target: fixed batches (dots), schedule (markers)")
    ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(os.path.join(out_dir, "frontier_schedule.png"), dpi=80); plt.close(fig)

    for x_name in ("tokens", "steps"):
        fig, ax = plt.subplots(figsize=(7.5, 5))
        for r, c in zip(fixed, colors):
            x = r[x_name]; ok = x > 0
            ax.plot(x[ok], r["loss"][ok], color=c, lw=1.0, label=f"fixed {r['batch_tokens']}")
        for j, r in enumerate(sched):
            x = r[x_name]; ok = x > 0
            ax.plot(x[ok], r["loss"][ok], color="red", lw=2.0, ls=["-", "--", ":", "-."][j % 4], label=r["name"])
        for k, a in enumerate(analyses):
            ax.axhline(a["target_loss"], color=tcolors[k % len(tcolors)], ls="--", lw=0.8)
        ax.set_xscale("log"); ax.set_xlabel(x_name); ax.set_ylabel("val loss")
        ax.set_title(f"val loss vs {x_name}")
        ax.legend(fontsize=7)
        fig.tight_layout(); fig.savefig(os.path.join(out_dir, f"loss_vs_{x_name}_schedule.png"), dpi=80); plt.close(fig)

    if sched:
        fig, ax = plt.subplots(figsize=(7.5, 5))
        for j, r in enumerate(sched):
            tr = r["train"]
            ls = ["-", "--", ":", "-."][j % 4]
            ax.plot(tr["tokens"], tr["batch_tokens"], color="black", lw=1.4, ls=ls, drawstyle="steps-pre", label=f"{r['name']}: batch")
            ok = [(t, b) for t, b in zip(tr["tokens"], tr["b_simple"]) if math.isfinite(b) and b > 0]
            if ok:
                ax.plot([p[0] for p in ok], [p[1] for p in ok], color="tab:blue", lw=0.8, ls=ls, label=f"{r['name']}: B_simple")
        for k, a in enumerate(analyses):
            if "B_crit" in a:
                ax.axhline(a["B_crit"], color=tcolors[k % len(tcolors)], ls="--", lw=0.8, label=f"B_crit at loss {a['target_loss']:g} (fit)")
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel("tokens"); ax.set_ylabel("tokens per step")
        ax.set_title("schedule runs: batch and B_simple over training")
        ax.legend(fontsize=7)
        fig.tight_layout(); fig.savefig(os.path.join(out_dir, "batch_schedule.png"), dpi=80); plt.close(fig)


def main():
    parser = Parser(prog="plot_schedule.py", usage="%(prog)s [-h] --targets X,Y [-o OUTPUT] sweep_dir",
                    description="A batch-size schedule run against a fixed-batch sweep, at several target losses.")
    parser.add_argument("sweep_dir", nargs="?")
    parser.add_argument("--targets", required=True, help="comma-separated target val losses, e.g. 7.0,6.5")
    parser.add_argument("-o", "--output", help="output dir (default: SWEEP_DIR)")
    args, unknown = parser.parse_known_args()
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.sweep_dir is None:
        parser.error("the following arguments are required: sweep_dir")
    try:
        targets = [float(t) for t in args.targets.split(",")]
    except ValueError:
        fail(f"--targets {args.targets}: not comma-separated numbers; expected e.g. 7.0,6.5")
    if not all(math.isfinite(t) for t in targets):
        fail(f"--targets {args.targets}: not finite; expected loss values")
    out_dir = args.output or args.sweep_dir
    runs = load_runs(args.sweep_dir)
    os.makedirs(out_dir, exist_ok=True)
    analyses = [analyse(runs, t) for t in targets]
    for a in analyses:
        print_target(a)
    draw(runs, analyses, out_dir)
    with open(os.path.join(out_dir, "schedule_summary.json"), "w") as f:
        json.dump({"targets": analyses}, f, indent=1)
    print(f"plot_schedule: wrote frontier_schedule.png loss_vs_tokens_schedule.png loss_vs_steps_schedule.png "
          f"batch_schedule.png schedule_summary.json in {out_dir}")


if __name__ == "__main__":
    main()
