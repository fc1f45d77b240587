"""Parity mode for Keras: the backend's own switch (TensorFlow's op determinism,
torch's deterministic algorithms, XLA's deterministic ops, Theano's
deterministic=more), chosen from KERAS_BACKEND before Keras is imported."""
from __future__ import annotations

import os


def enable() -> tuple:
    backend = os.environ.get("KERAS_BACKEND", "").lower()
    if backend == "theano":
        from lasagne_wrapper.determinism import enable as enable_theano
        return enable_theano()
    if backend == "torch":
        from torch_wrapper.determinism import enable as enable_torch
        return enable_torch()
    if backend == "jax":
        # read when jax starts; it only changes GPU kernels (XLA's CPU reductions have a fixed order)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
        return (["XLA_FLAGS=--xla_gpu_deterministic_ops=true"],
                ["XLA CPU has no determinism switch; its thread-pool split depends on the CPU and thread count"])
    import keras  # tensorflow backend (named, or Keras's default)

    if keras.backend.backend() != "tensorflow":
        return [], [f"no determinism switch known for Keras backend {keras.backend.backend()!r}"]
    from tensorflow_wrapper.determinism import enable as enable_tensorflow
    return enable_tensorflow()
