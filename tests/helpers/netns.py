"""What the two-host tests share: the check that this machine can make network
namespaces (a test that needs them fails with the reason when it cannot: CI runs as
root on such a machine, so a missing `ip netns` is a broken machine, not a skip), and
what a cluster left behind: namespaces, processes inside them, interfaces here."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from algorithms.paths import REPO_ROOT
from scripts.netns_cluster import PREFIX, namespaces
from tests.helpers.listening import listening, process_tree


def require_namespaces() -> None:
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(
            f"the two-host tests need network namespaces (root and iproute2's `ip netns`): "
            f"`ip netns add` said {made.stderr.strip() or made.returncode}",
            pytrace=False,
        )
    subprocess.run(["ip", "netns", "delete", probe], check=True)


def interfaces_here() -> set:
    listed = subprocess.run(["ip", "-o", "link"], check=True, capture_output=True, text=True).stdout
    return {line.split(":")[1].strip() for line in listed.splitlines()}


def processes_in(inodes: set) -> list:
    """Every process whose network namespace is one of these (by inode)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            namespace = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if int(namespace[len("net:[") : -1]) in inodes:
            found.append(int(pid))
    return found


def left_behind(cluster, interfaces_before: set) -> dict:
    """What a closed cluster left: {} when nothing."""
    left = {
        "namespaces": [name for name in namespaces() if name in cluster.inodes],
        "processes": processes_in(set(cluster.inodes.values())),
        "interfaces": sorted(interfaces_here() - interfaces_before),
    }
    return {what: names for what, names in left.items() if names}


def hex_address(address: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it (little-endian hex)."""
    return "".join(f"{int(part):02X}" for part in reversed(address.split(".")))


def run_on_hosts(
    cluster, commands: list, timeout_s: float = 300, env: dict | None = None, until_first_ends: bool = False
) -> tuple:
    """Runs commands[i] in host i until all end (or host 0's, with `until_first_ends`: the
    others are then killed), sampling each host's listening sockets from that host's
    namespace; returns ([(status, output)] per host, [{(address, port)}] per host)."""
    processes = [
        cluster.start(
            index, command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for index, command in enumerate(commands)
    ]
    outputs = [[] for _ in processes]
    readers = [threading.Thread(target=lambda p=p, o=o: o.append(p.stdout.read())) for p, o in zip(processes, outputs)]
    for reader in readers:
        reader.start()
    seen = [set() for _ in processes]
    deadline = time.monotonic() + timeout_s
    watched = processes[:1] if until_first_ends else processes
    while any(p.poll() is None for p in watched) and time.monotonic() < deadline:
        for index, process in enumerate(processes):
            try:
                seen[index] |= listening(process_tree(process.pid), namespace_of=process.pid)
            except OSError:  # it ended while being read
                pass
        time.sleep(0.25)
    for process in processes:
        if process.poll() is None:
            process.kill()
    for reader in readers:
        reader.join()
    return [(p.wait(), "".join(o)) for p, o in zip(processes, outputs)], seen


LOOPBACK_HEX = {hex_address("127.0.0.1")}
WILDCARD_HEX = {"00000000", "00000000000000000000000000000000"}  # 0.0.0.0 and ::, as /proc writes them
