"""Raw TensorFlow 2: the spec as tf.Variables and tf.nn ops (NHWC), trained by
tf.function + GradientTape steps; no model.fit. `model.py` translates the spec
(layer placement, split-independent dropout), `devices.py` picks devices and the
tf.distribute strategy (MirroredStrategy; MultiWorkerMirroredStrategy from
TF_CONFIG), `trainer.py` holds the steps, `train.py` runs them through the shared
loop in algorithms/loop.py; `native.py` serves the benchmark."""

from algorithms.contract import Support
from algorithms.errors import InputError


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
            "--noise_scale",
        ),
    )


def prepare_process(config, dataset) -> None:
    """--compile is the single-device fused step's XLA jit_compile."""
    if config.compile and (config.plan.strategy != "single" or config.accumulate > 1):
        raise InputError(
            "--compile: tensorflow_script.py compiles the single-device step "
            "(--strategy single, no --accumulate); drop --compile"
        )


def launch(config, argv: list) -> None:
    """Multi-worker runs are started one process per worker by the user (TF_CONFIG)."""
