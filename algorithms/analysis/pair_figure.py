"""A pair's evidence as a picture: where two runs part, and whether that is drift.

One PNG per pair of a comparison (`<report prefix>-pairs/pair-<N>.png`, N its row in the
report's table; the page shows each inline, in that pair's evidence):

- left, top: the pair's |dloss|/loss per step (drift_envelope.pair_series; step 0 the init
  row) on a log axis, against the yardstick its verdict rests on: ENVELOPE_FACTOR x the drift
  envelope, shaded below (drift), the horizon (the last step the envelope judges) a dashed
  line with what lies past it greyed, and every judged step beyond the yardstick in red (an
  x along the top where the step's accuracies differ beyond the accuracy envelope);
- left, bottom, on the same steps: the step check (run/step_check.py), each run's worst
  error over its tolerance at each checked step, the tolerance a line at 1, a step beyond in red;
- right, top: the two runs' epoch checks (run/epoch_check.py), their |dloss|/loss against
  the check's own envelope and horizon;
- right, bottom: where the runs end (final validation accuracy, test predictions alike),
  marked when the pair ends far apart (answer.far_apart).
"""

from __future__ import annotations

import glob
import io
import os
import textwrap
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.analysis.answer import Finding, findings
from algorithms.analysis.drift_envelope import DRIFT_FLOOR, ENVELOPE_FACTOR, pair_series
from algorithms.figures import pyplot, save_figure

PAIR_FOLDER_SUFFIX = "-pairs"
# the colours the page uses too: a pair's line, the drift band, beyond, past the horizon
PAIR = "#1f4e96"
DRIFT = "#2e8b57"
BEYOND = "#d62728"
RUN_COLOURS = ("#1f77b4", "#9467bd")
APART = "#d9822b"
SMALLEST_SHOWN = 1e-9  # a bit-identical step (a difference of 0) is drawn here on the log axis
TITLE_CHARS = 130
PALETTE_COLOURS = 128


@dataclass(frozen=True)
class Marks:
    """What a pair's picture marks, as drawn: the first judged step beyond its yardstick and
    the horizon (None: no yardstick drawn), the same of its epoch check, and each run's
    step-check steps drawn red ({name: [steps]})."""

    first_beyond: Optional[int]
    horizon: Optional[int]
    check_first_beyond: Optional[int]
    check_horizon: Optional[int]
    step_check_beyond: dict


def pair_folder(prefix: str) -> str:
    """Where a comparison's per-pair PNGs are written: beside its page."""
    return prefix + PAIR_FOLDER_SUFFIX


def write_pair_figures(report: dict, prefix: str) -> list:
    """Every pair's PNG in pair_folder(prefix) (what an earlier writing of the same
    comparison left there is replaced); returns their paths, in the report's order."""
    folder = pair_folder(prefix)
    os.makedirs(folder, exist_ok=True)
    for stale in glob.glob(os.path.join(folder, "pair-*.png")):
        os.remove(stale)
    paths = []
    for index, finding in enumerate(findings(report), start=1):
        path = os.path.join(folder, f"pair-{index}.png")
        draw_pair(index, finding, report["yardsticks"], path)
        paths.append(path)
    return paths


def draw_pair(index: int, finding: Finding, yardsticks, path: str) -> Marks:
    """The pair's picture (the module's docstring says what it holds) as a PNG at `path`;
    returns what it marked."""
    pair, verdict = finding.pair, finding.verdict
    a, b = pair.a, pair.b
    plt = pyplot()
    figure = plt.figure(figsize=(11, 5.6))
    # fixed margins: matplotlib's tight layout would measure every label again, the most of a figure's time
    grid = figure.add_gridspec(
        2,
        2,
        width_ratios=(3, 1.15),
        height_ratios=(2.1, 1),
        left=0.065,
        right=0.99,
        top=0.86,
        bottom=0.09,
        wspace=0.16,
        hspace=0.42,
    )
    drift_axis = figure.add_subplot(grid[0, 0])
    step_axis = figure.add_subplot(grid[1, 0], sharex=drift_axis)
    check_axis = figure.add_subplot(grid[0, 1])
    end_axis = figure.add_subplot(grid[1, 1])

    envelope = yardsticks.envelope(a, b) if verdict.horizon is not None else None
    first_beyond = _drift_panel(drift_axis, a, b, envelope, "the pair's |dloss|/loss")
    if envelope is None:
        _say(drift_axis, _no_yardstick(verdict))
    drift_axis.set(ylabel="|dloss| / loss", title="where the runs part, against their drift yardstick")
    step_check_beyond = _step_check_panel(step_axis, a, b)
    check_first_beyond, check_horizon = _epoch_check_panel(check_axis, a, b, verdict, yardsticks)
    _end_panel(end_axis, finding)
    colour = {"beyond": BEYOND, "apart": APART}.get(finding.css_class, "#1d1d1d")
    title = textwrap.shorten(f"{index}. {a.label} vs {b.label}", TITLE_CHARS)
    figure.text(0.01, 0.965, title, fontsize=10, va="center")
    figure.text(0.01, 0.925, textwrap.shorten(finding.text, TITLE_CHARS + 20), fontsize=8.5, color=colour)
    _save_small(figure, path)
    horizon = envelope.horizon() if envelope is not None else None
    return Marks(first_beyond, horizon, check_first_beyond, check_horizon, step_check_beyond)


def _save_small(figure, path: str) -> None:
    """The PNG in PALETTE_COLOURS colours: a third of the bytes of matplotlib's own, with no
    change a reader sees (a default run's page holds 28 of them inline)."""
    from PIL import Image

    buffer = io.BytesIO()
    save_figure(figure, buffer, tight_layout=False, format="png")
    Image.open(buffer).convert("RGB").quantize(colors=PALETTE_COLOURS).save(path, format="PNG")


def _series(a, b) -> tuple:
    """(steps, |dloss|/loss drawn, |accuracy differences|, one sample's accuracy) of a pair."""
    steps, differences, accuracy, one_sample = pair_series(a, b)
    return steps, np.maximum(differences, SMALLEST_SHOWN), accuracy, one_sample


def _drift_panel(axis, a, b, envelope, label: str, colour: str = PAIR) -> Optional[int]:
    """The pair's relative loss difference, and where it has one, its yardstick: the band
    under ENVELOPE_FACTOR x the envelope, the horizon, each judged step beyond in red.
    Returns the first step beyond (None: none)."""
    steps, differences, accuracy, one_sample = _series(a, b)
    if not steps.size:
        _say(axis, "no common steps")
        return None
    axis.plot(steps, differences, color=colour, linewidth=1.1, label=label)
    axis.set_yscale("log")
    first = None
    if envelope is not None:
        limit = ENVELOPE_FACTOR * np.maximum(envelope.limit, DRIFT_FLOOR)
        axis.fill_between(envelope.steps, SMALLEST_SHOWN, limit, color=DRIFT, alpha=0.14, linewidth=0)
        axis.plot(
            envelope.steps, limit, color=DRIFT, linewidth=1.2, label=f"drift: under {ENVELOPE_FACTOR:g} x the envelope"
        )
        horizon = envelope.horizon()
        axis.axvline(horizon, color="#555555", linestyle="--", linewidth=1, label=f"horizon: step {horizon}")
        right = max(float(steps[-1]), horizon + 1)
        axis.axvspan(horizon, right, color="#888888", alpha=0.08, linewidth=0)
        judged = np.isin(steps, envelope.steps) & (steps <= horizon)
        beyond, accuracy_beyond = np.zeros(len(steps), bool), np.zeros(len(steps), bool)
        beyond[judged] = differences[judged] > ENVELOPE_FACTOR * envelope.limit_at(steps[judged])
        # the drift test's other half (drift_envelope.drift_test): the step's accuracies, one sample allowed
        allowed = ENVELOPE_FACTOR * envelope.accuracy_at(steps[judged]) + one_sample[judged] + 1e-9
        accuracy_beyond[judged] = accuracy[judged] > allowed
        top = max(2.0, float(differences.max()) * 2)
        if beyond.any():
            axis.scatter(steps[beyond], differences[beyond], color=BEYOND, s=22, zorder=3, label="beyond drift")
        if accuracy_beyond.any():
            marks = steps[accuracy_beyond]
            axis.scatter(marks, np.full(len(marks), top / 2), color=BEYOND, marker="x", s=30, label="accuracies beyond")
        if (beyond | accuracy_beyond).any():
            first = int(steps[beyond | accuracy_beyond][0])
            at = differences[steps == first][0] if beyond[steps == first][0] else top / 2
            axis.annotate(
                f"beyond at step {first}",
                (first, at),
                textcoords="offset points",
                xytext=(6, 6),
                color=BEYOND,
                fontsize=8,
            )
    axis.set_ylim(SMALLEST_SHOWN / 2, max(2.0, float(differences.max()) * 2))
    axis.grid(alpha=0.3, which="major")
    axis.legend(fontsize=7, loc="lower right")
    return first


def _no_yardstick(verdict) -> str:
    if verdict.p is not None:
        return f"no per-step yardstick: the seed regime judges the whole runs (p={verdict.p:.2g})"
    return "no drift yardstick for this pair: " + textwrap.shorten(verdict.word, 70)


def _step_check_panel(axis, a, b) -> dict:
    """Each run's worst error over its tolerance at its checked steps; 1 is the tolerance.
    Returns {run's name: its steps drawn beyond}."""
    axis.set(xlabel="step", ylabel="error / tolerance")
    axis.set_yscale("log")
    checked = [(run, colour, marker) for run, colour, marker in zip((a, b), RUN_COLOURS, "o^") if run.step_checks]
    runs = "  ".join(f"{symbol} {run.label.split(' ')[0]}" for run, symbol in zip((a, b), "●▲") if run.step_checks)
    title = "the step check: each checked step again in float64" + (f" ({runs}; red: beyond)" if runs else "")
    axis.set_title(textwrap.shorten(title, 110), fontsize=9.5)
    if not checked:
        _say(axis, "no step check (--step_check off, or runs from before it)")
        return {}
    axis.axhline(1.0, color=BEYOND, linestyle="--", linewidth=1)
    firsts, drawn = [], {}
    for run, colour, marker in checked:
        rows = [row for row in run.step_checks if row["worst"] is not None]
        steps = np.array([row["step"] for row in rows])
        worst = np.maximum(np.array([row["worst"] for row in rows], dtype=float), SMALLEST_SHOWN)
        beyond = np.array([bool(row["part"]) or row["worst"] > 1 for row in rows], dtype=bool)
        name = run.label.split(" ")[0]
        drawn[name] = [int(step) for step in steps[beyond]]
        axis.scatter(steps[~beyond], worst[~beyond], color=colour, marker=marker, s=18)
        if beyond.any():
            axis.scatter(steps[beyond], worst[beyond], color=BEYOND, marker=marker, s=30)
            first = next(row for row in rows if bool(row["part"]) or row["worst"] > 1)
            firsts.append(f"{name} at step {first['step']}: {first['part'] or 'beyond'}")
    if firsts:
        text = textwrap.shorten("first beyond: " + "; ".join(firsts), 110)
        axis.text(0.01, 0.97, text, transform=axis.transAxes, va="top", fontsize=7.5, color=BEYOND)
    axis.set_ylim(top=max(axis.get_ylim()[1], 1.0) * 30)  # room for that line above the points
    axis.text(
        0.995, 1.0, "tolerance", transform=axis.get_yaxis_transform(), color=BEYOND, fontsize=7, ha="right", va="bottom"
    )
    axis.grid(alpha=0.3, which="major")
    return drawn


def _epoch_check_panel(axis, a, b, verdict, yardsticks) -> tuple:
    """The two runs' epoch checks against the check's own envelope; returns (its first step
    beyond, its horizon), None where not drawn."""
    axis.set(xlabel="step of the epoch check", title="the epoch check")
    if a.check is None or b.check is None:
        _say(axis, "no epoch check\n(run_all.py runs one;\n--epoch_check)")
        return None, None
    envelope = None
    if verdict.check is not None and verdict.check.horizon is not None:
        envelope = yardsticks.envelope(a.check, b.check)
    first = _drift_panel(axis, a.check, b.check, envelope, "its |dloss|/loss")
    if envelope is None:
        _say(axis, "no envelope for the epoch check")
        return first, None
    return first, envelope.horizon()


def _end_panel(axis, finding: Finding) -> None:
    """Where the two runs end: their final validation accuracies (bars) and, where the
    report has them, the test predictions alike; orange with the reason where far apart."""
    a, b = finding.pair.a, finding.pair.b
    values = [run.final_val_accuracy for run in (a, b)]
    names = [run.label.split(" ")[0] for run in (a, b)]
    axis.set(title="where they end", ylabel="final val acc", ylim=(0, 1.18))
    if None in values:
        _say(axis, "no validation rows")
        return
    colour = APART if finding.apart else "#7f7f7f"
    bars = axis.bar(range(2), values, color=colour, width=0.6)
    axis.set_xticks(range(2), [textwrap.shorten(name, 22) for name in names], fontsize=7)
    for bar, value in zip(bars, values):
        axis.text(bar.get_x() + bar.get_width() / 2, value + 0.02, f"{value:.3f}", ha="center", fontsize=7)
    lines = []
    if finding.agreement is not None:
        lines.append(f"{100 * finding.agreement:.1f}% of the test predictions alike")
    if finding.apart:
        lines.append("ENDS FAR APART")
    axis.set_xlabel("\n".join(lines), fontsize=7.5, color=colour)


def _say(axis, text: str) -> None:
    """`text` in the middle of a panel; a panel with nothing else drawn loses its ticks."""
    if not axis.has_data():
        axis.tick_params(labelleft=False, labelbottom=False, left=False, bottom=False)
        axis.set_yscale("linear")
    axis.text(0.5, 0.5, text, transform=axis.transAxes, ha="center", va="center", fontsize=8, color="#555555")
