"""The main job: train the same network on the same data with every framework
available, one process after another (so timings do not compete), and print one
comparison table read back from the CSVs they wrote.

    python run_all.py [--only tensorflow,torch] [any flag of the entry scripts]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .baseline import format_checks
from .cli import OneLineErrorParser
from .compare import build_report, format_against_first, write_outputs
from .environments import NotRun, not_run
from .errors import EXIT_INPUT_ERROR, InputError
from .frameworks import NAMES, get
from .paths import BASELINE_DIR, REPO_ROOT
from .recorder import read_rows, results_csv_name, summarize_rows
from .run import prepare
from .session import new_run_id
from .tensorboard import export_run


def parse_suite_args(argv):
    parser = OneLineErrorParser(
        prog="run_all.py",
        add_help=False,
        description="Train one network with every framework and print a comparison table. "
        "Every other flag is passed to each entry script (see python torch_script.py --help).",
    )
    parser.add_argument(
        "--only", default=",".join(NAMES), help=f"comma-separated subset of: {', '.join(NAMES)} (default: all)"
    )
    parser.add_argument("-h", "--help", action="store_true")
    args, forwarded = parser.parse_known_args(argv)
    if args.help:
        print_help_with_entry_flags(parser, "run_all.py")
    return framework_names(parser, args.only, "--only"), forwarded


def print_help_with_entry_flags(parser, prog: str, note: str = "") -> None:
    """The command's own help, then the entry scripts' flags it passes on; exits."""
    parser.print_help()
    print(f"\nflags passed to every entry script{note}:")
    prepare(["--help"], prog, "")  # prints the shared flags and exits


def framework_names(parser, text: str, flag: str) -> list:
    """A comma-separated list of registry names (algorithms/frameworks.py), or the parser's one-line error."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in NAMES]
    if unknown or not names:
        parser.error(f"{flag}: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(NAMES)}")
    return names


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names, forwarded = parse_suite_args(argv)
    try:
        config, dataset = prepare(forwarded, "run_all.py", "")  # checks flags and data once, makes default data
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    run_id = config.run_id or new_run_id()
    if "--run_id" not in forwarded:
        forwarded = forwarded + ["--run_id", run_id]
    print(f"run {run_id}: {config.network.name} on {dataset.describe()}, frameworks: {', '.join(names)}\n", flush=True)
    outcomes = {}
    for index, name in enumerate(names, start=1):
        prefix, build_logs = f"[{index}/{len(names)}] ", os.path.join(config.results_dir, "build")
        outcomes[name] = not_run(get(name), build_logs, prefix) or run_framework(name, forwarded, prefix)
    csv_paths = print_table(config, run_id, names, outcomes)
    if len(csv_paths) >= 2:
        report = build_report([f"{path}@{run_id}" for path in csv_paths], [0.5, 0.8, 0.9], BASELINE_DIR)
        png, page = write_outputs(report, os.path.join(config.results_dir, "compare", run_id))
        print("\n" + format_against_first(report))
        print("\n" + format_checks(report["baseline"]))
        print(
            f"\ncurves: {png}\nfull comparison (every pair, the three signals): {page}\n"
            f"any two CSVs: python -m algorithms.compare A.csv[@RUN_ID] B.csv[@RUN_ID]"
        )
    export_run(csv_paths, run_id, os.path.join(config.results_dir, "tensorboard"))
    # a framework whose environment could not be built is shown, not counted (docs/legacy.md)
    ran = [outcome for outcome in outcomes.values() if not isinstance(outcome, NotRun)]
    return 0 if ran and all(code == 0 for code, _ in ran) else 1


def run_framework(name: str, flags: list, prefix: str = "") -> tuple:
    """One entry script in its own process (so timings do not compete);
    returns (exit status, wall seconds)."""
    framework = get(name)
    print(f"{prefix}{name}: python {framework.script} {' '.join(flags)}", flush=True)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, framework.script), *flags],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
    )
    print(flush=True)
    return proc.returncode, time.perf_counter() - started


def print_table(config, run_id: str, names: list, outcomes: dict) -> list:
    """Prints the table; returns the CSVs of the runs that finished."""
    header = ("framework", "backend", "val acc", "test acc", "final loss", "ms/step", "samples/s", "wall s")
    lines, finished = [], []
    for name in names:
        framework, backend = get(name).framework, get(name).backend
        if isinstance(outcomes[name], NotRun):
            lines.append((framework, backend, str(outcomes[name])))
            continue
        code, wall = outcomes[name]
        path = os.path.join(config.results_dir, results_csv_name(config.network.name, framework, backend))
        rows = read_rows(path, run_id) if os.path.exists(path) else []
        if code != 0 or not rows:
            lines.append((framework, backend, f"failed (exit {code})", "", "", "", "", f"{wall:.0f}"))
            continue
        finished.append(path)
        s = summarize_rows(rows)
        lines.append(
            (
                framework,
                backend,
                _fmt(s["val_accuracy"]),
                _fmt(s["test_accuracy"]),
                _fmt(s["train_loss"]),
                _fmt(s["median_ms"], ".1f"),
                _fmt(s["samples_per_sec"], ".0f"),
                f"{wall:.0f}",
            )
        )
    widths = [max(len(str(row[i])) for row in [header] + lines if len(row) == len(header)) for i in range(len(header))]
    print(f"{config.network.name} · run {run_id} · batch {config.batch_size} · {config.num_epochs} epochs")
    for row in [header, tuple("-" * w for w in widths)] + lines:
        print(
            "  ".join(
                str(cell).ljust(w) if i < 2 else str(cell).rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
            )
        )
    print(
        f"\nper-step rows: {config.results_dir}/{config.network.name}_*.csv (run_id {run_id}); "
        f"summaries: {config.results_log}"
    )
    return finished


def _fmt(value, spec=".4f"):
    return "n/a" if value is None else format(value, spec)
