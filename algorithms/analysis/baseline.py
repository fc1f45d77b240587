"""The shipped baselines, and checking a new run against them.

`make baseline` runs the main command (run_all.py) on the default data where ordinary
runs never write: seeds 0, 1 and 2 of both networks for 3 epochs at each preset's batch
size (results/baseline/), and seeds 0-9 of the main command's own default
(results/baseline/default/: the 3-layer net at batch 100 for 10 epochs). The seeds of
one framework at one setting span its seed band: how far the curve moves when only the
randomness (initial weights, batch order, dropout) changes. They are the bands the pair
verdicts rest on (verdict.py), and each run of a report is also checked against its own
framework's seeds: does it reproduce them? A user on a new machine asks that first; a
run outside means a real difference (another library version, a wrong input, a bug).

The check is spread.py's test of one new draw against n seeds, at its settings only
(settings.py: the seed and the arithmetic's threads and kernels may differ): its
distance from the seeds' mean loss curve against each seed's from the mean of the
others (leave one out), and its final validation accuracy against theirs, each by a
t-based prediction interval; outside when the combined p < spread.ALPHA, or when the
run ended at chance and the seeds did not; not checked, rather than within, when the
seeds are too few to call the run's gap at that threshold (spread.py's two rules).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional


from algorithms.analysis.runs import Run, load_run, setting_differences
from algorithms.analysis.settings import (
    HORIZON,
    NOT_COMPARED_ACROSS_SEEDS,
    differences_line,
    unknown_line,
    value_text,
)
from algorithms.analysis.spread import reproduction_test
from algorithms.paths import BASELINE_DIR
from algorithms.tables import wrapped
from algorithms.records import results_csv_name, run_ids


@dataclass
class BaselineCheck:
    run: Run
    baseline_path: Optional[str]
    verdict: str  # "within" | "outside" | "not checked"
    detail: str
    p: Optional[float] = None
    reason: str = ""  # the detail's gist, in a clause: what the console's one line says
    at_chance: bool = False  # outside by the at-chance rule (spread.chance_line), whatever p

    @property
    def word(self) -> str:
        if self.verdict == "not checked":
            return "not checked"
        return f"{self.verdict} the baseline band ({'at chance, ' if self.at_chance else ''}p={self.p:.2g})"

    def line(self) -> str:
        return f"  {self.run.label:<45} {self.word}: {self.detail}"

    def short(self) -> str:
        """The word, and why where it is not `within`."""
        if self.verdict == "within":
            return self.word
        return f"{self.word}: {self.reason or self.detail.split('; ')[0]}"


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
    """The baseline runs of `run`'s framework at its settings (Run.settings: all but the
    seed, threads and kernels equal), other than itself."""
    framework, backend, network = run.backend_key
    return [
        baseline
        for baseline in baseline_runs(network, framework, backend, baseline_dir)
        if not setting_differences(baseline, run, NOT_COMPARED_ACROSS_SEEDS)
        and not (os.path.abspath(baseline.path) == os.path.abspath(run.path) and baseline.run_id == run.run_id)
    ]


def describe_settings(run: Run) -> str:
    settings = run.settings
    epochs = settings.get("epochs")
    rate = settings.get("learning_rate")
    return (
        f"batch {settings.get('batch')} ({settings.get('strategy')} on {settings.get('devices')} device(s), "
        f"{epochs} epoch{'s' if epochs != 1 else ''}{'' if rate is None else f', lr {value_text(rate)}'})"
    )


def closeness(differences: list) -> tuple:
    """How far a baseline's settings are from a run's, closest first: a difference in how
    it trains (batch, learning rate, ...) before one in where it stops (HORIZON: epochs,
    --max_steps, ...), so a run that only stopped sooner names its epochs, not a batch
    that some other baseline happens to share with it."""
    training = [name for name, _, _ in differences if name not in HORIZON]
    return len(training), len(differences)


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
        ran = sorted({describe_settings(b) for b in every})
        closest = min(every, key=lambda b: closeness(setting_differences(b, run, NOT_COMPARED_ACROSS_SEEDS)))
        differ = differences_line(setting_differences(run, closest, NOT_COMPARED_ACROSS_SEEDS))
        return BaselineCheck(
            run,
            every[0].path,
            "not checked",
            f"the baselines ran at {'; '.join(ran)}; this run: {differ} (the closest baseline's): rerun at "
            "their settings to compare",
            reason=f"{differ} (the closest baseline's)",
        )
    test = reproduction_test(run, baselines)
    if test is None:
        return BaselineCheck(run, baselines[0].path, "not checked", "fewer than 3 seeds, or no step in common")
    seeds = ", ".join(str(b.seed) if b.seed is not None else b.run_id.rsplit("seed", 1)[-1] for b in baselines)
    detail = f"{'; '.join(test.evidence)} (baseline seeds {seeds})"
    unknown = unknown_line(run.label, run.settings, "its baselines", baselines[0].settings, NOT_COMPARED_ACROSS_SEEDS)
    if unknown:
        detail += f"; {unknown}"
    if test.undecided:
        folder = os.path.dirname(baselines[0].path)
        reason = f"{test.cannot}: add seeds to {folder} (docs/comparing.md#few-seeds)"
        return BaselineCheck(run, baselines[0].path, "not checked", f"{reason}; {detail}", test.p, reason)
    worst = (test.at_chance or max(test.evidence, key=_p_of)) if test.beyond else ""
    verdict = "outside" if test.beyond else "within"
    return BaselineCheck(run, baselines[0].path, verdict, detail, test.p, worst, test.at_chance is not None)


def _p_of(evidence: str) -> float:
    """How strongly one line of a test's evidence speaks (1 - its p), for the console's one line."""
    try:
        return 1.0 - float(evidence.rsplit("p=", 1)[1].split()[0].rstrip(");,"))
    except (IndexError, ValueError):
        return 0.0


def format_checks(checks: list, verbose: bool = False) -> str:
    """One line per run (wrapped to CONSOLE_WIDTH); with `verbose`, each with its whole evidence."""
    lines = ["does each run reproduce its own framework's shipped seeds at its settings? (results/baseline/):"]
    width = max((len(f"{check.run.backend_key[0]}/{check.run.backend_key[1]}") for check in checks), default=0)
    for check in checks:
        name = f"{check.run.backend_key[0]}/{check.run.backend_key[1]}"
        text = f"{check.word}: {check.detail}" if verbose else check.short()
        lines += wrapped(f"{name:<{width}}  {text}", "  ", " " * (width + 2))
    return "\n".join(lines)
