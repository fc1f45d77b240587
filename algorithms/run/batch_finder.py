"""--batch_size auto: the batch with the highest samples/s whose trial stays within a
memory budget, found as Lightning's BatchSizeFinder finds its batch (double until a
trial does not fit, then bisect between the last that did and the first that did
not), each trial a few real steps of the wrapper's own trainer in a child process
(`python -m algorithms.run.probe PACKAGE --mode trial`, the benchmark's harness).

A child process per trial because the CPU's peak memory is the process's peak RSS
(ru_maxrss only grows); on a GPU the trial reports the framework's own
peak-allocated counter instead (each native.py's `device_memory_mb`). The search
(`search`) knows nothing of processes or frameworks; `find_batch_size` runs it
before the entry script's framework loads. Imports no framework."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from typing import Callable, Optional

from algorithms.errors import InputError
from algorithms.config.argv import without_flags
from algorithms.run.probe_process import run_probe
from algorithms.network.parallel import make_plan
from algorithms.tables import last_line
from algorithms.machine.resources import available_memory_mb

START_BATCH = 16
# the largest batch tried leaves the run at least this many optimizer steps an epoch: a batch
# of a third of the rows trains fastest per sample on a CPU and learns little in 3 epochs
MIN_STEPS_PER_EPOCH = 10
BISECT_UNTIL = 8  # stop bisecting once the bracket is narrower than 1/8 of its lower end
MAX_TRIALS = 14
TRIAL_STEPS = 3  # timed steps per trial at least, after one warm-up block (Keras: fit blocks of 4)
TRIAL_SAMPLES = 1024  # and at least this many samples timed: a small batch's few ms steps are noise on a shared CPU
TRIAL_TIMEOUT_S = 600
CPU_BUDGET_FRACTION = 0.5  # of MemAvailable: the machine is shared, and a run holds more than one trial
GPU_BUDGET_FRACTION = 0.9  # of the GPU's free memory: the allocator's slack and workspaces
# how a trial that ran out of memory ends (the kernel's OOM killer, or the framework's own error)
OUT_OF_MEMORY_SIGNS = ("out of memory", "MemoryError", "ResourceExhausted", "OOM", "std::bad_alloc")


@dataclass(frozen=True)
class Trial:
    batch: int
    ms_per_step: Optional[float]  # None: the trial ran out of memory
    samples_per_s: Optional[float]
    peak_mb: Optional[float]
    memory: str = "peak RSS"  # or "GPU peak allocated"
    free_mb: Optional[float] = None  # on a GPU: its free memory, as the framework sees it

    def fits(self, budget_mb: float) -> bool:
        return self.ms_per_step is not None and self.peak_mb <= budget_mb


def search(measure: Callable[[int], Trial], budget_of: Callable[[Trial], float], most: int) -> tuple:
    """Doubling from START_BATCH (capped at `most`, the training rows), then bisecting;
    `budget_of(first trial)` is the budget (the first trial says whether it ran on a
    GPU). Returns (trials in the order run, budget MB, chosen Trial or None when even
    the first does not fit)."""
    trials: list = []

    def run(batch: int) -> Trial:
        trials.append(measure(batch))
        return trials[-1]

    first = run(min(START_BATCH, most))
    budget = budget_of(first)
    low, high = (first.batch, None) if first.fits(budget) else (None, first.batch)
    while low is not None and high is None and low < most and len(trials) < MAX_TRIALS:
        batch = min(2 * low, most)
        if run(batch).fits(budget):
            low = batch
        else:
            high = batch
    while low is not None and high is not None and high - low > max(1, low // BISECT_UNTIL):
        if len(trials) >= MAX_TRIALS:
            break
        middle = (low + high) // 2
        if run(middle).fits(budget):
            low = middle
        else:
            high = middle
    fitting = [trial for trial in trials if trial.fits(budget)]
    chosen = max(fitting, key=lambda trial: trial.samples_per_s) if fitting else None
    return trials, budget, chosen


# --------------------------------------------------------------------------- trials as processes


def trial_argv(argv: list, batch: int, scratch: str) -> list:
    """The user's flags with the trial's appended (argparse keeps the last of a flag):
    its batch, no test set, rows and log in a scratch folder, no step limit."""
    return list(argv) + [
        "--batch_size",
        str(batch),
        "--test",
        "none",
        "--results_dir",
        os.path.join(scratch, "results"),
        "--results_log",
        os.path.join(scratch, "results.log"),
        "--run_id",
        f"batch-trial-{batch}",
        "--max_steps",
        str(10**9),
        "--checkpoint_every",
        "0",
        "--quiet",
    ]


def run_trial(package: str, argv: list, batch: int, accumulate: int) -> Trial:
    """One probe process at `batch`; a trial that runs out of memory does not fit, any
    other failure stops the search with the trial's last line."""
    argv = without_flags(argv, "--memory_budget_mb")  # the trial's own flags must parse without --batch_size auto
    steps = max(TRIAL_STEPS, -(-TRIAL_SAMPLES // (batch * accumulate)))
    probe_args = ["--mode", "trial", "--steps", str(steps), "--block", "1", "--gemm", "0", "--skip_compiled"]
    with tempfile.TemporaryDirectory(prefix="batch-trial-") as scratch:
        try:
            probe = run_probe(
                sys.executable,
                package,
                probe_args + trial_argv(argv, batch, scratch),
                TRIAL_TIMEOUT_S,
                {"PYTHONUNBUFFERED": "1"},
            )
        except subprocess.TimeoutExpired:
            raise InputError(
                f"--batch_size auto: the trial at batch {batch} took over {TRIAL_TIMEOUT_S} s; "
                "pass --memory_budget_mb lower, or --batch_size"
            ) from None
    if probe.result is not None:
        device = probe.result.get("device_memory")
        return Trial(
            batch,
            probe.result["harness_ms"],
            batch * accumulate * 1000.0 / probe.result["harness_ms"],
            device["peak_mb"] if device else probe.result["peak_rss_mb"],
            "GPU peak allocated" if device else "peak RSS",
            device.get("free_mb") if device else None,
        )
    if probe.returncode in (-9, 137) or any(sign in probe.stderr for sign in OUT_OF_MEMORY_SIGNS):
        return Trial(batch, None, None, None)
    raise InputError(
        f"--batch_size auto: the trial at batch {batch} failed (exit {probe.returncode}): "
        f"{last_line(probe.stderr)[:200]}"
    )


def default_budget(first: Trial, available_mb: float) -> tuple:
    """(budget MB, how it was reached) when --memory_budget_mb is not given."""
    if first.memory != "peak RSS" and first.free_mb:
        return GPU_BUDGET_FRACTION * first.free_mb, f"{GPU_BUDGET_FRACTION:.0%} of {first.free_mb:.0f} MB GPU free"
    return CPU_BUDGET_FRACTION * available_mb, f"{CPU_BUDGET_FRACTION:.0%} of {available_mb:.0f} MB available"


def trial_table(trials: list, budget_mb: float, chosen: Optional[Trial]) -> list:
    memory = trials[0].memory if trials else "peak RSS"
    lines = [f"  {'batch':>6} {'ms/step':>9} {'samples/s':>10} {memory + ' MB':>24}"]
    for trial in trials:
        if trial.ms_per_step is None:
            lines.append(f"  {trial.batch:>6} {'-':>9} {'-':>10} {'out of memory':>24}")
            continue
        verdict = "chosen" if trial is chosen else ("" if trial.fits(budget_mb) else "over budget")
        lines.append(
            f"  {trial.batch:>6} {trial.ms_per_step:>9.1f} {trial.samples_per_s:>10.0f} {trial.peak_mb:>24.0f}"
            + (f"  {verdict}" if verdict else "")
        )
    return lines


def log_text(trials: list, budget_text: str, chosen: Trial, limit: str = "") -> str:
    """results.log's `batch size auto` line: every trial, then the choice (and `limit`,
    the largest batch tried)."""
    parts = [
        f"{t.batch}: out of memory"
        if t.ms_per_step is None
        else f"{t.batch}: {t.ms_per_step:.1f} ms/step {t.samples_per_s:.0f} samples/s {t.peak_mb:.0f} MB"
        for t in trials
    ]
    return f"{' | '.join(parts)}; chosen {chosen.batch}; budget {budget_text}, {chosen.memory} of each trial" + (
        f"; {limit}" if limit else ""
    )


def largest_batch(rows: int, accumulate: int) -> int:
    """The most the finder tries: MIN_STEPS_PER_EPOCH whole optimizer steps an epoch."""
    return max(1, rows // (accumulate * MIN_STEPS_PER_EPOCH))


def find_batch_size(config, package: str, argv: list, rows: int, say=print):
    """Runs the search for the run's wrapper package and returns the config at the
    chosen batch (its plan rebuilt, the trials for results.log)."""
    available = available_memory_mb()
    given = config.memory_budget_mb

    def budget_of(first: Trial) -> float:
        return given if given is not None else default_budget(first, available)[0]

    most = largest_batch(rows, config.accumulate)
    say(
        f"batch size auto: doubling from {START_BATCH} up to {most} (at least {MIN_STEPS_PER_EPOCH} steps an epoch "
        f"of the {rows} training rows), then bisecting; each trial in its own process, at least {TRIAL_STEPS} "
        f"timed steps of the whole batch and {TRIAL_SAMPLES} samples",
        flush=True,
    )
    trials, budget, chosen = search(lambda batch: run_trial(package, argv, batch, config.accumulate), budget_of, most)
    how = "--memory_budget_mb" if given is not None else default_budget(trials[0], available)[1]
    budget_text = f"{budget:.0f} MB ({how})"
    for line in trial_table(trials, budget, chosen):
        say(line, flush=True)
    if chosen is None:
        first = trials[0]
        peak = "ran out of memory" if first.ms_per_step is None else f"peaked at {first.peak_mb:.0f} MB"
        raise InputError(
            f"--batch_size auto: batch {first.batch} already {peak}, over the budget of {budget_text}; "
            "raise --memory_budget_mb or pass --batch_size"
        )
    say(f"  chosen: batch {chosen.batch}, the highest samples/s within {budget_text}", flush=True)
    return replace(
        config,
        batch_size=chosen.batch,
        plan=make_plan(config.network, "single", 1, chosen.batch),
        batch_search=log_text(
            trials, budget_text, chosen, f"batches up to {most}: {MIN_STEPS_PER_EPOCH} steps an epoch of {rows} rows"
        ),
    )
