"""How the asynchronous strategies start their processes (async: Hogwild; ps: the
parameter server and its workers): torch.multiprocessing's spawn context, a fresh
interpreter with no OpenMP pool or lock copied from this one, and torch's sharing of
tensors in memory (Hogwild's model). algorithms/machine/processes.py starts, watches
and ends them."""

from __future__ import annotations

import torch.multiprocessing as mp

from algorithms.machine.processes import ChildProcesses

CONTEXT = mp.get_context("spawn")


def child_processes() -> ChildProcesses:
    return ChildProcesses(CONTEXT)
