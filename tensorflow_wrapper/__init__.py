"""Raw TensorFlow 2: the spec as tf.Variables and tf.nn ops (NHWC), trained by a
tf.function + GradientTape step; no model.fit. `model.py` translates the spec,
`train.py` runs it through the shared loop in algorithms/loop.py."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single",), "flags": ()}
