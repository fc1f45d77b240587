"""Raw TensorFlow 2: the spec as tf.Variables and tf.nn ops (NHWC), trained by
tf.function + GradientTape steps; no model.fit. `model.py` translates the spec
(layer placement, split-independent dropout), `devices.py` picks devices and the
tf.distribute strategy (MirroredStrategy; MultiWorkerMirroredStrategy from
TF_CONFIG), `train.py` runs it through the shared loop in algorithms/loop.py."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single", "data", "model"),
            "flags": ("--lr_scaling linear", "--warmup_steps", "--reduce_lr_on_plateau", "--accumulate",
                      "--checkpoint_every")}
