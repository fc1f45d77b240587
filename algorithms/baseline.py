"""The shipped baselines, and checking a new run against them.

`make baseline` runs the main command (run_all.py) for both networks on the default
data, 3 epochs at each preset's batch size, with seeds 0, 1 and 2, into
results/baseline/, where ordinary runs never write. The three seeds of one
framework/backend span its run-to-run band: how far the curve moves when only the
randomness (initial weights, batch order, dropout) changes. A user reproducing on
a new machine asks first whether their curve falls inside that band; a curve
outside it means a real difference (another library version, a wrong input, a
bug), not noise.

The check compares the 5-step mean of the training loss at every common step
against the band of the baselines' 5-step means (widened by BAND_MARGIN of its
width each side), and the validation accuracy at the baselines' last validation
step against their range (widened by ACCURACY_MARGIN).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .cli import REPO_ROOT
from .compare import Run, load_run, smooth
from .recorder import results_csv_name, run_ids

BASELINE_DIR = os.path.join(REPO_ROOT, "results", "baseline")
BAND_MARGIN = 0.25        # of the band's width at that step, added on each side
ACCURACY_MARGIN = 0.01    # added to each side of the baselines' validation-accuracy range
INSIDE_FRACTION = 0.9     # of the common steps, for "within the band"


@dataclass
class BaselineCheck:
    run: Run
    baseline_path: Optional[str]
    verdict: str          # "within" | "outside" | "not checked"
    detail: str

    def line(self) -> str:
        return f"  {self.run.label:<45} {self.verdict + ' the baseline band' if self.verdict != 'not checked' else 'not checked'}: {self.detail}"


def baseline_runs(network: str, framework: str, backend: str, baseline_dir: str = BASELINE_DIR) -> list:
    path = os.path.join(baseline_dir, results_csv_name(network, framework, backend))
    if not os.path.exists(path):
        return []
    return [load_run(f"{path}@{run_id}") for run_id in run_ids(path)]


def check_run(run: Run, baseline_dir: str = BASELINE_DIR) -> BaselineCheck:
    framework, backend, network = run.backend_key
    baselines = baseline_runs(network, framework, backend, baseline_dir)
    path = os.path.join(baseline_dir, results_csv_name(network, framework, backend))
    if not baselines:
        return BaselineCheck(run, None, "not checked", f"no baseline for {framework}/{backend} on {network} in {baseline_dir}")
    if os.path.abspath(run.path) == os.path.abspath(path):
        return BaselineCheck(run, path, "not checked", "this run is one of the baselines")
    reference = baselines[0]
    if run.config_key != reference.config_key:
        _, batch, strategy, devices = reference.config_key
        return BaselineCheck(run, path, "not checked",
                             f"the baselines ran at batch {batch}, {strategy} on {devices} device(s); this run "
                             f"at batch {run.config_key[1]}, {run.config_key[2]} on {run.config_key[3]}: rerun with "
                             f"the preset's batch size to compare")
    steps = run.steps
    for baseline in baselines:
        steps = np.intersect1d(steps, baseline.steps)
    if steps.size == 0:
        return BaselineCheck(run, path, "not checked", "no step in common with the baselines")
    mine = smooth(_at(run, steps))
    curves = np.array([smooth(_at(baseline, steps)) for baseline in baselines])
    low, high = curves.min(axis=0), curves.max(axis=0)
    margin = BAND_MARGIN * (high - low)
    inside = (mine >= low - margin) & (mine <= high + margin)
    accuracy_text, accuracy_ok = _accuracy(run, baselines)
    within = inside.mean() >= INSIDE_FRACTION and accuracy_ok
    detail = (f"smoothed loss inside at {int(inside.sum())}/{inside.size} steps "
              f"(baseline seeds {', '.join(b.run_id.rsplit('seed', 1)[-1] for b in baselines)}, steps "
              f"{int(steps[0])}-{int(steps[-1])}); {accuracy_text}")
    return BaselineCheck(run, path, "within" if within else "outside", detail)


def _at(run: Run, steps: np.ndarray) -> np.ndarray:
    index = {int(step): i for i, step in enumerate(run.steps)}
    return np.array([run.losses[index[int(step)]] for step in steps])


def _accuracy(run: Run, baselines: list) -> tuple:
    last_steps = {baseline.val[-1][0] for baseline in baselines if baseline.val}
    if len(last_steps) != 1 or not run.val:
        return "validation accuracy not compared", True
    (step,) = last_steps
    mine = next((accuracy for val_step, _, accuracy in run.val if val_step == step), None)
    if mine is None:
        return f"no validation at step {step} to compare", True
    values = [baseline.val[-1][2] for baseline in baselines]
    low, high = min(values) - ACCURACY_MARGIN, max(values) + ACCURACY_MARGIN
    ok = low <= mine <= high
    return (f"val accuracy {mine:.4f} at step {step} {'in' if ok else 'outside'} "
            f"[{min(values):.4f}, {max(values):.4f}] +- {ACCURACY_MARGIN:g}"), ok


def format_checks(checks: list) -> str:
    return "\n".join(["against the shipped baselines (results/baseline/, seeds 0-2; `make baseline` remakes them):"]
                     + [check.line() for check in checks])
