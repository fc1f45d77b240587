"""XLA's switches, which TensorFlow's XLA and jax both read from XLA_FLAGS when they
load (tensorflow_wrapper and Keras on tensorflow and jax name them in their Support):
its CPU thread pool for one thread, and where its compiler writes what it compiled.
Environment variables only: importing this loads no framework."""

from __future__ import annotations

import os


ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"


def thread_flags(threads: int) -> None:
    """Support.thread_environment: XLA's CPU backend (jax) reads its Eigen threading from
    XLA_FLAGS, not from the OpenMP variables, so one thread is said there too. Every token
    starts with `--`: XLA stops reading XLA_FLAGS at the first that does not (the widely
    copied `intra_op_parallelism_threads=1`, which is no XLA flag, made it ignore every flag
    after it, the device count and YNNPACK's switch among them; tests/test_threads.py)."""
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if ONE_THREAD.split("=")[0] not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {ONE_THREAD}".strip()


def dump_to(folder: str) -> None:
    """Support.profile_environment: XLA writes its optimized HLO into `folder`, as text
    (what its fusions hold, which the benchmark's profile names)."""
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={folder} --xla_dump_hlo_as_text".strip()
