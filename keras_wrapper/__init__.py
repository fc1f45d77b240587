"""Keras: one model builder for every backend (Keras 3 on tensorflow, torch or jax,
chosen by KERAS_BACKEND). `model.py` translates the spec, `train.py` trains it
with model.fit over the shared batch order, recording each step from a callback,
`distribute.py` holds the data-parallel setups (MirroredStrategy on tensorflow,
keras.distribution.DataParallel on jax)."""

import json
import os

from algorithms.contract import Support
from algorithms.errors import InputError
from algorithms.parallel import worker_strategy_advice

SCHEDULE_FLAGS = ("--lr_scaling linear", "--warmup_steps", "--reduce_lr_on_plateau")
KERAS_3_FLAGS = SCHEDULE_FLAGS + ("--accumulate", "--checkpoint_every")
# model.fit applies every update itself, in step, and Keras has no parameter-server
# training (keras-team/keras#18624) nor shared-memory or periodically averaged replicas
NO_WORKER_STRATEGIES = worker_strategy_advice(
    "Keras trains through model.fit, which applies every update in step (Keras 3 has no "
    "parameter-server training: keras-team/keras#18624)"
)


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


def supported() -> Support:
    """What this wrapper implements on the chosen backend (read before the framework is imported)."""
    name = backend()
    if name in ("tensorflow", "jax"):
        return Support(strategies=("single", "data"), flags=KERAS_3_FLAGS, advice=NO_WORKER_STRATEGIES)
    if name == "torch":
        return Support(
            strategies=("single",),
            flags=KERAS_3_FLAGS,
            advice={
                "data": "Keras on torch has no data parallel here; run torch_script.py --strategy "
                "data (DistributedDataParallel), or KERAS_BACKEND=tensorflow or jax",
                **NO_WORKER_STRATEGIES,
            },
        )
    return Support(  # Keras 2 on Theano (legacy env)
        strategies=("single",), flags=("--checkpoint_every",), advice=NO_WORKER_STRATEGIES
    )


def prepare_process(config, dataset) -> None:
    """Before Keras is imported: refuse what Keras cannot run as asked on this data, and
    have jax make N host (CPU) devices, which it does only if asked at import."""
    name, rows, accumulate = backend(), len(dataset.train_x), config.accumulate
    if accumulate > 1 and rows % config.effective_batch:
        # Keras steps after every K batches, across epoch ends too; one K x batch step needs K equal batches
        raise InputError(
            f"--accumulate {accumulate}: Keras steps once per {accumulate} equal batches, but the "
            f"{rows} training rows leave a last step of {rows % config.effective_batch} rows; pick "
            f"--batch_size x --accumulate dividing {rows} (or use tensorflow_script.py)"
        )
    if config.plan.strategy != "data":
        return
    if accumulate > 1 and name == "tensorflow":
        raise InputError(
            "--accumulate with --strategy data: Keras's gradient accumulation does not run under "
            "MirroredStrategy; use tensorflow_script.py or KERAS_BACKEND=jax"
        )
    devices = config.devices
    if name == "jax" and rows % devices:
        raise InputError(
            f"--strategy data --devices {devices}: jax splits every batch evenly across the devices, "
            f"but the last batch of each epoch has {rows % config.batch_size} of the {rows} training "
            f"rows; change --validation_split so that the training rows divide by {devices}"
        )
    flags = os.environ.get("XLA_FLAGS", "")
    if name == "jax" and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()


def launch(config, argv: list) -> None:
    """One process: Keras's data parallel runs its replicas inside it."""
