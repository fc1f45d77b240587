"""Compare result CSVs: is a difference real error or only floating-point and
scheduling drift?

    python -m algorithms.analysis.compare results/net_torch.csv results/net_keras_jax.csv
    python -m algorithms.analysis.compare results/net_torch.csv@RUN_A results/net_torch.csv@RUN_B

Each input is a results CSV, optionally `@RUN_ID` (default: the file's latest run).
Runs are aligned by step. Printed: final and best validation accuracy, test accuracy,
steps to reach given accuracies; for every pair, the per-step loss difference (max,
mean, at checkpoints), the correlation of the loss curves, and a verdict
(algorithms/analysis/verdict.py): parity runs of one seed against the float32 drift
envelope, other pairs against the seed bands of their frameworks at their settings
(from two or more seeds among the inputs, or the shipped baselines), runs at different
settings never against a yardstick that does not span both. Without a yardstick there
is no verdict, only the distance. Each run is also checked against its own framework's
shipped seeds (baseline.py). A PNG of the curves and the HTML page a person reads
(report_page.py) are written beside each other, named for the runs compared, never over
another comparison's (report_files.py).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.figures import grid_and_legend, pyplot, save_figure
from algorithms.analysis.answer import against_first, device_of, findings, headline, short_label
from algorithms.analysis.baseline import check_run, format_checks
from algorithms.analysis.pair_figure import pair_folder, write_pair_figures
from algorithms.analysis.report_files import check_free, comparison_key, default_prefix, localisation_png
from algorithms.analysis.report_page import write_page
from algorithms.analysis.runs import Run, curve_distance, load_run, smooth
from algorithms.analysis.verdict import RULE, Yardsticks, judge
from algorithms.errors import EXIT_INPUT_ERROR, InputError
from algorithms.paths import BASELINE_DIR
from algorithms.tables import number, text_table, wrapped


LEGEND_CHARS = 48  # a longer run label would squeeze the plots: the page's tables show it whole


@dataclass
class PairDiff:
    a: Run
    b: Run
    common_steps: np.ndarray
    abs_diff: np.ndarray
    correlation: Optional[float]
    final_accuracy_gap: Optional[float]

    @property
    def same_backend(self) -> bool:
        return self.a.backend_key == self.b.backend_key


def diff_pair(a: Run, b: Run) -> PairDiff:
    common, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    la, lb = a.losses[ia], b.losses[ib]
    correlation = None
    sa, sb = smooth(la), smooth(lb)
    if len(sa) >= 3 and sa.std() > 0 and sb.std() > 0:
        correlation = float(np.corrcoef(sa, sb)[0, 1])
    elif len(sa) >= 1 and np.array_equal(sa, sb):
        correlation = 1.0
    gap = None
    if a.val and b.val:
        gap = abs(a.val[-1][2] - b.val[-1][2])
    return PairDiff(a, b, common, np.abs(la - lb), correlation, gap)


def steps_to_accuracy(run: Run, threshold: float) -> Optional[int]:
    return next((step for step, _, accuracy in run.val if accuracy >= threshold), None)


def time_to_accuracy(run: Run, threshold: float) -> tuple:
    """DAWNBench's measure: (wall seconds, training samples) at the first validation row
    reaching `threshold`, or (None, None)."""
    for (_, _, accuracy), progress in zip(run.val, run.val_progress):
        if accuracy >= threshold:
            return progress
    return None, None


def serial_sum(values: np.ndarray) -> np.float32:
    """Left to right, one float32 addition at a time (np.cumsum is sequential)."""
    return np.cumsum(values, dtype=np.float32)[-1]


def tree_sum(values: np.ndarray) -> np.float32:
    """Pairwise: halve the array by adding neighbours until one value is left."""
    values = values.astype(np.float32)
    while len(values) > 1:
        if len(values) % 2:
            values = np.append(values, np.float32(0))
        values = values[0::2] + values[1::2]
    return values[0]


def sharded_sum(values: np.ndarray, shards: int) -> np.float32:
    """What an all-reduce over `shards` devices adds: each shard's serial sum, then
    the shard totals in ring order."""
    return serial_sum(np.array([serial_sum(part) for part in np.array_split(values, shards)], np.float32))


def summation_order(network_name: str, seed: int = 0) -> tuple:
    """(how many values, [(order, float32 sum, difference from the exact float64 sum)]) for
    the network's own initial kernels: float32 values like those a gradient all-reduce
    adds up, in different orders."""
    from algorithms.network.weights import initial_weights
    from algorithms.network.networks import get_network

    values = np.concatenate([w.kernel.ravel() for w in initial_weights(get_network(network_name), seed)])
    exact = float(np.sum(values, dtype=np.float64))
    orders = [("serial, left to right", serial_sum(values)), ("pairwise tree", tree_sum(values))]
    orders += [(f"all-reduce of {k} shards", sharded_sum(values, k)) for k in (2, 4, 8)]
    return values.size, [(name, float(total), float(total) - exact) for name, total in orders]


def checkpoints(steps: np.ndarray) -> list:
    if steps.size == 0:
        return []
    marks = [steps[0]] + [s for s in (10, 100, 1000) if steps[0] < s < steps[-1]] + [steps[-1]]
    return sorted(set(int(s) for s in marks))


def build_report(specs: list, thresholds: list, baseline_dir: Optional[str] = None) -> dict:
    """`baseline_dir`: check every run against the shipped baselines there (see baseline.py)."""
    runs = [load_run(spec) for spec in specs]
    pairs = [diff_pair(a, b) for a, b in itertools.combinations(runs, 2)]
    yardsticks = Yardsticks(runs, baseline_dir)
    baseline_checks = []
    if baseline_dir:
        baseline_checks = [check_run(run, baseline_dir) for run in runs]
    return {
        "runs": runs,
        "pairs": pairs,
        "yardsticks": yardsticks,
        "thresholds": thresholds,
        "verdicts": [judge(p.a, p.b, yardsticks) for p in pairs],
        "baseline": baseline_checks,
    }


def format_report(report: dict, verbose: bool = False) -> str:
    """The compare command's text: the runs, then every pair's verdict and its evidence, the
    baseline checks; with `verbose` the rule of the verdicts and each check's whole evidence
    too. Every line fits CONSOLE_WIDTH (longer text wraps at word boundaries)."""
    lines = wrapped(headline(report)) + ["", "runs:"]
    thresholds = report["thresholds"]
    header = ["run", "steps", "final val acc", "best val acc", "test acc"]
    table = []
    for run in report["runs"]:
        val_acc = [accuracy for _, _, accuracy in run.val]
        table.append(
            [
                run.label,
                str(len(run.steps)),
                number(val_acc[-1] if val_acc else None),
                number(max(val_acc) if val_acc else None),
                number(run.test_accuracy),
            ]
        )
    lines += text_table(header, table, indent="  ")
    if thresholds:
        lines.append("time to accuracy (the first validation at or above it: steps, wall seconds, samples):")
        header = ["run"] + [f"{what} to {t:g}" for t in thresholds for what in ("steps", "s", "samples")]
        table = [
            [run.label]
            + [
                text
                for t in thresholds
                for text in (number(steps_to_accuracy(run, t), "d"), *_time_cells(time_to_accuracy(run, t)))
            ]
            for run in report["runs"]
        ]
        lines += text_table(header, table, indent="  ")
    for finding in findings(report):
        pair, verdict = finding.pair, finding.verdict
        lines += [""] + wrapped(f"{pair.a.label}  vs  {pair.b.label}: {finding.text}")
        if pair.abs_diff.size == 0:
            lines.append("  no common steps")
            continue
        lines.append(
            f"  |dloss| over {pair.abs_diff.size} aligned steps: max {pair.abs_diff.max():.3e}, "
            f"mean {pair.abs_diff.mean():.3e}; correlation {number(pair.correlation, '.4f')}"
        )
        index = {int(s): i for i, s in enumerate(pair.common_steps)}
        lines += wrapped(
            "at steps: " + ", ".join(f"{s}: {pair.abs_diff[index[s]]:.3e}" for s in checkpoints(pair.common_steps)),
            "  ",
        )
        for signal in verdict.evidence:
            lines += wrapped(signal, "  ", "    ")
    if verbose:
        lines += [""] + wrapped(RULE)
    if report.get("baseline"):
        lines.append("\n" + format_checks(report["baseline"], verbose))
        for note in agreement_notes(report):
            lines += wrapped(note) if note else [""]
    from algorithms.network.networks import DEFAULT_NETWORK, NETWORKS

    # a network of the user's is known here by its name only: a built-in one's kernels stand in
    network = report["runs"][0].backend_key[2]
    network = network if network in NETWORKS else DEFAULT_NETWORK
    count, sums = summation_order(network)
    lines += [""] + wrapped(
        f"float32 summation order ({network}'s initial kernels, {count:,} values; "
        "the same numbers added in another order give another float32 result):"
    )
    lines += [f"  {name:<24} {total:+.9e}  vs exact float64 sum: {delta:+.3e}" for name, total, delta in sums]
    return "\n".join(lines)


def format_against_first(report: dict, verbose: bool = False) -> str:
    """The answer (answer.headline), then one line per run against the first: its verdict
    (the same-seed regime's to the horizon, the epoch check's, the step check's, then the
    seed regime's; and where the pair ends far apart, why), its validation accuracy gap and,
    when they differ, its settings; with `verbose`, the distances, the yardsticks and the
    rule of the verdicts too (all of it is in the HTML report). Where the runs trained on
    different kinds of device each label says which, and a run on another kind than the
    first is judged against the first's framework on its own kind where the report has
    that run (answer.same_device_reference). Every line fits CONSOLE_WIDTH: longer text
    wraps at word boundaries."""
    first = report["runs"][0]
    found = findings(report)
    devices = len({device_of(run) for run in report["runs"]}) > 1
    heading = f"verdicts against {short_label(first, first, devices)}"
    lines = wrapped(headline(report))
    lines.append(f"{heading} (the rule, the yardsticks and the evidence: the report):")
    shown = [(run, reference, found[index]) for run, reference, index in against_first(report)]
    width = max((len(short_label(run, first, devices)) for run, *_ in shown), default=0)
    for run, reference, finding in shown:
        pair, verdict = finding.pair, finding.verdict
        numbers = f"val acc gap {number(pair.final_accuracy_gap, '.4f')}"
        if verbose:
            numbers += (
                f", distance {number(curve_distance(pair.a, pair.b), '.4f')}, max |dloss| "
                f"{pair.abs_diff.max():.2e}, r {number(pair.correlation, '.3f')}"
            )
        label = short_label(run, first, devices)
        lines += wrapped(f"{label:<{width}}  {finding.text} · {numbers}", "  ", " " * (width + 2))
        if reference is not first:
            where = f"against {short_label(reference, first, devices)}: the first on the same kind of device"
            lines += wrapped(where, "  " + " " * (width + 2), "  ")
        if verdict.settings_line and verdict.settings_line not in verdict.text:
            lines += wrapped(verdict.settings_line, "  " + " " * (width + 2), "  ")
    if verbose:
        lines += wrapped("yardsticks: " + "; ".join(yardstick_sources(report)))
        lines += wrapped(RULE)
    return "\n".join(lines)


def yardstick_sources(report: dict) -> list:
    """Where the report's seed bands and drift envelopes come from."""
    yardsticks, runs = report["yardsticks"], report["runs"]
    bands = sorted({band.describe() for band in (yardsticks.band(run) for run in runs) if band})
    envelopes = sorted(
        {envelope.describe() for envelope in (yardsticks.envelope(runs[0], run) for run in runs[1:]) if envelope}
    )
    return bands + envelopes or ["none: no seed band or drift envelope for these settings"]


def agreement_notes(report: dict) -> list:
    """Where a pair verdict and a baseline check seem to disagree, what each answers (both hold)."""
    checks = {id(check.run): check for check in report.get("baseline", [])}
    notes = []
    for pair, verdict in zip(report["pairs"], report["verdicts"]):
        ends = [checks.get(id(pair.a)), checks.get(id(pair.b))]
        if verdict.regime != "seed" or any(check is None or check.verdict == "not checked" for check in ends):
            continue
        outside = [check.run.label for check in ends if check.verdict == "outside"]
        if verdict.word.startswith("within") and outside:
            notes.append(
                f"note: {pair.a.label} vs {pair.b.label} is within spread, and {' and '.join(outside)} outside "
                "its own baselines: both hold: the run left its own framework's seeds (another machine, library "
                "or bug), yet differs from the other run no more than two seeds may"
            )
        elif verdict.beyond and not outside:
            notes.append(
                f"note: {pair.a.label} vs {pair.b.label} is beyond spread while each run reproduces its own "
                "baselines: both hold: the two frameworks differ from each other by more than seeds do"
            )
    return ["", *notes] if notes else []


def write_outputs(report: dict, prefix: str, heatmap_png: Optional[str] = None) -> tuple:
    """The PNG of the curves, each pair's picture (pair_figure.py, in `prefix`-pairs/) and the
    HTML page (report_page.py) at `prefix`.{png,html}, never over another comparison's
    (report_files.py: InputError); `heatmap_png`, the per-layer localisation, is shown on the
    page when given. Returns the paths of the curves and the page."""
    key = comparison_key(report["runs"])
    check_free(prefix, key)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    plot_png(report, prefix + ".png")
    pair_pngs = write_pair_figures(report, prefix)
    write_page(
        report,
        format_report(report, verbose=True),
        agreement_notes(report),
        key,
        prefix + ".html",
        prefix + ".png",
        heatmap_png,
        pair_pngs,
    )
    return prefix + ".png", prefix + ".html"


def _time_cells(progress: tuple) -> tuple:
    wall, samples = progress
    return number(wall, ".1f"), number(samples, ",d")


def plot_png(report: dict, path: str) -> None:
    plt = pyplot()
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in report["runs"]:
        loss_axis.plot(run.steps, run.losses, linewidth=0.8, alpha=0.35)
        color = loss_axis.lines[-1].get_color()
        smoothed = smooth(run.losses)
        label = run.label if len(run.label) <= LEGEND_CHARS else run.label[: LEGEND_CHARS - 3] + "..."
        loss_axis.plot(run.steps[len(run.steps) - len(smoothed) :], smoothed, color=color, label=label)
        if run.val:
            steps, _, accuracy = zip(*run.val)
            accuracy_axis.plot(steps, accuracy, marker="o", color=color, label=label)
    loss_axis.set(title="training loss per step (faint) and its 5-step mean", xlabel="step", ylabel="loss")
    accuracy_axis.set(title="validation accuracy", xlabel="step", ylabel="accuracy")
    grid_and_legend(loss_axis, accuracy_axis, fontsize=7)
    save_figure(figure, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m algorithms.analysis.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("inputs", nargs="+", metavar="CSV[@RUN_ID]", help="results CSVs (two runs at least)")
    parser.add_argument("--accuracies", default="0.5,0.8,0.9", help="report the first step reaching each")
    parser.add_argument(
        "--baseline",
        default=BASELINE_DIR,
        help="check each run against the shipped baselines in this folder ('none': skip)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="path prefix of the PNG and HTML (default: results/compare/<first run id>-<key of every run compared>); "
        "a file of another comparison is never replaced",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="the rule of the verdicts and each baseline check's whole evidence too (both are in the report)",
    )
    parser.add_argument(
        "--heatmap",
        default=None,
        metavar="PNG",
        help="the per-layer localisation heatmap to show on the page (default: results/localise/<first run id>.png "
        "when there is one)",
    )
    args = parser.parse_args(argv)
    try:
        thresholds = [float(t) for t in args.accuracies.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--accuracies: expected numbers like 0.5,0.9, got {args.accuracies!r}")
    try:
        report = build_report(args.inputs, thresholds, None if args.baseline == "none" else args.baseline)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if len(report["runs"]) < 2:
        parser.error("give at least two runs (two CSVs, or one CSV twice with @RUN_ID)")
    results_dir = os.path.dirname(os.path.abspath(args.inputs[0].partition("@")[0]))
    prefix = args.out or default_prefix(os.path.join(results_dir, "compare"), report["runs"])
    heatmap = args.heatmap or localisation_png(results_dir, report["runs"][0].run_id)
    try:
        if heatmap and not os.path.isfile(heatmap):
            raise InputError(f"--heatmap {heatmap}: file not found; give the PNG the localisation wrote")
        png, page = write_outputs(report, prefix, heatmap)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    print(format_report(report, args.verbose))
    print(
        f"\nthe curves:\n  {png}\neach pair's picture:\n  {pair_folder(prefix)}/\n"
        f"the report (every pair's verdict and evidence, the rule of the verdicts):\n  {page}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
