"""Worker processes of the strategies this process starts itself, without torchrun
(async: Hogwild; ps: the parameter server and its workers): started with
torch.multiprocessing's spawn context, watched while the run waits on them, and
ended when it finishes or fails. This process records the run. Each child dies with
it (`die_with_parent`), and one that cannot be started (fork refused: a limit on
processes, no memory) ends the run in one line with the others stopped."""

from __future__ import annotations

import os
import signal
from typing import Callable

import torch.multiprocessing as mp

from algorithms.errors import PeerLost, ResourceError
from algorithms.machine.resources import die_with_parent, why_not_started

CONTEXT = mp.get_context("spawn")  # a fresh interpreter: no OpenMP pool or lock copied from this one
STOP_GRACE_S = 10


def ignore_interrupts() -> None:
    """In a child: Ctrl-C reaches the whole process group; the recording process alone
    decides when to stop, after the update in progress, and then ends its children."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child(parent_pid: int, target: Callable, *args) -> None:
    die_with_parent(parent_pid)  # a recording process that is killed leaves no worker waiting on its queue
    target(*args)


class Processes:
    """The run's child processes by name (`worker 0`, `the parameter server`)."""

    def __init__(self):
        self.children: dict = {}

    def start(self, name: str, target: Callable, *args) -> None:
        process = CONTEXT.Process(target=_child, args=(os.getpid(), target, *args), name=name, daemon=True)
        try:
            process.start()
        except OSError as error:
            started = len(self.children)
            self.end()
            raise ResourceError(
                f"could not start {name} after {started} other processes of this run ({why_not_started(error)}); "
                "they were stopped; run fewer --devices"
            ) from None
        self.children[name] = process

    def check(self, after: str) -> None:
        """Raises PeerLost naming the first child that has died."""
        for name, process in self.children.items():
            if process.exitcode is not None and process.exitcode != 0:
                code = process.exitcode
                how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
                raise PeerLost(f"{name} (pid {process.pid}) {how} {after}")

    def wait(self, timeout_s: float = STOP_GRACE_S) -> None:
        for process in self.children.values():
            process.join(timeout_s)

    def end(self) -> None:
        """Every child still running is stopped (SIGTERM, then SIGKILL)."""
        for process in self.children.values():
            if process.is_alive():
                process.terminate()
        for process in self.children.values():
            process.join(STOP_GRACE_S)
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join()
