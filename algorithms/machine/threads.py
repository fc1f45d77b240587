"""The process settings every framework runs under, set before it loads.

Threads (--threads N): the environment the native libraries read when they load
(OpenMP, OpenBLAS, MKL: Theano and Caffe compute through them), and what a framework
reads of it besides, as its wrapper's Support says (XLA's CPU client for jax); each
wrapper sets its framework's own switches (tf.config.threading, torch.set_num_threads)
when it builds its trainer.

Memory (--malloc): whether glibc's malloc keeps freed blocks for reuse or hands
them back to the kernel. Imports no framework."""

from __future__ import annotations

import ctypes
import os
import resource
from typing import Callable, Optional

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
MALLOC_POLICIES = ("reuse", "release")  # --malloc's choices, the default first (see set_malloc)
# glibc reads these when a process starts; mallopt() sets the same two in a running one
MALLOC_VARIABLES = {"MALLOC_MMAP_MAX_": 0, "MALLOC_TRIM_THRESHOLD_": 2**31 - 1}
MALLOPT_CODES = {"MALLOC_MMAP_MAX_": -4, "MALLOC_TRIM_THRESHOLD_": -1}  # M_MMAP_MAX, M_TRIM_THRESHOLD (malloc.h)
GLIBC_DEFAULTS = {"MALLOC_MMAP_MAX_": 65536, "MALLOC_TRIM_THRESHOLD_": 128 * 1024}


def process_threads(threads: int) -> int:
    """This process's share of --threads, which is the run's on this machine: the ranks a
    launcher started here (torchrun's LOCAL_WORLD_SIZE) share them, as they share its cores."""
    return max(1, threads // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def set_thread_environment(threads: int, framework_switches: Optional[Callable[[int], None]] = None) -> str:
    """Before the framework is imported; `framework_switches(threads)`, where given, sets
    what the framework reads of the thread count besides these variables (the wrapper's
    Support.thread_environment). Returns what was set here, for results.log."""
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    if framework_switches is not None:
        framework_switches(threads)
    return " ".join(f"{name}={threads}" for name in THREAD_VARIABLES)


def set_malloc(policy: str) -> str:
    """--malloc reuse (the default) keeps freed memory in the process for the next
    allocation; --malloc release is glibc's own behaviour.

    glibc serves each block over its mmap threshold (128 KiB, rising to at most
    32 MiB) with fresh pages from the kernel and unmaps it when freed. A training
    step's activations and gradients are such blocks, so every step faults all of
    them in again: torch_script.py at batch 128 took 6,000-13,000 page faults a
    step, and at batch 1000 120,000-200,000, a fifth to a third of its step time.
    `reuse` turns off mmap for new blocks (M_MMAP_MAX 0; a thread arena still maps
    a block larger than its 64 MiB heap) and never trims the heap, so a step reuses
    the previous step's pages. The cost: memory freed during a run stays with the
    process until it exits. Peak RSS in the benchmark: torch 526 -> 514-523 MB,
    TensorFlow 1,438-1,572 -> 1,590-1,703 MB.

    Sets this process (mallopt) and the variables child processes' glibc reads
    at start (torchrun workers, the legacy env). Returns what was set, for
    results.log; on a C library other than glibc it changes nothing and says so."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return f"--malloc {policy}: not glibc, nothing set"
    if policy == "reuse":
        values = MALLOC_VARIABLES
        os.environ.update({name: str(value) for name, value in values.items()})
    elif any(name in os.environ for name in MALLOC_VARIABLES):  # release: undo what a parent process set
        # (glibc's values; only its sliding mmap threshold stays off once mallopt has run)
        values = GLIBC_DEFAULTS
        for name in MALLOC_VARIABLES:
            os.environ.pop(name, None)
    else:
        return "--malloc release: glibc defaults"
    for name, value in values.items():
        if not mallopt(MALLOPT_CODES[name], value):
            raise OSError(f"mallopt({name.strip('_')}, {value}) failed")
    return f"--malloc {policy}: " + " ".join(f"{name}={value}" for name, value in values.items())


def environment_text(names) -> str:
    """ "NAME=value ..." of these variables as this process has them, for results.log."""
    return " ".join(f"{name}={os.environ.get(name, 'unset')}" for name in names)


def peak_rss_mb() -> float:
    """This process's peak resident memory (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
