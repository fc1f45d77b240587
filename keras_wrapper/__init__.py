"""Keras: one model builder for every backend (Keras 3 on tensorflow, torch or jax,
chosen by KERAS_BACKEND). `model.py` translates the spec, `train.py` trains it
with model.fit over the shared batch order, the rows' shared dropout uniforms fed as
extra model inputs (trainer.py), recording each step from a callback; `probes.py` is the
model seen from outside a run (the cross-framework tests, the structural check, the
localisation); `distribute.py` holds the data-parallel setups (MirroredStrategy on tensorflow,
keras.distribution.DataParallel on jax) and, on jax, tensor and hybrid parallel
(keras.distribution.ModelParallel); `gpu_check.py` is the GPU check's Keras side
(`make gpu-check`)."""

import json
import os

# TensorFlow's INFO logging off before Keras loads it, its warnings kept (the oneDNN notice it
# writes before reading this is dropped by the entry script: algorithms/run/notices.py)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from algorithms.contract.types import Support
from algorithms.contract.shared_support import LR_SCHEDULE_FLAGS, PRECISION_FLAGS, graph_only_fp32_advice
from algorithms.machine.resources import Footprint, Started, one_process
from algorithms.machine.tuning import Setting, Tuning
from backends.tuning import (
    MEASURED,
    OMP_SPIN,
    OPENBLAS_AVX512,
    TENSORFLOW,
    TENSORFLOW_LISTS,
    THEANO_LISTS,
    THEANO_OPENMP,
    XLA_LISTS,
)
from backends import openblas
from backends.gpu_builds import jax_build, tensorflow_build, torch_build
from backends.jax_backend import cpu_environment as jax_cpu_environment
from backends.jax_backend import device_environment as jax_device_environment
from backends.jax_backend import host_devices as jax_host_devices
from backends.xla import dump_to, thread_flags
from algorithms.network.parallel import STRATEGIES
from algorithms.errors import InputError
from algorithms.network.parallel import worker_strategy_advice

KERAS_3_FLAGS = LR_SCHEDULE_FLAGS + ("--accumulate", "--checkpoint_every", "--fault frozen", "--device gpu")
# why Keras does not run a strategy, where a backend cannot (Keras's distribution API is jax-only)
JAX_ONLY = (
    "Keras's tensor parallel (keras.distribution.ModelParallel) runs on jax only; use KERAS_BACKEND=jax, "
    "or tensorflow_script.py / torch_script.py --strategy tensor"
)
HYBRID_JAX_ONLY = (
    "Keras's hybrid parallel (data x tensor: keras.distribution.ModelParallel on a 2-D mesh) runs on jax only; "
    "use KERAS_BACKEND=jax with --inner tensor, or torch_script.py --strategy hybrid"
)
NO_PIPELINE = (
    "Keras has no pipeline-parallel API (model.fit runs the whole model as one program per step); "
    "use tensorflow_script.py or torch_script.py --strategy pipeline"
)
CPU_ONLY_KERAS_2 = (
    "Keras 2 on Theano runs on the CPU here (theano-pymc is built without a GPU backend in .venv-legacy); "
    "drop --device gpu (auto puts it on the CPU), or use keras_script.py on Keras 3"
)
ONE_DEVICE_KERAS_2 = (
    "Keras 2 on Theano runs on one CPU device here (Theano has no multi-device machinery, and Keras 2's "
    "multi_gpu_model needs TensorFlow); use keras_script.py on Keras 3, tensorflow_script.py or torch_script.py"
)
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


# --execution per backend: run_eagerly=True (eager), jit_compile=False on tensorflow (graph:
# a tf.function), jit_compile=True (compiled: XLA, jax.jit, torch.compile; "--compile")
MODE_FLAGS = {
    "tensorflow": ("--execution eager", "--execution graph", "--compile"),
    "jax": ("--execution eager", "--compile"),
    "torch": ("--execution eager", "--compile"),
}
MODE_ADVICE = {
    "jax": {
        "--execution graph": "Keras on jax has no graph mode apart from its compiler: the train step is "
        "jax.jit-compiled (the default, --execution compiled) or run eagerly (--execution eager)"
    },
    "torch": {
        "--execution graph": "Keras on torch runs eager (its default) or compiled (torch.compile); "
        "pass --execution eager or compiled"
    },
}
KERAS_2_ADVICE = graph_only_fp32_advice(
    "Keras 2 on Theano", "Keras 2 on Theano is graph-only (one compiled Theano train function)"
)

# --tuned, per backend: (candidates, the best measured one)
TUNING = {
    "tensorflow": (TENSORFLOW, "default"),
    "torch": ((OMP_SPIN,), "default"),
    "jax": (
        (  # on top of the default (XLA CPU's YNNPACK fusions off: backends/jax_backend.cpu_environment)
            Setting("onednn", {"XLA_FLAGS": "--xla_cpu_use_onednn=true"}, why="XLA CPU's oneDNN rewrites on"),
            Setting(
                "xnn_off",
                {"XLA_FLAGS": "--xla_cpu_experimental_xnn_fusion_type="},
                why="XLA CPU's XNNPACK fusions off as well",
            ),
            Setting(
                "concurrent",
                {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"},
                why="XLA CPU's scheduler orders independent ops to run side by side",
            ),
            Setting(
                "no_thunks",
                {"XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false"},
                why="XLA CPU's older whole-program runtime instead of its thunk executor",
            ),
        ),
        "default",
    ),
    "theano": ((THEANO_OPENMP, OPENBLAS_AVX512), "default"),
}


# the variables of each backend's settings that hold a list (appended to)
FLAG_LISTS = {"tensorflow": TENSORFLOW_LISTS, "jax": XLA_LISTS, "theano": THEANO_LISTS}


# where each table's `best` was measured, where not backends/tuning.MEASURED
MEASURED_AT = {"jax": "results/benchmark/2026-12-04-defaults.md"}


def tuning(name: str) -> Tuning:
    candidates, best = TUNING[name]
    return Tuning(f"keras_{name}", candidates, best, MEASURED_AT.get(name, MEASURED), FLAG_LISTS.get(name, {}))


def started(config) -> Started:
    """What a run of `config` starts: its replicas or shards are devices inside this process."""
    if config.strategy == "single":
        return Started()
    return Started(processes=1, devices=config.devices, what=f"one process with {config.devices} devices")


# measured (docs/parallel.md#memory-before-anything-starts; torch's and theano's, one process
# each: docs/own-network.md#memory-before-it-starts)
FOOTPRINTS = {
    "tensorflow": Footprint(process_mb=912, sample_mb=0.78, device_mb=19, started=started, name="keras on tensorflow"),
    "jax": Footprint(process_mb=681, sample_mb=0.48, device_mb=17, started=started, name="keras on jax"),
    "torch": Footprint(process_mb=621, sample_mb=1.55, device_mb=0, started=one_process, name="keras on torch"),
    "theano": Footprint(process_mb=189, sample_mb=0.68, device_mb=0, started=one_process, name="keras on theano"),
}


def supported() -> Support:
    """What this wrapper implements on the chosen backend (read before the framework is imported)."""
    name = backend()
    if name == "jax":
        return Support(
            strategies=("single", "data", "tensor", "hybrid"),
            flags=KERAS_3_FLAGS + MODE_FLAGS[name] + PRECISION_FLAGS,
            tuning=tuning(name),
            advice={"pipeline": NO_PIPELINE, **NO_WORKER_STRATEGIES, **MODE_ADVICE.get(name, {})},
            footprint=FOOTPRINTS[name],
            thread_environment=jax_cpu_environment,  # XLA's thread flags and the CPU default
            profile_environment=dump_to,
            gpu_build=jax_build,
            device_environment=jax_device_environment,
        )
    if name == "tensorflow":
        return Support(
            strategies=("single", "data"),
            flags=KERAS_3_FLAGS + MODE_FLAGS[name] + PRECISION_FLAGS,
            tuning=tuning(name),
            advice={
                "tensor": JAX_ONLY,
                "hybrid": HYBRID_JAX_ONLY,
                "pipeline": NO_PIPELINE,
                **NO_WORKER_STRATEGIES,
                **MODE_ADVICE.get(name, {}),
            },
            footprint=FOOTPRINTS[name],
            thread_environment=thread_flags,  # XLA's, on jax and tensorflow
            profile_environment=dump_to,
            gpu_build=tensorflow_build,
        )
    if name == "torch":
        return Support(
            strategies=("single",),
            flags=KERAS_3_FLAGS + MODE_FLAGS[name] + PRECISION_FLAGS,
            tuning=tuning(name),
            advice={
                "data": "Keras on torch has no data parallel here; run torch_script.py --strategy "
                "data (DistributedDataParallel), or KERAS_BACKEND=tensorflow or jax",
                "tensor": JAX_ONLY,
                "hybrid": HYBRID_JAX_ONLY,
                "pipeline": NO_PIPELINE,
                **NO_WORKER_STRATEGIES,
                **MODE_ADVICE["torch"],
            },
            footprint=FOOTPRINTS[name],
            gpu_build=torch_build,
        )
    return Support(  # Keras 2 on Theano (legacy env)
        strategies=("single",),
        flags=("--checkpoint_every", "--execution graph", "--fault frozen"),
        tuning=tuning("theano"),
        thread_environment=openblas.environment,  # OpenBLAS's core for this CPU, before Theano loads it
        advice={strategy: ONE_DEVICE_KERAS_2 for strategy in STRATEGIES if strategy != "single"}
        | NO_WORKER_STRATEGIES
        | KERAS_2_ADVICE
        | {"--device gpu": CPU_ONLY_KERAS_2},
        footprint=FOOTPRINTS["theano"],
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
    if config.strategy in ("tensor", "hybrid"):
        check_model_parallel(config, rows)
    for epoch, batch in config.batch_schedule if accumulate > 1 else ():
        if rows % (batch * accumulate):
            raise InputError(
                f"--batch_schedule {epoch}:{batch} with --accumulate {accumulate}: Keras steps once per "
                f"{accumulate} equal batches; {batch} x {accumulate} must divide the {rows} training rows"
            )
    if config.precision == "fp16" and accumulate > 1:
        raise InputError(
            "--precision fp16 with --accumulate: Keras's loss-scale optimizer does not accumulate "
            "gradients; use --precision bf16 (no loss scale needed) or drop --accumulate"
        )
    if config.compile and config.parity and name == "tensorflow":
        # measured: under enable_op_determinism() XLA has no deterministic max-pool gradient
        raise InputError(
            "--compile with --parity: TensorFlow's op determinism has no deterministic XLA max-pool "
            "gradient; drop --compile (--execution compiled) or --parity, or use KERAS_BACKEND=jax"
        )
    if config.execution and config.strategy in ("data", "tensor", "hybrid"):
        raise InputError(
            f"--execution {config.execution} with --strategy {config.strategy}: Keras's distributed training runs in "
            "its default mode here; drop --execution / --compile"
        )
    if config.strategy not in ("data", "tensor", "hybrid"):
        return
    if accumulate > 1 and name == "tensorflow":
        raise InputError(
            "--accumulate with --strategy data: Keras's gradient accumulation does not run under "
            "MirroredStrategy; use tensorflow_script.py or KERAS_BACKEND=jax"
        )
    devices = config.devices
    if name == "jax" and config.strategy == "data" and rows % devices:
        raise InputError(
            f"--strategy data --devices {devices}: jax splits every batch evenly across the devices, "
            f"but the last batch of each epoch has {rows % config.batch_size} of the {rows} training "
            f"rows; change --validation_split so that the training rows divide by {devices}"
        )
    named = jax_host_devices(devices) if name == "jax" else None
    if named is not None and named < devices:
        raise InputError(
            f"--devices {devices}: XLA_FLAGS names --xla_force_host_platform_device_count={named}, so jax "
            f"would see {named} CPU device(s); drop it from XLA_FLAGS (the run sets it) or pass --devices {named}"
        )


def check_model_parallel(config, rows: int) -> None:
    """What jax's ModelParallel cannot shard (keras_wrapper/distribute.py), refused before Keras loads."""
    plan = config.plan
    if config.strategy == "hybrid" and plan.inner != "tensor":
        raise InputError(
            f"--strategy hybrid --inner {plan.inner}: Keras on jax runs hybrid as data x tensor parallel "
            "(a 2-D DeviceMesh, batch x model); use --inner tensor"
        )
    width_flag = "--group" if config.strategy == "hybrid" else "--devices"
    for index, ranges in plan.shards.items():
        width = ranges[-1][1]
        if width % plan.group:
            fits = [g for g in range(2, width + 1) if all(r[-1][1] % g == 0 for r in plan.shards.values())]
            raise InputError(
                f"{width_flag} {plan.group}: jax shards a layer's channels only evenly, and layer {index} of "
                f"{config.network.name} has {width}; use {width_flag} "
                + (" or ".join(str(g) for g in fits[:3]) if fits else "1 (tensorflow_script.py splits unevenly)")
            )
    if plan.replicas > 1 and rows % plan.replicas:
        raise InputError(
            f"--strategy hybrid: jax splits every batch evenly across the {plan.replicas} replicas, but the "
            f"last batch of each epoch has {rows % config.batch_size} of the {rows} training rows; change "
            f"--validation_split so that the training rows divide by {plan.replicas}"
        )


def launch(config, argv: list) -> None:
    """One process: Keras's data parallel runs its replicas inside it."""
