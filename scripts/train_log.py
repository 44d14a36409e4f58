"""
train_log.py: read a trainer's log.jsonl (format: common/logger.h) for plot_log.py and plot_sweep.py.

One JSON object per line:
  {"kind":"config", ...}                       optional, first line
  {"kind":"train","step":S,"loss":..,"lr":..,"grad_norm":..,"ms":..,"tokens_per_s":..,
   "tokens":cumulative,"batch_tokens":..,"gns_g2":..,"gns_trace":..,"b_simple":..}
  {"kind":"val","step":S,"loss":..,"tokens":..}
  {"kind":"hellaswag","step":S,"acc":..,"acc_norm":..,"examples":..,"skipped":..,"tokens":..}
Any field but kind/step/loss (hellaswag: kind/step/acc_norm) may be missing or null (the trainer writes NaN/inf as null); both read
as NaN here. Unknown kinds are ignored, so the trainer can add records without breaking the plots.
A resumed run appends to the same file and may repeat steps: a record whose step is not after the
previous one of its kind replaces everything from that step on, so the curves show the run as it
finally went. A malformed LAST line (a run killed mid-write) is dropped with a warning; a
malformed line anywhere else is an error.
"""
import json
import math
import os
import sys

TRAIN_FIELDS = ("step", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "tokens", "batch_tokens",
                "gns_g2", "gns_trace", "b_simple")
VAL_FIELDS = ("step", "loss", "tokens")
HELLASWAG_FIELDS = ("step", "acc", "acc_norm", "examples", "tokens")
RECORD_FIELDS = {"train": TRAIN_FIELDS, "val": VAL_FIELDS, "hellaswag": HELLASWAG_FIELDS}
REQUIRED_FIELDS = {"train": ("step", "loss"), "val": ("step", "loss"), "hellaswag": ("step", "acc_norm")}


class LogError(Exception):
    """A user-facing problem with a log; str() is '<file>: <what>; expected <what>'."""


def fail(message):
    """Print the one-line error the house style asks for and exit 1."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def one_line_usage(parser):
    """argparse's usage, wrapped over several lines for long ones, as one line for an error message."""
    return " ".join(parser.format_usage().split())


def resolve_log_path(path):
    """A log.jsonl file, or a directory holding one."""
    if os.path.isdir(path):
        candidate = os.path.join(path, "log.jsonl")
        if not os.path.isfile(candidate):
            raise LogError(f"{path}: directory has no log.jsonl; expected a trainer output dir (-o) or a log.jsonl file")
        return candidate
    if not os.path.exists(path):
        raise LogError(f"{path}: no such file or directory; expected a log.jsonl file or a directory holding one")
    if not os.path.isfile(path):
        raise LogError(f"{path}: not a regular file; expected a log.jsonl file or a directory holding one")
    return path


def _number(value):
    """JSON number (or null / missing) -> float, NaN for missing; None if it is not a number."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _append_record(records, record):
    # A step at or before the previous one means the run was resumed from an earlier checkpoint:
    # what was logged from that step on was superseded.
    while records and records[-1]["step"] >= record["step"]:
        records.pop()
    records.append(record)


def load_log(path):
    """
    Read one log. Returns {"path", "config": dict, "train": {field: list of floats},
    "val": {field: list of floats}, "hellaswag": {field: list of floats}}, lists in step order. Raises LogError for a missing, empty or
    malformed log, or one without train records.
    """
    path = resolve_log_path(path)
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise LogError(f"{path}: cannot read ({e}); expected a readable UTF-8 text file")
    # A line the writer had not finished is the last one and has no newline after it; the
    # trainer writes whole lines and flushes each, so only a kill mid-write leaves one.
    unfinished_index = len(lines) - 1 if lines[-1].strip() else -1
    config = {}
    records_of = {kind: [] for kind in RECORD_FIELDS}
    train = records_of["train"]
    nonblank = 0
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        nonblank += 1
        where = f"{path}:{index + 1}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if index == unfinished_index:
                print(f"warning: {where}: dropped an unfinished last line ({e.msg})", file=sys.stderr)
                continue
            raise LogError(f"{where}: not valid JSON ({e.msg}); expected one JSON object per line")
        except RecursionError:
            raise LogError(f"{where}: JSON nested too deeply to read; expected one flat JSON object per line") from None
        except ValueError as e:  # e.g. an integer with more digits than Python converts
            raise LogError(f"{where}: unreadable JSON value ({e}); expected one JSON object per line") from None
        if not isinstance(record, dict):
            raise LogError(f"{where}: a JSON {type(record).__name__}, not an object; expected one JSON object per line")
        kind = record.get("kind")
        if kind == "config":
            config.update(record)
            continue
        if kind not in RECORD_FIELDS:
            if kind is None:
                raise LogError(f"{where}: record has no \"kind\"; expected \"kind\": \"config\", \"train\" or \"val\"")
            continue  # a record kind this reader does not know: ignore, for forward compatibility
        fields = RECORD_FIELDS[kind]
        parsed = {}
        for name in fields:
            value = _number(record.get(name))
            if value is None:
                raise LogError(f"{where}: \"{name}\" is {json.dumps(record.get(name))}; expected a number or null")
            parsed[name] = value
        for name in REQUIRED_FIELDS[kind]:
            if name not in record:
                first, second = REQUIRED_FIELDS[kind]
                raise LogError(f"{where}: {kind} record has no \"{name}\"; expected \"{first}\" and \"{second}\" in every {kind} record")
        if not math.isfinite(parsed["step"]):
            raise LogError(f"{where}: \"step\" is null; expected an integer step")
        _append_record(records_of[kind], parsed)
    if nonblank == 0:
        raise LogError(f"{path}: empty log; expected JSON lines with \"kind\": \"train\" records")
    if not train:
        raise LogError(f"{path}: no train records; expected lines with \"kind\": \"train\"")

    def columns(records, fields):
        return {name: [r[name] for r in records] for name in fields}

    result = {"path": path, "config": config}
    result.update({kind: columns(records_of[kind], fields) for kind, fields in RECORD_FIELDS.items()})
    return result


def has_values(values):
    """True if any entry is a finite number."""
    return any(math.isfinite(v) for v in values)


def ema_smooth(steps, values, beta):
    """
    Bias-corrected exponential moving average (as in Adam) of values, skipping NaNs. Returns
    (centre_steps, smoothed): each smoothed value is placed at the same EMA of the steps, the
    centre of mass of its weights, not at the latest step. An EMA of a rising or falling curve
    lags it by about beta/(1-beta) records; placed at its centre of mass it matches the curve to
    first order (exactly for a linear curve), so steps-to-target read from it are not biased late.
    """
    centres, smoothed = [], []
    ema, ema_step, weight = 0.0, 0.0, 0.0
    for step, v in zip(steps, values):
        if not math.isfinite(v):
            continue
        ema = beta * ema + (1.0 - beta) * v
        ema_step = beta * ema_step + (1.0 - beta) * step
        weight = beta * weight + (1.0 - beta)
        centres.append(ema_step / weight)
        smoothed.append(ema / weight)
    return centres, smoothed
