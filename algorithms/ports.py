"""Free TCP ports on this host's loopback, for the processes a run or a test starts to
meet on (a TensorFlow cluster's tasks, a torchrun rendezvous). Imports nothing of the
project."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list:
    """`count` ports no process listens on now, each bound once and released (all bound at
    once, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
