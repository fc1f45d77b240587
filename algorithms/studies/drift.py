"""Run-to-run drift next to cross-framework drift, in parity mode.

    python -m algorithms.studies.drift [--only torch,tensorflow] [--steps 100] [--low_precision bf16]
                               [any entry-script flag]
    python -m algorithms.studies.drift --only torch,tensorflow --strategy async --devices 2
    python -m algorithms.studies.drift --envelope      # the parity regime's yardstick (studies/envelope.py)

Each framework trains twice with `--parity --max_steps N` (shared init, the same
batches, dropout off, deterministic kernels where offered). Step by step the
relative loss difference |loss_a - loss_b| / |loss_a| is measured between the two
runs of one framework (run-to-run) and between each framework and the reference,
the first one listed (cross-framework). Printed per framework: the largest of each,
whether the two runs were bit-identical, the first step where each difference
exceeds 1e-6, 1e-4 and 1e-2, and what its parity run could not make deterministic.
If run-to-run stays at zero while cross-framework grows, the frameworks differ
only in how they order float32 arithmetic; a run-to-run difference means the
framework itself is not reproducible, and that drift is part of every comparison.

With --strategy S (and its --devices, --ps_sync, --sync_every), the frameworks still
run twice synchronously on one device (the bit-identical pairs and the
cross-framework band), and the first of them that runs S also runs it twice with the
same seed: its row ("torch async x2") is the run-to-run divergence of S, which for
the asynchronous strategies (ps, async) is the order the scheduler applied the
updates in. --steps then counts its applied updates, compared in the order they were
applied: the k-th of either run comes from the same batch, but which worker's share
landed k-th, and on which parameters, is the scheduler's choice, so the difference
holds both (its cross-framework columns are empty: an update is not a one-device step).

Precision: each framework that has `--precision bf16` (fp16 with `--low_precision
fp16`; `none` skips it) trains a third time, in parity mode at that precision, and
its difference from the framework's own float32 run is a third axis beside
run-to-run (the framework's own summation order) and cross-framework: how much of
a difference that precision alone makes. A second table lists each framework's
three axes as rows.

Written under --results_dir (default results/drift/): the rows of every run, and
<run id>.csv (the table), <run id>_steps.csv (every step's differences) and
<run id>.png (both differences on a log scale).
"""

from __future__ import annotations

import argparse
import csv
import importlib
import os
import sys
from typing import Optional

import numpy as np

from algorithms.figures import grid_and_legend, pyplot, save_figure
from algorithms.analysis.drift_envelope import MODES, relative_difference
from algorithms.dataset.data import steps_per_epoch
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, InputError
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.paths import BASELINE_DIR, RESULTS_DIR
from algorithms.config.argv import split_flags, without_flags
from algorithms.records import read_log_field
from algorithms.registry.capabilities import environment
from algorithms.run.entry import prepare, support_of
from algorithms.session.run_session import new_run_id
from algorithms.studies import children
from algorithms.studies.envelope import ENVELOPE_STEPS, measure_envelopes
from algorithms.studies.suite import main_command_flags
from algorithms.tables import number, text_table, wrapped

THRESHOLDS = (1e-6, 1e-4, 1e-2)
DEFAULT_STEPS = 100
DEFAULT_BATCH = 128


def first_step_beyond(steps: np.ndarray, differences: np.ndarray, threshold: float) -> Optional[int]:
    beyond = np.nonzero(differences > threshold)[0]
    return int(steps[beyond[0]]) if beyond.size else None


def train_losses(path: str, run_id: str) -> tuple:
    rows = [r for r in children.run_rows(path, run_id) if r["phase"] == "train"]
    return np.array([r["step"] for r in rows], dtype=int), np.array([r["loss"] for r in rows], dtype=np.float64)


def aligned(a: tuple, b: tuple) -> tuple:
    steps, ia, ib = np.intersect1d(a[0], b[0], return_indices=True)
    return steps, a[1][ia], b[1][ib]


# --strategy and what comes with it: run by the strategy's pair of runs only
STRATEGY_FLAGS = ("--strategy", "--devices", "--sync_every")
STRATEGY_SWITCHES = ("--ps_sync",)


def measure_strategy(results_dir: str, results_log: str, network: str, name: str, label: str, run_id: str) -> dict:
    """The run-to-run divergence of the two runs of `name` with the --strategy flags."""
    framework = get(name)
    path = children.results_csv(results_dir, network, name)
    first, second = train_losses(path, run_id + "-a"), train_losses(path, run_id + "-b")
    if first[0].size == 0 or second[0].size == 0:
        return {"name": label, "failed": True}
    steps, a, b = aligned(first, second)
    empty = np.array([], dtype=np.float64)
    return {
        "name": label,
        "failed": False,
        "steps": steps,
        "run_to_run": relative_difference(a, b),
        "cross_steps": empty.astype(int),
        "cross": empty,
        "identical": bool(np.array_equal(a, b)),
        "precision_steps": empty.astype(int),
        "precision": empty,
        "not_run": {  # why its axes other than run-to-run are empty
            "cross": "an update of 1/N batch is not a one-device step",
            "precision": "the strategy's pair runs at float32 only",
        },
        "notes": read_log_field(results_log, run_id + "-a", f"{framework.framework}/{framework.backend}", "parity")
        or "",
    }


def measure(
    results_dir: str, results_log: str, network: str, names: list, run_id: str, low_precision: str = "none"
) -> list:
    """One dict per framework that produced both runs; the first is the reference;
    "precision": its float32 run against its `low_precision` run (empty if none)."""
    measured, reference = [], None
    for name in names:
        framework = get(name)
        path = children.results_csv(results_dir, network, name)
        first, second = train_losses(path, run_id + "-a"), train_losses(path, run_id + "-b")
        if first[0].size == 0 or second[0].size == 0:
            measured.append({"name": name, "failed": True})
            continue
        reference = reference or first
        steps, a, b = aligned(first, second)
        run_to_run = relative_difference(a, b)
        cross_steps, ref, mine = aligned(reference, first)
        cross = relative_difference(ref, mine)
        low = train_losses(path, f"{run_id}-{low_precision}") if low_precision != "none" else (np.array([]),)
        precision_steps, full, reduced = aligned(first, low) if low[0].size else (np.array([], int), None, None)
        not_run = {}
        if low_precision != "none" and not low[0].size:
            not_run["precision"] = (
                f"its --precision {low_precision} run wrote no rows"
                if runs_precision(name, low_precision)
                else f"{name} has no --precision {low_precision}"
            )
        measured.append(
            {
                "name": name,
                "failed": False,
                "steps": steps,
                "run_to_run": run_to_run,
                "cross_steps": cross_steps,
                "cross": cross,
                "identical": bool(np.array_equal(a, b)),
                "precision_steps": precision_steps,
                "precision": relative_difference(full, reduced) if full is not None else np.array([]),
                "not_run": not_run,
                "notes": read_log_field(
                    results_log, run_id + "-a", f"{framework.framework}/{framework.backend}", "parity"
                )
                or "",
            }
        )
    return measured


def table_rows(measured: list) -> list:
    """The printed/CSV table: one row per framework."""
    rows = []
    for item in measured:
        if item["failed"]:
            rows.append({"framework": item["name"], "steps": 0, "bit_identical": "failed"})
            continue
        row = {
            "framework": item["name"],
            "steps": int(item["steps"].size),
            "bit_identical": "yes" if item["identical"] else "no",
            "run_to_run_max": float(item["run_to_run"].max()) if item["run_to_run"].size else None,
            "run_to_run_step1": float(item["run_to_run"][0]) if item["run_to_run"].size else None,
            "cross_step1": float(item["cross"][0]) if item["cross"].size else None,
            "cross_max": float(item["cross"].max()) if item["cross"].size else None,
        }
        for threshold in THRESHOLDS:
            row[f"run_to_run_first_above_{threshold:g}"] = first_step_beyond(
                item["steps"], item["run_to_run"], threshold
            )
            row[f"cross_first_above_{threshold:g}"] = first_step_beyond(item["cross_steps"], item["cross"], threshold)
        precision = item["precision"]
        row["precision_step1"] = float(precision[0]) if precision.size else None
        row["precision_max"] = float(precision.max()) if precision.size else None
        for threshold in THRESHOLDS:
            row[f"precision_first_above_{threshold:g}"] = first_step_beyond(
                item["precision_steps"], precision, threshold
            )
        rows.append(row)
    return rows


def axis_rows(rows: list, reference: str, low_precision: str, not_run: dict = None) -> list:
    """Each framework's drift as three rows, one per axis: its own summation order (run to
    run), the other framework's (cross-framework), and `low_precision` against float32.
    `not_run`: framework -> {axis key: why it has no numbers} (measure's "not_run")."""
    axes = (
        ("run_to_run", "run-to-run (own summation order)"),
        ("cross", f"cross-framework (vs {reference})"),
        ("precision", f"precision ({low_precision} vs fp32)"),
    )
    table = []
    for row in rows:
        if row["bit_identical"] == "failed":
            continue
        for key, axis in axes:
            if key == "precision" and low_precision == "none":
                continue
            largest = row.get(f"{key}_max")
            table.append(
                {
                    "framework": row["framework"],
                    "axis": axis,
                    "step1": row["cross_step1"] if key == "cross" else row.get(f"{key}_step1"),
                    "max": largest,
                    "firsts": [row.get(f"{key}_first_above_{t:g}") for t in THRESHOLDS],
                    "ran": largest is not None,
                    "why": (not_run or {}).get(row["framework"], {}).get(key, "no steps measured"),
                }
            )
    return table


def format_axes(rows: list, measured: list, reference: str, low_precision: str) -> list:
    not_run = {item["name"]: item.get("not_run", {}) for item in measured}
    items = axis_rows(rows, reference, low_precision, not_run)
    body = [
        [
            item["framework"],
            item["axis"],
            _sci(item["step1"]) if item["ran"] else "",
            _sci(item["max"]) if item["ran"] else "not run (below)",
            "/".join(_step(step) for step in item["firsts"]) if item["ran"] else "",
        ]
        for item in items
    ]
    header = ["framework", "axis", "step 1", "max", "first >1e-6/1e-4/1e-2"]
    reasons = [
        line
        for item in items
        if not item["ran"]
        for line in wrapped(f"{item['framework']} {item['axis']}: not run: {item['why']}", "  ", "    ")
    ]
    return ["the same differences by axis:"] + text_table(header, body, indent="  ") + reasons


def format_drift(rows: list, measured: list, reference: str, low_precision: str = "none") -> str:
    header = [
        "framework",
        "steps",
        "bit-identical",
        "run-to-run max",
        "first >1e-6/1e-4/1e-2",
        f"vs {reference} step 1",
        "max",
        "first >1e-6/1e-4/1e-2",
    ]
    body = []
    for row in rows:
        if row["bit_identical"] == "failed":
            body.append([row["framework"], "0", "run failed", "", "", "", "", ""])
            continue
        firsts = [
            "/".join(_step(row[f"{kind}_first_above_{t:g}"]) for t in THRESHOLDS) for kind in ("run_to_run", "cross")
        ]
        body.append(
            [
                row["framework"],
                str(row["steps"]),
                row["bit_identical"],
                _sci(row["run_to_run_max"]),
                firsts[0],
                _sci(row["cross_step1"]),
                _sci(row["cross_max"]),
                firsts[1],
            ]
        )
    lines = ["relative loss difference |dloss|/loss per step, parity mode ('-': never crossed):"]
    lines += text_table(header, body, indent="  ")
    lines += ["", *format_axes(rows, measured, reference, low_precision)]
    lines.append("\nwhat each parity run could not make deterministic:")
    for item in measured:
        if not item["failed"]:
            lines += wrapped(f"{item['name']}: {item['notes'] or 'not recorded'}", "  ", "    ")
    return "\n".join(lines)


def _step(value) -> str:
    return number(value, "d", "-")


def _sci(value) -> str:
    return number(value, ".2e")


def write_csvs(rows: list, measured: list, prefix: str) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(prefix + ".csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    with open(prefix + "_steps.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["framework", "step", "run_to_run", "cross", "precision"])
        for item in measured:
            if item["failed"]:
                continue
            cross = dict(zip(item["cross_steps"].tolist(), item["cross"].tolist()))
            precision = dict(zip(item["precision_steps"].tolist(), item["precision"].tolist()))
            for step, value in zip(item["steps"].tolist(), item["run_to_run"].tolist()):
                writer.writerow(
                    [item["name"], step, repr(value), repr(cross.get(step, "")), repr(precision.get(step, ""))]
                )


def plot_drift(measured: list, reference: str, path: str, low_precision: str = "none") -> None:
    plt = pyplot()
    floor = 1e-10  # where a zero difference is drawn on the log axis
    figure, axis = plt.subplots(figsize=(10, 5))
    for item in measured:
        if item["failed"]:
            continue
        (line,) = axis.plot(
            item["cross_steps"], np.maximum(item["cross"], floor), label=f"{item['name']} vs {reference}"
        )
        for steps, differences, style, what in (
            (item["steps"], item["run_to_run"], "--", "bit-identical" if item["identical"] else "run-to-run"),
            (item["precision_steps"], item["precision"], ":", f"{low_precision} vs fp32"),
        ):
            if differences.size:
                axis.plot(
                    steps,
                    np.maximum(differences, floor),
                    linestyle=style,
                    color=line.get_color(),
                    label=f"{item['name']} {what}",
                )
    for threshold in THRESHOLDS:
        axis.axhline(threshold, color="grey", linewidth=0.6, linestyle=":")
    axis.set(
        yscale="log",
        ylim=(floor / 2, 1),
        xlabel="step",
        ylabel="|dloss| / loss",
        title=f"parity mode: cross-framework (solid), run-to-run (dashed), precision (dotted); zero drawn at {floor:g}",
    )
    grid_and_legend(axis, fontsize=7, ncol=2)
    save_figure(figure, path)


def runs_precision(name: str, precision: str) -> bool:
    """Whether the framework's wrapper has --precision `precision` (read from supported())."""
    framework = get(name)
    with environment(framework.env):
        return f"--precision {precision}" in support_of(framework.package).flags


def split_strategy(flags: list) -> tuple:
    """(flags without the --strategy ones, those flags, the strategy or None)."""
    rest, moved = split_flags(flags, STRATEGY_FLAGS, STRATEGY_SWITCHES)
    strategy = next((moved[i + 1] for i, flag in enumerate(moved[:-1]) if flag == "--strategy"), None)
    strategy = strategy or next((flag.split("=", 1)[1] for flag in moved if flag.startswith("--strategy=")), None)
    return rest, moved, strategy


def runs_strategy(name: str, strategy: str) -> bool:
    from algorithms.registry.capabilities import environment

    framework = get(name)
    with environment(framework.env):
        return strategy in importlib.import_module(framework.package).supported().strategies


def parse_args(argv: list) -> tuple:
    parser = children.study_parser(
        "python -m algorithms.studies.drift", __doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated frameworks, the first is the reference (default: {','.join(NAMES)}; "
        "with --envelope: the same)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"optimizer steps per run (default {DEFAULT_STEPS}; with --envelope {ENVELOPE_STEPS})",
    )
    parser.add_argument(
        "--envelope",
        action="store_true",
        help="measure the float32 drift envelopes at the main command's settings (its batch; dropout on, and "
        "--parity) from run-to-run, thread-count, summation-order and cross-framework pairs, and write them to "
        "--envelope_dir",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"with --envelope: the modes to measure, of {', '.join(MODES)} (default: both)",
    )
    parser.add_argument(
        "--envelope_dir",
        default=BASELINE_DIR,
        help="where --envelope writes drift/envelope_<network>_<mode>.csv (default: the shipped baselines')",
    )
    parser.add_argument(
        "--low_precision",
        choices=("bf16", "fp16", "none"),
        default="bf16",
        help="a third run per framework at this --precision, measured against its float32 run (none: skip)",
    )
    args, forwarded = children.parse_study_flags(parser, argv, " (--parity and --max_steps are added)")
    names = framework_names(parser, args.only or ",".join(NAMES), "--only")
    args.steps = args.steps or (ENVELOPE_STEPS if args.envelope else DEFAULT_STEPS)
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: must be 1 or more")
    if args.envelope:  # the main command's settings, whose verdicts the envelope serves
        args.low_precision = "none"
    elif not any(flag.startswith("--batch_size") for flag in forwarded):
        forwarded += ["--batch_size", str(DEFAULT_BATCH)]
    if not any(flag.startswith("--results_dir") for flag in forwarded):
        forwarded += ["--results_dir", os.path.join(RESULTS_DIR, "drift")]
    if any(flag.startswith("--precision") for flag in forwarded):
        parser.error("--precision: drift runs float32 and --low_precision itself; pass --low_precision instead")
    modes = tuple(args.modes.split(","))
    if set(modes) - set(MODES):
        parser.error(f"--modes {args.modes}: give some of {', '.join(MODES)}")
    return names, args.steps, forwarded, args.low_precision, args.envelope and args.envelope_dir, modes


def main(argv=None) -> int:
    names, steps, forwarded, low_precision, envelope_dir, modes = parse_args(
        list(sys.argv[1:] if argv is None else argv)
    )
    forwarded, strategy_flags, strategy = split_strategy(forwarded)
    forwarded += ([] if envelope_dir else ["--parity"]) + ["--max_steps", str(steps)]
    try:
        config, dataset = prepare(forwarded, "python -m algorithms.studies.drift", "")
        if envelope_dir:
            forwarded, _ = main_command_flags(config.network, forwarded, "main")
            config, dataset = prepare(forwarded, "python -m algorithms.studies.drift", "")
        if strategy:  # the strategy's own flag checks, before anything runs
            prepare(forwarded + strategy_flags, "python -m algorithms.studies.drift", "")
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    strategist = next((name for name in names if strategy and runs_strategy(name, strategy)), None)
    if strategy and strategist is None:
        print(f"error: --strategy {strategy}: none of {', '.join(names)} runs it; add torch to --only", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if not any(flag.startswith(("--num_epochs", "--epochs")) for flag in forwarded):
        per_epoch = steps_per_epoch(len(dataset.train_x), config.effective_batch)
        forwarded += ["--num_epochs", str(max(config.num_epochs, -(-steps // per_epoch)))]
    run_id = config.run_id or new_run_id()
    forwarded = without_flags(forwarded, "--run_id")
    if envelope_dir:
        if strategy:
            print("error: --envelope and --strategy: the envelope is measured on one device", file=sys.stderr)
            return EXIT_INPUT_ERROR
        print(f"drift envelope {run_id}: {config.network.name}, {steps} steps at batch {config.batch_size}\n")
        return measure_envelopes(
            names, forwarded, config.results_dir, config.network.name, run_id, envelope_dir, steps, modes
        )
    print(
        f"drift {run_id}: {config.network.name}, {steps} steps at batch {config.batch_size}, "
        f"each of {', '.join(names)} twice in parity mode"
        + (f", and once more at --precision {low_precision}" if low_precision != "none" else "")
        + "\n",
        flush=True,
    )
    for index, name in enumerate(names, start=1):
        for copy in ("a", "b"):
            children.run_framework(
                name,
                forwarded + ["--run_id", f"{run_id}-{copy}", "--quiet"],
                f"[{index}/{len(names)} run {copy}] {name}",
            )
        if low_precision != "none" and runs_precision(name, low_precision):
            children.run_framework(
                name,
                forwarded + ["--precision", low_precision, "--run_id", f"{run_id}-{low_precision}", "--quiet"],
                f"[{index}/{len(names)} run {low_precision}] {name}",
            )
    label = f"{strategist} {' '.join(strategy_flags)}" if strategist else ""
    if strategist:
        for copy in ("a", "b"):
            children.run_framework(
                strategist,
                forwarded + strategy_flags + ["--run_id", f"{run_id}-{strategy}-{copy}", "--quiet"],
                f"[{label} run {copy}] {strategist}",
            )
    measured = measure(config.results_dir, config.results_log, config.network.name, names, run_id, low_precision)
    if strategist:
        measured.append(
            measure_strategy(
                config.results_dir, config.results_log, config.network.name, strategist, label, f"{run_id}-{strategy}"
            )
        )
    rows = table_rows(measured)
    # the reference is the first framework whose two runs finished
    reference = next((item["name"] for item in measured if not item["failed"]), names[0])
    print(format_drift(rows, measured, reference, low_precision))
    prefix = os.path.join(config.results_dir, run_id)
    write_csvs(rows, measured, prefix)
    if any(not item["failed"] for item in measured):
        plot_drift(measured, reference, prefix + ".png", low_precision)
        print(f"\nplot: {prefix}.png\ntable: {prefix}.csv  every step: {prefix}_steps.csv")
    return 0 if all(not item["failed"] for item in measured) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
