"""The confusion table (algorithms/studies/power.py) with known answers: envelope runs and
error runs written by hand (their epoch checks too), so that the drift pairs are known to
lie within each other's envelope, the 0.9x learning rate to leave it at step 2, batches not
reshuffled to leave it only in the epoch check (at the check's first step of epoch 2), and a
metric on the wrong labels to leave it by its accuracy alone. Nothing trains: a finished
error run of the same --run_id is reused (tests/test_verdict_runs.py runs real ones)."""

import numpy as np
import pytest

from algorithms.studies import power
from tests.helpers.synthetic_runs import write_run

STEPS = 10
CHECK_STEPS = 12  # the epoch check: 4 epochs of 3 steps
CURVE = 2.3 * np.exp(-np.arange(1, STEPS + 1) / 10.0)
CHECK = 2.3 * np.exp(-np.arange(1, CHECK_STEPS + 1) / 12.0)
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
DEFAULT = {"max_steps": STEPS, "dropout": "shared"}


def drifted(curve, offset: float) -> np.ndarray:
    return curve * (1 + offset * 1e-7 * 1.5 ** np.arange(len(curve)))


def envelope_runs(folder, mode: str = "default", settings: dict = DEFAULT) -> None:
    for (name, variant), offset in OFFSETS.items():
        write_run(
            folder,
            name,
            f"env-{mode}-{variant}",
            drifted(CURVE, offset),
            0.5,
            check_losses=drifted(CHECK, offset),
            **settings,
        )


def error_run(folder, suffix: str, losses=CURVE, check=CHECK, mode: str = "default", **settings) -> None:
    write_run(folder, "torch/torch", f"env-{mode}-{suffix}", losses, 0.5, check_losses=check, **DEFAULT, **settings)


def table_row(lines: list, start: str) -> str:
    return next(line for line in lines if line.strip().startswith(start))


def test_drift_is_called_drift_and_each_error_is_caught_in_the_rows_or_the_epoch_check_that_shows_it(tmp_path, capsys):
    envelope_runs(tmp_path)
    error_run(tmp_path, "lr0.9x", CURVE * (1 + np.r_[0.0, 1e-3 * np.ones(STEPS - 1)]), learning_rate=0.045)
    not_reshuffled = CHECK * (1 + np.r_[np.zeros(3), 1e-2 * np.ones(CHECK_STEPS - 3)])  # from epoch 2's first step
    error_run(tmp_path, "same-order", check=not_reshuffled, fault="same_order")
    wrong_labels = np.r_[0.3, np.full(STEPS - 1, 0.5)]  # the loss is right, the step's accuracy not
    error_run(tmp_path, "accuracy-labels", accuracies=wrong_labels, fault="accuracy_labels")
    argv = ["--run_id", "env", "--results_dir", str(tmp_path), "--modes", "default"]
    assert power.main(argv + ["--errors", "lr0.9x,same-order,accuracy-labels"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "beyond drift at step 2" in table_row(lines, "torch, learning rate x0.9")
    order = table_row(lines, "torch, batches not reshuffled")
    assert "beyond drift in the epoch check at step 4" in order and order.endswith("right")
    assert "beyond drift at step 1" in table_row(lines, "torch, training accuracy on the wrong labels")
    cross = table_row(lines, "tensorflow vs torch")
    assert "within drift, epoch check within drift" in cross and cross.endswith("right")
    assert "real errors caught: 3 of 3; drift sources called drift: 7 of 7 (their epoch checks: 7 of 7)" in lines
    assert not any("WRONG" in line for line in lines)
    assert all(len(line) < 160 for line in lines)  # the console's width


def test_an_error_the_envelope_cannot_tell_from_drift_is_marked_wrong(tmp_path, capsys):
    """An error run as close to torch's own run as rounding is: not caught, and the table says so."""
    envelope_runs(tmp_path)
    error_run(tmp_path, "lr0.9x", drifted(CURVE, 0.2), drifted(CHECK, 0.2), learning_rate=0.045)
    argv = ["--run_id", "env", "--results_dir", str(tmp_path), "--modes", "default", "--errors", "lr0.9x"]
    assert power.main(argv) == 1
    out = capsys.readouterr().out
    assert "real errors caught: 0 of 1; drift sources called drift: 7 of 7" in out
    row = table_row(out.splitlines(), "torch, learning rate x0.9")
    assert "within drift" in row and row.endswith("WRONG")


def test_the_parity_mode_has_its_own_table_from_its_own_runs(tmp_path, capsys):
    envelope_runs(tmp_path, "parity", {**DEFAULT, "parity": True})
    error_run(tmp_path, "order1", CURVE * (1 + np.r_[1e-2 * np.ones(STEPS)]), mode="parity", parity=True)
    argv = ["--run_id", "env", "--results_dir", str(tmp_path), "--modes", "parity", "--errors", "order1"]
    assert power.main(argv) == 0
    out = capsys.readouterr().out
    assert "confusion table, mode parity (--parity;" in out and "mode default" not in out
    assert "beyond drift at step 1" in table_row(out.splitlines(), "torch, epoch 1's batches in another order")


def test_an_unknown_error_name_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        power.main(["--run_id", "env", "--results_dir", str(tmp_path), "--errors", "lr0.9x,bias"])
    assert stopped.value.code == 2
    assert "--errors lr0.9x,bias: bias is not one of lr0.9x, lr0.5x, momentum0.85" in capsys.readouterr().err


def test_without_envelope_runs_it_says_how_to_make_them(tmp_path, capsys):
    assert power.main(["--run_id", "env", "--results_dir", str(tmp_path)]) == 2
    assert "make envelope" in capsys.readouterr().err
