"""Parity mode for TensorFlow: op determinism (backends/tensorflow_backend.py), before the model is built."""

from backends.tensorflow_backend import enable_determinism as enable  # noqa: F401
