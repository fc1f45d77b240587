"""The asynchronous PyTorch strategies and local SGD, real processes on CPU, small data:
each trains; with one worker ps and async are the one-device run; with two, updates
go stale, and two async runs of one seed differ where two synchronous runs are
bit-identical; every launcher's servers listen on loopback only; a killed parameter
server or Hogwild worker ends the run with one line, its rows kept."""

import csv
import os
import signal
import sys
import time

import numpy as np
import pytest

from algorithms.records import read_rows
from tests.conftest import REPO_ROOT, run_module, run_python, run_script, script_env, start_script
from tests.helpers.flags import flags, run_flags
from tests.helpers.listening import LOOPBACK, run_watching_sockets

pytestmark = pytest.mark.slow  # every test here starts processes

NETWORK = "cnn2d_3layer_fullconnected_3layer"
CSV_NAME = f"{NETWORK}_torch.csv"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # the processes share two cores
KILLED_RUN_MUST_END_S = 60
EXIT_PEER_LOST = 4

# Two epochs of the small data (30 steps of 32) at lr 0.02: at the default 0.05 with momentum
# 0.9, two workers' stale half-batch updates spike and fall back to 2.3 (seen: the last third's
# median above the first's in one run of four); at 0.02 the last third's median was 1.5-2.0
# against 2.28 in six runs of ps and async.
EPOCHS_AND_LR = ["--num_epochs", "2", "--learning_rate", "0.02"]
RUNS = {  # name: the strategy flags
    "single": [],
    "async_1": ["--strategy", "async", "--devices", "1"],
    "ps_1": ["--strategy", "ps", "--devices", "1"],
    "async": ["--strategy", "async", "--devices", "2"],
    "ps": ["--strategy", "ps", "--devices", "2"],
    "ps_sync": ["--strategy", "ps", "--devices", "2", "--ps_sync"],
    "localsgd": ["--strategy", "localsgd", "--devices", "2", "--sync_every", "2"],
}


def torch_flags(small_data, results, *extra, quiet=True):
    return run_flags(small_data / "train.csv", results, quiet=quiet, batch_size=32, threads=1) + list(extra)


@pytest.fixture(scope="module")
def run(small_data, tmp_path_factory):
    """Each run once, when a test first asks: (its train rows, the sockets it listened on)."""
    done = {}

    def get(name):
        if name not in done:
            results = tmp_path_factory.mktemp(name) / "results"
            command = [
                sys.executable,
                "torch_script.py",
                *torch_flags(small_data, results, *EPOCHS_AND_LR, *RUNS[name]),
            ]
            proc, sockets = run_watching_sockets(command, script_env(ONE_THREAD), REPO_ROOT)
            assert proc.returncode == 0, proc.stderr[-3000:]
            done[name] = ([r for r in read_rows(str(results / CSV_NAME)) if r["phase"] == "train"], sockets)
        return done[name]

    return get


def losses(rows) -> np.ndarray:
    return np.array([r["loss"] for r in rows])


@pytest.mark.parametrize("name", ["async", "ps", "ps_sync", "localsgd"])  # localsgd: the torchrun launcher
def test_each_strategy_trains_and_listens_on_loopback_only(run, name):
    rows, sockets = run(name)
    single, _ = run("single")
    updates_per_step = 2 if name in ("async", "ps") else 1  # each worker's half of a batch is one update
    assert len(rows) == updates_per_step * len(single) and [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    third = len(rows) // 3  # medians: a stale Hogwild update can spike one loss (3.19 among 2.0-2.3 in a CI run)
    assert np.median(losses(rows)[-third:]) < np.median(losses(rows)[:third]), losses(rows)
    assert {r["worker"] for r in rows} == ({0, 1} if updates_per_step == 2 else {0})
    if name != "async":  # Hogwild's processes share memory and pipes: no sockets at all
        assert sockets, "a live run of this launcher should have listened somewhere"
    assert {address for address, _ in sockets} <= LOOPBACK, sockets


def test_with_one_worker_ps_and_async_are_the_one_device_run(run):
    single, _ = run("single")
    for name in ("async_1", "ps_1"):
        rows, _ = run(name)
        np.testing.assert_allclose(losses(rows), losses(single), rtol=0, atol=1e-6)
        assert {(r["worker"], r["staleness"]) for r in rows} == {(0, 0)}


def test_two_workers_apply_stale_updates_and_the_synchronous_ones_none(run):
    for name in ("async", "ps"):
        rows, _ = run(name)
        assert max(r["staleness"] for r in rows) > 0, [r["staleness"] for r in rows]
    for name in ("ps_sync", "localsgd"):
        assert {r["staleness"] for r in run(name)[0]} == {0}


# --------------------------------------------------------------------------- faults


def spawned_children(pid: int) -> list:
    """The run's torch.multiprocessing children in the order they started (ps: the
    server first, then the workers), leaving out multiprocessing's resource tracker."""
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        children = [int(child) for child in handle.read().split()]
    spawned = []
    for child in children:
        with open(f"/proc/{child}/cmdline", "rb") as handle:
            if b"spawn_main" in handle.read():
                spawned.append(child)
    return spawned


# A Hogwild pool in a Python of its own: two workers take two jobs each; the last line says
# whether this process's multiprocessing resource sharer ever started.
HOGWILD_JOBS = """
import sys
from multiprocessing import resource_sharer
from algorithms.run.entry import prepare
from algorithms.network.dropout import uniforms
from torch_wrapper.asynchronous.hogwild import HogwildPool
config, dataset = prepare(sys.argv[1:], "torch_script.py", "")
pool = HogwildPool(config, dataset)
for step in range(4):
    rows = list(range(32 * step, 32 * step + 32))
    pool.submit(step % 2, rows, 0.02, uniforms(config.network, config.seed, 0, rows))
updates = [pool.result(60) for _ in range(4)]
pool.close()
print(sum(update is not None for update in updates), resource_sharer._resource_sharer._listener is None)
"""


def test_a_hogwild_job_crosses_by_value_never_through_the_resource_sharer(small_data, tmp_path):
    """Each step's job (rows, dropout uniforms) reaches its worker pickled by value: as a torch
    tensor it would cross by torch's fd passing, through the recording process's resource
    sharer, whose thread prints a traceback when the worker dies mid-handshake (the CI failure
    of the killed-worker test below: a one-line error that had 20 lines)."""
    argv = torch_flags(small_data, tmp_path / "results", "--strategy", "async", "--devices", "2")
    proc = run_python(["-c", HOGWILD_JOBS, *argv], ONE_THREAD, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["4", "True"], proc.stdout[-2000:]


@pytest.mark.parametrize(
    "strategy, victim, named",
    [("ps", 0, "the parameter server (pid "), ("async", 1, "Hogwild worker 1 (pid ")],
    ids=["parameter_server", "hogwild_worker"],
)
def test_a_killed_process_ends_the_run_in_one_line_within_a_minute_rows_kept(
    small_data, tmp_path, strategy, victim, named
):
    results = tmp_path / "results"
    argv = torch_flags(small_data, results, "--num_epochs", "50", "--strategy", strategy, "--devices", "2")
    run = start_script("torch_script.py", argv, ONE_THREAD, start_new_session=True)
    try:
        csv_path, deadline = results / CSV_NAME, time.monotonic() + 120
        while not (csv_path.exists() and len(read_rows(str(csv_path))) >= 3):  # updates are being applied
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
            time.sleep(0.2)
        os.kill(spawned_children(run.pid)[victim], signal.SIGKILL)
        killed_at = time.monotonic()
        _, stderr = run.communicate(timeout=KILLED_RUN_MUST_END_S)
        assert time.monotonic() - killed_at < KILLED_RUN_MUST_END_S
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == EXIT_PEER_LOST, stderr[-3000:]
    assert stderr.strip().count("\n") == 0 and stderr.strip().startswith(f"error: {named}"), stderr[-3000:]
    train = [r for r in read_rows(str(csv_path)) if r["phase"] == "train"]
    assert f"the rows of the {len(train)} finished steps are in {csv_path}" in stderr
    assert [r["step"] for r in train] == list(range(1, len(train) + 1))
    assert f"failed: {named}" in (tmp_path / "results.log").read_text()


# --------------------------------------------------------------------------- drift


@pytest.fixture(scope="module")
def drift(small_data, tmp_path_factory):
    """The drift command on torch with --strategy async: two synchronous runs, two async ones."""
    results, run_id = tmp_path_factory.mktemp("drift"), "asyncdrift"
    argv = flags(only="torch", steps=DRIFT_STEPS, run_id=run_id, results_log=results / "results.log")
    argv += torch_flags(small_data, results / "results", "--strategy", "async", "--devices", "2")
    proc = run_module("algorithms.studies.drift", argv, ONE_THREAD)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(results / "results" / f"{run_id}.csv") as handle:
        report = {row["framework"]: row for row in csv.DictReader(handle)}

    def pair(prefix):
        path = str(results / "results" / CSV_NAME)
        return [losses([r for r in read_rows(path, f"{prefix}-{copy}") if r["phase"] == "train"]) for copy in "ab"]

    return report, pair(run_id), pair(f"{run_id}-async"), proc.stdout


DRIFT_STEPS = 30  # two epochs of the small data synchronously, one of updates with two workers


def test_two_async_runs_of_one_seed_differ_where_two_synchronous_runs_are_bit_identical(drift):
    _, synchronous, asynchronous, _ = drift
    assert len(synchronous[0]) == len(asynchronous[0]) == DRIFT_STEPS
    assert synchronous[0].tolist() == synchronous[1].tolist()
    assert asynchronous[0].tolist() != asynchronous[1].tolist()  # which update lands first is the scheduler's


def test_the_drift_command_puts_a_strategys_pair_beside_the_bit_identical_synchronous_pair(drift):
    report, _, (first, second), stdout = drift
    assert report["torch"]["bit_identical"] == "yes" and float(report["torch"]["run_to_run_max"]) == 0.0
    row = report["torch --strategy async --devices 2"]
    assert int(row["steps"]) == DRIFT_STEPS and row["bit_identical"] == "no"
    assert float(row["run_to_run_max"]) == pytest.approx((np.abs(second - first) / np.abs(first)).max())
    assert row["cross_max"] == ""  # an update of half a batch is not a one-device step
    assert "torch --strategy async --devices 2" in stdout
    # the axes table says why the strategy's row has no cross-framework and no precision numbers
    axes = [line for line in stdout.splitlines() if line.lstrip().startswith("torch --strategy async --devices 2")]
    assert any("not run: an update of 1/N batch is not a one-device step" in line for line in axes), stdout
    assert any("not run: the strategy's pair runs at float32 only" in line for line in axes), stdout
    assert "no --precision here" not in stdout


# --------------------------------------------------------------------------- scaling report


def test_the_scaling_report_runs_async_at_equal_samples_with_throughput_from_wall_time(small_data, tmp_path):
    results, steps = tmp_path / "results", 4
    argv = flags(frameworks="torch", strategy="async", devices=2, max_steps=steps, run_id="scaling-async")
    argv += flags(threads_per_device=1)  # the report gives each run --threads: 1 per device
    argv += run_flags(small_data / "train.csv", results, quiet=False, batch_size=32)  # it sets --quiet itself
    proc = run_script("scaling_report.py", argv, ONE_THREAD)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(results / "scaling" / "scaling-async.csv") as handle:
        (two,) = csv.DictReader(handle)
    assert two["strategy"] == "async"
    runs = results / "scaling" / "scaling-async"
    train = [r for r in read_rows(str(runs / "torch_x2" / CSV_NAME)) if r["phase"] == "train"]
    assert len(train) == 2 * steps  # 2 updates of half a batch per batch: the single run's samples
    rate = (len(train) - 1) / (train[-1]["wall_time_s"] - train[0]["wall_time_s"])
    assert float(two["updates_per_sec"]) == pytest.approx(rate)
    assert float(two["samples_per_sec"]) == pytest.approx(rate * 16)  # 16 samples per update
    assert float(two["staleness_p95"]) >= float(two["staleness_median"]) >= 0 and float(two["val_accuracy"]) > 0
    assert "stale p50/p95" in proc.stdout
