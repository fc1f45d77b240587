"""jax helpers (Keras on jax)."""

from __future__ import annotations

import os


def enable_determinism() -> tuple:
    """XLA's deterministic-ops flag, read when jax starts: set before jax is imported.
    It only changes GPU kernels (XLA's CPU reductions have a fixed order)."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
    return (
        ["XLA_FLAGS=--xla_gpu_deterministic_ops=true"],
        ["XLA CPU has no determinism switch; its thread-pool split depends on the CPU and thread count"],
    )
