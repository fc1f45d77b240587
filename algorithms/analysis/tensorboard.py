"""Results CSVs as TensorBoard event files, written with TensorBoard's own writer
(`tensorboard.summary.Writer`, which needs no framework), so that one
`tensorboard --logdir` overlays every framework of a run, the legacy env's too
(their CSVs are read here, in the main env).

    python -m algorithms.analysis.tensorboard                      # every run of every results/*.csv
    python -m algorithms.analysis.tensorboard results/net_torch.csv@RUN_ID results/net_caffe.csv@RUN_ID

Each input is a results CSV, optionally `@RUN_ID` (default: every run in the file).
Each run goes to <logdir>/<run_id>/<framework name> (the --only name: torch, keras_jax,
lasagne ...), with the CSV's step as the step and the run's start plus wall_time_s as
the wall time. Converting a run again replaces its event files: no point is doubled.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import types
from datetime import datetime, timezone

from algorithms.errors import EXIT_INPUT_ERROR, InputError
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.paths import RESULTS_DIR
from algorithms.records import read_log_field, read_rows, run_ids

DEFAULT_LOGDIR = os.path.join(RESULTS_DIR, "tensorboard")
# phase -> {TensorBoard tag: CSV column}; a tag's prefix is its section in TensorBoard
TAGS = {
    "train": {
        "train/loss": "loss",
        "train/accuracy": "accuracy",
        "train/learning_rate": "learning_rate",
        "time/step_time_ms": "step_time_ms",
        "time/data_time_ms": "data_time_ms",
        "time/comm_time_ms": "comm_time_ms",
        "time/samples_per_sec": "samples_per_sec",
    },
    "val": {"val/loss": "loss", "val/accuracy": "accuracy"},
    "test": {"test/loss": "loss", "test/accuracy": "accuracy"},
}
NEEDED_COLUMNS = ("run_id", "framework", "backend", "devices", "global_batch", "epoch", "step", "phase", "loss")
EVENT_FILES = "events.out.tfevents.*"
INSTALL_HINT = "pip install -r requirements.txt (or make setup) installs it"


def load_writer():
    """TensorBoard's framework-free writer class; ImportError where tensorboard is not installed.
    TensorBoard writes files through TensorFlow's file layer when TensorFlow is installed;
    the module `tensorboard.compat.notf` (which its no-TensorFlow build ships) is its own
    switch to its pure-Python stub, and keeps TensorFlow out of this process unless loaded already."""
    if "tensorflow" not in sys.modules:
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.summary import Writer

    return Writer


def runs_of(spec: str) -> list:
    """(path, run_id) for each run `CSV[@RUN_ID]` names; a bad file or run id: InputError."""
    path, _, run_id = spec.partition("@")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give results CSVs written by an entry script")
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found; give results CSVs written by an entry script")
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            header = handle.readline().strip().split(",")
        missing = [column for column in NEEDED_COLUMNS if column not in header]
        if missing:
            raise InputError(f"{path}:1: not a results CSV (no column {', '.join(missing)})")
        ids = run_ids(path)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file; give results CSVs written by an entry script") from None
    if not ids:
        raise InputError(f"{path}: no rows")
    if run_id and run_id not in ids:
        raise InputError(f"{path}: no run {run_id!r}; runs in it: {', '.join(ids[-5:])}")
    return [(path, run_id)] if run_id else [(path, each) for each in ids]


def run_name(framework: str, backend: str) -> str:
    """The registry's name for a framework/backend (what --only takes), else framework_backend."""
    for entry in FRAMEWORKS:
        if (entry.framework, entry.backend) == (framework, backend):
            return entry.name
    return f"{framework}_{backend}"


def run_start(path: str, rows: list) -> float:
    """When the run started, in seconds since the epoch: the `start:` line of its results.log
    block (beside the results folder, where entry scripts write it by default), else the time
    in a run id the commands made (20260101T120000Z-ab12), else the CSV's modification time
    less the run's last wall_time_s."""
    first = rows[0]
    log = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "results.log")
    start = read_log_field(log, first["run_id"], f"{first['framework']}/{first['backend']}", "start")
    for text, layout in ((start, "%Y-%m-%d %H:%M:%S UTC"), (first["run_id"][:16], "%Y%m%dT%H%M%SZ")):
        try:
            return datetime.strptime(text or "", layout).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            pass
    return os.path.getmtime(path) - max((r["wall_time_s"] or 0.0) for r in rows)


def write_run(writer_class, path: str, run_id: str, logdir: str) -> tuple:
    """One run's rows as scalars in its own run directory; returns (directory, points written).
    The run's old event files are removed once the new one is complete; a conversion that
    fails removes its own partial file instead, so a run's points are never there twice."""
    rows = read_rows(path, run_id)
    directory = os.path.join(logdir, re.sub(r"[/\\]", "_", run_id), run_name(rows[0]["framework"], rows[0]["backend"]))
    old_files = set(glob.glob(os.path.join(directory, EVENT_FILES)))
    start = run_start(path, rows)
    writer, points, wall = writer_class(directory), 0, start
    try:
        for row in rows:
            wall = start + row["wall_time_s"] if row["wall_time_s"] is not None else wall
            for tag, column in TAGS.get(row["phase"], {}).items():
                if row.get(column) is not None:
                    writer.add_scalar(tag, row[column], row["step"], wall_time=wall)
                    points += 1
        writer.close()
    except BaseException:
        try:  # its writer thread may create or flush the file after the failure: stop it first
            writer.close()
        except Exception:
            pass
        for partial in set(glob.glob(os.path.join(directory, EVENT_FILES))) - old_files:
            os.remove(partial)
        raise
    for old in old_files:
        os.remove(old)
    return directory, points


def export_run(csv_paths: list, run_id: str, logdir: str) -> None:
    """The main command's closing lines: the CSVs of the run it made, converted, and the
    command that shows them; one line, never a failure of the run, if that cannot be done."""
    if not csv_paths:
        return
    try:
        writer_class = load_writer()
    except ImportError:
        print(f"\ntensorboard: not installed in this Python, so no event files; {INSTALL_HINT}")
        return
    try:
        directories = [write_run(writer_class, path, run_id, logdir)[0] for path in csv_paths]
    except (InputError, OSError) as error:
        print(f"\ntensorboard: event files not written: {error}")
        return
    directory = os.path.dirname(directories[0])
    print(
        f"\ntensorboard event files, one run per framework: {directory}\n"
        f"view them together: {tensorboard_command()} --logdir {directory}"
    )


def tensorboard_command() -> str:
    """`tensorboard` as this Python's environment has it (.venv/bin/tensorboard), or plain."""
    command = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    if not os.path.exists(command):
        return "tensorboard"
    relative = os.path.relpath(command)
    return relative if not relative.startswith("..") else command


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m algorithms.analysis.tensorboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "inputs", nargs="*", metavar="CSV[@RUN_ID]", help="results CSVs (default: every CSV in results/)"
    )
    parser.add_argument("--logdir", default=DEFAULT_LOGDIR, help="where the run directories go (default: %(default)s)")
    args = parser.parse_args(argv)
    inputs = args.inputs or sorted(glob.glob(os.path.join(RESULTS_DIR, "*.csv")))
    try:
        if not inputs:
            raise InputError(f"{RESULTS_DIR}: no results CSVs; run an entry script first, or name CSVs")
        runs = [run for spec in inputs for run in runs_of(spec)]  # every input checked before anything is written
        writer_class = load_writer()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except ImportError:
        print(f"error: tensorboard is not installed in this Python; {INSTALL_HINT}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    try:
        for path, run_id in runs:
            directory, points = write_run(writer_class, path, run_id, args.logdir)
            print(f"{directory}: {points} points from {path}@{run_id}")
    except OSError as error:
        print(f"error: {error.filename or args.logdir}: {error.strerror}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    print(f"view: {tensorboard_command()} --logdir {args.logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
