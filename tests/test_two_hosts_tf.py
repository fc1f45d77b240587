"""tensorflow_script.py across hosts of scripts/netns_cluster.py, each task started with
its own TF_CONFIG as docs/parallel.md shows: `--strategy data` (MultiWorkerMirroredStrategy)
on 2 hosts gives the losses of the same two workers on one host's 127.0.0.1, and `--strategy
ps` with the chief, the worker and the parameter server on 3 hosts gives the single-device
run's (one worker), and goes on without a worker whose host is lost (4 hosts). TensorFlow's
gRPC server binds 0.0.0.0 whatever TF_CONFIG names, and TensorFlow has no option to choose:
the tests state it (the port is on the wildcard)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from algorithms.ports import free_ports
from algorithms.records import STEP_CHECK_FOLDER, YARDSTICK_FOLDER, read_rows, sidecar_path
from scripts.netns_cluster import Cluster, pids_in
from tests.conftest import REPO_ROOT, run_script
from tests.helpers.netns import WILDCARD_HEX, interfaces_here, left_behind, require_namespaces, run_on_hosts

pytestmark = pytest.mark.slow  # a TensorFlow process per host

NETWORK = "cnn2d_3layer_fullconnected_3layer"
CSV_NAME = f"{NETWORK}_tensorflow.csv"
PORT = 2222
STEPS = 4
FLOAT32_RELATIVE = 2e-5  # as tests/test_ps_tf.py: the same batches and masks, float32 sums
TASK_ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(autouse=True)
def namespaces_available():
    require_namespaces()


def flags(small_data, results, *extra) -> list:
    return [
        *("--train", str(small_data / "train.csv"), "--test", "none", "--batch_size", "32"),
        *("--max_steps", str(STEPS), "--results_dir", str(results), "--quiet", *extra),
    ]


def tf_config(cluster: dict, kind: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


def task_command(config: str, arguments: list) -> list:
    """A task as typed on its node: `TF_CONFIG='...' python tensorflow_script.py ...`."""
    return ["env", f"TF_CONFIG={config}", sys.executable, os.path.join(REPO_ROOT, "tensorflow_script.py"), *arguments]


def data_worker(workers: dict, index: int, small_data, results, *extra) -> list:
    """Worker `index` of a MultiWorkerMirroredStrategy run on 2 devices over `workers`."""
    config = tf_config(workers, "worker", index)
    return task_command(config, flags(small_data, results, "--strategy", "data", "--devices", "2", *extra))


def train_losses(csv_path) -> list:
    return [r["loss"] for r in read_rows(str(csv_path)) if r["phase"] == "train"]


def assert_grpc_on_the_wildcard(seen: list) -> None:
    """Every task's gRPC server listens on *:PORT (TensorFlow's grpc_server_lib binds 0.0.0.0)."""
    for listened in seen:
        assert any(address in WILDCARD_HEX and port == PORT for address, port in listened), listened


def test_multi_worker_data_parallel_on_two_hosts_equals_two_workers_on_one(small_data, tmp_path):
    before = interfaces_here()
    nodes = [tmp_path / f"host{index}" / "results" for index in range(2)]
    with Cluster(2) as cluster:
        workers = {"worker": [f"{address}:{PORT}" for address in cluster.addresses]}
        commands = [data_worker(workers, index, small_data, nodes[index]) for index in range(2)]
        ended, seen = run_on_hosts(cluster, commands, env={**TASK_ENV, "TMPDIR": str(tmp_path)})
    assert left_behind(cluster, before) == {}
    assert [status for status, _ in ended] == [0, 0], [output[-3000:] for _, output in ended]
    # worker 0, the chief, alone writes: its rows, its run's settings record once, its step
    # check's rows and the yardstick it measured (no shipped envelope covers the small data)
    written = [CSV_NAME, os.path.basename(sidecar_path(CSV_NAME)), STEP_CHECK_FOLDER, YARDSTICK_FOLDER]
    assert sorted(os.listdir(nodes[0])) == sorted(written)
    assert len((nodes[0] / sidecar_path(CSV_NAME)).read_text().splitlines()) == 1 and not nodes[1].exists()
    two_hosts = train_losses(nodes[0] / CSV_NAME)
    assert_grpc_on_the_wildcard(seen)

    # the same two workers on one host, over 127.0.0.1
    local = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    one_host = tmp_path / "one_host" / "results"
    processes = [
        subprocess.Popen(
            data_worker(local, index, small_data, one_host),
            cwd=REPO_ROOT,
            env={**TASK_ENV, "TMPDIR": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index in range(2)
    ]
    outputs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [output[-3000:] for output in outputs]
    assert len(two_hosts) == STEPS
    np.testing.assert_allclose(two_hosts, train_losses(one_host / CSV_NAME), rtol=FLOAT32_RELATIVE)


def test_parameter_servers_on_three_hosts_with_one_worker_equal_the_single_device_run(small_data, tmp_path):
    before = interfaces_here()
    chief_results = tmp_path / "chief" / "results"
    with Cluster(3) as cluster:
        chief, worker, ps = (f"{address}:{PORT}" for address in cluster.addresses)
        spec = {"chief": [chief], "worker": [worker], "ps": [ps]}
        arguments = ["--strategy", "ps", "--devices", "1", "--ps_tasks", "1"]
        commands = [
            task_command(tf_config(spec, "chief", 0), flags(small_data, chief_results, *arguments)),
            task_command(tf_config(spec, "worker", 0), flags(small_data, tmp_path / "worker", *arguments)),
            task_command(tf_config(spec, "ps", 0), flags(small_data, tmp_path / "ps", *arguments)),
        ]
        # the worker and the ps serve until killed: the run is over when the chief is
        ended, seen = run_on_hosts(cluster, commands, env=TASK_ENV, until_first_ends=True)
    assert left_behind(cluster, before) == {}
    assert ended[0][0] == 0, ended[0][1][-3000:]
    rows = [r for r in read_rows(str(chief_results / CSV_NAME)) if r["phase"] == "train"]
    assert {(int(r["worker"]), int(r["staleness"])) for r in rows} == {(0, 0)}
    assert_grpc_on_the_wildcard(seen)
    single = run_script("tensorflow_script.py", flags(small_data, tmp_path / "single"))
    assert single.returncode == 0, single.stderr[-2000:]
    reference = train_losses(tmp_path / "single" / CSV_NAME)
    assert len(rows) == len(reference) == STEPS
    np.testing.assert_allclose([r["loss"] for r in rows], reference, rtol=FLOAT32_RELATIVE)


def test_parameter_servers_go_on_without_a_worker_whose_host_is_lost(small_data, tmp_path):
    """Chief, 2 workers and the ps on 4 hosts; worker 1's host's processes killed after 10
    updates: the coordinator runs its unfinished closures on worker 0 and the run completes,
    as on one host (tests/test_ps_tf.py)."""
    before = interfaces_here()
    chief_results = tmp_path / "chief" / "results"
    csv_path = chief_results / CSV_NAME
    with Cluster(4) as cluster:
        chief, worker0, worker1, ps = (f"{address}:{PORT}" for address in cluster.addresses)
        spec = {"chief": [chief], "worker": [worker0, worker1], "ps": [ps]}
        arguments = ["--strategy", "ps", "--devices", "2", "--ps_tasks", "1", "--num_epochs", "3", "--batch_size", "64"]
        data = ["--train", str(small_data / "train.csv"), "--test", "none", "--quiet"]
        tasks = [("chief", 0, chief_results), ("worker", 0, tmp_path / "w0"), ("worker", 1, tmp_path / "w1")]
        tasks.append(("ps", 0, tmp_path / "ps"))
        processes = [
            cluster.start(
                index,
                task_command(tf_config(spec, kind, task), [*data, "--results_dir", str(results), *arguments]),
                cwd=REPO_ROOT,
                env=TASK_ENV,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for index, (kind, task, results) in enumerate(tasks)
        ]
        deadline = time.monotonic() + 300
        while not (csv_path.exists() and len(csv_path.read_text().splitlines()) > 10):
            assert time.monotonic() < deadline and processes[0].poll() is None
            time.sleep(0.5)
        for pid in pids_in(cluster.hosts[2]):
            os.kill(pid, signal.SIGKILL)
        output = processes[0].communicate(timeout=300)[0]
    assert left_behind(cluster, before) == {}
    assert processes[0].returncode == 0, output[-3000:]
    rows = [r for r in read_rows(str(csv_path)) if r["phase"] == "train"]
    assert [r["step"] for r in rows] == list(range(1, 49))  # every update of 3 epochs x 8 batches x 2 shares
    assert {int(r["worker"]) for r in rows[30:]} == {0}
    log = (chief_results.parent / "results.log").read_text()
    assert "worker(s) 1 of 2 stopped during the run" in log and "status:      completed" in log, log[-1500:]


LOST_HOST_ENDS_WITHIN_S = 90  # TensorFlow's heartbeat and the 30 s collective timeout, on a loaded machine


@pytest.mark.parametrize("fault", ["killed", "link_down"])
def test_a_lost_second_host_ends_the_chiefs_data_parallel_run_in_one_line_naming_it(fault, small_data, tmp_path):
    """MultiWorkerMirroredStrategy on 2 hosts, the second host's processes killed or its cable
    unplugged mid-run: the chief ends within the stated time, status 4, one line naming the
    lost worker and its address, every finished row kept, nothing left on either host."""
    before = interfaces_here()
    nodes = [tmp_path / f"host{index}" / "results" for index in range(2)]
    csv_path = nodes[0] / CSV_NAME
    with Cluster(2) as cluster:
        workers = {"worker": [f"{address}:{PORT}" for address in cluster.addresses]}
        processes = [
            cluster.start(
                index,
                data_worker(workers, index, small_data, nodes[index], "--max_steps", "100000"),
                cwd=REPO_ROOT,
                env={**TASK_ENV, "TMPDIR": str(tmp_path)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for index in range(2)
        ]
        deadline = time.monotonic() + 300
        while not (  # three train steps recorded (a run's rows begin with its init row)
            csv_path.exists() and sum(r["phase"] == "train" for r in read_rows(str(csv_path))) >= 3
        ):
            assert time.monotonic() < deadline and processes[0].poll() is None
            time.sleep(0.5)
        if fault == "killed":
            for pid in pids_in(cluster.hosts[1]):
                os.kill(pid, signal.SIGKILL)
        else:
            cluster.link_down(1)
        lost_at = time.monotonic()
        output = processes[0].communicate(timeout=LOST_HOST_ENDS_WITHIN_S)[0]
        ended_after_s = time.monotonic() - lost_at
        assert pids_in(cluster.hosts[0]) == []
    assert left_behind(cluster, before) == {}
    print(f"the chief ended {ended_after_s:.1f} s after the second host was lost ({fault})")
    assert processes[0].returncode == 4, output[-3000:]
    said = "error: lost worker 1 at 10.77.0.2:2222: a worker of this multi-worker run stopped or is unreachable"
    assert said in output and "Traceback" not in output, output[-3000:]
    rows = [r for r in read_rows(str(csv_path)) if r["phase"] == "train"]
    assert len(rows) >= 3 and [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert "status:      failed: lost worker 1 at 10.77.0.2:2222" in (nodes[0].parent / "results.log").read_text()
