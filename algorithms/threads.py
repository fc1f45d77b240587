"""Thread counts, set explicitly for every framework (--threads N). This part sets
the environment the native libraries read when they load (OpenMP, OpenBLAS, MKL:
Theano and Caffe compute through them; XLA's CPU client for jax); each wrapper sets
its framework's own switches (tf.config.threading, torch.set_num_threads) when it
builds its trainer. Imports no framework."""
from __future__ import annotations

import os
import resource

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def set_thread_environment(threads: int) -> str:
    """Before the framework is imported; returns what was set, for results.log."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    if threads == 1:  # XLA's CPU backend (jax) reads its thread pool size from XLA_FLAGS
        flags = os.environ.get("XLA_FLAGS", "")
        if "intra_op_parallelism_threads" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1".strip()
    return " ".join(f"{name}={threads}" for name in THREAD_VARIABLES)


def peak_rss_mb() -> float:
    """This process's peak resident memory (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
