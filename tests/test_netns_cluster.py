"""scripts/netns_cluster.py: N hosts on one machine that reach each other on their own
addresses and share no loopback, and that leave nothing behind (namespace, process
inside one, interface here) when the block raises, when the script is stopped by
SIGINT, SIGTERM or SIGHUP, or, after SIGKILL, once the next cluster starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from scripts.netns_cluster import PREFIX, Cluster, namespaces, pids_in
from tests.conftest import REPO_ROOT
from tests.helpers.netns import interfaces_here, left_behind, processes_in, require_namespaces

SCRIPT = os.path.join(REPO_ROOT, "scripts", "netns_cluster.py")
STOPPED_WITHIN_S = 15  # the script's SIGTERM, then SIGKILL after its 5 s grace, with room for a loaded machine
SERVE = "import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 5000)); s.listen(); s.accept()[0].sendall(b'hi')"
FETCH = "import socket,sys; c=socket.create_connection((sys.argv[1], 5000), timeout=5); print(c.recv(2).decode())"


@pytest.fixture(autouse=True)
def namespaces_available():
    require_namespaces()


def wait_for_listener(cluster, index: int, port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listening = cluster.exec(index, ["cat", "/proc/net/tcp"]).stdout.decode()
        if f":{port:04X} 00000000:0000 0A" in listening:
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on port {port} in host {index}")


def test_hosts_reach_each_other_on_their_addresses_and_share_no_loopback():
    before = interfaces_here()
    with Cluster(2) as cluster:
        assert cluster.addresses == ["10.77.0.1", "10.77.0.2"]
        server = cluster.start(1, [sys.executable, "-c", SERVE, "10.77.0.2"])
        wait_for_listener(cluster, 1, 5000)
        fetched = cluster.exec(0, [sys.executable, "-c", FETCH, "10.77.0.2"]).stdout.decode().strip()
        assert fetched == "hi"
        assert server.wait(10) == 0
        # host 1's loopback is not host 0's
        loopback_server = cluster.start(1, [sys.executable, "-c", SERVE, "127.0.0.1"])
        wait_for_listener(cluster, 1, 5000)
        refused = subprocess.run(
            ["ip", "netns", "exec", cluster.hosts[0], sys.executable, "-c", FETCH, "127.0.0.1"],
            capture_output=True,
            text=True,
        )
        assert refused.returncode != 0 and "ConnectionRefusedError" in refused.stderr, refused.stderr
        assert pids_in(cluster.hosts[1]) == [loopback_server.pid]  # `ip netns exec` became the command
    assert left_behind(cluster, before) == {}


def test_a_failure_inside_the_block_still_tears_everything_down():
    before = interfaces_here()
    with pytest.raises(RuntimeError, match="the test's own failure"):
        with Cluster(3) as cluster:
            for index in range(3):
                cluster.start(index, ["sleep", "600"])
            # a process that ignores SIGTERM too: it must get SIGKILL
            cluster.start(0, ["sh", "-c", "trap '' TERM; sleep 600"])
            time.sleep(0.5)
            assert sum(len(pids) for pids in cluster.pids().values()) >= 4
            raise RuntimeError("the test's own failure")
    assert left_behind(cluster, before) == {}


def start_script(hosts: int, *flags: str) -> tuple:
    """The script (with `flags`) and `sleep 600` in every host, once every host runs it:
    (process, namespace inodes)."""
    commands = [word for _ in range(hosts) for word in ("--", "sleep", "600")]
    process = subprocess.Popen(
        [sys.executable, SCRIPT, "--hosts", str(hosts), *flags, *commands],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    owned = f"{PREFIX}{process.pid}-"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        mine = [name for name in namespaces() if name.startswith(owned)]
        hosts_up = [name for name in mine if not name.endswith("-sw") and pids_in(name)]
        if len(hosts_up) == hosts:
            return process, {name: os.stat(f"/run/netns/{name}").st_ino for name in mine}
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the script's hosts did not start: {process.communicate()}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_the_script_stopped_by_a_signal_leaves_nothing(signum):
    before = interfaces_here()
    process, inodes = start_script(2)
    deadline = time.monotonic() + 30  # a loaded machine: each host's command may still be exec'ing
    while len(processes_in(set(inodes.values()))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(processes_in(set(inodes.values()))) == 2
    process.send_signal(signum)
    assert process.wait(STOPPED_WITHIN_S) == 128 + signum
    assert [name for name in namespaces() if name in inodes] == []
    assert processes_in(set(inodes.values())) == []
    assert interfaces_here() == before


def test_the_leftovers_of_a_killed_script_are_removed_by_the_next_cluster():
    before = interfaces_here()
    process, inodes = start_script(2)
    process.kill()
    process.wait()
    assert sorted(name for name in namespaces() if name in inodes) == sorted(inodes)  # SIGKILL: no teardown
    with Cluster(1) as cluster:
        assert [name for name in namespaces() if name in inodes] == []
        assert processes_in(set(inodes.values())) == []
    assert left_behind(cluster, before) == {}


def test_the_cleanup_flag_removes_leftovers_and_spares_a_live_cluster():
    process, inodes = start_script(1)
    with Cluster(1) as live:
        process.kill()
        process.wait()
        cleaned = subprocess.run([sys.executable, SCRIPT, "--cleanup"], capture_output=True, text=True, timeout=60)
        assert cleaned.returncode == 0, cleaned.stderr
        assert sorted(cleaned.stdout.split()[1::2]) == sorted(inodes)
        assert all(name in namespaces() for name in live.hosts + [live.switch])


def test_a_command_count_other_than_hosts_is_one_line():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--hosts", "2", "--", "true"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("--hosts 2 needs 2 commands, each after its own `--`; got 1")


SEND = (
    "import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 5001)); s.listen(); "
    "s.accept()[0].sendall(bytes(2 << 20))"
)
RECEIVE = (
    "import socket,sys,time; c=socket.create_connection((sys.argv[1], 5001), timeout=30); t=time.monotonic(); n=0\n"
    "while (chunk := c.recv(1 << 16)): n += len(chunk)\n"
    "print(n, time.monotonic() - t)"
)


def test_a_rate_shapes_every_cable_both_ways_with_the_kernels_token_bucket():
    """--rate 10mbit: tbf at 10 Mbit/s on each host's eth0 and on its switch port, and 2 MiB
    cannot cross in less than the 1.7 s that rate allows (a bound a slow machine only widens)."""
    before = interfaces_here()
    with Cluster(2, "10mbit") as cluster:
        for index in range(2):
            host_end = cluster.exec(index, ["tc", "qdisc", "show", "dev", "eth0"]).stdout.decode()
            port = cluster.switch_port(index)
            switch_end = subprocess.run(
                ["tc", "-n", cluster.switch, "qdisc", "show", "dev", port], capture_output=True, text=True, check=True
            ).stdout
            assert "tbf" in host_end and "rate 10Mbit" in host_end, host_end
            assert "tbf" in switch_end and "rate 10Mbit" in switch_end, switch_end
        server = cluster.start(1, [sys.executable, "-c", SEND, "10.77.0.2"])
        wait_for_listener(cluster, 1, 5001)
        received, seconds = cluster.exec(0, [sys.executable, "-c", RECEIVE, "10.77.0.2"]).stdout.decode().split()
        assert server.wait(30) == 0
    assert int(received) == 2 << 20 and float(seconds) >= (2 << 20) * 8 / 10e6 * 0.95, seconds
    assert left_behind(cluster, before) == {}


def test_a_rate_tc_cannot_read_is_one_line():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--rate", "fast", "--", "true", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("--rate fast: expected a number and kbit, mbit or gbit, as tc writes it (100mbit)")
    )
