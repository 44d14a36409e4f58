#!/usr/bin/env python3
"""
plot_log.py: one PNG summarising a training run from its log.jsonl (format: common/logger.h).

    python3 scripts/plot_log.py LOGDIR_or_FILE [-o out.png] [--smooth BETA] [--dpi N]

Panels: train loss (raw and smoothed) with val loss, vs step, and HellaSwag accuracy (-hs:
acc_norm and acc, right axis) beside it; learning rate; gradient norm
(before clipping, log scale); tokens/s; and the gradient noise scale B_simple in tokens
(McCandlish et al. 2018) beside the run's batch size per step, with its changes marked (a batch
schedule: -d auto, -ds) and, for -d auto, the growth threshold factor x batch. Default output:
log.png next to the log; -o takes a .png, .pdf or .svg path, or a directory to put log.png in. Bad input (missing, empty or malformed log) prints one error line and
exits 1.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_log import LogError, ema_smooth, fail, has_values, load_log, one_line_usage  # noqa: E402


class Parser(argparse.ArgumentParser):
    def error(self, message):  # house style: one line, exit 1 (argparse's default exits 2)
        fail(f"{self.prog}: {message}; expected: {one_line_usage(self)}")


def finite_points(xs, ys):
    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def plot_log(log, out_path, smooth_beta, dpi=100):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, val = log["train"], log["val"]
    steps = train["step"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    axes = axes.ravel()

    ax = axes[0]
    x, y = finite_points(steps, train["loss"])
    ax.plot(x, y, color="tab:blue", alpha=0.3, lw=0.8, label="train")
    x, y = ema_smooth(steps, train["loss"], smooth_beta)
    ax.plot(x, y, color="tab:blue", lw=1.5, label=f"train (EMA {smooth_beta})")
    if has_values(val["loss"]):
        x, y = finite_points(val["step"], val["loss"])
        ax.plot(x, y, "o-", color="tab:orange", ms=3, lw=1.5, label="val")
    ax.set_title("loss")
    ax.set_xlabel("step")
    handles, labels = ax.get_legend_handles_labels()
    hellaswag = log["hellaswag"]
    if has_values(hellaswag["acc_norm"]):
        acc_ax = ax.twinx()
        for name, style, color in (("acc_norm", "s-", "tab:green"), ("acc", "^--", "tab:olive")):
            x, y = finite_points(hellaswag["step"], hellaswag[name])
            acc_ax.plot(x, y, style, color=color, ms=3, lw=1.2, label=f"HellaSwag {name}")
        acc_ax.axhline(0.25, color="gray", lw=0.8, ls=":")  # chance: 4 endings
        acc_ax.set_ylabel("HellaSwag accuracy (chance 0.25)")
        more_handles, more_labels = acc_ax.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels)

    def series_panel(ax, name, title, log_y=False):
        ax.set_title(title)
        ax.set_xlabel("step")
        x, y = finite_points(steps, train[name])
        if not x:
            ax.text(0.5, 0.5, f"no {name} in log", ha="center", va="center", transform=ax.transAxes)
            return
        ax.plot(x, y, lw=1.0)
        if log_y and min(y) > 0:
            ax.set_yscale("log")

    series_panel(axes[1], "lr", "learning rate")
    series_panel(axes[2], "grad_norm", "gradient norm (before clipping)", log_y=True)
    series_panel(axes[3], "tokens_per_s", "tokens/s")

    ax = axes[4]
    config = log["config"]
    schedule = config.get("batch_schedule", "fixed")
    ax.set_title("B_simple and the batch (tokens)" + ("" if schedule == "fixed" else f", batch schedule: {schedule}"))
    ax.set_xlabel("step")
    x, y = finite_points(steps, train["b_simple"])
    bx, by = finite_points(steps, train["batch_tokens"])
    if x or bx:
        if x:
            ax.plot(x, y, lw=1.0, label="B_simple (smoothed)")
        else:  # the batch alone: say why the meter's line is missing
            ax.text(0.5, 0.5, b_simple_missing_reason(config), ha="center", va="center", transform=ax.transAxes,
                    fontsize=9)
        if bx:
            # The batch of each step, as a staircase; a dot where it changed (-d auto, -ds).
            ax.plot(bx, by, color="black", lw=1.4, drawstyle="steps-post", label="batch tokens")
            changed = [i for i in range(1, len(by)) if by[i] != by[i - 1]]
            if changed:
                ax.plot([bx[i] for i in changed], [by[i] for i in changed], "o", color="black", ms=4,
                        label=f"batch changes ({len(changed)})")
            factor = config.get("batch_growth_factor")
            if schedule == "auto" and isinstance(factor, (int, float)) and factor > 0:
                ax.plot(bx, [factor * b for b in by], ":", color="gray", lw=1.0, drawstyle="steps-post",
                        label=f"growth threshold {factor:g} x batch")
        if min(y + by) > 0:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, b_simple_missing_reason(config), ha="center", va="center", transform=ax.transAxes,
                wrap=True, fontsize=9)

    ax = axes[5]
    ax.axis("off")
    summary = summary_lines(log)
    ax.text(0.0, 1.0, "\n".join(summary), va="top", ha="left", family="monospace", fontsize=9,
            transform=ax.transAxes)

    fig.suptitle(log["path"])
    fig.tight_layout()
    fig.savefig(out_path, dpi=dpi)
    plt.close(fig)


def b_simple_missing_reason(config):
    """Why a log has no B_simple, from its config record: the meter needs two batch sizes."""
    if config.get("gns_beta") is None and config.get("gns_small_batch") == "off":
        if config.get("world_size") == 1 and config.get("grad_accum_steps") == 1:
            return ("no B_simple: one rank without gradient accumulation\nhas no smaller batch to compare;"
                    "\nrun with several ranks or -d > B*T (accumulation)")
        return "no B_simple: the meter was off (-gb -1)"
    if not config:
        return "no b_simple in log (no config record)"
    return "no B_simple yet: undefined on every step so far\n(too few steps for the meter's averages)"


# The settings a reader looks for first, in this order; the rest of the config follows, sorted.
FIRST_SETTINGS = ("lr", "zero_stage", "world_size", "batch_tokens", "B", "T", "grad_accum_steps", "max_steps",
                  "init", "L", "C", "parameters", "batch_schedule", "offload_optimizer", "offload_params")


def summary_lines(log):
    train, val = log["train"], log["val"]
    lines = [f"train records   {len(train['step'])}",
             f"last step       {int(train['step'][-1])}"]

    def last_finite(values):
        finite = [v for v in values if math.isfinite(v)]
        return finite[-1] if finite else None

    for label, values in (("last train loss", train["loss"]), ("last val loss", val["loss"]),
                          ("last HellaSwag", log["hellaswag"]["acc_norm"]),
                          ("tokens seen", train["tokens"]), ("batch tokens", train["batch_tokens"]),
                          ("last B_simple", train["b_simple"])):
        v = last_finite(values)
        if v is not None:
            lines.append(f"{label:<15} {v:.6g}")
    config = log["config"]
    keys = [k for k in FIRST_SETTINGS if k in config]
    keys += sorted(k for k in config if k != "kind" and k not in FIRST_SETTINGS)
    room = 24 - len(lines)  # what fits under the panel; the rest is in the log
    for key in keys[:room]:
        lines.append(f"{key:<15} {config[key]}")
    if len(keys) > room:
        lines.append(f"... {len(keys) - room} more in log.jsonl's config record")
    return lines


FORMATS = (".png", ".pdf", ".svg")


def output_path(output, log_path):
    """
    Where the plot goes: log.png next to the log by default; -o DIR (an existing directory) puts
    log.png in it; otherwise -o must name a .png, .pdf or .svg file in an existing directory
    (matplotlib picks the format by the suffix and would append .png to a name without one).
    """
    if output is None:
        return os.path.join(os.path.dirname(log_path) or ".", "log.png")
    if os.path.isdir(output):
        return os.path.join(output, "log.png")
    if os.path.splitext(output)[1].lower() not in FORMATS:
        fail(f"-o {output}: unsupported file type; expected a path ending in .png, .pdf or .svg, or an existing directory")
    out_dir = os.path.dirname(output)
    if out_dir and not os.path.isdir(out_dir):
        fail(f"-o {output}: directory {out_dir} does not exist; expected a path in an existing directory")
    return output


def main():
    parser = Parser(prog="plot_log.py", usage="%(prog)s [-h] [-o OUTPUT] [--smooth BETA] [--dpi N] log",
                    description="Plot one training run's log.jsonl.")
    parser.add_argument("log", nargs="?", help="log.jsonl, or the trainer's output dir (-o) holding it")
    parser.add_argument("-o", "--output", help="output .png, .pdf or .svg, or a directory to put log.png in (default: log.png next to the log)")
    parser.add_argument("--smooth", type=float, default=0.9, help="EMA beta for the smoothed train loss (default 0.9)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution of the 16 x 9 inch PNG (default 100)")
    # An unknown flag is named even when log is missing too (argparse would report only the latter).
    args, unknown = parser.parse_known_args()
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.log is None:
        parser.error("the following arguments are required: log")
    if not 0.0 <= args.smooth < 1.0:
        fail(f"--smooth {args.smooth}: out of range; expected a number in [0, 1)")
    if not 20 <= args.dpi <= 600:
        fail(f"--dpi {args.dpi}: out of range; expected 20..600")
    try:
        log = load_log(args.log)
    except LogError as e:
        fail(str(e))
    out_path = output_path(args.output, log["path"])
    try:
        plot_log(log, out_path, args.smooth, args.dpi)
    except OSError as e:
        fail(f"-o {out_path}: cannot write ({e.strerror or e}); expected a writable path")
    except (ValueError, RuntimeError) as e:  # matplotlib: e.g. a backend that cannot write the format
        fail(f"-o {out_path}: cannot write ({' '.join(str(e).split())}); expected a .png, .pdf or .svg path")
    print(f"plot_log: wrote {out_path}")


if __name__ == "__main__":
    main()
