"""XLA's switches, which TensorFlow's XLA and jax both read from XLA_FLAGS when they
load (tensorflow_wrapper and Keras on tensorflow and jax name them in their Support):
its CPU thread pool for one thread, and where its compiler writes what it compiled.
Environment variables only: importing this loads no framework."""

from __future__ import annotations

import os


def thread_flags(threads: int) -> None:
    """Support.thread_environment: XLA's CPU backend (jax) reads its thread pool size from
    XLA_FLAGS, not from the OpenMP variables, so one thread is said there too."""
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if "intra_op_parallelism_threads" not in flags:
            os.environ["XLA_FLAGS"] = (
                f"{flags} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1".strip()
            )


def dump_to(folder: str) -> None:
    """Support.profile_environment: XLA writes its optimized HLO into `folder`, as text
    (what its fusions hold, which the benchmark's profile names)."""
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={folder} --xla_dump_hlo_as_text".strip()
