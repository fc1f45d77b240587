"""Results CSVs of made-up runs, written by the recorder's own writer (ResultsCsv), so
the code that reads runs back is tested on true rows in milliseconds: what a real run
adds (a framework's losses) is tested where a real run is needed."""

from __future__ import annotations

import numpy as np

from algorithms.run.recorder import ResultsCsv

NETWORK = "cnn2d_3layer_fullconnected_3layer"
# a torch run on the small data: 480 training rows, 2 epochs of 15 steps at batch 32
IDENTITY = dict(framework="torch", backend="torch", network=NETWORK, strategy="single", devices=1, global_batch=32)
STEPS_PER_EPOCH, EPOCHS = 15, 2
STEP_TIME_MS = 20.0


def seed_curve(seed: int) -> tuple:
    """(per-step losses, per-epoch validation accuracies) of a run that learns: from
    about ln(10) down, with the seed's own step-to-step noise and final accuracy."""
    rng = np.random.default_rng(seed)
    steps = np.arange(STEPS_PER_EPOCH * EPOCHS)
    losses = 0.3 + 2.0 * np.exp(-steps / 12.0) + rng.normal(0.0, 0.04, steps.size)
    return losses, [0.70 + 0.02 * rng.random(), 0.85 + 0.02 * rng.random()]


def stuck_curve() -> tuple:
    """A run that learned nothing (a learning rate far too high): loss and accuracy at chance."""
    return np.full(STEPS_PER_EPOCH * EPOCHS, np.log(10)), [0.1] * EPOCHS


def write_run(path, run_id: str, losses, val_accuracies, **identity) -> str:
    """One run's rows as a session writes them: a train row per loss (steps 1..N), a val
    row at the end of each epoch (the steps cut evenly into len(val_accuracies) epochs).
    `identity` overrides IDENTITY's columns. Appends, as runs do; returns the path."""
    identity = {**IDENTITY, **identity}
    steps_per_epoch = len(losses) // len(val_accuracies)
    writer = ResultsCsv(str(path), {"run_id": run_id, **identity})
    try:
        for step, loss in enumerate(losses, start=1):
            epoch = (step - 1) // steps_per_epoch + 1
            writer.write(
                epoch=epoch,
                step=step,
                phase="train",
                loss=float(loss),
                accuracy=val_accuracies[epoch - 1],
                learning_rate=0.05,
                step_time_ms=STEP_TIME_MS,
                data_time_ms=0.5,
                samples_per_sec=identity["global_batch"] * 1000.0 / STEP_TIME_MS,
                wall_time_s=step * STEP_TIME_MS / 1000.0,
            )
            if step % steps_per_epoch == 0:
                writer.write(
                    epoch=epoch,
                    step=step,
                    phase="val",
                    loss=float(loss),
                    accuracy=val_accuracies[epoch - 1],
                    wall_time_s=step * STEP_TIME_MS / 1000.0 + 0.1,
                )
    finally:
        writer.close()
    return str(path)
