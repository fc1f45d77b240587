"""Eager against graph against compiled: step time against batch size, per framework
and execution mode, to show where the per-op overhead of an imperative framework
stops mattering.

    python -m algorithms.studies.execution_sweep [--only torch,tensorflow] [--batches 8,64,512]
                                         [--steps 8] [any entry-script flag]

Every (framework, mode, batch) is one real run of the entry script (`--execution MODE
--batch_size B --max_steps N --test none`), in its own process, so each mode is timed
exactly as a user runs it; the median step time after the first WARMUP_STEPS (tracing
and compilation) is read back from the run's CSV. The modes of a framework are the
ones its wrapper's supported() lists. Printed: ms/step and ms per sample for each
mode and batch, and each mode's time over the framework's fastest at that batch (the
per-op overhead shows as a ratio that falls toward 1 as the batch grows). Written
under --out (default results/benchmark/): <run id>-execution-sweep.csv and .png
(ms per sample against batch, log-log), and every run's rows and results.log under
<run id>-runs/.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

from algorithms.figures import grid_and_legend, pyplot, save_figure
from algorithms.registry.capabilities import environment
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, InputError
from algorithms.registry.frameworks import framework_names, get
from algorithms.paths import RESULTS_DIR
from algorithms.config.argv import without_flags
from algorithms.records import steady_state_ms
from algorithms.run.entry import prepare, support_of
from algorithms.session.run_session import new_run_id
from algorithms.studies import children
from algorithms.tables import text_table

MODE_FLAGS = {"eager": "--execution eager", "graph": "--execution graph", "compiled": "--compile"}
DEFAULT_ONLY = "torch,tensorflow"
DEFAULT_BATCHES = "8,64,512"  # short on 2 CPU cores; 8,32,128,512,1024 for the full curve
COLUMNS = ["framework", "mode", "batch", "ms_per_step", "ms_per_sample", "over_fastest", "steps_timed", "status"]


def modes_of(name: str) -> list:
    """The execution modes the framework's wrapper runs, read from its supported()."""
    framework = get(name)
    with environment(framework.env):
        flags = support_of(framework.package).flags
    return [mode for mode, flag in MODE_FLAGS.items() if flag in flags]


def parse_args(argv: list) -> tuple:
    parser = children.study_parser(
        "python -m algorithms.studies.execution_sweep", __doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=DEFAULT_ONLY, help=f"comma-separated frameworks (default: {DEFAULT_ONLY})")
    parser.add_argument("--batches", default=DEFAULT_BATCHES, help=f"batch sizes (default: {DEFAULT_BATCHES})")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first 3 are not timed)")
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "benchmark"), help="where the table and plot go")
    args, forwarded = children.parse_study_flags(parser, argv, " (--execution is added)")
    names = framework_names(parser, args.only, "--only")
    try:
        batches = [int(text) for text in args.batches.split(",") if text.strip()]
    except ValueError:
        parser.error(f"--batches {args.batches}: expected whole numbers, e.g. 8,64,512")
    if not batches or min(batches) < 1:
        parser.error(f"--batches {args.batches}: expected batch sizes of 1 or more, e.g. 8,64,512")
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: must be 1 or more")
    for flag in ("--execution", "--compile", "--batch_size", "--max_steps"):
        if any(item == flag or item.startswith(flag + "=") for item in forwarded):
            parser.error(f"{flag}: the sweep sets it for every run; drop it")
    return names, batches, args.steps, os.path.abspath(args.out), forwarded


def sweep(names: list, batches: list, steps: int, folder: str, run_id: str, network: str, forwarded: list) -> list:
    """One row per (framework, mode, batch), in run order."""
    results_dir, results_log = os.path.join(folder, "runs"), os.path.join(folder, "results.log")
    rows = []
    for name in names:
        path = children.results_csv(results_dir, network, name)
        for mode in modes_of(name):
            for batch in batches:
                run = f"{run_id}-{name}-{mode}-{batch}"
                flags = forwarded + [*MODE_FLAGS[mode].split(), "--batch_size", str(batch), "--max_steps", str(steps)]
                flags += ["--num_epochs", "1000", "--test", "none", "--quiet", "--run_id", run]
                flags += ["--results_dir", results_dir, "--results_log", results_log]
                code, _ = children.run_framework(name, flags, f"[{name} {mode} batch {batch}] {name}")
                train = [r for r in children.run_rows(path, run) if r["phase"] == "train"]
                median = steady_state_ms([r["step_time_ms"] for r in train])
                rows.append(
                    {
                        "framework": name,
                        "mode": mode,
                        "batch": batch,
                        "ms_per_step": median,
                        "ms_per_sample": median / batch if median else None,
                        "steps_timed": max(0, len(train) - 3) or len(train),
                        "status": "ok" if code == 0 and median else f"failed (exit {code})",
                    }
                )
    for row in rows:  # each mode against the framework's fastest mode at the same batch
        same = [r["ms_per_step"] for r in rows if r["framework"] == row["framework"] and r["batch"] == row["batch"]]
        fastest = min((ms for ms in same if ms), default=None)
        row["over_fastest"] = row["ms_per_step"] / fastest if row["ms_per_step"] and fastest else None
    return rows


def format_sweep(rows: list, batches: list) -> str:
    header = ["framework", "mode"] + [f"batch {b}: ms/step (x fastest)" for b in batches]
    body = []
    for key in dict.fromkeys((r["framework"], r["mode"]) for r in rows):
        cells = []
        for batch in batches:
            row = next(r for r in rows if (r["framework"], r["mode"], r["batch"]) == (*key, batch))
            cells.append(
                f"{row['ms_per_step']:.1f} (x{row['over_fastest']:.2f})" if row["status"] == "ok" else row["status"]
            )
        body.append([*key, *cells])
    return "\n".join(
        ["median ms per step (x: over the framework's fastest mode at that batch; 1.00 is the fastest):"]
        + text_table(header, body, indent="  ")
    )


def plot_sweep(rows: list, path: str) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 5))
    styles = {"eager": "-", "graph": "--", "compiled": ":"}
    colours = {}
    for key in dict.fromkeys((r["framework"], r["mode"]) for r in rows):
        points = [
            (r["batch"], r["ms_per_sample"]) for r in rows if (r["framework"], r["mode"]) == key and r["ms_per_sample"]
        ]
        if not points:
            continue
        colour = colours.setdefault(key[0], f"C{len(colours)}")
        axis.plot(*zip(*points), styles[key[1]], marker="o", color=colour, label=f"{key[0]} {key[1]}")
    axis.set(
        xscale="log",
        yscale="log",
        xlabel="batch size",
        ylabel="ms per sample (median step / batch)",
        title="eager (solid), graph (dashed), compiled (dotted): where per-op overhead stops mattering",
    )
    grid_and_legend(axis, fontsize=8, which="both")
    save_figure(figure, path)


def main(argv=None) -> int:
    names, batches, steps, out, forwarded = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        config, _ = prepare(
            forwarded + ["--batch_size", str(max(batches))], "python -m algorithms.studies.execution_sweep", ""
        )
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    run_id = config.run_id or new_run_id()
    folder = os.path.join(out, f"{run_id}-runs")
    rows = sweep(names, batches, steps, folder, run_id, config.network.name, without_flags(forwarded, "--run_id"))
    print(format_sweep(rows, batches))
    os.makedirs(out, exist_ok=True)
    prefix = os.path.join(out, f"{run_id}-execution-sweep")
    with open(prefix + ".csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    if any(row["status"] == "ok" for row in rows):
        plot_sweep(rows, prefix + ".png")
        print(f"\nplot: {prefix}.png\ntable: {prefix}.csv")
    return 0 if all(row["status"] == "ok" for row in rows) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
