"""The settings record: every setting two runs must share for their difference to be
judged, written once per run, at its start, beside its results CSV:

    results/<csv stem>.settings.jsonl     one JSON line per run: {"run_id", "framework",
                                          "backend", "settings": {name: value}}

Among the settings, `releases` ({distribution or library: version}: the framework, its
backend, numpy and the libraries they compute with; the one setting that is not a scalar)
is a drift source like the threads (algorithms/analysis/settings.py), which the verdict
line names where two runs differ in it (algorithms/analysis/releases.py).

The CSV keeps its columns (older readers still read it); a run resumed with --resume
adds no second line. Read back by algorithms/records.py (read_settings); what an older
file without this record leaves unknown, algorithms/analysis/settings.py says.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from algorithms.errors import ResourceError
from algorithms.records import read_settings, sidecar_path
from algorithms.dataset.array_data import folder_files
from algorithms.session.recorder import append_whole, cannot_write

# what a pair may differ in and still be one same-seed pair (analysis/settings.py reads these):
# the seed (the seed regime's), what changes only the order and kernels of the float32
# arithmetic, and where a run stops
SEED = ("seed",)
# releases: {distribution or library: version} (a framework upgrade is a drift source, named in the verdict)
THREADS_AND_KERNELS = ("threads", "execution", "tuned", "device_detail", "releases")
STOPS = ("epochs", "max_steps", "early_stopping", "target_accuracy")
# how one synchronous step is split over devices or parts (--strategy data, model, tensor,
# pipeline, hybrid, --accumulate): the same sums in another order, when both runs step synchronously
SPLITS = ("strategy", "devices", "plan", "accumulate")
SYNCHRONOUS = ("single", "data", "model", "tensor", "pipeline", "hybrid")
KEY_HEX = 12

HASH_CHUNK_BYTES = 1 << 20
FINGERPRINT_HEX = 16  # 64 bits of the SHA-256: no two training files here collide


def file_fingerprint(path: str) -> str:
    """The training file's content (not its name): a copy elsewhere is the same data, an
    edited file is other data. A folder of images: each image's path inside it (its class
    folder is its label) and content, the hidden cache left out."""
    digest = hashlib.sha256()
    if os.path.isdir(path):
        for relative in folder_files(path):
            digest.update(f"{relative}\0{os.path.getsize(os.path.join(path, relative))}\0".encode())
            _hash_content(os.path.join(path, relative), digest)
    else:
        _hash_content(path, digest)
    return "sha256:" + digest.hexdigest()[:FINGERPRINT_HEX]


def _hash_content(path: str, digest) -> None:
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)


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
        # every Dropout layer's mask from the uniforms of network/dropout.py, the same in every
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


def synchronous(settings) -> bool:
    """Whether a run's every update is one synchronous step over the whole global batch (a
    parameter server with --ps_sync too): its steps are a single device's, split."""
    strategy = settings.get("strategy")
    return strategy in SYNCHRONOUS or (strategy == "ps" and bool(settings.get("ps_sync")))


def yardstick_key(settings: dict) -> str:
    """The settings a run's own drift yardstick holds for (run/yardstick.py), as a short
    hash: all but the seed, the drift sources, where the run stops and (a synchronous run)
    how its step is split, so a second run at the same settings finds the first one's."""
    ignored = SEED + THREADS_AND_KERNELS + STOPS + (SPLITS if synchronous(settings) else ())
    kept = {name: value for name, value in settings.items() if name not in ignored}
    kept.pop("part", None)
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:KEY_HEX]


def device_settings(device) -> dict:
    """Where the run trained (contract.Device), as the record holds it: `device`, its kind
    (cpu or gpu: a pair on two kinds is never judged), and `device_detail`, the device's
    model with its driver and runtime versions (another model is a drift source, like
    another CPU: not a setting a pair must share)."""
    return {"device": device.kind, "device_detail": device.detail}


def releases(versions: dict) -> dict:
    """The run's releases: what its wrapper's Runtime.versions names (the framework, its backend,
    numpy, their libraries) and numpy's BLAS, which the float64 evaluation multiplies with."""
    return {**versions, **numpy_blas()}


def numpy_blas() -> dict:
    """numpy's BLAS and its version, where this numpy reports them (1.25 on); {} elsewhere."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return {"numpy BLAS": f"{blas['name']} {blas['version']}"}
    except (TypeError, KeyError, AttributeError):  # an older numpy: show_config prints only
        return {}


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
