"""Keras: one model builder for every backend (Keras 3 on tensorflow, torch or jax,
chosen by KERAS_BACKEND). `model.py` translates the spec, `train.py` trains it
with model.fit over the shared batch order, recording each step from a callback,
`distribute.py` holds the data-parallel setups (MirroredStrategy on tensorflow,
keras.distribution.DataParallel on jax)."""
import json
import os

SCHEDULE_FLAGS = ("--lr_scaling linear", "--warmup_steps", "--reduce_lr_on_plateau")


def backend() -> str:
    """The backend Keras will load, read as Keras reads it, without importing it."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"].lower()
    config = os.path.join(os.environ.get("KERAS_HOME", os.path.expanduser("~/.keras")), "keras.json")
    try:
        with open(config) as handle:
            return str(json.load(handle).get("backend", "tensorflow")).lower()
    except (OSError, ValueError):
        return "tensorflow"


def supported() -> dict:
    """What this wrapper implements on the chosen backend (read before the framework is imported)."""
    name = backend()
    if name in ("tensorflow", "jax"):
        return {"strategies": ("single", "data"), "flags": SCHEDULE_FLAGS}
    if name == "torch":
        return {"strategies": ("single",), "flags": SCHEDULE_FLAGS,
                "advice": {"data": "Keras on torch has no data parallel here; run torch_script.py --strategy "
                                   "data (DistributedDataParallel), or KERAS_BACKEND=tensorflow or jax"}}
    return {"strategies": ("single",), "flags": ()}  # Keras 2 on Theano (legacy env)


def prepare_process(config, dataset) -> None:
    """Before Keras is imported: jax makes N host (CPU) devices only if asked at import.
    jax shards every batch evenly across the devices, the epoch's last, shorter one
    too, which works exactly when the training rows divide by N (--batch_size does)."""
    if backend() != "jax" or config.plan.strategy != "data":
        return
    devices, rows = config.devices, len(dataset.train_x)
    if rows % devices:
        from algorithms.errors import InputError

        raise InputError(f"--strategy data --devices {devices}: jax splits every batch evenly across the devices, "
                         f"but the last batch of each epoch has {rows % config.batch_size} of the {rows} training "
                         f"rows; change --validation_split so that the training rows divide by {devices}")
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
