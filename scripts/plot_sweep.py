#!/usr/bin/env python3
"""
plot_sweep.py: steps and tokens to reach a target loss across a batch-size sweep, and the
critical batch size B_crit, following McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", eq. 2.11 and B_crit = E_min / S_min.

    python3 scripts/plot_sweep.py SWEEP_DIR [--target-loss X] [-o OUTDIR]

SWEEP_DIR holds one subdirectory per run (scripts/batch_size_sweep.sh makes them), each with a
log.jsonl (format: common/logger.h); a run's batch size is the batch_tokens of its train records.

Per run, the loss curve is the val loss when the log has at least two val records, else the
train loss smoothed by a bias-corrected EMA (--smooth), each value placed at the centre of mass
of its weights so that the smoothing does not delay the crossing (train_log.ema_smooth). The steps S to reach the target loss are
found by linear interpolation between the two records around the first crossing, and the tokens
are E = S * batch_tokens. The default target is the highest of the runs' lowest losses, raised
by --margin (relative), so every run reaches it.

The model (eq. 2.11): (S/S_min - 1)(E/E_min - 1) = 1. With E = B S it reads
S = S_min + E_min / B, i.e. S_min/S + E_min/E = 1 for every run. We fit S_min, E_min by linear
least squares on that form: the residual 1 - S_min/S - E_min/E is the relative error of the
predicted S (it equals (S - S_min - E_min/B) / S), so each run counts by its relative miss,
whatever its step count. B_crit = E_min / S_min (tokens): below it, doubling the batch nearly
halves the steps; above it, it mostly costs tokens.

The meter's reading beside it: each run logs the simple noise scale B_simple (common/gns.h); the
paper's prediction is B_crit(L) ~ B_simple(L) at the same loss L. So per run we read B_simple at
the train record nearest to the step where that run reaches the target loss (b_simple_at_target),
and print their median next to the fitted B_crit.

Outputs in OUTDIR (default SWEEP_DIR): loss_vs_tokens.png, loss_vs_steps.png, b_simple.png,
frontier.png, and sweep_summary.json (table, target, fit). Prints the table and the fit.
Fewer than two runs reaching the target (or a fit without positive S_min, E_min) skips the fit,
says so, and still draws everything else. Bad input prints one error line and exits 1.
"""
import argparse
import json
import math
import os
import sys
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_log import LogError, ema_smooth, fail, has_values, load_log, one_line_usage  # noqa: E402


class Parser(argparse.ArgumentParser):
    def error(self, message):  # house style: one line, exit 1 (argparse's default exits 2)
        fail(f"{self.prog}: {message}; expected: {one_line_usage(self)}")


def load_runs(sweep_dir, smooth_beta):
    """Every subdirectory with a log.jsonl, as a run dict, sorted by batch size."""
    if not os.path.isdir(sweep_dir):
        fail(f"{sweep_dir}: not a directory; expected a sweep dir with one subdir (holding log.jsonl) per batch size")
    runs = []
    for name in sorted(os.listdir(sweep_dir)):
        log_path = os.path.join(sweep_dir, name, "log.jsonl")
        if not os.path.isfile(log_path):
            continue
        if os.path.getsize(log_path) == 0:
            print(f"warning: {log_path}: empty log, run skipped (did it fail to start?)", file=sys.stderr)
            continue
        try:
            log = load_log(log_path)
        except LogError as e:
            fail(str(e))
        for step, b in zip(log["train"]["step"], log["train"]["batch_tokens"]):
            if math.isfinite(b) and not (b > 0 and b == int(b)):
                fail(f"{log_path}: batch_tokens is {b:g} at step {step:g}; expected a positive integer (total batch tokens per step)")
        batch_values = [int(b) for b in log["train"]["batch_tokens"] if math.isfinite(b)]
        if not batch_values:
            fail(f"{log_path}: no batch_tokens in the train records; expected \"batch_tokens\": total batch tokens per step")
        batch_tokens, count = Counter(batch_values).most_common(1)[0]
        if count != len(batch_values):
            print(f"warning: {log_path}: batch_tokens changes during the run; using the most common, {batch_tokens}",
                  file=sys.stderr)
        train, val = log["train"], log["val"]
        if sum(1 for v in val["loss"] if math.isfinite(v)) >= 2:
            steps, loss, source = val["step"], val["loss"], "val"
        else:
            steps, loss = ema_smooth(train["step"], train["loss"], smooth_beta)
            source = f"train EMA {smooth_beta}"
        points = [(s, l) for s, l in zip(steps, loss) if math.isfinite(l)]
        if not points:
            print(f"warning: {log_path}: no finite loss values, run skipped", file=sys.stderr)
            continue
        runs.append({
            "name": name, "path": log_path, "batch_tokens": batch_tokens, "source": source,
            "steps": np.array([p[0] for p in points], dtype=float),
            "loss": np.array([p[1] for p in points], dtype=float),
            "train_steps": np.array(train["step"], dtype=float),
            "b_simple": np.array(train["b_simple"], dtype=float),
        })
    if not runs:
        fail(f"{sweep_dir}: no run with a non-empty log.jsonl in its subdirs; expected SWEEP_DIR/<run>/log.jsonl")
    runs.sort(key=lambda r: (r["batch_tokens"], r["name"]))
    return runs


def steps_to_target(steps, loss, target):
    """First step where the loss curve reaches target, linearly interpolated; None if never."""
    below = np.nonzero(loss <= target)[0]
    if len(below) == 0:
        return None
    i = below[0]
    if i == 0:
        return float(steps[0])
    s0, s1, l0, l1 = steps[i - 1], steps[i], loss[i - 1], loss[i]
    return float(s0 + (s1 - s0) * (l0 - target) / (l0 - l1))


def value_near_step(steps, values, step):
    """The finite value logged at the step nearest to `step` (a train record), or None."""
    ok = np.isfinite(values)
    if not ok.any():
        return None
    s, v = steps[ok], values[ok]
    return float(v[np.argmin(np.abs(s - step))])


def fit_frontier(S, E):
    """
    Least-squares S_min, E_min of eq. 2.11 from steps S and tokens E of runs at different batch
    sizes (see the module docstring). Returns (S_min, E_min, rms relative residual) or None when
    the fit is not physical (a non-positive S_min or E_min: e.g. every run deep in one regime).
    """
    S, E = np.asarray(S, dtype=float), np.asarray(E, dtype=float)
    A = np.stack([1.0 / S, 1.0 / E], axis=1)
    (s_min, e_min), *_ = np.linalg.lstsq(A, np.ones_like(S), rcond=None)
    if not (s_min > 0 and e_min > 0):
        return None
    residual = 1.0 - s_min / S - e_min / E
    return float(s_min), float(e_min), float(np.sqrt(np.mean(residual ** 2)))


def main():
    parser = Parser(prog="plot_sweep.py", usage="%(prog)s [-h] [-o OUTPUT] [--target-loss X] [--margin M] [--smooth BETA] sweep_dir",
                    description="Steps/tokens to a target loss across a batch-size sweep, and B_crit.")
    parser.add_argument("sweep_dir", nargs="?", help="directory with one subdir (holding log.jsonl) per run")
    parser.add_argument("-o", "--output", help="output dir for the PNGs and sweep_summary.json (default: SWEEP_DIR)")
    parser.add_argument("--target-loss", type=float, help="loss to reach (default: highest of the runs' lowest losses, plus --margin)")
    parser.add_argument("--margin", type=float, default=0.01, help="relative margin over the default target (default 0.01)")
    parser.add_argument("--smooth", type=float, default=0.9, help="EMA beta for train loss when a run has no val loss (default 0.9)")
    # An unknown flag is named even when sweep_dir is missing too (argparse would report only the latter).
    args, unknown = parser.parse_known_args()
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.sweep_dir is None:
        parser.error("the following arguments are required: sweep_dir")
    if not 0.0 <= args.smooth < 1.0:
        fail(f"--smooth {args.smooth}: out of range; expected a number in [0, 1)")
    if not (args.margin >= 0 and math.isfinite(args.margin)):
        fail(f"--margin {args.margin}: out of range; expected a number >= 0")
    if args.target_loss is not None and not math.isfinite(args.target_loss):
        fail(f"--target-loss {args.target_loss}: not finite; expected a loss value")
    out_dir = args.output or args.sweep_dir
    runs = load_runs(args.sweep_dir, args.smooth)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        fail(f"-o {out_dir}: cannot create ({e.strerror}); expected a writable directory")

    if args.target_loss is not None:
        target, target_how = args.target_loss, "given"
    else:
        worst_best = max(float(r["loss"].min()) for r in runs)
        target = worst_best * (1.0 + args.margin) if worst_best > 0 else worst_best + args.margin
        target_how = f"highest of the runs' lowest losses ({worst_best:.4f}) + {args.margin:g} relative"

    for r in runs:
        r["S"] = steps_to_target(r["steps"], r["loss"], target)
        r["E"] = r["S"] * r["batch_tokens"] if r["S"] is not None else None
        finite_b = r["b_simple"][np.isfinite(r["b_simple"])]
        r["b_simple_last"] = float(finite_b[-1]) if len(finite_b) else None
        r["b_simple_at_target"] = value_near_step(r["train_steps"], r["b_simple"], r["S"]) if r["S"] is not None else None

    reached = [r for r in runs if r["S"] is not None and r["S"] > 0]
    fit, fit_note = None, ""
    if len({r["batch_tokens"] for r in reached}) < 2:
        fit_note = (f"fit skipped: {len(reached)} run(s) reach the target loss {target:.4f} at a step > 0; "
                    "the frontier needs at least 2 batch sizes")
    else:
        fit = fit_frontier([r["S"] for r in reached], [r["E"] for r in reached])
        if fit is None:
            fit_note = "fit skipped: least squares gave a non-positive S_min or E_min (runs all in one regime?)"

    print_table(runs, target, target_how)
    summary = {"target_loss": target, "target_how": target_how, "runs": [
        {"name": r["name"], "batch_tokens": r["batch_tokens"], "loss_source": r["source"],
         "steps_to_target": r["S"], "tokens_to_target": r["E"], "final_loss": float(r["loss"][-1]),
         "b_simple_last": r["b_simple_last"], "b_simple_at_target": r["b_simple_at_target"]} for r in runs]}
    at_target = [r["b_simple_at_target"] for r in runs if r["b_simple_at_target"] is not None]
    b_simple_median = float(np.median(at_target)) if at_target else None
    summary["b_simple_at_target_median"] = b_simple_median
    if b_simple_median is not None:
        print(f"B_simple (meter) where the runs reach the target: median {b_simple_median:.6g} tokens over {len(at_target)} run(s)")
    else:
        print("B_simple (meter): no run logged a finite b_simple where it reaches the target")
    if fit is not None:
        s_min, e_min, rms = fit
        summary.update({"S_min": s_min, "E_min": e_min, "B_crit": e_min / s_min, "fit_rms_relative": rms,
                        "fit_runs": len(reached)})
        exact = " (2 runs: exact, no residual to judge the fit by)" if len(reached) == 2 else ""
        ratio = f" (B_crit / B_simple = {e_min / s_min / b_simple_median:.3g})" if b_simple_median else ""
        print(f"fit (McCandlish eq. 2.11) over {len(reached)} runs: S_min = {s_min:.4g} steps, "
              f"E_min = {e_min:.4g} tokens, rms relative miss {rms:.3g}{exact}")
        print(f"B_crit = E_min / S_min = {e_min / s_min:.6g} tokens{ratio}")
    else:
        summary["fit_skipped"] = fit_note
        print(fit_note)

    draw_plots(runs, target, fit, fit_note, out_dir)
    with open(os.path.join(out_dir, "sweep_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"plot_sweep: wrote loss_vs_tokens.png loss_vs_steps.png b_simple.png frontier.png sweep_summary.json in {out_dir}")


def print_table(runs, target, target_how):
    print(f"target loss {target:.4f} ({target_how})")
    header = (f"{'batch_tokens':>12} {'steps_to_target':>15} {'tokens_to_target':>16} {'final_loss':>10} "
              f"{'b_simple_at_target':>18} {'b_simple_last':>13}  run (loss from)")
    print(header)
    for r in runs:
        s = f"{r['S']:.1f}" if r["S"] is not None else "-"
        e = f"{r['E']:.4g}" if r["E"] is not None else "-"
        b = f"{r['b_simple_last']:.4g}" if r["b_simple_last"] is not None else "-"
        bt = f"{r['b_simple_at_target']:.4g}" if r["b_simple_at_target"] is not None else "-"
        print(f"{r['batch_tokens']:>12} {s:>15} {e:>16} {r['loss'][-1]:>10.4f} {bt:>18} {b:>13}  {r['name']} ({r['source']})")


def draw_plots(runs, target, fit, fit_note, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = plt.cm.viridis(np.linspace(0.0, 0.9, len(runs)))

    for x_name, x_label in (("tokens", "tokens"), ("steps", "step")):
        fig, ax = plt.subplots(figsize=(8, 5.5))
        for r, c in zip(runs, colors):
            x = r["steps"] * r["batch_tokens"] if x_name == "tokens" else r["steps"]
            positive = x > 0  # log x axis: the step-0 point has no place on it
            ax.plot(x[positive], r["loss"][positive], color=c, lw=1.3, label=f"{r['batch_tokens']} tokens ({r['source']})")
            if r["S"] is not None:
                ax.plot(r["E"] if x_name == "tokens" else r["S"], target, "o", color=c, ms=5)
        ax.axhline(target, color="gray", ls="--", lw=1.0, label=f"target {target:.4f}")
        ax.set_xscale("log")
        ax.set_xlabel(x_label)
        ax.set_ylabel("loss")
        ax.set_title(f"loss vs {x_label}, per batch size")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"loss_vs_{x_name}.png"), dpi=100)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5.5))
    any_b = False
    for r, c in zip(runs, colors):
        ok = np.isfinite(r["b_simple"]) & (r["b_simple"] > 0)
        if ok.any():
            any_b = True
            ax.plot(r["train_steps"][ok] * r["batch_tokens"], r["b_simple"][ok], color=c, lw=1.0,
                    label=f"B_simple, run at {r['batch_tokens']} tokens")
            if r["b_simple_at_target"] is not None:  # where this run reaches the target loss
                ax.plot(r["E"], r["b_simple_at_target"], "o", color=c, ms=6)
    if fit is not None:
        ax.axhline(fit[1] / fit[0], color="red", ls="--", lw=1.0, label=f"B_crit from the frontier fit {fit[1] / fit[0]:.4g}")
    if any(r["b_simple_at_target"] is not None for r in runs):
        ax.plot([], [], "o", color="gray", ms=6, label="B_simple where the run reaches the target loss")
    if any_b:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no b_simple in any log", ha="center", va="center", transform=ax.transAxes)
    ax.set_xscale("log")
    ax.set_xlabel("tokens")
    ax.set_ylabel("B_simple (tokens)")
    ax.set_title("gradient noise scale over training")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "b_simple.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5.5))
    reached = [(r, c) for r, c in zip(runs, colors) if r["S"] is not None and r["S"] > 0]
    for r, c in reached:
        ax.plot(r["E"], r["S"], "o", color=c, ms=7)
        ax.annotate(f"B={r['batch_tokens']}", (r["E"], r["S"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    if fit is not None:
        s_min, e_min, _ = fit
        b_crit = e_min / s_min
        # The curve over batch sizes from well below to well above the measured ones.
        batches = np.geomspace(min(r["batch_tokens"] for r, _ in reached) / 4, max(r["batch_tokens"] for r, _ in reached) * 4, 200)
        ax.plot(e_min * (1 + batches / b_crit), s_min * (1 + b_crit / batches), "r-", lw=1.2,
                label="fit: (S/S_min - 1)(E/E_min - 1) = 1")
        ax.axhline(s_min, color="gray", ls=":", lw=1.0, label=f"S_min = {s_min:.4g} steps")
        ax.axvline(e_min, color="gray", ls="-.", lw=1.0, label=f"E_min = {e_min:.4g} tokens")
        ax.plot(2 * e_min, 2 * s_min, "r*", ms=12, label=f"B_crit = E_min/S_min = {b_crit:.4g} tokens")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, fit_note, ha="center", va="center", transform=ax.transAxes, fontsize=8, wrap=True)
    if reached:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("tokens to target E")
    ax.set_ylabel("steps to target S")
    ax.set_title(f"steps vs tokens to reach loss {target:.4f}")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "frontier.png"), dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
