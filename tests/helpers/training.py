"""What the parallel-strategy tests share: the probe process they start (one Python with
its logical devices set before any op, printing JSON), the runs a probe trains through
the wrapper's own train() in that process, and the checks that a run trained."""

from __future__ import annotations

import importlib
import json
import math

import numpy as np

from algorithms.records import read_rows
from tests.conftest import run_module
from tests.helpers.flags import run_flags

NETWORK = "cnn2d_3layer_fullconnected_3layer"
BATCH, EPOCHS = 32, 2
STEPS_PER_EPOCH = 480 // BATCH  # the small data's 480 training rows: 15 steps an epoch


def run_probe(module: str, train_csv, results_dir, env_extra: dict | None = None) -> dict:
    """`python -m module TRAIN_CSV RESULTS_DIR`: the JSON its last line prints."""
    proc = run_module(module, [str(train_csv), str(results_dir)], env_extra, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_strategy(wrapper_module: str, script: str, train_csv, results_dir, strategy: str, devices: int, *extra):
    """EPOCHS epochs at BATCH with this strategy, through the wrapper's train() in this
    process: the probe's logical devices, fixed at its first op, serve the run too."""
    from algorithms.run.entry import prepare
    from algorithms.session.run_session import RunSession

    wrapper = importlib.import_module(wrapper_module)
    argv = run_flags(train_csv, results_dir, num_epochs=EPOCHS, batch_size=BATCH, strategy=strategy, devices=devices)
    config, dataset = prepare(argv + list(extra), script, "")
    wrapper.train(RunSession(config, dataset, wrapper.describe_runtime()))


def resume_line(run_id: str, checkpoint: int, steps_per_epoch: int = STEPS_PER_EPOCH) -> str:
    """What a run resumed from its checkpoint at step `checkpoint` says: where a signal stops
    a run, and so which checkpoint is its last, depends on the machine's speed, and one on
    an epoch's last step resumes with that epoch's validation (run_session._restore)."""
    epoch, into = divmod(checkpoint, steps_per_epoch)
    if into == 0:
        return f"resuming run {run_id} after epoch {epoch}'s last step (its validation, then step {checkpoint + 1})"
    return f"resuming run {run_id} at step {checkpoint + 1} (epoch {epoch + 1})"


def train_rows(csv_path) -> list:
    return [r for r in read_rows(str(csv_path)) if r["phase"] == "train"]


def assert_trains(losses: list) -> None:
    """The first loss sits at chance (ln 10: the loss is the mean over the batch, not a
    sum over replicas), and the last third of the steps is clearly below the first."""
    third = len(losses) // 3
    assert abs(losses[0] - math.log(10)) < 0.15, "the first loss should sit near ln(10)"
    assert np.mean(losses[-third:]) < np.mean(losses[:third]) - 0.1, losses
