"""torch_script.py across two hosts (scripts/netns_cluster.py: two network namespaces on a
bridge, 10.77.0.1 and 10.77.0.2): `--strategy data` (2 hosts x 1 and x 2 ranks) and
`localsgd`, launched on each host with the multi-node command of docs/parallel.md, train
to the same losses as the one-host run of the same plan, rank 0 alone writes, and every
listening socket of each host is on its cluster address or loopback, never the wildcard
address; the other host's processes killed end the run with its rows kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from algorithms.records import read_rows
from scripts.netns_cluster import Cluster, pids_in
from tests.conftest import REPO_ROOT, run_python, run_script
from tests.helpers.netns import (
    LOOPBACK_HEX,
    WILDCARD_HEX,
    hex_address,
    interfaces_here,
    left_behind,
    require_namespaces,
    run_on_hosts,
)

pytestmark = pytest.mark.slow  # several torch processes per host

NETWORK = "cnn2d_3layer_fullconnected_3layer"
CSV_NAME = f"{NETWORK}_torch.csv"
STEPS = 3
FLOAT32_ABSOLUTE = 1e-5  # a few steps' losses (about 2.3), gloo summing in another order
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # the ranks share two cores


def flags(small_data, results, devices: int, strategy: str = "data") -> list:
    return [
        *("--strategy", strategy, "--devices", str(devices), "--threads", "1", "--max_steps", str(STEPS)),
        *("--train", str(small_data / "train.csv"), "--test", "none", "--batch_size", "32"),
        *("--results_dir", str(results), "--quiet"),
    ]


def node_command(small_data, results, devices: int, ranks_per_host: int, strategy: str = "data") -> list:
    """docs/parallel.md's command for a node, the rendezvous on the first host's address."""
    return [
        *(sys.executable, "-m", "torch_wrapper.agent", "--nnodes", "2", "--nproc_per_node", str(ranks_per_host)),
        *("--rdzv_backend", "c10d", "--rdzv_endpoint", "10.77.0.1:29400", "--rdzv_id", "cnn-run-1"),
        "torch_script.py",
        *flags(small_data, results, devices, strategy),
    ]


def train_losses(csv_path) -> list:
    return [r["loss"] for r in read_rows(str(csv_path)) if r["phase"] == "train"]


def one_host_losses(small_data, tmp_path, devices: int, strategy: str) -> list:
    results = tmp_path / "one_host" / "results"
    proc = run_script("torch_script.py", flags(small_data, results, devices, strategy), {"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return train_losses(results / CSV_NAME)


@pytest.fixture(autouse=True)
def namespaces_available():
    require_namespaces()


@pytest.mark.parametrize(
    "strategy, ranks_per_host",
    [("data", 1), ("data", 2), ("localsgd", 1)],
    ids=["data-2x1", "data-2x2", "localsgd-2x1"],
)
def test_a_torchrun_strategy_on_two_hosts_equals_one_host(strategy, ranks_per_host, small_data, tmp_path):
    devices = 2 * ranks_per_host
    before = interfaces_here()
    nodes = [tmp_path / f"host{index}" / "results" for index in range(2)]
    with Cluster(2) as cluster:
        ended, seen = run_on_hosts(
            cluster,
            [node_command(small_data, results, devices, ranks_per_host, strategy) for results in nodes],
            env=ONE_THREAD,
        )
    assert left_behind(cluster, before) == {}
    assert [status for status, _ in ended] == [0, 0], [output[-3000:] for _, output in ended]
    written = [results for results in nodes if (results / CSV_NAME).exists()]
    assert len(written) == 1, written  # global rank 0's host alone
    assert (written[0] / CSV_NAME).read_text().count("run_id,") == 1
    rows = read_rows(str(written[0] / CSV_NAME))
    assert {(r["strategy"], r["devices"]) for r in rows} == {(strategy, devices)}
    two_hosts = train_losses(written[0] / CSV_NAME)
    assert len(two_hosts) == STEPS
    np.testing.assert_allclose(
        two_hosts, one_host_losses(small_data, tmp_path, devices, strategy), rtol=0, atol=FLOAT32_ABSOLUTE
    )
    for address, listened in zip(cluster.addresses, seen):
        assert listened, f"nothing seen listening on {address}"  # the sampling saw the run
        assert {where for where, _ in listened} <= {hex_address(address), *LOOPBACK_HEX}, (address, listened)


def test_a_parameter_server_run_with_a_worker_on_the_other_host_equals_one_host(small_data, tmp_path):
    """--strategy ps --ps_sync, 2 workers: the coordinator, the server and worker 0 on host 0
    (--ps_endpoint on its address, --remote_workers 1), worker 1 on host 1 by
    `python -m torch_wrapper.asynchronous.ps_worker --worker 1` with the same flags: the losses of the
    one-host run, host 0 alone writes, and every socket listens on a host's own address or
    its loopback."""
    before = interfaces_here()
    nodes = [tmp_path / f"host{index}" / "results" for index in range(2)]
    extra = ["--ps_sync", "--ps_endpoint", "10.77.0.1:29500", "--remote_workers", "1"]
    commands = [
        [sys.executable, "torch_script.py", *flags(small_data, nodes[0], 2, "ps"), *extra],
        [
            sys.executable,
            "-m",
            "torch_wrapper.asynchronous.ps_worker",
            "--worker",
            "1",
            *flags(small_data, nodes[1], 2, "ps"),
            *extra,
        ],
    ]
    with Cluster(2) as cluster:
        ended, seen = run_on_hosts(cluster, commands, env=ONE_THREAD)
    assert left_behind(cluster, before) == {}
    assert [status for status, _ in ended] == [0, 0], [output[-3000:] for _, output in ended]
    assert not (nodes[1] / CSV_NAME).exists()  # the remote worker records nothing
    two_hosts = train_losses(nodes[0] / CSV_NAME)
    assert len(two_hosts) == STEPS
    one_host = tmp_path / "one_host" / "results"
    proc = run_script("torch_script.py", [*flags(small_data, one_host, 2, "ps"), "--ps_sync"], {"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(two_hosts, train_losses(one_host / CSV_NAME), rtol=0, atol=FLOAT32_ABSOLUTE)
    for address, listened in zip(cluster.addresses, seen):
        assert listened, f"nothing seen listening on {address}"
        assert {where for where, _ in listened} <= {hex_address(address), *LOOPBACK_HEX}, (address, listened)
    assert "ps_endpoint=10.77.0.1:29500 remote_workers=1" in (nodes[0].parent / "results.log").read_text()


def test_a_remote_worker_the_coordinator_starts_itself_is_refused_in_one_line(small_data, tmp_path):
    extra = ["--ps_endpoint", "10.77.0.1:29500", "--remote_workers", "1", "--worker", "0"]
    proc = run_python(["-m", "torch_wrapper.asynchronous.ps_worker", *flags(small_data, tmp_path, 2, "ps"), *extra])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: --worker 0: the coordinator starts workers 0-0 itself; the remote ones are 1-1 "
        "(--devices 2, --remote_workers 1)"
    )


def test_plain_torchrun_across_hosts_needs_the_three_flags_and_binds_every_interface(small_data, tmp_path):
    """docs/parallel.md's torchrun typed by hand: is_host on the endpoint's node, --local_addr
    and GLOO_SOCKET_IFNAME on each; it trains, and torch's own stores listen on the wildcard."""
    before = interfaces_here()
    nodes = [tmp_path / f"host{index}" / "results" for index in range(2)]
    commands = [
        [
            *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"),
            *("--rdzv_backend", "c10d", "--rdzv_endpoint", "10.77.0.1:29400", "--rdzv_id", "cnn-run-1"),
            *("--rdzv_conf", f"is_host={int(index == 0)}", "--local_addr", f"10.77.0.{index + 1}"),
            "torch_script.py",
            *flags(small_data, results, 2),
        ]
        for index, results in enumerate(nodes)
    ]
    with Cluster(2) as cluster:
        ended, seen = run_on_hosts(cluster, commands, env={**ONE_THREAD, "GLOO_SOCKET_IFNAME": "eth0"})
    assert left_behind(cluster, before) == {}
    assert [status for status, _ in ended] == [0, 0], [output[-3000:] for _, output in ended]
    assert sum((results / CSV_NAME).exists() for results in nodes) == 1
    wildcard = {where for listened in seen for where, _ in listened} - {hex_address(a) for a in cluster.addresses}
    assert wildcard and wildcard <= WILDCARD_HEX, seen  # the TCPStores that torch_wrapper.agent binds to one address


LOST_HOST_ENDS_WITHIN_S = 60


@pytest.mark.parametrize("fault", ["killed", "link_down"])
def test_a_lost_second_host_ends_the_first_hosts_run_with_its_rows(fault, small_data, tmp_path):
    """The host without rank 0 lost mid-run, its processes killed (gloo sees the reset
    connection; results.log names the lost address) or its link taken down (nothing reaches
    the survivor: gloo's 30 s collective timeout ends it): the other host's run ends within a
    minute, status not 0, its rows kept, and no process is left on it."""
    before = interfaces_here()
    nodes = [tmp_path / f"host{index}" / "results" for index in range(2)]
    long_run = [word if word != str(STEPS) else "10000" for word in node_command(small_data, nodes[0], 2, 1)]
    with Cluster(2) as cluster:
        processes = [
            cluster.start(
                index,
                [word if word != str(nodes[0]) else str(results) for word in long_run],
                cwd=REPO_ROOT,
                env=ONE_THREAD,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for index, results in enumerate(nodes)
        ]
        deadline = time.monotonic() + 300
        while not any(
            (results / CSV_NAME).exists()
            and sum(row["phase"] == "train" for row in read_rows(str(results / CSV_NAME))) >= 3
            for results in nodes
        ):
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
            time.sleep(0.5)
        writer = next(index for index, results in enumerate(nodes) if (results / CSV_NAME).exists())
        lost = 1 - writer
        if fault == "killed":
            for pid in pids_in(cluster.hosts[lost]):
                os.kill(pid, signal.SIGKILL)
        else:
            cluster.link_down(lost)
        killed_at = time.monotonic()
        output = processes[writer].communicate(timeout=LOST_HOST_ENDS_WITHIN_S)[0]
        ended_after_s = time.monotonic() - killed_at
        assert pids_in(cluster.hosts[writer]) == []  # the first host's agent stopped its rank
        if fault == "killed":
            assert pids_in(cluster.hosts[lost]) == []
    assert left_behind(cluster, before) == {}
    print(f"the first host's run ended {ended_after_s:.1f} s after the host was lost ({fault})")
    assert processes[writer].returncode not in (0, None)
    assert output.strip().splitlines()[-1].startswith("error: torch_script.py FAILED: rank 0"), output[-2000:]
    rows = [r for r in read_rows(str(nodes[writer] / CSV_NAME)) if r["phase"] == "train"]
    assert len(rows) >= 3 and [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    log = (nodes[writer].parent / "results.log").read_text()
    assert "status:      failed:" in log, log[-1500:]
    # one line, on the console and in results.log, naming the host that was lost
    if fault == "killed":  # gloo's "Read error [host]:port" or "Connection closed by peer [host]:port"
        said = f"rank 0 lost its peer at host {cluster.addresses[lost]} (port "
    else:
        said = "rank 0 lost a peer: no "  # recv (or send) "from it for 30 s (its host or link is down"
        assert "from it for 30 s (its host or link is down" in log, log[-1500:]
    assert f"status:      failed: {said}" in log, log[-1500:]
    assert f"error: {said}" in output, output[-2000:]
