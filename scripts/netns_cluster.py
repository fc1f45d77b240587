"""A cluster of N hosts on one Linux machine, for rehearsing a multi-machine run: each host
is a network namespace with its own interface `eth0` at 10.77.0.<i+1>/24 and its own
loopback; the hosts are joined by a bridge in a further namespace (the switch), so nothing
is added to this machine's own network. Every framework sees N machines: own addresses,
own routing, no shared loopback (the file system and the hostname stay shared).

    sudo .venv/bin/python scripts/netns_cluster.py --hosts 2 [--rate 100mbit]
        [--delay_ms 5 [--jitter_ms 1] [--loss 0.1]] -- CMD_FOR_HOST_0 -- CMD_FOR_HOST_1

runs one command in each host (`{host}` in a command is replaced by its address, `{first}`
by host 0's), waits for all of them, and exits with the first non-zero status. Everything
is torn down at the end, however the run ends: Ctrl-C, SIGTERM or SIGHUP included. A run
killed outright (SIGKILL) leaves its namespaces; the next cluster started here removes
them (their names carry the owner's pid, and a cluster whose owner is gone is a leftover).
`--rate` makes every cable that slow, both ways: the kernel's token-bucket shaper (`tc qdisc
... tbf`) on each end, as a 1 Gbit/s or 100 Mbit/s network would be
(algorithms/interconnect/network_cost.py measures what that costs each strategy). `--delay_ms`
adds a one-way delay to every packet between the hosts (and `--jitter_ms`, `--loss`): the
kernel this was written on has no netem (`Specified qdisc kind is unknown`), so the switch
is then not the bridge but the delay line of scripts/delay_line.py, a process in the
switch's namespace that holds each frame for the delay before passing it on
(algorithms/interconnect/network_latency.py measures what that costs each strategy); it stops
with the cluster, and dies with the process that started it.
Needs root (or CAP_NET_ADMIN, CAP_SYS_ADMIN and CAP_NET_RAW) and iproute2's `ip` and `tc`."""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import subprocess
import sys
import time

PREFIX = "cnnp-"  # every namespace made here: cnnp-<owner pid>-<index>-sw / -h<i>
SUBNET = "10.77.0"
INTERFACE = "eth0"  # each host's cluster interface (GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME)
STOP_GRACE_S = 5
_clusters_made = 0  # in this process: makes each cluster's names unique
RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")  # tc's units, bits per second
SHAPER_QUEUE = "100ms"  # tbf's latency: how long a packet may wait for tokens before it is dropped
DELAY_LINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "delay_line.py")
DELAY_LINE_READY_S = 30  # its start-up: a Python without imports beyond the standard library


def check_delay(delay_ms, jitter_ms: float, loss: float) -> None:
    """ValueError, naming the flag, for a delay line the flags cannot make."""
    if delay_ms is not None and delay_ms < 0:
        raise ValueError(f"--delay_ms {delay_ms}: a delay of 0 ms or more")
    if not 0 <= jitter_ms <= (delay_ms or 0):
        raise ValueError(f"--jitter_ms {jitter_ms}: from 0 to --delay_ms ({delay_ms or 0}), so no delay is below 0")
    if not 0 <= loss <= 100:
        raise ValueError(f"--loss {loss}: a percentage from 0 to 100")


def rate_bits(rate: str) -> float:
    """`100mbit` -> 1e8; ValueError naming the form for anything else."""
    match = RATE.match(rate)
    if not match:
        raise ValueError(f"--rate {rate}: expected a number and kbit, mbit or gbit, as tc writes it (100mbit)")
    return float(match.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[match.group(2)]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def namespaces() -> list:
    listed = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def pids_in(namespace: str) -> list:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
    return [int(pid) for pid in listed.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_processes(namespace: str) -> None:
    """SIGTERM to every process in the namespace, SIGKILL to those left after a grace."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        pids = pids_in(namespace)
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid) and pid in pids_in(namespace)]
            time.sleep(0.05)
        if not pids:
            return


def remove_namespace(namespace: str) -> None:
    """Its processes stopped, then the namespace deleted (its interfaces and their veth peers with it)."""
    _stop_processes(namespace)
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)


def remove_leftovers() -> list:
    """Removes the namespaces of clusters whose owning process is gone; returns their names."""
    removed = []
    for namespace in namespaces():
        if not namespace.startswith(PREFIX):
            continue
        owner = namespace[len(PREFIX) :].split("-")[0]
        if owner.isdigit() and not _alive(int(owner)):
            remove_namespace(namespace)
            removed.append(namespace)
    return removed


class Cluster:
    """`with Cluster(2) as cluster:` N hosts up; `cluster.start(i, command)` runs a command in
    host i; leaving the block (or `close()`) stops every process in every host and deletes
    the namespaces, whatever raised. With `delay_ms` (0 included), `jitter_ms` or `loss` the
    hosts meet through scripts/delay_line.py instead of the bridge; its last line (the frames
    it forwarded, how late) is `delay_line_report` once the cluster is closed."""

    def __init__(self, hosts: int, rate: str = None, delay_ms: float = None, jitter_ms: float = 0.0, loss: float = 0.0):
        global _clusters_made
        if not 1 <= hosts <= 250:
            raise ValueError(f"--hosts {hosts}: 1 to 250 hosts fit the /24 subnet")
        self.rate = rate
        if rate is not None:
            rate_bits(rate)
        check_delay(delay_ms, jitter_ms, loss)
        self.delayed = delay_ms is not None or jitter_ms > 0 or loss > 0
        self.delay_ms, self.jitter_ms, self.loss = delay_ms or 0.0, jitter_ms, loss
        self.delay_line = None  # its Popen, while it runs
        self.delay_line_report = None
        _clusters_made += 1
        base = f"{PREFIX}{os.getpid()}-{_clusters_made}"
        self.switch = f"{base}-sw"
        self.hosts = [f"{base}-h{index}" for index in range(hosts)]
        self.addresses = [f"{SUBNET}.{index + 1}" for index in range(hosts)]
        self.processes: list = []
        self.inodes: dict = {}  # namespace -> its inode (/proc/PID/ns/net reads net:[inode])

    def __enter__(self) -> "Cluster":
        remove_leftovers()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        ip("netns", "add", self.switch)
        self.inodes[self.switch] = os.stat(f"/run/netns/{self.switch}").st_ino
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for index, (host, address) in enumerate(zip(self.hosts, self.addresses)):
            port = f"p{index}"
            ip("netns", "add", host)
            self.inodes[host] = os.stat(f"/run/netns/{host}").st_ino
            # created in the switch with its peer in the host: never an interface in this machine's namespace
            ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", INTERFACE, "netns", host)
            if self.delayed:  # the delay line reads and writes the port: no bridge in between
                ip("-n", self.switch, "link", "set", port, "up")
            else:
                ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            # IPv4 only: gloo and TensorPipe take an interface's first address, which must be the cluster's
            self.exec(index, ["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])
            ip("-n", host, "addr", "add", f"{address}/24", "dev", INTERFACE)
            ip("-n", host, "link", "set", INTERFACE, "up")
            ip("-n", host, "link", "set", "lo", "up")
            if self.rate:
                self._shape(host, INTERFACE)  # what the host sends
                self._shape(self.switch, port)  # what it receives
        if self.delayed:
            self._start_delay_line()

    def _start_delay_line(self) -> None:
        """scripts/delay_line.py on every port, once it says `ready` (its sockets are open)."""
        command = [sys.executable, DELAY_LINE, "--ports", ",".join(self.switch_port(i) for i in range(len(self.hosts)))]
        command += ["--delay_ms", str(self.delay_ms), "--jitter_ms", str(self.jitter_ms), "--loss", str(self.loss)]
        self.delay_line = subprocess.Popen(
            ["ip", "netns", "exec", self.switch, *command, "--parent", str(os.getpid())],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self.delay_line.stdout], [], [], DELAY_LINE_READY_S)
        said = self.delay_line.stdout.readline().strip() if ready else ""
        if said != "ready":
            self.delay_line.kill()
            error = self.delay_line.communicate()[1].strip()
            self.delay_line = None
            raise RuntimeError(f"the delay line did not start: {said or error or 'nothing said'}")

    def _shape(self, namespace: str, interface: str) -> None:
        """`--rate` on one end of a cable: a token bucket whose burst holds at least 4 ms of
        traffic (tbf needs one timer tick's worth) and 64 KiB."""
        burst = max(64 * 1024, int(rate_bits(self.rate) / 8 * 0.004))
        command = ["tc", "-n", namespace, "qdisc", "add", "dev", interface, "root", "tbf", "rate", self.rate]
        subprocess.run([*command, "burst", str(burst), "latency", SHAPER_QUEUE], check=True, capture_output=True)

    def switch_port(self, index: int) -> str:
        """The bridge's end of host `index`'s cable (what `link_down` and `delay` act on)."""
        return f"p{index}"

    def exec(self, index: int, command: list) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.hosts[index], *command], check=True, capture_output=True)

    def start(self, index: int, command: list, **popen) -> subprocess.Popen:
        """Starts `command` in host `index` (`ip netns exec` execs it: the Popen's pid is the command's)."""
        process = subprocess.Popen(["ip", "netns", "exec", self.hosts[index], *command], **popen)
        self.processes.append(process)
        return process

    def link_down(self, index: int) -> None:
        """Host `index` unplugged: the switch's end of its cable goes down."""
        ip("-n", self.switch, "link", "set", self.switch_port(index), "down")

    def pids(self) -> dict:
        return {host: pids_in(host) for host in self.hosts if host in namespaces()}

    def close(self) -> None:
        for host in self.hosts:
            if host in namespaces():
                remove_namespace(host)
        for process in self.processes:
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:  # `ip netns exec` not yet exec'd when stopped: its own pid
                process.kill()
                process.wait()
        if self.switch in namespaces():
            remove_namespace(self.switch)  # the delay line with it: SIGTERM, and it prints its counts
        if self.delay_line is not None:
            try:
                output = self.delay_line.communicate(timeout=STOP_GRACE_S)[0]
            except subprocess.TimeoutExpired:  # not yet exec'd into the namespace when stopped
                self.delay_line.kill()
                output = self.delay_line.communicate()[0]
            self.delay_line_report = (output.strip().splitlines() or [None])[-1]
            self.delay_line = None


def _raise_on(signum, _frame):
    raise SystemExit(128 + signum)


def split_commands(argv: list) -> list:
    commands, current = [], None
    for arg in argv:
        if arg == "--":
            current = []
            commands.append(current)
        elif current is not None:
            current.append(arg)
    return commands


def main(argv: list) -> int:
    if "--" in argv:
        own, rest = argv[: argv.index("--")], argv[argv.index("--") :]
    else:
        own, rest = argv, []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2, help="how many hosts (default 2)")
    parser.add_argument(
        "--rate",
        default=None,
        help="every cable this slow, both ways (tc tbf): e.g. 1gbit, 100mbit (default: as fast as the CPU)",
    )
    parser.add_argument(
        "--delay_ms",
        type=float,
        default=None,
        help="one-way delay added to every packet between hosts, by the delay line (default: none, the bridge)",
    )
    parser.add_argument("--jitter_ms", type=float, default=0.0, help="each packet's delay uniform in delay ± this")
    parser.add_argument("--loss", type=float, default=0.0, help="percentage of packets the delay line drops")
    parser.add_argument("--cleanup", action="store_true", help="only remove the leftovers of killed earlier runs")
    args = parser.parse_args(own)
    try:
        if args.rate is not None:
            rate_bits(args.rate)
        check_delay(args.delay_ms, args.jitter_ms, args.loss)
    except ValueError as error:
        parser.error(str(error))
    if args.cleanup:
        for namespace in remove_leftovers():
            print(f"removed {namespace}")
        return 0
    commands = split_commands(rest)
    if len(commands) != args.hosts:
        parser.error(f"--hosts {args.hosts} needs {args.hosts} commands, each after its own `--`; got {len(commands)}")
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _raise_on)
    with Cluster(args.hosts, args.rate, args.delay_ms, args.jitter_ms, args.loss) as cluster:
        first = cluster.addresses[0]
        running = [
            cluster.start(index, [word.replace("{host}", address).replace("{first}", first) for word in command])
            for index, (address, command) in enumerate(zip(cluster.addresses, commands))
        ]
        statuses = [process.wait() for process in running]
    return next((status for status in statuses if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
