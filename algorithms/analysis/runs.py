"""A run read back from a results CSV (`path[@RUN_ID]`, default the file's latest
run): its train losses by step, validation and test accuracy, and its settings (its
settings record, else what its rows show: settings.py); and the moving mean that
smooths a loss curve. Read by compare.py, baseline.py and the verdicts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from algorithms.analysis.settings import (
    Settings,
    from_key as settings_from_key,
    from_rows as settings_from_rows,
    recorded as settings_recorded,
)
from algorithms.errors import InputError
from algorithms.records import check_csv, read_rows, read_settings, read_step_checks, run_ids, yardstick_envelope
from algorithms.session.settings_record import yardstick_key

SMOOTHING_STEPS = 5


@dataclass
class Run:
    path: str
    run_id: str
    label: str
    backend_key: tuple
    config_key: tuple  # (network, global batch, strategy, devices), from the rows
    steps: np.ndarray
    losses: np.ndarray
    accuracies: Optional[np.ndarray] = None  # the train rows' accuracy, by step (None: built by hand)
    samples: Optional[np.ndarray] = None  # the train rows' samples, by step (None: built by hand)
    # (loss, accuracy, rows) of the validation split at the initial weights: the init row (step 0)
    init: Optional[tuple] = None
    val: list = field(default_factory=list)  # (step, loss, accuracy), one per epoch
    val_rows: Optional[int] = None  # the rows the last validation scored (None: unknown, or built by hand)
    test_accuracy: Optional[float] = None
    val_progress: list = field(default_factory=list)  # (wall_time_s, training samples so far), one per val row
    settings: Optional[Settings] = None  # None: built by hand, from config_key and the epochs validated
    check: Optional["Run"] = None  # its epoch check (run/epoch_check.py), when it ran one
    # the envelope a run at its settings measured (run/yardstick.py): a path, where there is one
    yardstick: Optional[str] = None
    step_checks: Optional[list] = None  # its step check's rows (run/step_check.py), where it ran one
    shown: Optional[Settings] = None  # what its rows show (settings.from_rows); None: its settings are that

    def __post_init__(self):
        if self.settings is None:
            self.settings = settings_from_key(self.config_key, len(self.val))
        if self.shown is None:
            self.shown = self.settings

    @property
    def seed(self):
        return self.settings.get("seed")

    @property
    def parity(self) -> bool:
        return bool(self.settings.get("parity"))

    @property
    def final_val_accuracy(self) -> Optional[float]:
        return self.val[-1][2] if self.val else None


def load_run(spec: str) -> Run:
    path, _, run_id = spec.partition("@")
    if not os.path.isfile(path):
        raise InputError(f"{path}: file not found; give results CSVs written by an entry script")
    ids = run_ids(path)
    if not ids:
        raise InputError(f"{path}: no rows")
    run_id = run_id or ids[-1]
    if run_id not in ids:
        raise InputError(f"{path}: no run {run_id!r}; runs in it: {', '.join(ids[-5:])}")
    run = _run_of(path, run_id)
    check = check_csv(path)
    if os.path.isfile(check) and run_id in run_ids(check):
        run.check = _run_of(check, run_id)
    run.step_checks = read_step_checks(path, run_id)
    recorded = read_settings(path).get(run_id)
    if recorded is not None:  # the yardstick measured at its settings (by it or an earlier run), where there is one
        key, folder = yardstick_key(recorded), os.path.dirname(path)
        run.yardstick = _existing(yardstick_envelope(folder, key))
        if run.check is not None:
            run.check.yardstick = _existing(yardstick_envelope(folder, key, check=True))
    return run


def _existing(path: str) -> Optional[str]:
    return path if os.path.isfile(path) else None


def _run_of(path: str, run_id: str) -> Run:
    rows = read_rows(path, run_id)
    train = [r for r in rows if r["phase"] == "train"]
    first = rows[0]
    test = [r["accuracy"] for r in rows if r["phase"] == "test"]
    return Run(
        path=path,
        run_id=run_id,
        label=f"{first['framework']}/{first['backend']} {run_id}",
        backend_key=(first["framework"], first["backend"], first["network"]),
        config_key=(first["network"], first["global_batch"], first["strategy"], first["devices"]),
        steps=np.array([r["step"] for r in train]),
        losses=np.array([r["loss"] for r in train]),
        accuracies=np.array([r["accuracy"] for r in train]),
        samples=np.array([_samples(r) for r in train]),
        init=next((_init(r) for r in rows if r["phase"] == "init"), None),
        val=[(r["step"], r["loss"], r["accuracy"]) for r in rows if r["phase"] == "val"],
        val_rows=next((_samples(r) or None for r in reversed(rows) if r["phase"] == "val"), None),
        test_accuracy=test[-1] if test else None,
        val_progress=val_progress(rows),
        settings=_settings(path, run_id, rows),
        shown=settings_from_rows(rows),
    )


def _samples(row: dict) -> int:
    """The samples a train or init row was measured on: samples/s x its time."""
    if not row["samples_per_sec"] or row["step_time_ms"] is None:
        return 0
    return round(row["samples_per_sec"] * row["step_time_ms"] / 1000.0)


def _init(row: dict) -> tuple:
    """(loss, accuracy, rows scored) of an init row."""
    return row["loss"], row["accuracy"], _samples(row)


def setting_differences(a: Run, b: Run, ignore: tuple = ()) -> list:
    """(name, a's, b's) of every setting known for both runs that differs. Two recorded runs
    compare their records. With an older file, both are read as their rows show them:
    there `epochs` is the epochs a run validated, not its --num_epochs, so a recorded run
    cut short by --max_steps is not mistaken for a full one."""
    if a.settings.recorded and b.settings.recorded:
        return a.settings.differences(b.settings, ignore)
    return a.shown.differences(b.shown, ignore)


def _settings(path: str, run_id: str, rows: list) -> Settings:
    recorded = read_settings(path).get(run_id)
    if recorded is None:
        return settings_from_rows(rows)
    return settings_recorded(recorded)  # only a run with --fault records one; device: see settings.recorded


def val_progress(rows: list) -> list:
    """(wall_time_s, training samples stepped on so far) at each validation row; a train
    row's samples are samples_per_sec x step_time_ms (its batch, the last smaller one too)."""
    progress, samples = [], 0
    for row in rows:
        if row["phase"] == "train" and row["samples_per_sec"] is not None:
            samples += round(row["samples_per_sec"] * row["step_time_ms"] / 1000.0)
        elif row["phase"] == "val":
            progress.append((row["wall_time_s"], samples))
    return progress


def losses_at(run: Run, steps: np.ndarray) -> np.ndarray:
    index = {int(step): i for i, step in enumerate(run.steps)}
    return np.array([run.losses[index[int(step)]] for step in steps])


def curve_distance(a: Run, b: Run) -> Optional[float]:
    """How far apart two loss curves are: the mean, over their common steps, of
    |5-step mean loss of a - that of b| (None without a common step)."""
    steps = np.intersect1d(a.steps, b.steps)
    if steps.size == 0:
        return None
    return float(np.mean(np.abs(smooth(losses_at(a, steps)) - smooth(losses_at(b, steps)))))


def smooth(values: np.ndarray, width: int = SMOOTHING_STEPS) -> np.ndarray:
    """The moving mean over `width` steps (shorter by width - 1); a curve shorter than that as it is."""
    if len(values) < width:
        return values
    return np.convolve(values, np.ones(width) / width, mode="valid")
