"""A run's records, and the one place they are read back. What a run writes
(algorithms/session/recorder.py and settings_record.py write it; nothing here writes):

    results/<network>_<framework>[_<backend>].csv    one row per step (CSV_COLUMNS)
    results/<csv stem>.settings.jsonl                 the settings record, a line per run
    results/epoch_check/<the run's CSV name>          the epoch check's rows, under the run's id
    results/step_check/<the run's CSV name>           the step check's rows, a row per checked step
    results.log                                       a block per run, `key: value` lines

Here: their names and columns, and reading them back: a CSV's rows (a resumed run's
superseded rows left out) and run ids, a run's summary from its rows, the settings
record, a results.log field. Imports nothing of the project: every layer may read."""

from __future__ import annotations

import csv
import json
import os
import statistics
from typing import Optional

CSV_COLUMNS = [
    "run_id",
    "framework",
    "backend",
    "network",
    "strategy",
    "devices",
    "global_batch",
    "epoch",
    "step",
    "phase",
    "loss",
    "accuracy",
    "learning_rate",
    "step_time_ms",
    "data_time_ms",
    "samples_per_sec",
    "wall_time_s",
    "comm_time_ms",
    "worker",
    "staleness",
    "loss_scale",
    "device",
]
# a file from before the device column: every run then trained on the CPU (requirements.txt
# installs CPU builds only, and no GPU had run this project: docs/gpu.md)
DEVICE_BEFORE_COLUMN = "cpu"
WARMUP_STEPS = 3  # tracing / compilation happens here; excluded from the steady-state median


def results_csv_name(network: str, framework: str, backend: Optional[str]) -> str:
    suffix = f"_{backend}" if backend and backend != framework else ""
    return f"{network}_{framework}{suffix}.csv"


SIDECAR_SUFFIX = ".settings.jsonl"


def sidecar_path(csv_path: str) -> str:
    return os.path.splitext(csv_path)[0] + SIDECAR_SUFFIX


CHECK_FOLDER = "epoch_check"


def check_csv(csv_path: str) -> str:
    """Where the epoch check of the run whose rows are in `csv_path` keeps its rows."""
    return os.path.join(os.path.dirname(csv_path), CHECK_FOLDER, os.path.basename(csv_path))


STEP_CHECK_FOLDER = "step_check"
# a row per checked step (run/step_check.py): the framework's step against the same step in
# float64 from its own state; each error is the largest over the layers, `*_layer` which one
STEP_CHECK_COLUMNS = [
    "run_id",
    "step",
    "epoch",
    "why",
    "learning_rate",
    "loss",
    "reference_loss",
    "forward_error",
    "forward_allowed",
    "forward_rounding",
    "accuracy_error",
    "gradient_error",
    "gradient_allowed",
    "gradient_layer",
    "gradient_unjudged",
    "update_error",
    "update_allowed",
    "update_layer",
    "state_error",
    "state_allowed",
    "state_layer",
    "worst",
    "part",
    "seconds",
]
_STEP_CHECK_TEXT = ("run_id", "why", "gradient_layer", "gradient_unjudged", "update_layer", "state_layer", "part")


YARDSTICK_FOLDER = "yardstick"


def yardstick_folder(results_dir: str, key: str) -> str:
    """Where the yardstick a run measured at its settings lives (run/yardstick.py):
    <results dir>/yardstick/<settings key>/, holding envelope.csv (and envelope_check.csv for
    the epoch check), in a shipped envelope's format, and twin/, the twins' rows."""
    return os.path.join(results_dir, YARDSTICK_FOLDER, key)


def yardstick_envelope(results_dir: str, key: str, check: bool = False) -> str:
    return os.path.join(yardstick_folder(results_dir, key), "envelope_check.csv" if check else "envelope.csv")


def envelope_path(baseline_dir: str, network: str, mode: str) -> str:
    return os.path.join(baseline_dir, "drift", f"envelope_{network}_{mode}.csv")


def mode_of(settings) -> str:
    """The envelope a run's settings call for: `parity` or `default`, then `_gpu` for a run
    on a GPU (its own envelope, measured there: never the CPU's), and `_check` last for an
    epoch check's rows (run/epoch_check.py)."""
    return (
        ("parity" if settings.get("parity") else "default")
        + ("_gpu" if settings.get("device") == "gpu" else "")
        + ("_check" if settings.get("part") else "")
    )


ENVELOPE_SETTINGS_PREFIX = "# settings: "
ENVELOPE_ACCURACY = "accuracy_envelope"  # an envelope file's column of the accuracy envelope


def envelope_settings(path: str) -> Optional[dict]:
    """The settings a shipped drift envelope holds for (the JSON of its header), or None."""
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        for line in handle:
            if line.startswith(ENVELOPE_SETTINGS_PREFIX):
                return json.loads(line[len(ENVELOPE_SETTINGS_PREFIX) :])
            if not line.startswith("#"):
                return None
    return None


def step_check_csv(csv_path: str) -> str:
    """Where the step check of the run whose rows are in `csv_path` keeps its rows."""
    return os.path.join(os.path.dirname(csv_path), STEP_CHECK_FOLDER, os.path.basename(csv_path))


def read_step_checks(csv_path: str, run_id: str) -> Optional[list]:
    """The step check's rows of one run (numbers converted; None for an empty cell), or
    None where the run has none (it ran before the check existed, or with --step_check off)."""
    path = step_check_csv(csv_path)
    if not os.path.isfile(path):
        return None
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["run_id"] != run_id:
                continue
            for key, value in row.items():
                if key not in _STEP_CHECK_TEXT:
                    row[key] = (int(value) if key in ("step", "epoch") else float(value)) if value else None
            rows.append(row)
    return rows or None


def read_rows(path: str, run_id: Optional[str] = None) -> list:
    """Rows of a results CSV as dicts with numbers converted; one run's rows if run_id is given."""
    numeric = {"devices", "global_batch", "epoch", "step", "worker", "staleness"}
    # every column from loss to loss_scale is a measurement
    floats = set(CSV_COLUMNS[CSV_COLUMNS.index("loss") : CSV_COLUMNS.index("loss_scale") + 1]) - numeric
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if run_id is not None and row["run_id"] != run_id:
                continue
            for key in numeric - {"worker", "staleness"}:
                row[key] = int(row[key]) if row[key] else None
            for key in floats:
                row[key] = float(row[key]) if row.get(key) else None
            for key in ("worker", "staleness"):  # absent in files of earlier versions, which ran synchronously
                value = row.get(key)
                row[key] = int(value) if value else (0 if row["phase"] == "train" else None)
            row["device"] = row.get("device") or DEVICE_BEFORE_COLUMN
            rows.append(row)
    return _latest_per_step(rows)


def _latest_per_step(rows: list) -> list:
    """A resumed run (--resume) starts again after its checkpoint's step S: the rows
    its interrupted part wrote after S (train, val, test) are superseded by the new
    ones. Seen in file order, a train row whose step is not past the run's last step
    marks such a restart."""
    kept_by_run: dict = {}
    for row in rows:
        kept = kept_by_run.setdefault(row["run_id"], [])
        if row["phase"] == "train" and kept and row["step"] <= kept[-1]["step"]:  # steps never fall otherwise
            while kept and kept[-1]["step"] >= row["step"]:
                kept.pop()
        elif row["phase"] == "val":  # resumed exactly at an epoch's end: its validation is repeated
            tail = len(kept)
            while tail and kept[tail - 1]["step"] == row["step"]:
                tail -= 1
            kept[tail:] = [r for r in kept[tail:] if r["phase"] != "val"]
        kept.append(row)
    if sum(len(kept) for kept in kept_by_run.values()) == len(rows):
        return rows
    survivors = {id(row) for kept in kept_by_run.values() for row in kept}
    return [row for row in rows if id(row) in survivors]


def run_ids(path: str) -> list:
    """Run ids in the order they first appear."""
    seen = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            seen.setdefault(row["run_id"], None)
    return list(seen)


def steady_state_ms(step_times_ms: list) -> Optional[float]:
    """Median ms/step without the first WARMUP_STEPS (all steps if there are no more)."""
    if not step_times_ms:
        return None
    steady = step_times_ms[WARMUP_STEPS:] or step_times_ms
    return statistics.median(steady)


def summarize_rows(rows: list) -> dict:
    """Final numbers of one run from its rows."""
    train = [r for r in rows if r["phase"] == "train"]
    val = [r for r in rows if r["phase"] == "val"]
    test = [r for r in rows if r["phase"] == "test"]
    last_epoch = train[-1]["epoch"] if train else None
    last_epoch_rows = [r for r in train if r["epoch"] == last_epoch]
    median_ms = steady_state_ms([r["step_time_ms"] for r in train])
    batch = train[0]["global_batch"] if train else None
    return {
        "steps": len(train),
        "epochs": last_epoch,
        "train_loss": statistics.fmean(r["loss"] for r in last_epoch_rows) if last_epoch_rows else None,
        "train_accuracy": statistics.fmean(r["accuracy"] for r in last_epoch_rows) if last_epoch_rows else None,
        "val_loss": val[-1]["loss"] if val else None,
        "val_accuracy": val[-1]["accuracy"] if val else None,
        "test_loss": test[-1]["loss"] if test else None,
        "test_accuracy": test[-1]["accuracy"] if test else None,
        "median_ms": median_ms,
        "samples_per_sec": batch * 1000.0 / median_ms if median_ms else None,
        **update_rates(train),
    }


def update_rates(train: list) -> dict:
    """Applied updates per second of wall time (the asynchronous strategies' workers
    overlap, so a step's own time does not give it), and the staleness of the updates
    (median, 95th percentile), from a run's train rows."""
    span = train[-1]["wall_time_s"] - train[0]["wall_time_s"] if len(train) > 1 else 0.0
    staleness = sorted(r["staleness"] or 0 for r in train)
    return {
        "updates_per_sec": (len(train) - 1) / span if span > 0 else None,
        "staleness_median": statistics.median(staleness) if staleness else None,
        "staleness_p95": staleness[min(len(staleness) - 1, int(0.95 * len(staleness)))] if staleness else None,
    }


def read_log_field(path: str, run_id: str, title_part: str, key: str) -> Optional[str]:
    """One `key:` line of the results.log block of `run_id` whose title contains
    `title_part` (e.g. "torch/torch"); the last such block wins."""
    if not os.path.exists(path):
        return None
    value, in_block = None, False
    with open(path) as handle:
        for line in handle:
            if line.startswith("=== "):
                in_block = line[4:].startswith(run_id + " ") and f" {title_part} " in line
            elif in_block and line.startswith(key + ":"):
                value = line[len(key) + 1 :].strip()
    return value


def read_settings(path: str) -> dict:
    """run_id -> settings of a sidecar (its own path or its CSV's); {} when there is none.
    A line cut off by a crash is skipped."""
    if path.endswith(".csv"):
        path = sidecar_path(path)
    if not os.path.isfile(path):
        return {}
    records = {}
    with open(path) as handle:
        for line in handle:
            record = _parsed(line)
            if record is not None:
                records.setdefault(record["run_id"], record["settings"])
    return records


def _parsed(line: str) -> Optional[dict]:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "run_id" in record and "settings" in record else None
