"""TensorFlow's parallel strategies, for real on this CPU. One probe process with
2 logical CPU devices computes the equivalences (data and model parallel,
--accumulate, the per-step lr) and then trains 2 epochs with each strategy
through the wrapper's train(); two tensorflow_script.py processes with TF_CONFIG
on 127.0.0.1 act as two nodes (MultiWorkerMirroredStrategy).

    python -m tests.test_parallel_tf TRAIN_CSV RESULTS_DIR    # the in-process probe, prints JSON
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

from pathlib import Path

import numpy as np
import pytest

from algorithms.ports import free_ports
from algorithms.records import CSV_COLUMNS, STEP_CHECK_FOLDER, YARDSTICK_FOLDER, sidecar_path
from tests.conftest import run_script, start_script
from tests.helpers.flags import run_flags
from tests.helpers.training import (
    BATCH,
    EPOCHS,
    NETWORK,
    assert_trains,
    resume_line,
    run_probe,
    train_rows,
    train_strategy,
)

pytestmark = pytest.mark.slow  # MirroredStrategy and TF_CONFIG multi-worker runs: `make test-fast` leaves them out


# ----------------------------------------------------------------------------- the probe (own process)


def probe(train_csv: str, results_dir: str) -> dict:
    """First steps of the wrapper's own trainers on the same batches, dropout on;
    then full data- and model-parallel runs of the wrapper's train() into results_dir."""
    from algorithms.dataset.data import load_kaggle_csv
    from algorithms.network.parallel import layer_stages
    from algorithms.network.networks import get_network
    from tensorflow_wrapper.devices import local_devices
    from algorithms.network.dropout import uniforms
    from tensorflow_wrapper.trainer import TensorFlowTrainer
    import tensorflow as tf

    devices = local_devices(2)  # before any op
    network = get_network(NETWORK)
    images, labels = load_kaggle_csv(train_csv, labelled=True)

    def trainer(**placement):
        return TensorFlowTrainer(network, network.training.optimizer, seed=3, **placement)

    def weights(t):
        return [v.numpy() for v in t.variables]

    def batch(t, a, b):
        """Rows a..b with their dropout uniforms (dropout on: every placement drops the same units)."""
        return t.to_batch(images[a:b], labels[a:b], uniforms(network, 3, 0, np.arange(a, b)))

    def steps(t, batches, learning_rate=None):
        if learning_rate is not None:
            t.set_learning_rate(learning_rate)
        return [t.step([batch(t, a, b)]).loss for a, b in batches]

    def compare(reference, other, reference_losses, other_losses, start):
        return {
            "losses": [reference_losses, other_losses],
            "max_weight_diff": max(float(np.abs(a - b).max()) for a, b in zip(weights(reference), weights(other))),
            "max_weight_change": max(float(np.abs(a - b).max()) for a, b in zip(weights(reference), start)),
        }

    out = {}
    # data parallel: 2 replicas, global batch 64, lr changed before the step
    single = trainer()
    start = weights(single)
    mirrored = trainer(strategy=tf.distribute.MirroredStrategy(devices))
    out["data"] = compare(single, mirrored, steps(single, [(0, 64)], 0.1), steps(mirrored, [(0, 64)], 0.1), start)
    replica_copies = [v.values[1].numpy() for v in mirrored.variables]
    out["data"]["max_replica_diff"] = max(float(np.abs(a - b).max()) for a, b in zip(weights(single), replica_copies))
    # the lr really applies: twice the lr, twice the first (momentum-free) update
    plain = trainer()
    steps(plain, [(0, 64)])
    out["lr_ratio"] = float(
        np.median(
            [np.abs(a - s).max() / np.abs(b - s).max() for a, b, s in zip(weights(single), weights(plain), start)]
        )
    )
    # model parallel: conv block on /cpu:0, dense block on /cpu:1, three steps
    single = trainer()
    layer_devices = [
        devices[stage] for stage, (first, stop) in enumerate(layer_stages(network, 2)) for _ in range(first, stop)
    ]
    split = trainer(layer_devices=layer_devices)
    three = [(0, 32), (32, 64), (64, 96)]
    out["model"] = compare(single, split, steps(single, three), steps(split, three), start)
    out["model"]["kernel_devices"] = sorted({v.device.split("/")[-1] for v in split.variables})
    # --accumulate 2 of 32 equals one step of 64, one device and two replicas
    for name, placement in (
        ("accumulate", {}),
        ("accumulate_data", {"strategy": tf.distribute.MirroredStrategy(devices)}),
    ):
        whole, parts = trainer(), trainer(**placement)
        whole_loss = whole.step([batch(whole, 0, 64)]).loss
        parts_loss = parts.step([batch(parts, a, b) for a, b in ((0, 32), (32, 64))]).loss
        out[name] = compare(whole, parts, [whole_loss], [parts_loss], start)
    for strategy in ("data", "model"):
        results = os.path.join(results_dir, strategy, "results")
        train_strategy("tensorflow_wrapper.train", "tensorflow_script.py", train_csv, results, strategy, 2)
    return out


# ----------------------------------------------------------------------------- helpers


def start_workers(data, results, extra: list) -> list:
    """Two tensorflow_script.py processes, one TF_CONFIG task each, as on two nodes."""
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}})
        args = run_flags(
            data / "train.csv",
            results,
            quiet=False,
            batch_size=BATCH,
            strategy="data",
            devices=2,
            run_id="multi-worker",
        )
        # TMPDIR: a killed worker's scratch directory stays in the test's tmp
        env = {"TF_CONFIG": tf_config, "TMPDIR": str(results.parent)}
        workers.append(start_script("tensorflow_script.py", args + extra, env))
    return workers


def workers_under_way(data, results, extra=("--num_epochs", "100"), rows=3) -> tuple:
    """Two workers of a long run, once the chief has written its first `rows` rows."""
    workers = start_workers(data, results, list(extra))
    csv_path = results / f"{NETWORK}_tensorflow.csv"
    deadline = time.monotonic() + 180
    while not (csv_path.exists() and len(csv_path.read_text().splitlines()) > rows):
        assert time.monotonic() < deadline and workers[0].poll() is None, workers[0].communicate()[1][-2000:]
        time.sleep(0.5)
    return workers, csv_path


@pytest.fixture(scope="module")
def probed(small_data, tmp_path_factory):
    """The probe's JSON and the directory of its data- and model-parallel runs (2 logical CPUs)."""
    results = tmp_path_factory.mktemp("tf_probe")
    return run_probe("tests.test_parallel_tf", small_data / "train.csv", results), results


@pytest.fixture(scope="module")
def data_parallel_run(probed):
    """The rows of train() with --strategy data --devices 2 (MirroredStrategy on 2 logical CPUs)."""
    return train_rows(probed[1] / "data" / "results" / f"{NETWORK}_tensorflow.csv")


# ----------------------------------------------------------------------------- tests


def test_two_devices_equal_one_for_data_model_parallel_and_accumulation(probed):
    result = probed[0]
    for name in ("data", "model", "accumulate", "accumulate_data"):
        got = result[name]
        reference, other = got["losses"]
        np.testing.assert_allclose(other, reference, rtol=1e-5, err_msg=name)
        assert got["max_weight_change"] > 1e-3, name  # the step moved the weights, so equality means something
        assert got["max_weight_diff"] < 1e-6, (name, got)
    assert result["data"]["max_replica_diff"] < 1e-6  # the second replica's copy took the same update
    assert result["model"]["kernel_devices"] == ["device:CPU:0", "device:CPU:1"]
    assert result["lr_ratio"] == pytest.approx(2.0, rel=1e-3)


def test_data_parallel_trains_and_records_the_all_reduce_time(data_parallel_run):
    rows = data_parallel_run
    assert {(r["strategy"], r["devices"], r["global_batch"]) for r in rows} == {("data", 2, BATCH)}
    assert len(rows) == EPOCHS * 15
    assert all(r["comm_time_ms"] > 0 and r["comm_time_ms"] < r["step_time_ms"] for r in rows)
    assert_trains([r["loss"] for r in rows])


def test_data_parallel_all_reduces_its_gradients_in_one_batch(small_data, tmp_path):
    """The gradients entered the all-reduce function without a device, so TensorFlow found
    them on other devices than the variables, reduced them one tensor at a time and warned
    `Efficient batch_reduce is not supported if destinations are different` on every run."""
    flags = run_flags(small_data / "train.csv", tmp_path / "results", strategy="data", devices=2, max_steps=2)
    proc = run_script("tensorflow_script.py", flags + ["--batch_size", str(BATCH)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "batch_reduce" not in proc.stderr, proc.stderr[-2000:]


def test_model_parallel_trains(probed):
    run = probed[1] / "model"
    rows = train_rows(run / "results" / f"{NETWORK}_tensorflow.csv")
    assert {(r["strategy"], r["devices"]) for r in rows} == {("model", 2)}
    assert all(r["comm_time_ms"] is None for r in rows)  # transfers happen inside the step; not split out
    assert_trains([r["loss"] for r in rows])
    assert "stages layers 0-7 | layers 8-13" in (run / "results.log").read_text()  # conv block | dense block


def test_two_workers_on_localhost_train_like_two_local_devices(small_data, tmp_path, data_parallel_run):
    results = tmp_path / "results"
    workers = start_workers(small_data, results, ["--max_steps", "12"])
    outputs = [worker.communicate(timeout=240) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], [err[-2000:] for _, err in outputs]
    csv_path = results / f"{NETWORK}_tensorflow.csv"
    # only the chief wrote: its rows, its run's settings record once, its step check's rows and
    # the yardstick it measured (no shipped envelope covers the small data)
    written = [csv_path.name, os.path.basename(sidecar_path(str(csv_path))), STEP_CHECK_FOLDER, YARDSTICK_FOLDER]
    assert sorted(os.listdir(results)) == sorted(written)
    assert len(Path(sidecar_path(str(csv_path))).read_text().splitlines()) == 1
    rows = train_rows(results / f"{NETWORK}_tensorflow.csv")
    assert {(r["run_id"], r["strategy"], r["devices"]) for r in rows} == {("multi-worker", "data", 2)}
    # same global batches, same split into 2 replicas: the same losses as MirroredStrategy on 2 logical CPUs
    np.testing.assert_allclose([r["loss"] for r in rows], [r["loss"] for r in data_parallel_run[:12]], rtol=1e-4)
    assert all(r["comm_time_ms"] > 0 for r in rows)
    log = (tmp_path / "results.log").read_text()
    assert log.count("=== multi-worker") == 1 and "multi-worker: worker 0 of 2 tasks" in log


def test_a_killed_worker_stops_the_other_with_an_error_within_60_s(small_data, tmp_path):
    workers, _ = workers_under_way(small_data, tmp_path / "results")
    workers[1].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    try:
        _, stderr = workers[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        workers[0].kill()
        pytest.fail("the surviving worker still runs 60 s after its peer was killed")
    elapsed = time.monotonic() - killed_at
    workers[1].communicate()
    assert workers[0].returncode not in (0, None)
    # one line naming the lost worker with its address (TF_CONFIG's), status 4 as every lost peer
    said = re.search(r"error: lost worker 1 at 127\.0\.0\.1:\d+: a worker of this multi-worker run stopped", stderr)
    assert said and workers[0].returncode == 4 and "Traceback" not in stderr, stderr[-2000:]
    assert "status:      failed: lost worker 1 at 127.0.0.1:" in (tmp_path / "results.log").read_text()
    print(f"surviving worker exited {elapsed:.1f} s after the kill")


def test_a_signal_to_one_worker_stops_both_after_the_same_step(small_data, tmp_path):
    """SIGTERM to worker 1 only: both stop after the same step, and the chief records
    the interruption. (Before: the strategy's coordination service had taken SIGTERM
    over, and both workers trained on.)"""
    workers, csv_path = workers_under_way(small_data, tmp_path / "results")
    workers[1].send_signal(signal.SIGTERM)
    try:
        outputs = [worker.communicate(timeout=60) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    assert [worker.returncode for worker in workers] == [128 + signal.SIGTERM] * 2, [e[-2000:] for _, e in outputs]
    assert "interrupted by SIGTERM after" in outputs[0][1] and "WorkerLost" not in outputs[0][1], outputs[0][1][-2000:]
    assert "status:      interrupted by SIGTERM" in (tmp_path / "results.log").read_text()
    rows = train_rows(csv_path)
    assert len(rows) >= 3 and [r["step"] for r in rows] == list(range(1, len(rows) + 1))


def test_a_multi_worker_run_stopped_and_resumed_repeats_its_rows_bit_for_bit(small_data, tmp_path):
    """Parity mode: the chief checkpoints every 3 steps, SIGTERM to worker 1 stops both
    after step K, both resume from the chief's checkpoint at step S < K (and check that
    they restored the same step), and the steps S+1..K they train again give exactly
    the rows the uninterrupted run wrote for them."""
    results = tmp_path / "results"
    flags = ["--parity", "--checkpoint_every", "3", "--num_epochs", "100"]
    workers, csv_path = workers_under_way(small_data, results, flags, rows=8)
    workers[1].send_signal(signal.SIGTERM)
    outputs = [worker.communicate(timeout=60) for worker in workers]
    assert [worker.returncode for worker in workers] == [128 + signal.SIGTERM] * 2, [e[-2000:] for _, e in outputs]
    phase = CSV_COLUMNS.index("phase")

    def train_rows(lines):  # the init row (step 0) and any validation rows aside
        return [row for row in (line.split(",") for line in lines) if row[phase] == "train"]

    cut = train_rows(csv_path.read_text().splitlines()[1:])
    stopped_at = len(cut)
    written = len(csv_path.read_text().splitlines())
    checkpoint = max(
        int(name[len("step-") :]) for name in os.listdir(results / "checkpoints" / "multi-worker" / csv_path.stem)
    )
    assert 3 <= checkpoint < stopped_at, (checkpoint, stopped_at)
    # past where it stopped, wherever that was (under load the stop can land after the first epoch)
    last_step = stopped_at + 3
    workers = start_workers(small_data, results, flags + ["--resume", "multi-worker", "--max_steps", str(last_step)])
    outputs = [worker.communicate(timeout=240) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], [err[-2000:] for _, err in outputs]
    # the stop lands where the machine's speed puts it: the checkpoint before it may be epoch 1's last step
    assert resume_line("multi-worker", checkpoint) in outputs[0][0], outputs[0][0][-2000:]
    again = train_rows(csv_path.read_text().splitlines()[written:])
    step, loss, accuracy = (CSV_COLUMNS.index(name) for name in ("step", "loss", "accuracy"))
    first = [(r[step], r[loss], r[accuracy]) for r in cut[checkpoint:]]
    second = [(r[step], r[loss], r[accuracy]) for r in again[: stopped_at - checkpoint]]
    assert first == second and len(first) >= 1
    assert again[-1][step] == str(last_step)


@pytest.mark.parametrize("strategy", ["hybrid"])
def test_strategies_tensorflow_does_not_run_are_one_line_errors(strategy, small_data):
    proc = run_script(
        "tensorflow_script.py", run_flags(small_data / "train.csv", quiet=False, strategy=strategy, devices=4)
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        f"error: --strategy {strategy}: tensorflow_script.py runs single, data, model, tensor, pipeline"
    )
    assert len(proc.stderr.strip().splitlines()) == 1


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:])))
