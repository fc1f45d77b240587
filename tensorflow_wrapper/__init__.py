"""Raw TensorFlow 2: the spec as tf.Variables and tf.nn ops (NHWC), trained by
tf.function + GradientTape steps; no model.fit. `model.py` translates the spec
(layer placement, split-independent dropout), `tensor_parallel.py` its
channel-split variant, `devices.py` picks devices and the tf.distribute strategy
(MirroredStrategy; MultiWorkerMirroredStrategy from TF_CONFIG), `trainer.py` holds
the steps (pipeline's micro-batches too), `train.py` runs them through the shared
loop in algorithms/run/loop.py; `ps.py` is --strategy ps (ParameterServerStrategy and
its ClusterCoordinator as an UpdatePool of the shared asynchronous loop in
algorithms/run/updates.py), `cluster.py` starts its processes; `native.py` serves
the benchmark."""

import json
import os
import sys

# TensorFlow's INFO logging off before it loads, its warnings kept (the oneDNN notice it writes
# before reading this is dropped by the entry script: algorithms/run/notices.py)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from algorithms.contract.types import Support
from algorithms.contract.shared_support import LR_SCHEDULE_FLAGS, PRECISION_FLAGS
from algorithms.machine.resources import Footprint, Started
from algorithms.machine.tuning import Tuning
from backends.tuning import MEASURED, TENSORFLOW, TENSORFLOW_LISTS
from backends.gpu_builds import tensorflow_build
from backends.xla import dump_to, thread_flags
from algorithms.errors import InputError
from algorithms.machine.devices import hide_gpus
from algorithms.network.parallel import worker_strategy_advice


# measured: enable_op_determinism() makes XLA refuse the max-pool gradient ("GPU MaxPool
# gradient ops do not yet have a deterministic XLA implementation"), on CPU too
PARITY_XLA = (
    "--compile with --parity: TensorFlow's op determinism has no deterministic XLA max-pool "
    "gradient; drop --compile (--execution compiled) or --parity"
)


# the local cluster's tasks are processes sharing this machine; one GPU is not split between them here
PS_ON_CPU = (
    "--device gpu with --strategy ps: tensorflow_script.py runs its cluster's worker and parameter-server "
    "tasks on the CPU; drop --device gpu (or use --strategy data or single on the GPU)"
)


def started(config) -> Started:
    """What a run of `config` starts on this machine (devices.py, cluster.py); nothing in a
    task of a cluster (TF_CONFIG, or the local cluster's chief), whose launcher checked."""
    from tensorflow_wrapper.cluster import PARENT_NAMESPACE_VARIABLE

    devices = config.devices
    if (
        config.strategy == "single"
        or os.environ.get("TF_CONFIG", "").strip()
        or PARENT_NAMESPACE_VARIABLE in os.environ
    ):
        return Started()
    if config.strategy == "ps":
        return Started(
            processes=devices + config.ps_tasks + 1,
            data_copies=1,
            what=f"{devices} worker and {config.ps_tasks} parameter-server tasks and their chief",
        )
    return Started(processes=1, devices=devices, what=f"one process with {devices} devices")


# measured (docs/parallel.md#memory-before-anything-starts)
FOOTPRINT = Footprint(process_mb=880, sample_mb=0.47, device_mb=13, started=started, name="tensorflow")


def supported() -> Support:
    """What this wrapper implements (read before the framework is imported)."""
    return Support(
        strategies=("single", "data", "model", "tensor", "pipeline", "ps"),
        flags=LR_SCHEDULE_FLAGS
        + PRECISION_FLAGS
        + (
            "--accumulate",
            "--checkpoint_every",
            "--compile",
            "--execution eager",
            "--execution graph",
            "--noise_scale",
            "--fault frozen",
            "--device gpu",
        ),
        tuning=Tuning("tensorflow", TENSORFLOW, measured=MEASURED, lists=TENSORFLOW_LISTS),
        advice=worker_strategy_advice(
            "tf.distribute has no lock-free shared-memory replicas nor periodic model averaging",
            ("async", "localsgd"),
        ),
        footprint=FOOTPRINT,
        thread_environment=thread_flags,  # XLA's
        profile_environment=dump_to,
        gpu_build=tensorflow_build,
    )


def prepare_process(config, dataset) -> None:
    """--compile is the single-device fused step's XLA jit_compile."""
    if config.compile and (config.strategy != "single" or config.accumulate > 1):
        raise InputError(
            "--compile: tensorflow_script.py compiles the single-device step "
            "(--strategy single, no --accumulate); drop --compile"
        )
    if config.compile and config.parity:
        raise InputError(PARITY_XLA)
    if config.precision == "fp16" and config.strategy != "single":
        raise InputError(
            f"--precision fp16 with --strategy {config.strategy}: tensorflow_script.py scales the fp16 "
            "loss on one device only; use --precision bf16 (no loss scale needed) or --strategy single"
        )
    if config.execution == "eager" and config.strategy == "data":
        raise InputError(
            "--execution eager with --strategy data: tensorflow_script.py runs data parallel as "
            "tf.function graphs; drop --execution eager"
        )
    if config.precision != "fp32" and config.strategy in ("tensor", "ps"):
        raise InputError(
            f"--precision {config.precision} with --strategy {config.strategy}: tensorflow_script.py runs "
            "its tensor-parallel shards and parameter-server workers in float32; drop --precision"
        )
    if config.strategy != "ps":
        return
    if config.device == "gpu":
        raise InputError(PS_ON_CPU)
    hide_gpus()  # its cluster's tasks train on the CPU, and the run records that
    for flag, used in (
        ("--accumulate", config.accumulate > 1),
        ("--checkpoint_every", config.checkpoint_every > 0),
        ("--resume", bool(config.resume)),
        ("--ps_sync", config.ps_sync),
        ("--execution eager", config.execution == "eager"),
    ):
        if used:
            raise InputError(f"{flag}: not available with --strategy ps (asynchronous updates); drop {flag}")


def launch(config, argv: list) -> None:
    """--strategy ps: without TF_CONFIG, starts the local cluster and becomes its chief;
    with TF_CONFIG, a worker or ps task serves here until killed (never returns).
    Multi-worker data parallel is started one process per worker by the user (TF_CONFIG)."""
    if config.strategy != "ps":
        return
    from tensorflow_wrapper import cluster

    task = json.loads(os.environ["TF_CONFIG"]).get("task", {}) if os.environ.get("TF_CONFIG", "").strip() else None
    if task is None and cluster.PARENT_NAMESPACE_VARIABLE not in os.environ:
        sys.exit(cluster.run_chief_in_namespace([sys.argv[0], *argv]))
    if task is None:
        started = cluster.launch_local_ps(config.devices, config.ps_tasks, config.threads)
        os.environ[cluster.NOTE_VARIABLE] = started["note"]
        if not started["note"].startswith("private"):
            print(f"warning: --strategy ps: {started['note']}", file=sys.stderr, flush=True)
        return
    if task.get("type") in ("worker", "ps"):
        cluster.serve(max(1, config.threads))
        sys.exit(0)
    if task.get("type") != "chief":
        raise InputError(f"TF_CONFIG task type {task.get('type')!r}: --strategy ps runs chief, worker and ps tasks")
