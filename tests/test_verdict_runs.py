"""The parity regime on real runs: `drift --envelope` measures an envelope from real
parity runs of torch and TensorFlow and writes it, the cross-framework pair it holds is
within drift, a real torch run at 0.9x the learning rate is beyond drift at its second
step, and so is the same run with its settings recorded as the default's (a hidden
0.9x learning rate)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from algorithms.analysis.compare import build_report
from algorithms.analysis.drift_envelope import envelope_path, read_envelope
from algorithms.paths import REPO_ROOT
from tests.conftest import run_script
from tests.synthetic_runs import NETWORK, relabel

pytestmark = pytest.mark.slow  # nine real training processes
STEPS = 6


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
    proc = run_script(
        "torch_script.py",
        common
        + ["--parity", "--max_steps", str(STEPS), "--batch_size", "100", "--learning_rate", "0.045"]
        + ["--run_id", "lr045", "--quiet"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def test_the_envelope_is_measured_from_every_kind_of_honest_pair(envelope):
    folder = envelope
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
    folder = envelope
    runs = folder / "runs"
    tf, torch = runs / f"{NETWORK}_tensorflow.csv", runs / f"{NETWORK}_torch.csv"
    report = build_report([f"{tf}@env-a", f"{torch}@env-a", f"{torch}@lr045"], [], str(folder / "baseline"))
    verdicts = {(p.a.run_id, p.b.run_id, p.b.backend_key[0]): v for p, v in zip(report["pairs"], report["verdicts"])}
    assert verdicts["env-a", "env-a", "torch"].word == "within drift"
    lr = verdicts["env-a", "lr045", "torch"]
    assert lr.word == "beyond drift at step 2" and lr.settings_line == "settings differ: learning_rate 0.05 vs 0.045"
    hidden = relabel(str(torch), "lr045", folder, "hidden", learning_rate=0.05)
    report = build_report([f"{tf}@env-a", f"{hidden}@hidden"], [], str(folder / "baseline"))
    (verdict,) = report["verdicts"]
    assert verdict.word == "beyond drift at step 2" and verdict.settings_line is None
