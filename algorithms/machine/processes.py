"""The child processes a run starts itself, without a launcher (torch's asynchronous
workers and their parameter server), by name: started under the multiprocessing context
the framework's wrapper chooses, watched while the run waits on them, and ended when it
finishes or fails. The process that starts them records the run. Each child dies with
it (`die_with_parent`), and one that cannot be started (fork refused: a limit on
processes, no memory) ends the run in one line with the others stopped."""

from __future__ import annotations

import os
import signal
from typing import Callable

from algorithms.errors import PeerLost, ResourceError
from algorithms.machine.resources import die_with_parent, why_not_started

STOP_GRACE_S = 10


def ignore_interrupts() -> None:
    """In a child: Ctrl-C reaches the whole process group; the recording process alone
    decides when to stop, after the update in progress, and then ends its children."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def how_it_ended(exitcode: int) -> str:
    """A dead child's end in words, from its exit code (negative: the signal that killed it)."""
    if exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"exited with status {exitcode}"


def _child(parent_pid: int, target: Callable, *args) -> None:
    die_with_parent(parent_pid)  # a recording process that is killed leaves no worker waiting on its queue
    target(*args)


class ChildProcesses:
    """The run's child processes by name (`worker 0`, `the parameter server`), each a
    `context.Process` (a multiprocessing context, or the framework's own)."""

    def __init__(self, context):
        self.context = context
        self.children: dict = {}

    def start(self, name: str, target: Callable, *args) -> None:
        process = self.context.Process(target=_child, args=(os.getpid(), target, *args), name=name, daemon=True)
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
                raise PeerLost(f"{name} (pid {process.pid}) {how_it_ended(process.exitcode)} {after}")

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


class ChildWorkers:
    """What an UpdatePool whose workers are this process's children (`self.processes`, a
    ChildProcesses) says of them: a child that dies ends the run, none is absorbed."""

    processes: ChildProcesses

    def check(self, after: str) -> None:
        self.processes.check(after)

    def absorbed_faults(self) -> list:
        return []  # check() raises PeerLost
