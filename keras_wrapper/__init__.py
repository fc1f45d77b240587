"""Keras: one model builder for every backend (Keras 3 on tensorflow, torch or jax,
chosen by KERAS_BACKEND). `model.py` translates the spec, `train.py` trains it
with model.fit over the shared batch order, recording each step from a callback."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single",), "flags": ()}
