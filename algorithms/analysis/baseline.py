"""The shipped baselines, and checking a new run against them.

`make baseline` runs the main command (run_all.py) on the default data with seeds 0, 1
and 2, at two settings, where ordinary runs never write: both networks for 3 epochs at
each preset's batch size (results/baseline/), and the main command's own default
(results/baseline/default/: the 3-layer net at batch 100 for 10 epochs). A run is
checked against the baselines of its settings (network, batch, strategy, devices,
epochs); their seed-to-seed spread is also the band compare.py judges
cross-framework differences against. The three seeds of one
framework/backend span its run-to-run band: how far the curve moves when only the
randomness (initial weights, batch order, dropout) changes. A user reproducing on
a new machine asks first whether their curve falls inside that band; a curve
outside it means a real difference (another library version, a wrong input, a
bug), not noise.

The check measures how far a curve sits from the baselines' mean curve: the mean,
over the common steps, of |5-step mean loss - the seeds' mean of it|. Each
baseline seed's own distance from the mean of the other seeds (leave one out)
sets the band: a run is within it when its distance is at most
BASELINE_BAND_FACTOR times the largest of theirs, and its validation accuracy at
the baselines' last validation step lies within their range widened by the range
itself (at least ACCURACY_MARGIN). Per-step min/max envelopes were tried first and rejected: with
three seeds, every seed fell outside the envelope of the other two.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.paths import BASELINE_DIR
from algorithms.run.recorder import results_csv_name, run_ids
from algorithms.analysis.runs import Run, load_run, losses_at, smooth

BASELINE_BAND_FACTOR = 1.5  # x the largest leave-one-out distance of a baseline seed
ACCURACY_MARGIN = 0.01  # the least widening of the baselines' validation-accuracy range


@dataclass
class BaselineCheck:
    run: Run
    baseline_path: Optional[str]
    verdict: str  # "within" | "outside" | "not checked"
    detail: str

    def line(self) -> str:
        verdict = self.verdict + " the baseline band" if self.verdict != "not checked" else "not checked"
        return f"  {self.run.label:<45} {verdict}: {self.detail}"


def baseline_runs(network: str, framework: str, backend: str, baseline_dir: str = BASELINE_DIR) -> list:
    """Every baseline run of this framework/backend and network, in `baseline_dir` and its
    subfolders (one per setting), whatever their settings."""
    name = results_csv_name(network, framework, backend)
    paths = [os.path.join(baseline_dir, name)] + sorted(
        os.path.join(baseline_dir, entry, name)
        for entry in (os.listdir(baseline_dir) if os.path.isdir(baseline_dir) else [])
    )
    return [load_run(f"{path}@{run_id}") for path in paths if os.path.isfile(path) for run_id in run_ids(path)]


def matching_baselines(run: Run, baseline_dir: str = BASELINE_DIR) -> list:
    """The baseline runs of `run`'s framework at its settings (Run.settings), other than itself."""
    framework, backend, network = run.backend_key
    return [
        baseline
        for baseline in baseline_runs(network, framework, backend, baseline_dir)
        if baseline.settings == run.settings
        and not (os.path.abspath(baseline.path) == os.path.abspath(run.path) and baseline.run_id == run.run_id)
    ]


def describe_settings(settings: tuple) -> str:
    _, batch, strategy, devices, epochs = settings
    return f"batch {batch} ({strategy} on {devices} device(s), {epochs} epoch{'s' if epochs != 1 else ''})"


def check_run(run: Run, baseline_dir: str = BASELINE_DIR) -> BaselineCheck:
    framework, backend, network = run.backend_key
    every = baseline_runs(network, framework, backend, baseline_dir)
    if not every:
        return BaselineCheck(
            run, None, "not checked", f"no baseline for {framework}/{backend} on {network} in {baseline_dir}"
        )
    if any(os.path.abspath(b.path) == os.path.abspath(run.path) and b.run_id == run.run_id for b in every):
        return BaselineCheck(run, every[0].path, "not checked", "this run is one of the baselines")
    baselines = matching_baselines(run, baseline_dir)
    if not baselines:
        ran = sorted({describe_settings(b.settings) for b in every})
        return BaselineCheck(
            run,
            every[0].path,
            "not checked",
            f"the baselines ran at {'; '.join(ran)}; this run at {describe_settings(run.settings)}: rerun "
            "at one of those settings to compare",
        )
    path = baselines[0].path
    steps = run.steps
    for baseline in baselines:
        steps = np.intersect1d(steps, baseline.steps)
    if steps.size == 0:
        return BaselineCheck(run, path, "not checked", "no step in common with the baselines")
    mine = smooth(losses_at(run, steps))
    curves = np.array([smooth(losses_at(baseline, steps)) for baseline in baselines])
    distance = float(np.mean(np.abs(mine - curves.mean(axis=0))))
    band = BASELINE_BAND_FACTOR * max(_leave_one_out_distances(curves)) if len(curves) > 1 else 0.0
    accuracy_text, accuracy_ok = _accuracy(run, baselines)
    within = distance <= band and accuracy_ok
    detail = (
        f"mean |loss - baselines' mean| {distance:.4f} vs band {band:.4f} "
        f"(baseline seeds {', '.join(b.run_id.rsplit('seed', 1)[-1] for b in baselines)}, steps "
        f"{int(steps[0])}-{int(steps[-1])}); {accuracy_text}"
    )
    return BaselineCheck(run, path, "within" if within else "outside", detail)


def _leave_one_out_distances(curves: np.ndarray) -> list:
    """Each baseline's mean distance from the mean curve of the others."""
    return [float(np.mean(np.abs(curves[i] - np.delete(curves, i, axis=0).mean(axis=0)))) for i in range(len(curves))]


def _accuracy(run: Run, baselines: list) -> tuple:
    last_steps = {baseline.val[-1][0] for baseline in baselines if baseline.val}
    if len(last_steps) != 1 or not run.val:
        return "validation accuracy not compared", True
    (step,) = last_steps
    mine = next((accuracy for val_step, _, accuracy in run.val if val_step == step), None)
    if mine is None:
        return f"no validation at step {step} to compare", True
    values = [baseline.val[-1][2] for baseline in baselines]
    margin = max(ACCURACY_MARGIN, max(values) - min(values))
    ok = min(values) - margin <= mine <= max(values) + margin
    return (
        f"val accuracy {mine:.4f} at step {step} {'in' if ok else 'outside'} "
        f"[{min(values):.4f}, {max(values):.4f}] +- {margin:.4f}"
    ), ok


def format_checks(checks: list) -> str:
    return "\n".join(
        ["against the shipped baselines (results/baseline/, seeds 0-2 at their settings; `make baseline`):"]
        + [check.line() for check in checks]
    )
