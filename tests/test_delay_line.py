"""scripts/delay_line.py between the hosts of scripts/netns_cluster.py (`--delay_ms`): the
round trip ping measures is twice the one-way delay within 10% (at 0 ms, the delay line's
own cost: under 0.5 ms), jitter spreads it as two uniform draws do and loss drops what it
says; the cable can still be unplugged and shaped; and the delay line goes with the
cluster, leaving no namespace, process or interface when the block raises, when the script
is stopped by Ctrl-C, and no process when the script is killed outright."""

from __future__ import annotations

import re
import signal
import statistics
import subprocess
import sys
import time

import pytest

from scripts.netns_cluster import Cluster, namespaces
from scripts.ping import round_trips_ms
from tests.netns import interfaces_here, left_behind, processes_in, require_namespaces
from tests.test_netns_cluster import RECEIVE, SCRIPT, SEND, STOPPED_WITHIN_S, start_script, wait_for_listener

WITHIN = 0.10  # of the set round trip
ZERO_DELAY_BELOW_MS = 0.5  # the round trip through the delay line set to 0 ms: the bridge's own is about 0.1 ms
PINGS = 21  # the first also waits for ARP's exchange (two more crossings): not counted


@pytest.fixture(autouse=True)
def namespaces_available():
    require_namespaces()


def forwarded_frames(report: str) -> int:
    return int(re.match(r"forwarded (\d+) frames, \d+ bytes, lost \d+; sent late by median ", report).group(1))


@pytest.mark.parametrize("delay_ms", [0, 1, 5, 20])
def test_the_round_trip_is_twice_the_one_way_delay(delay_ms):
    before = interfaces_here()
    with Cluster(2, delay_ms=delay_ms) as cluster:
        round_trips = round_trips_ms(cluster, 0, cluster.addresses[1], count=PINGS)
    assert left_behind(cluster, before) == {}
    assert None not in round_trips, round_trips
    median = statistics.median(round_trips[1:])
    print(f"--delay_ms {delay_ms}: median round trip {median:.3f} ms; {cluster.delay_line_report}")
    if delay_ms:
        assert abs(median - 2 * delay_ms) <= WITHIN * 2 * delay_ms, round_trips
    else:
        assert median < ZERO_DELAY_BELOW_MS, round_trips
    # every request and reply crossed the delay line (not a bridge beside it)
    assert forwarded_frames(cluster.delay_line_report) >= 2 * PINGS


def test_jitter_spreads_the_round_trip_and_loss_drops_packets():
    with Cluster(2, delay_ms=5, jitter_ms=2) as cluster:
        round_trips = round_trips_ms(cluster, 0, cluster.addresses[1], count=41)[1:]
    # each way uniform in 3-7 ms: round trips from 6 to 14 ms, spread as the sum of two (sd 1.63 ms)
    assert 6 <= min(round_trips) and max(round_trips) <= 14 + ZERO_DELAY_BELOW_MS, round_trips
    assert 1.0 <= statistics.pstdev(round_trips) <= 2.4, round_trips
    with Cluster(2, loss=20) as cluster:
        round_trips_ms(cluster, 0, cluster.addresses[1], count=5, timeout_s=1)  # ARP resolved before counting
        measured = round_trips_ms(cluster, 0, cluster.addresses[1], count=200, interval_s=0.001, timeout_s=0.1)
    # a request and its reply each lost with 20%: 36% of round trips lost (binomial sd 3.4%)
    assert 0.24 <= measured.count(None) / len(measured) <= 0.48, measured.count(None)


def test_a_cable_is_still_unplugged_and_shaped_through_the_delay_line():
    """link_down and --rate act on the switch's port and the hosts' eth0, which the delay
    line reads and writes: unplugged, nothing crosses; at 10 Mbit/s, 2 MiB takes 1.7 s or more."""
    before = interfaces_here()
    with Cluster(2, "10mbit", delay_ms=1) as cluster:
        server = cluster.start(1, [sys.executable, "-c", SEND, "10.77.0.2"])
        wait_for_listener(cluster, 1, 5001)
        received, seconds = cluster.exec(0, [sys.executable, "-c", RECEIVE, "10.77.0.2"]).stdout.decode().split()
        assert server.wait(30) == 0
        cluster.link_down(1)
        unplugged = round_trips_ms(cluster, 0, cluster.addresses[1], count=3, timeout_s=0.3)
    assert int(received) == 2 << 20 and float(seconds) >= (2 << 20) * 8 / 10e6 * 0.95, seconds
    assert unplugged == [None, None, None]
    assert left_behind(cluster, before) == {}


def test_a_failure_inside_the_block_stops_the_delay_line_with_everything_else():
    before = interfaces_here()
    with pytest.raises(RuntimeError, match="the test's own failure"):
        with Cluster(2, delay_ms=5) as cluster:
            delay_line = cluster.delay_line.pid
            cluster.start(0, ["sleep", "600"])
            assert delay_line in processes_in({cluster.inodes[cluster.switch]})
            raise RuntimeError("the test's own failure")
    assert left_behind(cluster, before) == {}
    assert cluster.delay_line is None and forwarded_frames(cluster.delay_line_report) >= 0  # it ended and said so


def test_the_script_with_a_delay_stopped_by_ctrl_c_leaves_nothing():
    before = interfaces_here()
    process, inodes = start_script(2, "--delay_ms", "5")
    switch = next(inode for name, inode in inodes.items() if name.endswith("-sw"))
    assert len(processes_in({switch})) == 1  # the delay line
    process.send_signal(signal.SIGINT)
    assert process.wait(STOPPED_WITHIN_S) == 128 + signal.SIGINT
    assert [name for name in namespaces() if name in inodes] == []
    assert processes_in(set(inodes.values())) == []
    assert interfaces_here() == before


def test_the_delay_line_dies_with_a_script_killed_outright():
    """SIGKILL leaves the namespaces to the next cluster (as without a delay), but not the
    delay line: it asked the kernel for SIGTERM when its parent dies."""
    process, inodes = start_script(2, "--delay_ms", "5")
    switch = next(inode for name, inode in inodes.items() if name.endswith("-sw"))
    (delay_line,) = processes_in({switch})
    process.kill()
    process.wait()
    deadline = time.monotonic() + 5
    while processes_in({switch}) and time.monotonic() < deadline:
        time.sleep(0.05)
    outlived = processes_in({switch})
    with Cluster(1) as cluster:  # removes the killed script's namespaces (and what runs in them)
        assert [name for name in namespaces() if name in inodes] == []
    assert outlived == [], f"the delay line (pid {delay_line}) outlived its parent"
    assert processes_in(set(inodes.values()) | set(cluster.inodes.values())) == []


def test_a_jitter_above_the_delay_is_one_line():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--delay_ms", "1", "--jitter_ms", "3", "--", "true", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("--jitter_ms 3.0: from 0 to --delay_ms (1.0), so no delay is below 0")
    )
