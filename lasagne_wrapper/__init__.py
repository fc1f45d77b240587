"""Lasagne on Theano (legacy environment, .venv-legacy): `model.py` translates the
spec to Lasagne layers (NCHW), `train.py` compiles Theano train and eval functions
and runs them through the shared loop in algorithms/loop.py. `theano_compat.py`
sets THEANO_FLAGS and bridges theano-pymc to Lasagne 0.1 and Keras 2.3.1; it is
imported before either (Keras on Theano uses it too)."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single",), "flags": ("--checkpoint_every",)}
