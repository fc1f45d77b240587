"""The parity regime's confusion table (algorithms/studies/power.py) with known answers:
envelope runs and error runs written by hand, so that the drift pairs are known to lie
within each other's envelope, the 0.9x learning rate to leave it at step 2, and a late
batch-order change to stay inside it. Nothing trains: a finished error run of the same
--run_id is reused (tests/test_verdict_runs.py runs the real ones)."""

import numpy as np
import pytest

from algorithms.studies import power
from tests.synthetic_runs import write_run

STEPS = 10
CURVE = 2.3 * np.exp(-np.arange(1, STEPS + 1) / 10.0)
# each run's rounding, as a multiple of a drift that grows 1.5x a step; a and b bit-identical, as measured
OFFSETS = {
    ("torch/torch", "a"): 0.0,
    ("torch/torch", "b"): 0.0,
    ("torch/torch", "threads1"): 0.5,
    ("tensorflow/tensorflow", "a"): 1.0,
    ("tensorflow/tensorflow", "b"): 1.0,
    ("tensorflow/tensorflow", "threads1"): 0.7,
    ("tensorflow/tensorflow", "onednn_off"): 1.0,
    ("tensorflow/tensorflow", "eager"): 1.0,
}
PARITY = {"parity": True, "max_steps": STEPS}


def drifted(offset: float) -> np.ndarray:
    return CURVE * (1 + offset * 1e-7 * 1.5 ** np.arange(STEPS))


def test_drift_sources_are_called_drift_and_a_lower_learning_rate_is_caught_at_step_two(tmp_path, capsys):
    for (name, variant), offset in OFFSETS.items():
        write_run(tmp_path, name, f"env-{variant}", drifted(offset), 0.5, **PARITY)
    wrong = CURVE * (1 + np.r_[0.0, 1e-3 * np.ones(STEPS - 1)])  # the first update differs
    write_run(tmp_path, "torch/torch", "env-lr0.9x", wrong, 0.5, learning_rate=0.045, **PARITY)
    late = CURVE * (1 + np.r_[np.zeros(7), 1e-7 * 1.5 ** np.arange(7, STEPS)])  # from step 8, as small as drift
    write_run(tmp_path, "torch/torch", "env-order2", late, 0.5, fault="order:2:1", **PARITY)
    argv = ["--run_id", "env", "--results_dir", str(tmp_path), "--errors", "lr0.9x,order2"]
    assert power.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.strip().startswith("torch, learning rate x0.9"))
    assert "error" in row and "beyond drift at step 2" in row and row.endswith("right")
    cross = next(line for line in lines if line.strip().startswith("tensorflow vs torch"))
    assert "within drift" in cross and cross.endswith("right")
    assert "real errors caught: 1 of 1 (at step 2); drift sources called drift: 7 of 7" in lines
    assert not any("WRONG" in line for line in lines)
    # the late error is a measured limit, apart from the table: where it starts, against the envelope there
    limit = lines[
        lines.index("known limits, measured (not counted): an error that starts late, after drift has grown:") + 1
    ]
    assert limit.startswith(
        "  torch, epoch 2's batches in another order: within drift; from step 8 it moves the loss by"
    )
    assert not any(line.strip().startswith("torch, epoch 2's") for line in lines if line != limit)


def test_an_unknown_error_name_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        power.main(["--run_id", "env", "--results_dir", str(tmp_path), "--errors", "lr0.9x,bias"])
    assert stopped.value.code == 2
    assert "--errors lr0.9x,bias: bias is not one of lr0.9x, momentum0.85" in capsys.readouterr().err


def test_an_error_the_envelope_cannot_tell_from_drift_is_marked_wrong(tmp_path, capsys):
    """An error run as close to torch's own run as rounding is: not caught, and the table says so."""
    for (name, variant), offset in OFFSETS.items():
        write_run(tmp_path, name, f"env-{variant}", drifted(offset), 0.5, **PARITY)
    write_run(tmp_path, "torch/torch", "env-lr0.9x", drifted(0.2), 0.5, learning_rate=0.045, **PARITY)
    assert power.main(["--run_id", "env", "--results_dir", str(tmp_path), "--errors", "lr0.9x"]) == 1
    out = capsys.readouterr().out
    assert "real errors caught: 0 of 1; drift sources called drift: 7 of 7" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("torch, learning rate x0.9"))
    assert "within drift" in row and row.endswith("WRONG")


def test_without_envelope_runs_it_says_how_to_make_them(tmp_path, capsys):
    assert power.main(["--run_id", "env", "--results_dir", str(tmp_path)]) == 2
    assert "make envelope" in capsys.readouterr().err
