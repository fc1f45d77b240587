"""One meaning of the time columns of `--strategy ps` in every framework that runs it:
a row's step_time_ms is its worker's own time for its update (pull, forward, backward,
push), taken on the worker; comm_time_ms the pull and the push; data_time_ms 0 (the
share arrives with the job). Real two-worker runs of torch (torch.distributed.rpc)
and TensorFlow (ClusterCoordinator) on the small data, their CSVs read back.

With two workers computing at once, their rows' times add up to more than the wall
time the rows span; the chief's time between two applied updates (what TensorFlow's
rows once held) adds up to exactly that span, and the check rejects it. No worker's
times add up to more than the time its rows span: a worker is not busy twice at once."""

import os
import subprocess
import sys

import pytest

from algorithms.records import read_rows
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # two runs of three to four processes each

NETWORK = "cnn2d_3layer_fullconnected_3layer"
SCRIPTS = {"torch": "torch_script.py", "tensorflow": "tensorflow_script.py"}
BATCH = 64  # 480 training rows of the small data: 8 global batches an epoch, 16 updates of 32 samples
EPOCHS = 2
# two busy workers give about 2 (measured 1.77 to 2.07 for these runs, both frameworks, on 2 cores
# at load 10 to 14), less while the suite's other pytest-xdist worker trains beside them (1.21 for
# TensorFlow, once in three full runs on 2 cores); the chief's gaps give exactly 1 (measured 1.00001
# from TensorFlow's old rows): the line between the two meanings is drawn above 1 with room for both
OVERLAP = 1.1


@pytest.fixture(scope="module", params=sorted(SCRIPTS))
def run(request, small_data, tmp_path_factory):
    """(framework, the train rows) of a 2-worker ps run."""
    framework = request.param
    results = tmp_path_factory.mktemp(f"ps_{framework}") / "results"
    command = [sys.executable, os.path.join(REPO_ROOT, SCRIPTS[framework]), "--train", str(small_data / "train.csv")]
    command += ["--test", "none", "--batch_size", str(BATCH), "--num_epochs", str(EPOCHS), "--threads", "2"]
    command += ["--strategy", "ps", "--devices", "2", "--results_dir", str(results), "--quiet"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r for r in read_rows(str(results / f"{NETWORK}_{framework}.csv")) if r["phase"] == "train"]
    assert len(rows) == EPOCHS * 16 and {r["worker"] for r in rows} == {0, 1}, rows
    return framework, rows


def overlap(rows: list, times_ms: list) -> float:
    """The rows' times over the wall time the rows span, epoch by epoch (validation, between
    epochs, is nobody's update), each epoch's first row left out (its update began before
    anything the CSV records)."""
    busy = span = 0.0
    for epoch in sorted({r["epoch"] for r in rows}):
        index = [i for i, r in enumerate(rows) if r["epoch"] == epoch]
        busy += sum(times_ms[i] for i in index[1:])
        span += 1000.0 * (rows[index[-1]]["wall_time_s"] - rows[index[0]]["wall_time_s"])
    return busy / span


def test_two_workers_times_add_up_to_more_than_the_wall_time_their_rows_span(run):
    framework, rows = run
    step_times = [r["step_time_ms"] for r in rows]
    assert overlap(rows, step_times) > OVERLAP, (framework, step_times)
    # the chief's time between two applied updates, from the same rows, is what the check exists to reject
    walls = [r["wall_time_s"] for r in rows]
    chief_gaps = [0.0] + [1000.0 * (later - earlier) for earlier, later in zip(walls, walls[1:])]
    assert overlap(rows, chief_gaps) == pytest.approx(1.0) and overlap(rows, chief_gaps) < OVERLAP


def test_no_worker_is_busy_longer_than_the_wall_time_its_rows_span(run):
    """Each worker makes one update at a time, so its updates after its first fit between
    its first row and its last. Allowance: one update, since a worker may start its next
    update before the chief has recorded its last (TensorFlow queues two per worker)."""
    framework, rows = run
    for row in rows:
        assert 0 < row["step_time_ms"] <= 1000.0 * row["wall_time_s"], (framework, row)
    for worker in (0, 1):
        mine = [r for r in rows if r["worker"] == worker]
        busy = sum(r["step_time_ms"] for r in mine[1:])
        allowance = max(r["step_time_ms"] for r in mine)
        assert busy <= 1000.0 * (mine[-1]["wall_time_s"] - mine[0]["wall_time_s"]) + allowance, (framework, worker)


def test_comm_time_is_the_pull_and_the_push_inside_the_step_and_no_data_time(run):
    framework, rows = run
    for row in rows:
        assert row["comm_time_ms"] is not None and 0 < row["comm_time_ms"] < row["step_time_ms"], (framework, row)
        assert row["data_time_ms"] == 0.0, (framework, row)
