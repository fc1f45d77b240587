"""tensorflow_script.py --strategy ps, for real: the one command starts its cluster
(worker and ps tf.distribute.Server processes, the chief in a private network
namespace) on this machine. One 2-worker run is watched live (its listening
sockets), loses worker 1 part-way and must still finish; a 1-worker run must equal
the single-device run; a run whose parameter server is killed must stop."""

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.conftest import run_script, start_script
from tests.helpers.flags import run_flags
from tests.helpers.training import train_rows
from tests.helpers.listening import LOOPBACK, listening, only_loopback

pytestmark = pytest.mark.slow  # several TensorFlow processes per run: `make test-fast` leaves them out

NETWORK = "cnn2d_3layer_fullconnected_3layer"
BATCH = 32  # 480 training rows of the small data: 15 global batches an epoch, each cut into one share per worker


def start(data, results, workers: int, extra: list) -> subprocess.Popen:
    args = run_flags(data / "train.csv", results, batch_size=BATCH, strategy="ps", devices=workers)
    return start_script("tensorflow_script.py", args + extra)


def children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def task_of(pid: int) -> tuple:
    with open(f"/proc/{pid}/environ") as handle:
        config = next(e for e in handle.read().split("\0") if e.startswith("TF_CONFIG="))[len("TF_CONFIG=") :]
    task = json.loads(config)["task"]
    return task["type"], int(task["index"])


def wait_for_rows(process, csv_path, count: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not (csv_path.exists() and len(csv_path.read_text().splitlines()) > count):
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.3)


def listening_sockets(pid: int) -> list:
    """(address hex, port, whether the process's network namespace has only loopback)
    for every TCP socket the process listens on, read from /proc."""
    alone = only_loopback(pid)
    return [(address, port, alone) for address, port in sorted(listening([pid], namespace_of=pid))]


@pytest.fixture(scope="module")
def two_workers_one_lost(small_data, tmp_path_factory):
    """A 4-epoch run on 2 workers at global batch 64 (each update one worker's share of
    32; 16 updates an epoch): its sockets read while it trains, then worker 1 killed
    after 20 updates."""
    directory = tmp_path_factory.mktemp("ps_two")
    results = directory / "results"
    csv_path = results / f"{NETWORK}_tensorflow.csv"
    process = start(small_data, results, 2, ["--num_epochs", "4", "--batch_size", "64"])
    try:
        wait_for_rows(process, csv_path, 3)
        chief = children(process.pid)[0]
        servers = {task_of(pid): pid for pid in children(chief)}
        sockets = {
            "launcher": listening_sockets(process.pid),
            "tasks": {f"{kind} {index}": listening_sockets(pid) for (kind, index), pid in servers.items()},
            "chief": listening_sockets(chief),
            "same_namespace": os.readlink(f"/proc/{chief}/ns/net") == os.readlink("/proc/self/ns/net"),
        }
        wait_for_rows(process, csv_path, 20)
        os.kill(servers[("worker", 1)], signal.SIGKILL)
        _, stderr = process.communicate(timeout=180)
    finally:
        process.kill()
    return {
        "returncode": process.returncode,
        "stderr": stderr,
        "rows": train_rows(csv_path),
        "log": (directory / "results.log").read_text(),
        "sockets": sockets,
        "servers": sorted(servers),
    }


def test_ps_trains_with_two_workers_and_their_updates_are_stale(two_workers_one_lost):
    run = two_workers_one_lost
    assert run["returncode"] == 0, run["stderr"][-3000:]
    rows = run["rows"]
    assert [r["step"] for r in rows] == list(range(1, 65))  # every update recorded, in order
    assert {(r["strategy"], r["devices"]) for r in rows} == {("ps", 2)}
    assert {int(r["worker"]) for r in rows[:20]} == {0, 1}  # both workers applied updates before the kill
    staleness = [int(r["staleness"]) for r in rows]
    assert min(staleness) >= 0 and max(staleness) > 0, staleness  # asynchronous: other updates landed in between
    losses = [r["loss"] for r in rows]
    assert abs(losses[0] - np.log(10)) < 0.15
    assert np.mean(losses[-15:]) < np.mean(losses[:15]) - 0.3, losses


def test_a_killed_worker_leaves_the_run_to_the_others_and_results_log_says_so(two_workers_one_lost):
    run = two_workers_one_lost
    assert run["returncode"] == 0, run["stderr"][-3000:]
    assert {int(r["worker"]) for r in run["rows"][30:]} == {0}  # after the kill, worker 0 applies every update
    assert "worker(s) 1 of 2 stopped during the run; the coordinator ran their unfinished steps" in run["log"]
    assert "status:      completed" in run["log"], run["log"][-1500:]


def test_every_process_of_a_local_ps_run_listens_on_loopback_only(two_workers_one_lost):
    """TensorFlow's servers bind 0.0.0.0 whatever the cluster spec says, so the chief
    and its servers run in a private network namespace whose only interface is lo;
    the launcher, in the caller's namespace, listens on nothing."""
    sockets = two_workers_one_lost["sockets"]
    assert two_workers_one_lost["servers"] == [("ps", 0), ("worker", 0), ("worker", 1)]
    assert sockets["launcher"] == []
    assert not sockets["same_namespace"]
    for name, found in [("chief", sockets["chief"]), *sockets["tasks"].items()]:
        assert found, f"{name} listens on no port: the check would see nothing"
        for address, port, namespace_is_loopback_only in found:
            assert address in LOOPBACK or namespace_is_loopback_only, (name, address, port)
    assert "private network namespace" in two_workers_one_lost["log"]


def test_ps_with_one_worker_equals_the_single_device_run(small_data, tmp_path):
    common = ["--train", str(small_data / "train.csv"), "--test", "none", "--batch_size", str(BATCH)]
    common += ["--max_steps", "8", "--quiet"]
    single = run_script("tensorflow_script.py", common + ["--results_dir", str(tmp_path / "single")])
    assert single.returncode == 0, single.stderr[-2000:]
    process = start(small_data, tmp_path / "ps", 1, ["--max_steps", "8"])
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    reference = train_rows(tmp_path / "single" / f"{NETWORK}_tensorflow.csv")
    rows = train_rows(tmp_path / "ps" / f"{NETWORK}_tensorflow.csv")
    assert len(rows) == len(reference) == 8
    assert {(int(r["worker"]), int(r["staleness"])) for r in rows} == {(0, 0)}
    # same batches, dropout masks and optimizer: the same losses to float32 precision
    np.testing.assert_allclose([r["loss"] for r in rows], [r["loss"] for r in reference], rtol=2e-5)
    assert reference[-1]["loss"] < reference[0]["loss"] - 0.01  # the weights moved, so equality means something


def test_a_killed_parameter_server_stops_the_run_within_60_s_with_its_rows_kept(small_data, tmp_path):
    results = tmp_path / "results"
    csv_path = results / f"{NETWORK}_tensorflow.csv"
    process = start(small_data, results, 2, ["--num_epochs", "100"])
    try:
        wait_for_rows(process, csv_path, 5)
        chief = children(process.pid)[0]
        ps = next(pid for pid in children(chief) if task_of(pid) == ("ps", 0))
        os.kill(ps, signal.SIGKILL)
        killed_at = time.monotonic()
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the run still goes 60 s after its parameter server was killed")
    finally:
        process.kill()
    print(f"the run stopped {time.monotonic() - killed_at:.1f} s after the kill")
    assert process.returncode not in (0, None)
    # TensorFlow's own gRPC complaints may come after it (the servers share the chief's stderr)
    lines = [line for line in stderr.splitlines() if "ParameterServerLost:" in line]
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("tensorflow_wrapper.ps.ParameterServerLost: /job:ps/replica:0/task:0"), lines
    assert "status:      failed: ParameterServerLost" in (tmp_path / "results.log").read_text()
    rows = train_rows(csv_path)
    assert len(rows) >= 5 and [r["step"] for r in rows] == list(range(1, len(rows) + 1))


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keras_refuses_ps_in_one_line_naming_tensorflow_script(backend, small_data):
    proc = run_script(
        "keras_script.py",
        ["--train", str(small_data / "train.csv"), "--test", "none", "--strategy", "ps", "--devices", "2"],
        {"KERAS_BACKEND": backend},
    )
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("error: --strategy ps: Keras trains through model.fit"), line
    assert "keras-team/keras#18624" in line and "tensorflow_script.py --strategy ps" in line, line
