"""Ports and addresses of this host: free TCP ports on its loopback, for the processes a
run or a test starts to meet on (a TensorFlow cluster's tasks, a torchrun rendezvous), and
which of its addresses and interfaces reach a peer, for a run across hosts (a node finding
its own address from the rendezvous endpoint alone). Imports nothing of the project."""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

DEFAULT_PORT = 29400  # torchrun's, for an endpoint without one
SIOCGIFADDR = 0x8915


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


def ipv4_of(host: str) -> str:
    return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]


def is_local(address: str) -> bool:
    """Whether one of this machine's interfaces holds the address (it can be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def address_towards(address: str) -> str:
    """This machine's source address for packets to `address` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, DEFAULT_PORT))
        return probe.getsockname()[0]


def interface_of(address: str) -> str:
    if ipaddress.ip_address(address).is_loopback:
        return "lo"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address
                continue
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    raise OSError(f"no interface of this machine holds {address}")


def split_endpoint(endpoint: str) -> tuple:
    host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    return host, int(port or DEFAULT_PORT)
