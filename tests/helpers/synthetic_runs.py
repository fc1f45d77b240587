"""Results CSVs with their settings records written by hand (the recorder's own writers),
for verdicts with known answers: the curves, accuracies and settings are chosen, not
trained."""

from __future__ import annotations

import numpy as np

from algorithms.session.recorder import ResultsCsv
from algorithms.records import results_csv_name
from algorithms.session.settings_record import append_settings

NETWORK = "cnn2d_3layer_fullconnected_3layer"
# what settings_of records for the main command's default run (batch 100, 10 epochs)
DEFAULT_SETTINGS = {
    "network": NETWORK,
    "optimizer": "sgd",
    "learning_rate": 0.05,
    "momentum": 0.9,
    "nesterov": True,
    "lr_schedule": "none",
    "warmup_steps": 0,
    "lr_scaling": "none",
    "reduce_lr_on_plateau": 0,
    "plateau_factor": None,
    "batch": 100,
    "batch_schedule": "none",
    "accumulate": 1,
    "epochs": 10,
    "max_steps": None,
    "early_stopping": 0,
    "target_accuracy": None,
    "strategy": "single",
    "devices": 1,
    "plan": "single",
    "sync_every": None,
    "ps_sync": None,
    "parity": False,
    "precision": "fp32",
    "execution": "default",
    "tuned": "none",
    "threads": 2,
    "data": "sha256:0123456789abcdef",
    "validation_split": 0.2,
    "seed": 0,
    "device": "cpu",  # and its detail: what RunSession adds (settings_record.device_settings)
    "device_detail": "AMD EPYC (2 torch threads)",
}


def device_column(kind: str) -> str:
    """The CSV's device column of a run on this kind of device (the first GPU for a GPU)."""
    return "cpu" if kind == "cpu" else "cuda:0"


def write_run(
    folder,
    name: str,
    run_id: str,
    losses,
    val_accuracy: float,
    recorded: bool = True,
    row_learning_rate: float = None,
    validations: int = 1,
    accuracies=None,
    check_losses=None,
    val_rows: int = None,
    **settings,
) -> str:
    """One run of framework `name` ("torch/torch", "keras/jax") with these per-step losses
    (steps 1..N) and `validations` validation rows, the last at the end (the epochs its rows
    show); its settings record is
    DEFAULT_SETTINGS with `settings` over it (none with `recorded=False`: an older file).
    The rows' learning rate is the recorded one unless `row_learning_rate` says another;
    `val_rows`: the rows each validation scored, as a real run's val row gives them (its
    samples/s x time), or none. Returns the CSV's path."""
    framework, _, backend = name.partition("/")
    values = {**DEFAULT_SETTINGS, **settings}
    path = str(folder / results_csv_name(values["network"], framework, backend))
    identity = {
        "run_id": run_id,
        "framework": framework,
        "backend": backend,
        "network": values["network"],
        "strategy": values["strategy"],
        "devices": values["devices"],
        "global_batch": values["batch"],
        "device": device_column(values["device"]),
    }
    rate = values["learning_rate"] if row_learning_rate is None else row_learning_rate
    if recorded:
        append_settings(path, run_id, framework, backend, values)
    writer = ResultsCsv(path, identity)
    accuracies = np.full(len(losses), 0.5) if accuracies is None else np.asarray(accuracies, dtype=float)
    for step, (loss, accuracy) in enumerate(zip(np.asarray(losses, dtype=float), accuracies), start=1):
        writer.write(epoch=1, step=step, phase="train", loss=float(loss), accuracy=float(accuracy), learning_rate=rate)
    for epoch in range(1, validations + 1):
        step = len(losses) * epoch // validations
        scored = {} if val_rows is None else {"step_time_ms": 1000.0, "samples_per_sec": float(val_rows)}
        writer.write(epoch=epoch, step=step, phase="val", loss=float(losses[step - 1]), accuracy=val_accuracy, **scored)
    writer.close()
    if check_losses is not None:  # its epoch check (algorithms/run/epoch_check.py), in the folder beside it
        check_folder = folder / "epoch_check"
        check_folder.mkdir(exist_ok=True)
        write_run(check_folder, name, run_id, check_losses, val_accuracy, recorded, part="epoch check", **settings)
    return path


def relabel(csv_path: str, run_id: str, folder, new_run_id: str, **settings) -> str:
    """A real run's rows copied under `new_run_id` into `folder`, its settings record with
    `settings` over it, and a learning_rate given there written on its rows too: a run
    whose recorded settings hide what it really ran (a 0.9x learning rate recorded as the
    default's, say; a CPU run recorded as a GPU's, its rows' device column too). Returns the new CSV's path."""
    import os

    from algorithms.records import CSV_COLUMNS, read_rows, read_settings

    rows = read_rows(csv_path, run_id)
    path = os.path.join(str(folder), os.path.basename(csv_path))
    first = rows[0]
    identity = {column: first[column] for column in CSV_COLUMNS[: CSV_COLUMNS.index("epoch")]}
    append_settings(
        path, new_run_id, first["framework"], first["backend"], {**read_settings(csv_path)[run_id], **settings}
    )
    writer = ResultsCsv(path, {**identity, "run_id": new_run_id})
    for row in rows:
        values = {column: row[column] for column in CSV_COLUMNS[CSV_COLUMNS.index("epoch") :]}
        if "learning_rate" in settings and row["learning_rate"] is not None:
            values["learning_rate"] = settings["learning_rate"]
        if "device" in settings:  # the rows say it too
            values["device"] = device_column(settings["device"])
        writer.identity["global_batch"] = row["global_batch"]
        writer.write(**values)
    writer.close()
    return path


def write_step_checks(csv_path: str, run_id: str, checks: list) -> str:
    """The step check's rows of run `run_id` (run/step_check.py writes them beside its CSV):
    `checks` [(step, worst, part)], worst the step's largest error over its tolerance, part ''
    where within or the part beyond ('layer 3 BatchNormalization gradient'). Returns its path."""
    from algorithms.records import STEP_CHECK_COLUMNS, step_check_csv
    from algorithms.session.recorder import TableCsv

    path = step_check_csv(csv_path)
    writer = TableCsv(path, STEP_CHECK_COLUMNS)
    for step, worst, part in checks:
        writer.write(run_id=run_id, step=step, epoch=1, why="spread", learning_rate=0.05, worst=worst, part=part)
    writer.close()
    return path
