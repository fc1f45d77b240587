"""Parity mode for PyTorch: deterministic kernels (backends/torch_backend.py), before the model is built."""

from backends.torch_backend import enable_determinism as enable  # noqa: F401
