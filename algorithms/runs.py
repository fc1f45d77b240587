"""A run read back from a results CSV (`path[@RUN_ID]`, default the file's latest
run): its train losses by step, validation and test accuracy, and what must match
for two runs to be compared; and the moving mean that smooths a loss curve. Read by
compare.py and baseline.py."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import InputError
from .recorder import read_rows, run_ids

SMOOTHING_STEPS = 5


@dataclass
class Run:
    path: str
    run_id: str
    label: str
    backend_key: tuple
    config_key: tuple  # (network, global batch, strategy, devices): what must match for a fair pair
    steps: np.ndarray
    losses: np.ndarray
    val: list = field(default_factory=list)  # (step, loss, accuracy)
    test_accuracy: Optional[float] = None


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
        val=[(r["step"], r["loss"], r["accuracy"]) for r in rows if r["phase"] == "val"],
        test_accuracy=test[-1] if test else None,
    )


def smooth(values: np.ndarray, width: int = SMOOTHING_STEPS) -> np.ndarray:
    """The moving mean over `width` steps (shorter by width - 1); a curve shorter than that as it is."""
    if len(values) < width:
        return values
    return np.convolve(values, np.ones(width) / width, mode="valid")
