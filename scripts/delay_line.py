"""A delay line: the switch of scripts/netns_cluster.py's hosts, in user space, holding
every frame for a set one-way delay (with optional jitter and loss) before passing it on,
for the network latency the kernel's `netem` qdisc would add where this kernel has none.

    ip netns exec SWITCH python scripts/delay_line.py --ports p0,p1 --delay_ms 5 [--jitter_ms 1] [--loss 0.1]

It runs in the cluster's switch namespace in place of the bridge: one raw packet socket
(AF_PACKET) on each host's cable end, a frame read from one port sent out of all the others
once it is due (a hub: with more than two hosts, a host drops the frames not addressed to
it). Frames pass whole, with the kernel's offload header (PACKET_VNET_HDR): a TCP burst of
up to 64 KiB the host's stack has not cut into packets yet (GSO) crosses as one frame, its
checksum still to be done by the receiving host, so a 1 MB all-reduce is tens of frames, not
hundreds. Each frame's arrival is the kernel's receive timestamp, so the time this process
takes to wake is not added to the delay; it runs at real-time priority (SCHED_FIFO) where
allowed and spins the last 0.2 ms before a frame is due, so that neither a loaded machine
nor a late timer makes it late to send. Frames from one host leave in the order they came
(jitter delays, never reorders, as on one cable), and `--loss` drops that percentage of
frames at random (a dropped GSO frame is a whole burst). It prints `ready` once its sockets
are open, stops on SIGTERM or SIGINT or when its parent dies, and then prints one line of
counts (`forwarded ...`: frames, bytes, lost to --loss, not sent (a port down or its queue
full: its host never got the frame), and how late the due frames were sent:
median, 99th percentile, max).
Linux only; needs CAP_NET_RAW (root)."""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import random
import select
import signal
import socket
import struct
import sys
import time

SOL_PACKET = 263
PACKET_VNET_HDR = 15  # frames carry a struct virtio_net_hdr (10 bytes) before the Ethernet header
PACKET_IGNORE_OUTGOING = 23  # a port's socket does not read back the frames sent out of it
ETH_P_ALL = 3
PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29
SO_TIMESTAMPNS = 35
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
FRAME_BUFFER = 1 << 17  # a 64 KiB GSO frame, its header and room
SOCKET_BUFFER = 8 << 20  # what may queue at a port while this process is not running
REALTIME_PRIORITY = 50
SPIN_S = 0.0002  # how long before a frame is due select stops waiting and the loop spins
MAX_WAIT_S = 1.0  # the longest select waits with nothing due
LATENESS_BIN_S = 1e-5  # the summary's resolution


def open_port(name: str) -> socket.socket:
    port = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: nothing read until bound
    port.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    port.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    port.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    port.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, SOCKET_BUFFER)
    port.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SOCKET_BUFFER)
    port.bind((name, ETH_P_ALL))
    port.setblocking(False)
    return port


def arrival_monotonic(ancillary: list, realtime_minus_monotonic: float) -> float:
    """The kernel's receive time (CLOCK_REALTIME) on this process's monotonic clock; now when absent."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return seconds + nanoseconds * 1e-9 - realtime_minus_monotonic
    return time.monotonic()


def prepare_process(parent: int) -> None:
    """Dies with its parent; wakes on time (no timer slack, real-time priority where allowed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    libc.prctl(PR_SET_TIMERSLACK, 1)
    if parent and os.getppid() != parent:
        sys.exit(0)  # the parent died before the death signal was asked for
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (PermissionError, OSError):
        pass


class DelayLine:
    def __init__(self, ports: list, delay_s: float, jitter_s: float, loss: float, seed: int):
        self.ports = ports
        self.delay_s, self.jitter_s, self.loss = delay_s, jitter_s, loss
        self.random = random.Random(seed)
        self.queues = [collections.deque() for _ in ports]  # per input port: (due, frame), due ascending
        self.last_due = [0.0] * len(ports)
        self.frames = self.bytes = self.lost = self.unsent = 0
        self.lateness = collections.Counter()  # frames by how late they were sent, in LATENESS_BIN_S
        self.realtime_minus_monotonic = time.time() - time.monotonic()

    def receive(self, index: int) -> None:
        port = self.ports[index]
        while True:
            try:
                frame, ancillary, _, _ = port.recvmsg(FRAME_BUFFER, 64)
            except BlockingIOError:
                return
            except OSError:  # the port went down (a cable unplugged): nothing to read now
                return
            if self.loss and self.random.random() * 100 < self.loss:
                self.lost += 1
                continue
            due = arrival_monotonic(ancillary, self.realtime_minus_monotonic) + self.delay_s
            if self.jitter_s:
                due += self.random.uniform(-self.jitter_s, self.jitter_s)
            due = max(due, self.last_due[index])  # one cable never reorders
            self.last_due[index] = due
            self.queues[index].append((due, frame))

    def send_due(self, now: float) -> None:
        for index, queue in enumerate(self.queues):
            while queue and queue[0][0] <= now:
                due, frame = queue.popleft()
                for other, port in enumerate(self.ports):
                    if other != index:
                        try:
                            port.send(frame)
                        except OSError:  # the port is down, or its queue is full: the frame is lost there
                            self.unsent += 1
                self.frames += 1
                self.bytes += len(frame)
                self.lateness[int((now - due) / LATENESS_BIN_S)] += 1

    def next_due(self) -> float:
        return min((queue[0][0] for queue in self.queues if queue), default=None)

    def run(self) -> None:
        """Until a signal raises Stopped."""
        while True:
            due = self.next_due()
            now = time.monotonic()
            if due is not None and due - now <= SPIN_S:
                while time.monotonic() < due:  # a select would wake up to 0.1 ms late: the last moment is spun
                    pass
                self.send_due(time.monotonic())
                timeout = 0.0
            else:
                timeout = MAX_WAIT_S if due is None else min(MAX_WAIT_S, due - now - SPIN_S)
            readable, _, _ = select.select(self.ports, [], [], timeout)
            for port in readable:
                self.receive(self.ports.index(port))
            self.send_due(time.monotonic())

    def late_ms(self, fraction: float) -> float:
        """How late the frames were sent, at this fraction of them (0.5: the median; 1: the latest)."""
        counted, wanted = 0, max(1, fraction * self.frames)
        for late_bin in sorted(self.lateness):
            counted += self.lateness[late_bin]
            if counted >= wanted:
                return late_bin * LATENESS_BIN_S * 1e3
        return 0.0

    def summary(self) -> str:
        return (
            f"forwarded {self.frames} frames, {self.bytes} bytes, lost {self.lost}, unsent {self.unsent}; "
            "sent late by median "
            f"{self.late_ms(0.5):.2f} ms, p99 {self.late_ms(0.99):.2f} ms, max {self.late_ms(1):.2f} ms"
        )


class Stopped(Exception):
    pass


def _stop(signum, frame):
    raise Stopped


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ports", required=True, help="the hosts' cable ends in this namespace, comma-separated")
    parser.add_argument("--delay_ms", type=float, default=0.0, help="one-way delay added to every frame")
    parser.add_argument("--jitter_ms", type=float, default=0.0, help="each frame's delay uniform in delay ± jitter")
    parser.add_argument("--loss", type=float, default=0.0, help="percentage of frames dropped at random (netem's loss)")
    parser.add_argument("--seed", type=int, default=0, help="of the jitter and the loss")
    parser.add_argument("--parent", type=int, default=0, help="exit when this process is not the parent")
    args = parser.parse_args(argv)
    if not 0 <= args.jitter_ms <= args.delay_ms or not 0 <= args.loss <= 100:
        parser.error(
            f"--delay_ms {args.delay_ms} --jitter_ms {args.jitter_ms} --loss {args.loss}: "
            "jitter from 0 to the delay, loss from 0 to 100"
        )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    prepare_process(args.parent)
    line = DelayLine(
        [open_port(name) for name in args.ports.split(",")],
        args.delay_ms / 1e3,
        args.jitter_ms / 1e3,
        args.loss,
        args.seed,
    )
    print("ready", flush=True)
    try:
        line.run()
    except Stopped:
        pass
    try:
        print(line.summary(), flush=True)
    except BrokenPipeError:  # the parent is gone, and nobody reads the counts
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
