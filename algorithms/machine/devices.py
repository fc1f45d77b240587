"""`--device auto|cpu|gpu`, what can be said and done before any framework loads: the
NVIDIA GPUs the machine's driver lists (/proc/driver/nvidia/gpus) and CUDA_VISIBLE_DEVICES
leaves to this process, the driver's version, the CPU's name, and under `--device cpu`
every GPU hidden from this process and the processes it starts (CUDA_VISIBLE_DEVICES=-1:
each CUDA framework then finds none and trains on the CPU, whatever its build). Whether a
framework's own build can use a GPU is its wrapper's to say (Support.gpu_build); where it
found one once loaded, its Runtime's `device`."""

from __future__ import annotations

import glob
import os
import re
from typing import Optional

DEVICE_KINDS = ("auto", "cpu", "gpu")
HIDDEN = "-1"  # CUDA stops at the first entry that is not a device: none is visible
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"
NVIDIA_VERSION = "/proc/driver/nvidia/version"
NVIDIA_NODES = "/dev/nvidia[0-9]*"


def machine_gpus() -> int:
    """The NVIDIA GPUs the driver lists on this machine, or where a sandbox shows no
    /proc/driver/nvidia (gVisor), its device nodes /dev/nvidia0, 1, ... (0 without the driver)."""
    listed = glob.glob(os.path.join(NVIDIA_GPUS, "*"))
    return len(listed) if listed else len(glob.glob(NVIDIA_NODES))


def visible_gpus() -> int:
    """The GPUs a CUDA program started from here may use: the driver's, cut to the entries
    of CUDA_VISIBLE_DEVICES before its first one that names none (CUDA's own rule)."""
    present = machine_gpus()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return present
    visible = 0
    for entry in listed.split(","):
        entry = entry.strip()
        if entry.startswith(("GPU-", "MIG-")) or (entry.isdigit() and int(entry) < present):
            visible += 1
        else:
            break
    return min(visible, present)


def driver_version() -> Optional[str]:
    """The NVIDIA kernel driver's version ("NVRM version: ... Kernel Module  550.54.15 ..."), or None."""
    try:
        with open(NVIDIA_VERSION) as handle:
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", handle.read())
    except OSError:
        return None
    return found.group(1) if found else None


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo says it (the device of a CPU run)."""
    try:
        with open("/proc/cpuinfo") as handle:
            found = re.search(r"^model name\s*:\s*(.+)$", handle.read(), re.MULTILINE)
    except OSError:
        found = None
    return found.group(1).strip() if found else "cpu"


def no_gpu_reason(needed: int = 1) -> Optional[str]:
    """Why `--device gpu` cannot run `needed` GPUs from this process, read from the machine
    alone (None: the driver shows that many; the framework may still find none)."""
    present, visible = machine_gpus(), visible_gpus()
    if present == 0:
        return f"no NVIDIA GPU on this machine (the driver lists none in {NVIDIA_GPUS})"
    if visible == 0:
        return f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} hides this machine's {present} GPU(s)"
    if visible < needed:
        return f"{needed} GPUs asked for (--devices {needed}), and {visible} visible here"
    return None


def hide_gpus() -> None:
    """--device cpu: no GPU for this process or any process it starts (torchrun's ranks,
    workers, probes), before a framework loads."""
    os.environ["CUDA_VISIBLE_DEVICES"] = HIDDEN


def kind_of(name: str) -> str:
    """A device as a CSV row names it (`cpu`, `cuda:0`) -> its kind, as --device and the
    settings record say it: `cpu` or `gpu`."""
    return "cpu" if not name or name == "cpu" else "gpu"
