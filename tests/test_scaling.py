"""The scaling report, run for real on torch at 1 and 2 devices (small data, a
few steps): the table, the CSV, the PNG and the verdict; and the verdict rule."""

import csv
import re

import pytest

from algorithms.network.parallel import ring_allreduce_bytes
from algorithms.studies.scaling import WORTH_IT_AT_TWO, ScalingRow, add_speedups, verdicts
from algorithms.network.networks import get_network
from tests.conftest import run_script
from tests.helpers.flags import flags, run_flags

NETWORK = "cnn2d_3layer_fullconnected_3layer"


def scaling_report(small_data, results, run_id: str, **report_flags):
    """scaling_report.py on the small data at batch 32 (it sets --quiet itself)."""
    argv = flags(**report_flags) + run_flags(
        small_data / "train.csv", results, quiet=False, batch_size=32, run_id=run_id
    )
    proc = run_script("scaling_report.py", argv)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_scaling_report_runs_torch_at_one_and_two_devices(small_data, tmp_path):
    results = tmp_path / "results"
    proc = scaling_report(  # 30 steps: both runs learn (val 0.4-0.6), so their speedup means something
        small_data, results, "scaling-test", frameworks="torch", devices="1,2", max_steps=30, threads_per_device=1
    )
    assert "speedup" in proc.stdout and "efficiency" in proc.stdout
    assert "1 thread(s) per device (each run: --threads 1 x its devices)" in proc.stdout
    (verdict,) = [line for line in proc.stdout.splitlines() if line.startswith("verdict: torch:")]
    with open(results / "scaling" / "scaling-test.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["framework"], r["devices"], r["strategy"], r["status"]) for r in rows] == [
        ("torch", "1", "single", "ok"),
        ("torch", "2", "data", "ok"),
    ]
    one, two = rows
    assert one["near_chance"] == two["near_chance"] == "False" and "chance" not in proc.stdout
    speedup = float(one["ms_per_step"]) / float(two["ms_per_step"])
    assert float(two["speedup"]) == pytest.approx(speedup)
    assert float(two["efficiency"]) == pytest.approx(speedup / 2)
    assert ("don't add more" in verdict) == (speedup < WORTH_IT_AT_TWO), verdict
    assert float(two["predicted_allreduce_mb"]) == pytest.approx(
        ring_allreduce_bytes(get_network(NETWORK).param_count(), 2) / 1e6
    )
    assert one["comm_ms"] == "" and 0 < float(two["comm_ms"]) < float(two["ms_per_step"])
    png = (results / "scaling" / "scaling-test.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    # every run runs what the header says: one thread per device, so each process of each run has one
    # (the 1-device run had the machine's cores, and each torchrun rank OMP_NUM_THREADS of them)
    assert [r["threads"] for r in rows] == ["1", "2"]
    log = (results / "scaling" / "scaling-test" / "results.log").read_text()
    blocks = {block.split(" ", 1)[0]: block for block in log.split("=== ")[1:]}
    one, two = blocks["scaling-test-torch-x1"], blocks["scaling-test-torch-x2"]
    assert "threads:     --threads 1; OMP_NUM_THREADS=1 " in one and "devices:     cpu (1 thread)" in one
    assert "threads:     --threads 2 (1 in this process: the run's processes on this machine share them); " in two
    assert "OMP_NUM_THREADS=1 " in two and "2 processes under torchrun, cpu, 1 thread each" in two


@pytest.mark.slow  # the report and its run: make test-fast leaves it out
def test_a_run_that_ends_near_chance_gets_no_speedup_and_says_why(small_data, tmp_path):
    """Two steps learn nothing: the run's results.log says it ended near chance, and the
    report marks its row and judges no speedup (it printed 1.00x, as if it were a training)."""
    results = tmp_path / "results"
    proc = scaling_report(small_data, results, "chance", frameworks="torch", devices="1", max_steps=2)
    with open(results / "scaling" / "chance.csv") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["status"] == "ok" and row["near_chance"] == "True" and row["speedup"] == row["efficiency"] == ""
    (verdict,) = [line for line in proc.stdout.splitlines() if line.startswith("verdict: torch:")]
    assert "no speedup judged: x1 (single, val acc" in verdict and "ended near chance" in verdict, verdict
    assert re.search(r"torch +1 +single .* 0\.\d{4} chance ", proc.stdout), proc.stdout


def test_verdict_follows_the_one_and_a_half_rule():
    def rows(ms_two):
        made = [
            ScalingRow("a", 1, "single", "ok", ms_per_step=100.0),
            ScalingRow("a", 2, "data", "ok", ms_per_step=ms_two),
        ]
        add_speedups(made)
        return made

    slow = 100.0 / (WORTH_IT_AT_TWO * 0.9)
    fast = 100.0 / (WORTH_IT_AT_TWO * 1.1)
    assert "don't add more" in verdicts(rows(slow))[0]
    assert "scaling pays" in verdicts(rows(fast))[0]
    assert "no 1- and 2-device pair" in verdicts([ScalingRow("b", 2, "data", "failed (exit 2)")])[0]


def test_a_framework_that_refuses_every_run_is_a_failed_row_and_the_report_is_still_written(small_data, tmp_path):
    results = tmp_path / "results"
    flags = ["--frameworks", "keras_torch", "--strategy", "data", "--devices", "2", "--max_steps", "2"]
    flags += ["--train", str(small_data / "train.csv"), "--results_dir", str(results), "--run_id", "refused"]
    proc = run_script("scaling_report.py", flags)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "  keras_torch x2: python keras_script.py " in proc.stdout
    # the child's own one line, under its command (its output is captured)
    assert "    failed (exit 2): error: --strategy data: Keras on torch has no data parallel" in proc.stdout
    with open(results / "scaling" / "refused.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["framework"], r["devices"], r["strategy"], r["status"]) for r in rows] == [
        ("keras_torch", "2", "data", "failed (exit 2)")
    ]
    assert (results / "scaling" / "refused.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow  # three TensorFlow and jax processes
@pytest.mark.parametrize("strategy, frameworks", [("tensor", "tensorflow,keras_jax"), ("pipeline", "tensorflow")])
def test_scaling_report_runs_tensor_and_pipeline_beside_torch_in_tensorflow_and_keras_jax(
    strategy, frameworks, small_data, tmp_path
):
    results = tmp_path / "results"
    scaling_report(
        small_data, results, f"scaling-{strategy}", frameworks=frameworks, strategy=strategy, devices=2, max_steps=4
    )
    with open(results / "scaling" / f"scaling-{strategy}.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["framework"], r["devices"], r["strategy"], r["status"]) for r in rows] == [
        (name, "2", strategy, "ok") for name in frameworks.split(",")
    ]
    assert all(float(r["ms_per_step"]) > 0 for r in rows)
