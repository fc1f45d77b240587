"""Whether this machine can hold a run, asked before the run starts a process or a
device (docs/parallel.md#memory-before-anything-starts), and the process-tree helpers
that keep what it does start from outliving it. Imports no framework.

A wrapper declares what its framework costs (`Footprint`, in its Support: the peak
resident memory of one of its processes, of each sample of a step's batch and of one
more device inside a process, measured with the default net) and what a run of a given
config starts (`Footprint.started`); the network's own weights and activations scale it
(network_memory.py). The entry point asks `check_resources` before anything starts: a
network that one process cannot train in MemAvailable is refused in one line (exit 2)
naming its largest layer; a run whose processes and devices need more is refused with
the largest count that fits; one that asks for more devices than there are cores is let
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

from algorithms.errors import EXIT_FAILED, InputError
from algorithms.machine.network_memory import (
    DEFAULT_NET,
    FLOAT_BYTES,
    MB,
    NetworkMemory,
    extra_weights_mb,
    network_memory,
)
from algorithms.network.networks import network_text
from algorithms.network.parallel import make_plan

DOCS = "docs/parallel.md#memory-before-anything-starts"
NETWORK_DOCS = "docs/own-network.md#memory-before-it-starts"
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
    name: str = ""  # the framework, as a refusal names it: "torch", "keras on jax"

    def need_mb(self, started: Started, data_mb: float, batch: int, memory: NetworkMemory = DEFAULT_NET) -> float:
        """What the processes and devices a run starts need, each process holding the
        network's weights, the batch's activations however the run splits them."""
        return (
            started.processes * (self.process_mb + extra_weights_mb(memory))
            + started.data_copies * data_mb
            + started.devices * self.device_mb
            + batch * self.batch_sample_mb(memory)
        )

    def batch_sample_mb(self, memory: NetworkMemory) -> float:
        """What one sample of a step's batch adds, for this network: the measured figure
        scaled by its activations over the default net's."""
        return self.sample_mb * memory.outputs_per_sample / DEFAULT_NET.outputs_per_sample

    def one_process_mb(self, data_mb: float, batch: int, memory: NetworkMemory) -> float:
        """One process training the whole network on the whole batch: the least any run of it needs."""
        return self.process_mb + data_mb + extra_weights_mb(memory) + batch * self.batch_sample_mb(memory)


def one_process(config) -> Started:
    """A framework that runs in the process the user started, and starts nothing else."""
    return Started()


def available_memory_mb() -> float:
    """The kernel's MemAvailable: what new processes can take without swapping."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    raise OSError("/proc/meminfo has no MemAvailable")


def memory_room_mb() -> float:
    """What this process can still allocate: MemAvailable, and no more than its address-space
    limit (ulimit -v, RLIMIT_AS) leaves above what it has mapped already."""
    import resource

    room = available_memory_mb()
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit != resource.RLIM_INFINITY:
        with open("/proc/self/status") as handle:
            mapped = next(int(line.split()[1]) for line in handle if line.startswith("VmSize:")) / 1024.0
        room = min(room, limit / MB - mapped)
    return room


def dataset_mb(dataset) -> float:
    arrays = (dataset.train_x, dataset.train_y, dataset.val_x, dataset.val_y, dataset.test_x, dataset.test_y)
    return sum(array.nbytes for array in arrays if array is not None) / 2**20


def check_resources(config, footprint: Footprint, data_mb: float) -> list:
    """Raises InputError when the network does not fit in the memory this machine has free,
    or the run's processes and devices do not; returns the notes to print once the run goes
    ahead (more devices than cores; GPU memory, which this does not check)."""
    started = footprint.started(config)
    if config.strategy != "single" and not (started.processes or started.devices):
        return []  # a rank or task that a launcher started: the launcher checked
    memory, free = network_memory(config.network, config.optimizer), available_memory_mb()
    check_network_fits(config, footprint, memory, data_mb, free)
    if not (started.processes or started.devices):
        return []
    need = footprint.need_mb(started, data_mb, config.batch_size, memory)
    if need > free:
        fits = largest_count_that_fits(config, footprint, data_mb, free, memory)
        parts = [f"a process {footprint.process_mb:,.0f} MB"]
        parts += [f"a copy of the data {data_mb:,.0f} MB"] if started.data_copies else []
        parts += [f"a device {footprint.device_mb:,.0f} MB"] if started.devices else []
        parts += [f"a sample of the batch of {config.batch_size} {footprint.batch_sample_mb(memory):.2f} MB"]
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


def check_network_fits(config, footprint: Footprint, memory: NetworkMemory, data_mb: float, free: float) -> None:
    """The least any run of the network needs, one process training it on the whole batch,
    against MemAvailable: refused in one line naming its largest layer and what to change.
    On a GPU the weights and activations live in its memory, and the host holds the numpy
    initial weights (GPU memory is not part of this check)."""
    batch = max([config.batch_size] + [size for _, size in config.batch_schedule])
    on_gpu = config.device == "gpu" or (config.device == "auto" and bool(glob.glob("/proc/driver/nvidia/gpus/*")))
    copies = 1 if on_gpu else memory.weight_copies
    output_mb = 0.0 if on_gpu else footprint.sample_mb / DEFAULT_NET.outputs_per_sample  # per float of a sample
    fixed = footprint.process_mb + data_mb + memory.weights_mb(copies) - DEFAULT_NET.weights_mb()
    sample_mb = memory.outputs_per_sample * output_mb
    need = fixed + batch * sample_mb
    if need <= free:
        return

    def weights_and_outputs_mb(layer) -> tuple:
        return layer.weights * copies * FLOAT_BYTES / MB, batch * layer.outputs * output_mb

    layer = max(memory.layers, key=lambda one: sum(weights_and_outputs_mb(one)))
    weights_mb, outputs_mb = weights_and_outputs_mb(layer)
    fits = int((free - fixed) / sample_mb) if sample_mb else 0
    if outputs_mb > weights_mb:
        what = f"{outputs_mb:,.0f} MB of activations"
    else:
        what = f"{weights_mb:,.0f} MB of weights, their gradients and {config.optimizer.name}'s state"
    fix = (
        f"use --batch_size {fits} or less"
        if outputs_mb > weights_mb and fits >= 1
        else f"make layer {layer.index} smaller (or the network)"
    )
    raise InputError(
        f"{network_text(config.network)} needs about {need:,.0f} MB to train in {footprint.name or 'this framework'} "
        f"at batch {batch} (its largest layer, layer {layer.index} {layer.label}: {what}; the framework itself "
        f"{footprint.process_mb:,.0f} MB; {NETWORK_DOCS}) and this machine has {free:,.0f} MB free (MemAvailable); "
        + fix
    )


def largest_count_that_fits(
    config, footprint: Footprint, data_mb: float, free_mb: float, memory: NetworkMemory = DEFAULT_NET
) -> int:
    """The largest --devices below the one asked that the plan accepts and memory holds (0: none)."""
    plan = config.plan
    for devices in range(config.devices - 1, 0, -1):
        smaller = replace(config, devices=devices)
        if footprint.need_mb(footprint.started(smaller), data_mb, config.batch_size, memory) > free_mb:
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
        sys.exit(EXIT_FAILED)  # its launcher said why, in one line
