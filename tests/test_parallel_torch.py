"""Real multi-process PyTorch runs on CPU (torchrun, gloo), small data, a few
steps: every strategy trains; one step of each equals one device's step (and a
model- or tensor-parallel epoch, dropout on, equals the one-device epoch); only
rank 0 records; two torchrun launchers on 127.0.0.1 rendezvous as two nodes; a
killed worker ends the run with an error, fast; impossible requests are one line."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from algorithms.ports import free_ports
from algorithms.records import read_rows, run_ids
from tests.conftest import REPO_ROOT, run_script, start_script
from tests.helpers.flags import run_flags

pytestmark = pytest.mark.slow  # torchrun runs of every strategy: `make test-fast` leaves them out

NETWORK = "cnn2d_3layer_fullconnected_3layer"
CSV_NAME = f"{NETWORK}_torch.csv"
BATCH = 32
FLOAT32_RELATIVE = 1e-5  # of the largest gradient entry: float32 sums in another order
FLOAT32_ABSOLUTE = 1e-6  # losses (about 2.3) and updated weights (|w| < 0.3)
KILLED_RUN_MUST_END_S = 60
WORKER_ENV = {"OMP_NUM_THREADS": "1"}  # two ranks share two cores


def common_flags(small_data, results, *extra):
    return run_flags(small_data / "train.csv", results, batch_size=BATCH) + list(extra)


def torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", *args]


# --------------------------------------------------------------------------- equivalence


def run_probe(small_data, processes: int) -> dict:
    proc = subprocess.run(
        torchrun(
            "--standalone",
            f"--nproc_per_node={processes}",
            "tests/helpers/torch_parallel_probe.py",
            str(small_data / "train.csv"),
        ),
        cwd=REPO_ROOT,
        env={**os.environ, **WORKER_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def one_step_differences(small_data):
    """tests/helpers/torch_parallel_probe.py once on two processes, for every strategy but hybrid."""
    return run_probe(small_data, 2)


def assert_same_step(differences: dict, name: str) -> None:
    got = differences[name]
    assert got["loss"] <= FLOAT32_ABSOLUTE, (name, got)
    assert got["grad"] <= FLOAT32_RELATIVE * got["grad_scale"], (name, got)
    assert got["weight"] <= FLOAT32_ABSOLUTE, (name, got)
    assert got.get("ranks_agree_on_loss", True), (name, got)


def test_data_parallel_first_step_loss_and_updated_weights_equal_one_device(one_step_differences):
    assert_same_step(one_step_differences, "data")
    assert one_step_differences["data_replica_gap"] == 0.0  # both replicas hold the very same weights


def test_data_parallel_with_accumulation_equals_one_device(one_step_differences):
    assert_same_step(one_step_differences, "data_accumulate2")
    assert one_step_differences["data_accumulate2_replica_gap"] == 0.0


def test_tensor_parallel_loss_and_gradients_equal_the_unsplit_model(one_step_differences):
    assert_same_step(one_step_differences, "tensor")
    assert_same_step(one_step_differences, "tensor_checkpointing")


def test_model_and_pipeline_parallel_equal_the_unsplit_model(one_step_differences):
    for name in ("model", "pipeline", "pipeline_checkpointing"):
        assert_same_step(one_step_differences, name)


def test_accumulating_k_batches_equals_one_k_times_batch_step(one_step_differences):
    assert_same_step(one_step_differences, "accumulate2")
    assert_same_step(one_step_differences, "accumulate3")


def test_gradient_checkpointing_changes_nothing_but_memory(one_step_differences):
    assert_same_step(one_step_differences, "checkpointing")


def test_set_learning_rate_reaches_the_optimizer(one_step_differences):
    assert one_step_differences["learning_rate_zero_moved_weights_by"] == 0.0


def test_hybrid_on_four_processes_equals_one_device_for_every_inner_strategy(small_data):
    differences = run_probe(small_data, 4)
    for inner in ("tensor", "model", "pipeline"):
        assert_same_step(differences, f"hybrid_{inner}")
        assert differences[f"hybrid_{inner}_replica_gap"] == 0.0


# --------------------------------------------------------------------------- training runs

# (name, flags, processes, steps that must equal the one-device run's: stages and tensor
# slices of one replica draw its dropout masks; replicas and micro-batches draw their own)
#   model:  every step (each stage runs the one-device layers' own kernels)
#   tensor: the first 5; a shard's convolutions have fewer channels, and oneDNN picks their
#           kernels (their summation order) by channel count, so float32 differences then
#           compound (on an AVX-512 host: 5e-4 at step 7, 1.3e-2 at step 15, where AVX2
#           stayed under 1e-4 for the epoch); tests/helpers/torch_parallel_probe.py holds one
#           step's gradients to float32 tolerance
STRATEGY_RUNS = [
    ("data", ["--strategy", "data", "--devices", "2"], 2, 0),
    ("model", ["--strategy", "model", "--devices", "2"], 2, None),
    ("tensor", ["--strategy", "tensor", "--devices", "2"], 2, 5),
    ("pipeline", ["--strategy", "pipeline", "--devices", "2", "--micro_batches", "4"], 2, 0),
    ("hybrid_pipeline", ["--strategy", "hybrid", "--devices", "4", "--inner", "pipeline"], 4, 0),
]
EPOCH_DRIFT = 1e-4  # float32 differences a whole epoch of SGD with momentum can grow in the same kernels


def train_losses(results) -> list:
    return [r["loss"] for r in read_rows(str(results / CSV_NAME)) if r["phase"] == "train"]


@pytest.fixture(scope="module")
def one_device_losses(small_data, tmp_path_factory):
    results = tmp_path_factory.mktemp("one_device") / "results"
    # one thread, as each of the two ranks gets (--threads // ranks on this machine): oneDNN picks
    # its convolution kernels by thread count, and a different summation order is not the strategy
    proc = run_script(
        "torch_script.py", common_flags(small_data, results, "--num_epochs", "1", "--threads", "1"), WORKER_ENV
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return train_losses(results)


@pytest.mark.parametrize("name, flags, devices, equal_steps", STRATEGY_RUNS, ids=[r[0] for r in STRATEGY_RUNS])
def test_each_strategy_trains_and_only_rank_0_records(
    name, flags, devices, equal_steps, small_data, tmp_path, one_device_losses
):
    results = tmp_path / "results"
    proc = run_script("torch_script.py", common_flags(small_data, results, "--num_epochs", "1", *flags), WORKER_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"launching {devices} processes" not in proc.stdout  # --quiet
    csv_path = results / CSV_NAME
    rows = read_rows(str(csv_path))
    assert len(run_ids(str(csv_path))) == 1
    assert open(csv_path).read().count("run_id,") == 1  # one header: one writer
    strategy = flags[1]
    assert {(r["strategy"], r["devices"], r["global_batch"]) for r in rows} == {(strategy, devices, BATCH)}
    train = [r for r in rows if r["phase"] == "train"]
    assert [r["step"] for r in train] == list(range(1, len(one_device_losses) + 1))  # each step once
    losses = [r["loss"] for r in train]
    third = len(losses) // 3
    assert np.mean(losses[-third:]) < np.mean(losses[:third]), losses
    (val,) = [r for r in rows if r["phase"] == "val"]
    assert val["loss"] < losses[0], (val["loss"], losses[0])
    if equal_steps != 0:  # the same masks: those steps, dropout on, are the one-device run's
        np.testing.assert_allclose(losses[:equal_steps], one_device_losses[:equal_steps], rtol=0, atol=EPOCH_DRIFT)
    assert all(0 < r["comm_time_ms"] < r["step_time_ms"] for r in train), [r["comm_time_ms"] for r in train]
    log = (tmp_path / "results.log").read_text()
    assert log.count("=== ") == 1 and "completed" in log and f"{devices} processes under torchrun" in log


def test_large_batch_flags_across_processes_follow_the_shared_schedule(small_data, tmp_path):
    from algorithms.config.run_config import parse_config

    flags = [
        "--strategy",
        "data",
        "--devices",
        "2",
        "--accumulate",
        "2",
        "--lr_scaling",
        "linear",
        "--warmup_steps",
        "3",
        "--checkpointing",
        "--max_steps",
        "4",
    ]
    results = tmp_path / "results"
    proc = run_script("torch_script.py", common_flags(small_data, results, *flags))
    assert proc.returncode == 0, proc.stderr[-3000:]
    schedule = parse_config(common_flags(small_data, results, *flags), "t", "t").learning_rate_schedule()
    train = [r for r in read_rows(str(results / CSV_NAME)) if r["phase"] == "train"]
    assert [r["global_batch"] for r in train] == [2 * BATCH] * 4
    assert [r["learning_rate"] for r in train] == pytest.approx([schedule.at(step) for step in range(4)])
    assert len({r["learning_rate"] for r in train}) == 3  # warm-up ramps over 3 steps, then holds


# --------------------------------------------------------------------------- launching


def test_two_torchrun_launchers_rendezvous_as_two_nodes(small_data, tmp_path):
    (port,) = free_ports(1)
    results = tmp_path / "results"
    nodes = [
        subprocess.Popen(
            torchrun(
                "--nnodes=2",
                f"--node_rank={node}",
                "--nproc_per_node=1",
                "--rdzv_backend=c10d",
                f"--rdzv_endpoint=127.0.0.1:{port}",
                f"--rdzv_id=test-{port}",
                "torch_script.py",
                *common_flags(small_data, results, "--max_steps", "3", "--strategy", "data", "--devices", "2"),
            ),
            cwd=REPO_ROOT,
            env={**os.environ, **WORKER_ENV},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [node.communicate(timeout=180)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    rows = read_rows(str(results / CSV_NAME))
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1, 2, 3]
    assert {(r["strategy"], r["devices"]) for r in rows} == {("data", 2)}


def children(pid: int) -> list:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(child) for child in handle.read().split()]


def test_a_killed_worker_ends_the_run_with_an_error_within_a_minute(small_data, tmp_path):
    results = tmp_path / "results"
    run = start_script(
        "torch_script.py",
        common_flags(small_data, results, "--num_epochs", "50", "--strategy", "data", "--devices", "2"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        csv_path, deadline = results / CSV_NAME, time.monotonic() + 120
        while not (csv_path.exists() and len(read_rows(str(csv_path))) >= 2):  # training is under way
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-3000:]
            time.sleep(0.2)
        workers = children(run.pid)  # the launcher became torchrun's agent; its children are the ranks
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGKILL)
        killed_at = time.monotonic()
        output = run.communicate(timeout=KILLED_RUN_MUST_END_S)[0]
        assert time.monotonic() - killed_at < KILLED_RUN_MUST_END_S
        assert run.returncode != 0 and "FAILED" in output, output[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- clear refusals


def test_dataparallel_on_a_machine_without_gpus_is_one_line(small_data, tmp_path):
    proc = run_script(
        "torch_script.py",
        common_flags(
            small_data, tmp_path / "results", "--strategy", "data", "--devices", "2", "--dp_impl", "dataparallel"
        ),
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.startswith("error: --dp_impl dataparallel needs 2 CUDA devices") and proc.stderr.count("\n") == 1
    ), proc.stderr
    assert not (tmp_path / "results").exists()


def test_torchrun_with_the_wrong_number_of_processes_names_the_fix(small_data, tmp_path):
    proc = subprocess.run(
        torchrun(
            "--standalone",
            "--nproc_per_node=1",
            "torch_script.py",
            *common_flags(small_data, tmp_path / "results", "--strategy", "tensor", "--devices", "2"),
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "error: --strategy tensor --devices 2 needs 2 processes; torchrun started 1" in proc.stderr


def test_another_framework_refuses_dataparallel_in_one_line(small_data, tmp_path):
    proc = run_script(
        "keras_script.py",
        common_flags(
            small_data, tmp_path / "results", "--strategy", "data", "--devices", "2", "--dp_impl", "dataparallel"
        ),
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ")


@pytest.mark.parametrize(
    "script, extra, message",
    [
        (
            "torch_script.py",
            ["--strategy", "ps", "--devices", "2", "--ps_endpoint", "10.99.0.1:29500", "--remote_workers", "1"],
            "error: --ps_endpoint 10.99.0.1:29500: 10.99.0.1 is not an address of this host; start the coordinator",
        ),
        (
            "torch_script.py",
            ["--strategy", "data", "--devices", "2", "--ps_endpoint", "127.0.0.1:29500"],
            "error: --ps_endpoint with --strategy data: only --strategy ps meets there; drop it",
        ),
        (
            "torch_script.py",
            ["--strategy", "ps", "--devices", "2", "--remote_workers", "1"],
            "error: --remote_workers without --ps_endpoint: the other hosts' workers need HOST:PORT to join at",
        ),
        (
            "tensorflow_script.py",
            ["--strategy", "ps", "--ps_endpoint", "127.0.0.1:29500"],
            "error: --ps_endpoint: not available in tensorflow_script.py; drop the flag",
        ),
    ],
    ids=["endpoint-elsewhere", "not-ps", "no-endpoint", "tensorflow"],
)
def test_a_parameter_server_across_hosts_refuses_what_cannot_work_in_one_line(
    script, extra, message, small_data, tmp_path
):
    proc = run_script(script, common_flags(small_data, tmp_path / "results", *extra))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith(message), proc.stderr
    assert not (tmp_path / "results").exists()


def test_early_stopping_and_reduce_on_plateau_follow_the_validation_loss(small_data, tmp_path):
    """A learning rate too small to move float32 weights: the validation loss never
    improves after epoch 1, so the lr halves after each epoch without gain and the run
    stops after two of them, with the lr the CSV records."""
    from algorithms.records import read_rows

    results = tmp_path / "results"
    proc = run_script(
        "torch_script.py",
        common_flags(
            small_data,
            results,
            "--num_epochs",
            "6",
            "--parity",
            "--learning_rate",
            "1e-30",
            "--early_stopping",
            "2",
            "--reduce_lr_on_plateau",
            "1",
            "--plateau_factor",
            "0.5",
        ),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(str(results / "cnn2d_3layer_fullconnected_3layer_torch.csv"))
    val = [row for row in rows if row["phase"] == "val"]
    assert len(val) == 3 and val[1]["loss"] >= val[0]["loss"] and val[2]["loss"] >= val[0]["loss"]
    lr_by_epoch = {row["epoch"]: row["learning_rate"] for row in rows if row["phase"] == "train"}
    assert lr_by_epoch == {1: 1e-30, 2: 1e-30, 3: 5e-31}
    assert "early stopping: validation loss has not improved for 2 epoch(s)" in proc.stdout
    assert "lr now 2.5e-31" in proc.stdout
