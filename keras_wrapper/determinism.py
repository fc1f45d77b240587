"""Parity mode for Keras: the backend's own switch (backends/: TensorFlow's op
determinism, torch's deterministic algorithms, XLA's deterministic ops, Theano's
deterministic=more), chosen from the backend Keras will load, before it is imported."""

from __future__ import annotations

from keras_wrapper import backend


def enable() -> tuple:
    name = backend()
    if name == "theano":
        from backends import theano_backend

        return theano_backend.enable_determinism()
    if name == "torch":
        from backends import torch_backend

        return torch_backend.enable_determinism()
    if name == "jax":
        from backends import jax_backend

        return jax_backend.enable_determinism()
    if name == "tensorflow":
        from backends import tensorflow_backend

        return tensorflow_backend.enable_determinism()
    return [], [f"no determinism switch known for Keras backend {name!r}"]
