"""Whether this machine can hold a run, asked before the run starts a process or a
device (docs/parallel.md#memory-before-anything-starts), and the process-tree helpers
that keep what it does start from outliving it. Imports no framework.

A wrapper declares what its framework costs (`Footprint`, in its Support: the peak
resident memory of one of its processes, of each sample of a step's batch and of one
more device inside a process, measured) and what a run of a given config starts
(`Footprint.started`). The entry point asks `check_resources` before anything starts:
a run that needs more than MemAvailable is refused in one line (exit 2) with the
largest count that fits; one that asks for more devices than there are cores is let
through with a one-line note.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable

from algorithms.errors import InputError
from algorithms.spec.parallel import make_plan

DOCS = "docs/parallel.md#memory-before-anything-starts"
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Started:
    """What a run starts on this machine beyond what this process holds now."""

    processes: int = 0  # that load the framework: ranks, workers, servers, an agent, this one if it loads it later
    data_copies: int = 0  # of them, those that read the dataset themselves
    devices: int = 0  # inside one process: logical CPU devices, jax host devices
    what: str = ""  # for the messages: "1000 torchrun ranks and their agent"


@dataclass(frozen=True)
class Footprint:
    """A framework's memory, measured (the commands are in docs/parallel.md): the peak
    resident MB of one of its processes with the default net built, the default data's
    arrays left out (`process_mb`), what each sample of a step's batch adds to it
    (`sample_mb`: the batch's activations, however the run splits them across its
    processes or devices), and what one more device inside a process adds (`device_mb`).
    `started(config)` says what a run of `config` starts (read before the framework loads)."""

    process_mb: float
    sample_mb: float
    device_mb: float
    started: Callable[[Any], Started]

    def need_mb(self, started: Started, data_mb: float, batch: int) -> float:
        return (
            started.processes * self.process_mb
            + started.data_copies * data_mb
            + started.devices * self.device_mb
            + batch * self.sample_mb
        )


def available_memory_mb() -> float:
    """The kernel's MemAvailable: what new processes can take without swapping."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    raise OSError("/proc/meminfo has no MemAvailable")


def dataset_mb(dataset) -> float:
    arrays = (dataset.train_x, dataset.train_y, dataset.val_x, dataset.val_y, dataset.test_x, dataset.test_y)
    return sum(array.nbytes for array in arrays if array is not None) / 2**20


def check_resources(config, footprint: Footprint, data_mb: float) -> list:
    """Raises InputError when the run's processes and devices do not fit in the memory
    this machine has free; returns the notes to print once the run goes ahead (more
    devices than cores; GPU memory, which this does not check)."""
    started = footprint.started(config)
    if not (started.processes or started.devices):
        return []
    need, free = footprint.need_mb(started, data_mb, config.batch_size), available_memory_mb()
    if need > free:
        fits = largest_count_that_fits(config, footprint, data_mb, free)
        parts = [f"a process {footprint.process_mb:,.0f} MB"]
        parts += [f"a copy of the data {data_mb:,.0f} MB"] if started.data_copies else []
        parts += [f"a device {footprint.device_mb:,.0f} MB"] if started.devices else []
        parts += [f"a sample of the batch of {config.batch_size} {footprint.sample_mb:.2f} MB"]
        raise InputError(
            f"--strategy {config.strategy} --devices {config.devices} needs about {need:,.0f} MB for {started.what} "
            f"({', '.join(parts)}; measured, {DOCS}) and this machine has {free:,.0f} MB free (MemAvailable); "
            + (f"the most that fits is --devices {fits}" if fits else "not even the fewest devices fit: free memory")
        )
    notes, cores = [], os.cpu_count() or 1
    if config.devices > cores:
        notes.append(
            f"note: {started.what} on {cores} cores: {config.devices / cores:.1f}x oversubscribed; each "
            f"step takes longer than on {config.devices} real devices ({need:,.0f} MB of {free:,.0f} MB free)"
        )
    gpus = glob.glob("/proc/driver/nvidia/gpus/*")
    return notes + ([f"note: {gpu_memory_text(len(gpus))}"] if gpus else [])


def largest_count_that_fits(config, footprint: Footprint, data_mb: float, free_mb: float) -> int:
    """The largest --devices below the one asked that the plan accepts and memory holds (0: none)."""
    plan = config.plan
    for devices in range(config.devices - 1, 0, -1):
        smaller = replace(config, devices=devices)
        if footprint.need_mb(footprint.started(smaller), data_mb, config.batch_size) > free_mb:
            continue
        try:
            make_plan(
                config.network, config.strategy, devices, config.batch_size, 0, plan.group or 2, plan.inner or "model"
            )
        except InputError:
            continue
        return devices
    return 0


def gpu_memory_text(gpus: int) -> str:
    """What can be said of GPU memory before a framework loads: nvidia-smi's free memory, if it is there."""
    unchecked = "GPU memory is not part of this check (no per-device GPU footprint is measured yet)"
    if not shutil.which("nvidia-smi"):
        return f"{unchecked}; {gpus} NVIDIA GPU(s) here, and no nvidia-smi to read their free memory"
    query = ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"]
    try:
        free = [int(line) for line in subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.split()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return f"{unchecked}; nvidia-smi did not report their free memory"
    return f"{unchecked}; nvidia-smi: {', '.join(f'{mb:,} MiB' for mb in free)} free"


# --------------------------------------------------------------------------- process trees


def children(pid: int) -> list:
    """The pids of `pid`'s children (every thread's), [] once it is gone."""
    found = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as handle:
                found += [int(child) for child in handle.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def descendants(pid: int) -> list:
    found, waiting = [], children(pid)
    while waiting:
        child = waiting.pop()
        found.append(child)
        waiting += children(child)
    return found


def end_children() -> None:
    """SIGKILL to this process's children and their process groups (a child that made
    its own session, as torchrun's ranks do, leads its group)."""
    for child in children(os.getpid()):
        for kill in (lambda: os.killpg(child, signal.SIGKILL), lambda: os.kill(child, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                continue


def why_not_started(error: OSError) -> str:
    """The reason a fork or exec was refused, with its likely cause where the errno says it."""
    reason = error.strerror or str(error)
    if error.errno in (errno.EAGAIN, errno.ENOMEM):
        return f"{reason}: a limit on processes, such as ulimit -u, or memory"
    return reason


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """In a child the run started: the kernel sends `signum` when its parent ends, and
    if the parent ended already (before this call), this process ends now."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent_pid:
        sys.exit(1)  # its launcher said why, in one line
