"""The parity regime on real runs: `drift --envelope` measures an envelope from real
parity runs of torch and TensorFlow and writes it, the cross-framework pair it holds is
within drift, a real torch run at 0.9x the learning rate is beyond drift at its second
step, and so is the same run with its settings recorded as the default's (a hidden
0.9x learning rate). The confusion table (`algorithms.studies.power`) on those runs puts
real errors into torch through its flags (--learning_rate, --momentum, --fault) and
catches each, the layer fault localised at its layer."""

import os
import subprocess
import sys

import numpy as np
import pytest

from algorithms.analysis.compare import build_report
from algorithms.analysis.drift_envelope import envelope_path, read_envelope
from algorithms.paths import REPO_ROOT
from algorithms.run.settings_record import read_settings
from tests.conftest import run_python
from tests.synthetic_runs import NETWORK, relabel

pytestmark = pytest.mark.slow  # nine real training processes
STEPS = 6
# the confusion table's errors run here: each a torch run at the envelope's settings (the 0.9x
# learning rate is the one the verdict tests below read), one localisation; not the rest of
# `make power`'s (Nesterov off, the padding fault, epoch 2's order: the same paths, costlier)
ERRORS = ("lr0.9x", "momentum0.85", "weights3", "order1")


@pytest.fixture(scope="module")
def envelope(small_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("envelope")
    common = ["--train", str(small_data / "train.csv"), "--test", "none", "--results_dir", str(folder / "runs")]
    drift = ["-m", "algorithms.studies.drift", "--envelope", "--only", "torch,tensorflow", "--steps", str(STEPS)]
    proc = subprocess.run(
        [sys.executable, *drift, "--envelope_dir", str(folder / "baseline"), "--run_id", "env", *common],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    power = ["-m", "algorithms.studies.power", "--run_id", "env", "--errors", ",".join(ERRORS), *common]
    proc = run_python(power)  # its --results_dir: where the envelope's runs are, and its own go
    return folder, proc


def test_the_envelope_is_measured_from_every_kind_of_honest_pair(envelope):
    folder, _ = envelope
    measured = read_envelope(envelope_path(str(folder / "baseline"), NETWORK))
    assert list(measured.steps) == list(range(1, STEPS + 1))
    assert set(measured.sources) == {"run_to_run", "threads", "summation_order", "cross_framework"}
    assert (np.diff(measured.limit) >= 0).all() and measured.limit[0] > 0  # torch and TensorFlow differ at step 1
    assert measured.limit[0] < 1e-6  # float32 rounding, not a real difference
    assert measured.settings.get("parity") is True and measured.settings.get("batch") == 100
    header = " ".join(measured.notes)
    assert f"{STEPS} steps at batch 100" in header and "frameworks: torch, tensorflow" in header
    assert "leave one out: the worst honest pair" in header


def test_real_parity_pairs_are_within_drift_and_a_hidden_learning_rate_is_beyond_it_at_step_two(envelope):
    folder, _ = envelope
    runs = folder / "runs"
    tf, torch = runs / f"{NETWORK}_tensorflow.csv", runs / f"{NETWORK}_torch.csv"
    report = build_report([f"{tf}@env-a", f"{torch}@env-a", f"{torch}@env-lr0.9x"], [], str(folder / "baseline"))
    verdicts = {(p.a.run_id, p.b.run_id, p.b.backend_key[0]): v for p, v in zip(report["pairs"], report["verdicts"])}
    assert verdicts["env-a", "env-a", "torch"].word == "within drift"
    lr = verdicts["env-a", "env-lr0.9x", "torch"]
    assert lr.word == "beyond drift at step 2" and lr.settings_line == "settings differ: learning_rate 0.05 vs 0.045"
    hidden = relabel(str(torch), "env-lr0.9x", folder, "hidden", learning_rate=0.05)
    report = build_report([f"{tf}@env-a", f"{hidden}@hidden"], [], str(folder / "baseline"))
    (verdict,) = report["verdicts"]
    assert verdict.word == "beyond drift at step 2" and verdict.settings_line is None


def test_real_errors_put_in_through_flags_are_each_caught_and_the_layer_fault_localised(envelope):
    """Known answers: every error changes torch's first update (step 2) or its forward pass
    (step 1); the drift pairs stay within the envelope of the others."""
    folder, proc = envelope
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("  error  ")[0].strip(): line for line in proc.stdout.splitlines() if "  error  " in line}
    assert "beyond drift at step 2" in rows["torch, learning rate x0.9"]
    assert "beyond drift at step 2" in rows["torch, momentum 0.85, not 0.9"]
    weights = rows["torch, conv 3's initial kernel x1.1"]
    assert "beyond drift at step 1" in weights and "layer 3" in weights
    assert "beyond drift at step 1" in rows["torch, epoch 1's batches in another order"]
    assert all(line.endswith("right") for line in rows.values()) and len(rows) == len(ERRORS)
    assert "real errors caught: 4 of 4 (at step 2, 2, 1, 1)" in proc.stdout
    assert "layer faults localised at their own layer: 1 of 1" in proc.stdout
    settings = read_settings(str(folder / "runs" / f"{NETWORK}_torch.csv"))
    assert settings["env-weights3"]["fault"] == "weights:3:1.1" and "fault" not in settings["env-a"]
    assert settings["env-momentum0.85"]["momentum"] == 0.85
    log = (folder / "results.log").read_text()
    assert "fault=weights:3:1.1 (a known error, on purpose)" in log and "sgd(lr=0.05, momentum=0.85, nesterov)" in log
