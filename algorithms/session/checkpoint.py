"""Checkpoint and resume, the framework-neutral half.

`--checkpoint_every N` saves every N optimizer steps; `--resume RUN_ID` continues
that run (same run id, its CSV rows appended) from its latest checkpoint. The
framework state (weights, optimizer slots, RNG) is saved by the wrapper in the
framework's own format; this module keeps where the run stood:

    <results_dir>/checkpoints/<run_id>/<csv name without .csv>/step-0000050/
        <the framework's files>     written first, by every process of the run
        state.json                  written last (atomically): marks the checkpoint complete

state.json holds the step, the epoch and the next batch in it, the learning-rate
schedule, the early-stopping counters, the samples and the wall time the run has
used, and the settings a resumed run must share.
The last KEEP complete checkpoints are kept. A run resumed from step S rewrites
the rows after S that the interrupted run had written; `records.read_rows`
keeps the later of two rows for the same step.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Optional

from algorithms.errors import InputError

STATE_FILE = "state.json"
KEEP = 2


class Checkpoints:
    """One run's checkpoints: where they go, when one is due, and with --resume the
    newest one (`resume_from`, None without --resume) and its state."""

    def __init__(self, config, run_id: str, csv_name: str):
        self.root = checkpoint_root(config.results_dir, run_id, csv_name)
        self.every = config.checkpoint_every
        self.settings = shared_settings(config)
        self.resume_from: Optional[str] = None
        self.resume_state: Optional[dict] = None
        if config.resume:
            self.resume_from, self.resume_state = find_resume_point(self.root, run_id, self.settings, config.max_steps)

    def due(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def save(self, trainer, step: int, state: Optional[dict]) -> None:
        """`trainer.save_checkpoint(folder)` writes the framework's state (every process
        calls it; it returns once all have written), then the process that records
        writes `state` (None in the others) as state.json, which marks it complete."""
        directory = step_folder(self.root, step)
        os.makedirs(directory, exist_ok=True)
        trainer.save_checkpoint(directory)
        if state is not None:
            write_state(directory, {**state, "settings": self.settings})
            prune(self.root)


def checkpoint_root(results_dir: str, run_id: str, csv_name: str) -> str:
    return os.path.join(results_dir, "checkpoints", run_id, os.path.splitext(csv_name)[0])


def shared_settings(config) -> dict:
    """What must not change between a run and its resumption."""
    return _unscheduled_settings(config) | {
        flag: ",".join(f"{epoch}:{value:g}" for epoch, value in schedule)
        for flag, schedule in (("batch_schedule", config.batch_schedule), ("lr_schedule", config.lr_schedule))
        if schedule  # only when given: checkpoints written before these flags still resume
    }


def _unscheduled_settings(config) -> dict:
    return {
        "network": config.network.name,
        "train": os.path.abspath(config.train),
        "batch_size": config.batch_size,
        "accumulate": config.accumulate,
        "seed": config.seed,
        "validation_split": config.validation_split,
        "strategy": config.strategy,
        "devices": config.devices,
        "parity": config.parity,
        "optimizer": config.optimizer.name,
        "learning_rate": config.optimizer.learning_rate,
        "lr_scaling": config.lr_scaling,
        "warmup_steps": config.warmup_steps,
        "precision": config.precision,
    }


def complete_checkpoints(root: str) -> list:
    """Complete checkpoint folders, oldest first."""
    if not os.path.isdir(root):
        return []
    names = sorted(
        name
        for name in os.listdir(root)
        if name.startswith("step-") and os.path.exists(os.path.join(root, name, STATE_FILE))
    )
    return [os.path.join(root, name) for name in names]


def write_state(directory: str, state: dict) -> None:
    temporary = os.path.join(directory, STATE_FILE + ".tmp")
    with open(temporary, "w") as handle:
        json.dump(state, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, os.path.join(directory, STATE_FILE))


def prune(root: str) -> None:
    for directory in complete_checkpoints(root)[:-KEEP]:
        shutil.rmtree(directory, ignore_errors=True)


def find_resume_point(root: str, run_id: str, settings: dict, max_steps: Optional[int] = None) -> tuple:
    """(checkpoint folder, its state) to resume from, or an InputError naming the fix."""
    found = complete_checkpoints(root)
    if not found:
        raise InputError(f"--resume {run_id}: " + _why_none(root, run_id))
    directory = found[-1]
    with open(os.path.join(directory, STATE_FILE)) as handle:
        state = json.load(handle)
    changed = [
        f"{key} {state['settings'].get(key)!r} -> {value!r}"
        for key, value in settings.items()
        if state["settings"].get(key) != value
    ]
    if changed:
        raise InputError(
            f"--resume {run_id}: the flags differ from the checkpointed run's: {'; '.join(changed)}; "
            "resume with the original flags (see its command line in results.log)"
        )
    if max_steps is not None and max_steps <= state["step"]:
        raise InputError(
            f"--resume {run_id} --max_steps {max_steps}: its latest checkpoint is at step {state['step']} "
            f"already; pass a --max_steps above {state['step']}, or drop it to train to the last epoch"
        )
    return directory, state


def _why_none(root: str, run_id: str) -> str:
    """No checkpoint to resume from: the run has none at all, or has them for another
    framework or network (its CSV name is the folder under checkpoints/<run_id>/)."""
    run_folder, runs_folder = os.path.dirname(root), os.path.dirname(os.path.dirname(root))
    others = sorted(name for name in _listdir(run_folder) if complete_checkpoints(os.path.join(run_folder, name)))
    if others:
        return (
            f"no complete checkpoint in {root}: run {run_id} was checkpointed as {', '.join(others)}; "
            "resume it with the entry script and --network that made it (its command line is in results.log)"
        )
    runs = sorted(_listdir(runs_folder))
    return (
        f"no complete checkpoint in {root}"
        + (
            f" (runs with checkpoints there: {', '.join(runs[-3:])}{', ...' if len(runs) > 3 else ''})"
            if runs and not os.path.isdir(run_folder)
            else ""
        )
        + "; the run must have been started with --checkpoint_every N (and the same --results_dir)"
    )


def _listdir(directory: str) -> list:
    return os.listdir(directory) if os.path.isdir(directory) else []


def step_folder(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:07d}")
