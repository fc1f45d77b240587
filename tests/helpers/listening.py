"""The TCP sockets a process tree listens on, read from /proc (what `ss -ltnp` shows),
sampled while a run is alive: which addresses a launcher's servers are reachable on."""

from __future__ import annotations

import os
import subprocess
import time

LISTEN = "0A"  # the TCP state in /proc/net/tcp*
LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1, as /proc writes them


def process_tree(pid: int) -> list:
    pids = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                for child in handle.read().split():
                    pids += process_tree(int(child))
    except OSError:  # it ended while being read
        pass
    return pids


def _socket_inodes(pid: int) -> set:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    except OSError:
        pass
    return inodes


def listening(pids: list, namespace_of: int | None = None) -> set:
    """(address as /proc writes it, port) of every TCP socket these processes listen on;
    the tables of `namespace_of`'s network namespace (default: this process's)."""
    inodes = set().union(*(_socket_inodes(pid) for pid in pids))
    found = set()
    net = f"/proc/{namespace_of}/net" if namespace_of else "/proc/net"
    for table in (f"{net}/tcp", f"{net}/tcp6"):
        with open(table) as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                if fields[3] == LISTEN and fields[9] in inodes:
                    address, port = fields[1].split(":")
                    found.add((address, int(port, 16)))
    return found


def only_loopback(pid: int) -> bool:
    """Whether the process's network namespace has no interface but lo."""
    with open(f"/proc/{pid}/net/dev") as handle:
        return {line.split(":")[0].strip() for line in handle.readlines()[2:]} == {"lo"}


def run_watching_sockets(command: list, env: dict, cwd: str, timeout_s: float = 300) -> tuple:
    """Runs `command` to its end, sampling its tree's listening sockets; returns
    (the CompletedProcess, every (address, port) seen)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, deadline = set(), time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        seen |= listening(process_tree(process.pid))
        time.sleep(0.25)
    stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), seen
