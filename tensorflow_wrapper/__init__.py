"""Raw TensorFlow 2: the spec as tf.Variables and tf.nn ops (NHWC), trained by
tf.function + GradientTape steps; no model.fit. `model.py` translates the spec
(layer placement, split-independent dropout), `devices.py` picks devices and the
tf.distribute strategy (MirroredStrategy; MultiWorkerMirroredStrategy from
TF_CONFIG), `trainer.py` holds the steps, `train.py` runs them through the shared
loop in algorithms/loop.py; `native.py` serves the benchmark."""

from algorithms.contract import Support
from algorithms.errors import InputError


# measured: enable_op_determinism() makes XLA refuse the max-pool gradient ("GPU MaxPool
# gradient ops do not yet have a deterministic XLA implementation"), on CPU too
PARITY_XLA = (
    "--compile with --parity: TensorFlow's op determinism has no deterministic XLA max-pool "
    "gradient; drop --compile (--execution compiled) or --parity"
)


def supported() -> Support:
    """What this wrapper implements (read before the framework is imported)."""
    return Support(
        strategies=("single", "data", "model"),
        flags=(
            "--lr_scaling linear",
            "--warmup_steps",
            "--reduce_lr_on_plateau",
            "--accumulate",
            "--checkpoint_every",
            "--compile",
            "--precision bf16",
            "--precision fp16",
            "--execution eager",
            "--execution graph",
        ),
    )


def prepare_process(config, dataset) -> None:
    """--compile is the single-device fused step's XLA jit_compile."""
    if config.compile and (config.plan.strategy != "single" or config.accumulate > 1):
        raise InputError(
            "--compile: tensorflow_script.py compiles the single-device step "
            "(--strategy single, no --accumulate); drop --compile"
        )

    if config.compile and config.parity:
        raise InputError(PARITY_XLA)
    if config.precision == "fp16" and config.plan.strategy != "single":
        raise InputError(
            f"--precision fp16 with --strategy {config.strategy}: tensorflow_script.py scales the fp16 "
            "loss on one device only; use --precision bf16 (no loss scale needed) or --strategy single"
        )
    if config.execution == "eager" and config.plan.strategy == "data":
        raise InputError(
            "--execution eager with --strategy data: tensorflow_script.py runs data parallel as "
            "tf.function graphs; drop --execution eager"
        )


def launch(config, argv: list) -> None:
    """Multi-worker runs are started one process per worker by the user (TF_CONFIG)."""
