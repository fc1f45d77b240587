"""The process-tree helpers that keep what a run starts from outliving it: a run's
children die with it, and a launcher whose next child cannot be started stops those
it started. Imports no framework."""

from __future__ import annotations

import ctypes
import glob
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


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


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """In a child the run started: the kernel sends `signum` when its parent ends, and
    if the parent ended already (before this call), this process ends now."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent_pid:
        sys.exit(1)  # its launcher said why, in one line
