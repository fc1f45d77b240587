"""What the two-host tests share: the check that this machine can make network
namespaces (a test that needs them fails with the reason when it cannot: CI runs as
root on such a machine, so a missing `ip netns` is a broken machine, not a skip), and
what a cluster left behind: namespaces, processes inside them, interfaces here."""

from __future__ import annotations

import os
import subprocess

import pytest

from scripts.netns_cluster import PREFIX, namespaces


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
