"""ICMP echo round trips, as ping(8) measures them, for a machine without ping: each request
is timed from just before it is sent to the kernel's receive timestamp of its reply
(SO_TIMESTAMPNS), so this process's own wake-up is not in the time.

    python scripts/ping.py ADDRESS [--count 20] [--interval_s 0.02] [--timeout_s 2]

prints one line per request, its round trip in ms or `lost`. `round_trips_ms(cluster, i,
address)` runs it in host i of a scripts/netns_cluster.py cluster. Needs CAP_NET_RAW (root)."""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = 35
ECHO_REQUEST, ECHO_REPLY = 8, 0
PAYLOAD = bytes(56)  # ping's default size


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def echo_request(ident: int, sequence: int) -> bytes:
    unsummed = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, sequence) + PAYLOAD
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(unsummed), ident, sequence) + PAYLOAD


def received_at(ancillary: list) -> float:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return seconds + nanoseconds * 1e-9
    return time.time()


def ping(address: str, count: int, interval_s: float, timeout_s: float) -> list:
    """Round trips in ms, None for a request whose reply did not come within `timeout_s`."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    ident = os.getpid() & 0xFFFF
    round_trips = []
    for sequence in range(count):
        sent = time.time()
        probe.sendto(echo_request(ident, sequence), (address, 0))
        round_trips.append(None)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            probe.settimeout(left)
            try:
                packet, ancillary, _, _ = probe.recvmsg(2048, 64)
            except socket.timeout:
                break
            header = (packet[0] & 0x0F) * 4  # the IP header's length
            kind, _, _, their_ident, their_sequence = struct.unpack("!BBHHH", packet[header : header + 8])
            if (kind, their_ident, their_sequence) == (ECHO_REPLY, ident, sequence):
                round_trips[-1] = (received_at(ancillary) - sent) * 1e3
                break
        time.sleep(interval_s)
    return round_trips


def round_trips_ms(
    cluster, index: int, address: str, count: int = 20, interval_s: float = 0.02, timeout_s: float = 2.0
) -> list:
    """ping from host `index` of a scripts/netns_cluster.Cluster: round trips in ms, None where lost."""
    command = [sys.executable, os.path.abspath(__file__), address, "--count", str(count)]
    command += ["--interval_s", str(interval_s), "--timeout_s", str(timeout_s)]
    output = cluster.exec(index, command).stdout.decode()
    return [None if word == "lost" else float(word) for word in output.split()]


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--interval_s", type=float, default=0.02, help="between a reply (or its timeout) and the next")
    parser.add_argument("--timeout_s", type=float, default=2.0, help="how long a reply is waited for")
    args = parser.parse_args(argv)
    for round_trip in ping(args.address, args.count, args.interval_s, args.timeout_s):
        print("lost" if round_trip is None else f"{round_trip:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
