"""Parity mode and the drift command, with real runs: two runs of torch and of
TensorFlow are bit-identical, the two frameworks agree at step 1, dropout is off,
and the drift report's numbers are recomputed here from the CSVs it read."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest

from algorithms.dataset.data import batch_order, load_dataset
from algorithms.network.networks import get_network
from tests.conftest import run_module
from tests.helpers.flags import flags, run_flags

NETWORK = "cnn2d_3layer_fullconnected_3layer"
BATCH = 32
STEPS = 4
RUN_ID = "paritytest"


@pytest.fixture(scope="module")
def drift_run(small_data, tmp_path_factory):
    """`python -m algorithms.studies.drift` over torch and TensorFlow: each twice in parity mode, and once at bf16."""
    results = tmp_path_factory.mktemp("drift")
    argv = flags(only="torch,tensorflow", steps=STEPS) + run_flags(
        small_data / "train.csv",
        results,
        quiet=False,
        batch_size=BATCH,
        network=NETWORK,
        results_log=results / "results.log",
        run_id=RUN_ID,
    )
    proc = run_module("algorithms.studies.drift", argv, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return results, proc.stdout


def csv_path(results, framework):
    return results / f"{NETWORK}_{framework}.csv"


def raw_losses(path, run_id):
    """The train rows' loss column exactly as written (text), in step order."""
    with open(path, newline="") as handle:
        return [row["loss"] for row in csv.DictReader(handle) if row["run_id"] == run_id and row["phase"] == "train"]


def report_rows(results):
    with open(results / f"{RUN_ID}.csv", newline="") as handle:
        return {row["framework"]: row for row in csv.DictReader(handle)}


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_two_parity_runs_give_bit_identical_loss_columns(drift_run, framework):
    results, _ = drift_run
    first = raw_losses(csv_path(results, framework), RUN_ID + "-a")
    second = raw_losses(csv_path(results, framework), RUN_ID + "-b")
    assert len(first) == STEPS and first == second
    row = report_rows(results)[framework]
    assert row["bit_identical"] == "yes" and float(row["run_to_run_max"]) == 0.0


def test_frameworks_agree_at_step_one_and_the_report_is_recomputed(drift_run):
    results, stdout = drift_run
    torch_losses = np.array(raw_losses(csv_path(results, "torch"), RUN_ID + "-a"), dtype=np.float64)
    tf_losses = np.array(raw_losses(csv_path(results, "tensorflow"), RUN_ID + "-a"), dtype=np.float64)
    relative = np.abs(tf_losses - torch_losses) / np.abs(torch_losses)
    assert relative[0] < 1e-5
    row = report_rows(results)["tensorflow"]
    assert float(row["cross_step1"]) == pytest.approx(relative[0], rel=1e-12, abs=1e-15)
    assert float(row["cross_max"]) == pytest.approx(relative.max(), rel=1e-12, abs=1e-15)
    for threshold in ("1e-06", "0.0001", "0.01"):
        beyond = np.nonzero(relative > float(threshold))[0]
        expected = str(beyond[0] + 1) if beyond.size else ""
        assert row[f"cross_first_above_{threshold}"] == expected
    assert "tensorflow" in stdout and os.path.getsize(results / f"{RUN_ID}.png") > 10_000
    # the drift command's table and notes fit a 160-column terminal (its progress lines above are the runs')
    report = stdout[stdout.index("relative loss difference |dloss|/loss per step") :].splitlines()
    assert not [line for line in report if len(line) >= 160 and len(line.split()) > 1], report
    with open(results / f"{RUN_ID}_steps.csv") as handle:
        assert sum(1 for line in handle) == 1 + 2 * STEPS


def test_parity_turns_dropout_off_and_records_what_it_set(drift_run, small_data):
    """Step 1's training loss equals the dropout-free loss of the shared initial weights
    on the first shared batch; with dropout on it would not."""
    from torch_wrapper.probes import initial_loss_and_logits

    results, _ = drift_run
    dataset = load_dataset(str(small_data / "train.csv"), None, None, 0.2, 0)
    first_batch = batch_order(len(dataset.train_x), BATCH, 0, 0)[0]
    expected, _ = initial_loss_and_logits(
        get_network(NETWORK), dataset.train_x[first_batch], dataset.train_y[first_batch], seed=0
    )
    recorded = float(raw_losses(csv_path(results, "torch"), RUN_ID + "-a")[0])
    assert recorded == pytest.approx(expected, rel=1e-6)
    log = (results / "results.log").read_text()
    assert "dropout off; set: torch.use_deterministic_algorithms(True)" in log
    assert "enable_op_determinism" in log and "not deterministic:" in log


def test_the_drift_report_has_precision_rows_recomputed_from_the_bf16_runs(drift_run):
    """Each framework's third run, at bf16, against its own float32 run: in the table's
    precision columns and as a 'precision (bf16 vs fp32)' row of the by-axis table."""
    results, stdout = drift_run
    for framework in ("torch", "tensorflow"):
        full = np.array(raw_losses(csv_path(results, framework), RUN_ID + "-a"), dtype=np.float64)
        low = np.array(raw_losses(csv_path(results, framework), RUN_ID + "-bf16"), dtype=np.float64)
        assert len(low) == STEPS
        relative = np.abs(low - full) / np.abs(full)
        row = report_rows(results)[framework]
        assert float(row["precision_max"]) == pytest.approx(relative.max(), rel=1e-12, abs=1e-15)
        assert 1e-6 < relative.max() < 5e-2  # bf16's rounding: far above float32 drift, far below a real error
        assert any(line.split()[:4] == [framework, "precision", "(bf16", "vs"] for line in stdout.splitlines())
    log = (results / "results.log").read_text()
    assert "precision bf16 kept as asked" in log and "precision fp32 (float32 weights and compute)" in log
