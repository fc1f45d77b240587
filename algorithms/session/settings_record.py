"""The settings record: every setting two runs must share for their difference to be
judged, written once per run, at its start, beside its results CSV:

    results/<csv stem>.settings.jsonl     one JSON line per run: {"run_id", "framework",
                                          "backend", "settings": {name: value}}

The CSV keeps its columns (older readers still read it); a run resumed with --resume
adds no second line. Read back by algorithms/records.py (read_settings); what an older
file without this record leaves unknown, algorithms/analysis/settings.py says.
"""

from __future__ import annotations

import hashlib
import json
import os

from algorithms.errors import ResourceError
from algorithms.records import read_settings, sidecar_path
from algorithms.session.recorder import append_whole, cannot_write

HASH_CHUNK_BYTES = 1 << 20
FINGERPRINT_HEX = 16  # 64 bits of the SHA-256: no two training files here collide


def file_fingerprint(path: str) -> str:
    """The training file's content (not its name): a copy elsewhere is the same data, an
    edited file is other data."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()[:FINGERPRINT_HEX]


def _schedule(schedule: tuple) -> str:
    return ",".join(f"{epoch}:{value:g}" for epoch, value in schedule) or "none"


def settings_of(config) -> dict:
    """The run's settings by name, each a JSON scalar (None: the flag is off, e.g. no
    --max_steps). Only the optimizer's own hyper-parameters are recorded."""
    optimizer = config.optimizer
    hyper = (
        {"momentum": optimizer.momentum, "nesterov": optimizer.nesterov}
        if optimizer.name == "sgd"
        else {"beta_1": optimizer.beta_1, "beta_2": optimizer.beta_2, "epsilon": optimizer.epsilon}
    )
    plan = config.plan.describe() if config.plan and config.plan.strategy != "single" else "single"
    return {
        "network": config.network.name,
        "optimizer": optimizer.name,
        "learning_rate": optimizer.learning_rate,
        **hyper,
        "lr_schedule": _schedule(config.lr_schedule),
        "warmup_steps": config.warmup_steps,
        "lr_scaling": config.lr_scaling,
        "reduce_lr_on_plateau": config.reduce_lr_on_plateau,
        "plateau_factor": config.plateau_factor if config.reduce_lr_on_plateau else None,
        "batch": config.effective_batch,
        "batch_schedule": _schedule(config.batch_schedule),
        "accumulate": config.accumulate,
        "epochs": config.num_epochs,
        "max_steps": config.max_steps,
        "early_stopping": config.early_stopping,
        "target_accuracy": config.target_accuracy,
        "strategy": config.strategy,
        "devices": config.devices,
        "plan": plan,
        "sync_every": config.sync_every if config.strategy == "localsgd" else None,
        "ps_sync": config.ps_sync if config.strategy == "ps" else None,
        "parity": config.parity,
        "precision": config.precision,
        # every Dropout layer's mask from the uniforms of spec/dropout.py, the same in every
        # framework: a same-seed pair then drops the same units (a record without it: each
        # framework drew its own masks)
        "dropout": "shared",
        "execution": config.execution or "default",
        "tuned": config.tuned or "none",
        "threads": config.threads,
        "data": file_fingerprint(config.train),
        "validation_split": config.validation_split,
        "seed": config.seed,
        **({"fault": config.fault.describe()} if config.fault else {}),  # a record without it: no fault
        # a user's network file (a built-in network is its name): the same name, another file, is
        # another network (a record without it: a built-in network)
        **({"network_file": file_fingerprint(config.network.source)} if not config.network.builtin else {}),
        # the epoch check's own record (run/epoch_check.py) says what it trains on; a run's has none
        **({"part": config.part} if config.part != "run" else {}),
    }


def device_settings(device) -> dict:
    """Where the run trained (contract.Device), as the record holds it: `device`, its kind
    (cpu or gpu: a pair on two kinds is never judged), and `device_detail`, the device's
    model with its driver and runtime versions (another model is a drift source, like
    another CPU: not a setting a pair must share)."""
    return {"device": device.kind, "device_detail": device.detail}


def append_settings(csv_path: str, run_id: str, framework: str, backend: str, settings: dict) -> None:
    """The run's line, unless the file has one for `run_id` already (a resumed run)."""
    path = sidecar_path(csv_path)
    if run_id in read_settings(path):
        return
    line = json.dumps({"run_id": run_id, "framework": framework, "backend": backend, "settings": settings})
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # one write under the lock, as the CSV rows: runs starting together keep their lines whole
            append_whole(fd, (line + "\n").encode(), path)
        finally:
            os.close(fd)
    except OSError as error:
        raise ResourceError(cannot_write(path, error, "--results_dir")) from None
