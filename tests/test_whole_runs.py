"""The verdict's known answers over whole runs (algorithms/studies/whole_runs.py): an error
that starts past the drift envelope's horizon, put into a real torch run through its real
--fault and hidden from the verdict, is called beyond at the step it starts at, and the
honest pair beside it is within everywhere. Also the study's own pieces: the fault hidden
from the settings, the step each error starts at, the errors a network cannot take and a
bad --errors refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.analysis.runs import load_run
from algorithms.analysis.verdict import Yardsticks, judge
from algorithms.errors import EXIT_INPUT_ERROR
from algorithms.paths import BASELINE_DIR
from algorithms.studies import whole_runs
from algorithms.network.networks import get_network
from tests.helpers.synthetic_runs import NETWORK, write_run

CURVE = 2.3 * np.exp(-np.arange(1, 65) / 20.0)


def table_row(lines: list, start: str) -> str:
    return next(line for line in lines if line.strip().startswith(start))


def test_the_fault_is_hidden_from_the_verdict_as_a_bug_would_be(tmp_path):
    """With its --fault recorded, a pair of an honest run and an error run is `settings
    differ`; hidden, the error run is judged as the same run recorded with no fault is."""
    write_run(tmp_path, "tensorflow/tensorflow", "a", CURVE, 0.9, dropout="shared")
    for run_id, fault in (("err", "late_lr:2:0.5"), ("bug", None)):
        write_run(tmp_path, "torch/torch", run_id, CURVE * (1 + 1e-9), 0.9, dropout="shared", fault=fault)
    honest, error, bug = (
        load_run(str(tmp_path / f"cnn2d_3layer_fullconnected_3layer_{name}.csv") + f"@{run_id}")
        for name, run_id in (("tensorflow", "a"), ("torch", "err"), ("torch", "bug"))
    )
    yardsticks = Yardsticks([honest, error, bug], BASELINE_DIR)
    assert judge(honest, error, yardsticks).text.startswith("settings differ: fault none vs late_lr:2:0.5")
    hidden = whole_runs.hidden(error)
    assert hidden.settings.get("fault") is None and error.settings.get("fault") == "late_lr:2:0.5"
    assert judge(honest, hidden, yardsticks).text == judge(honest, bug, yardsticks).text
    assert "settings differ" not in judge(honest, hidden, yardsticks).text


@pytest.mark.parametrize(
    "fault, both, start",
    [
        ("late_lr:4:0.5", (), 97),  # epoch 4's first step, at 32 steps an epoch
        ("late_momentum:5:0.8", (), 129),
        ("skip:60:40", (), 60),
        ("lr_late", whole_runs.SCHEDULE, 129),  # the schedule's change at epoch 5, applied at epoch 6
        ("bn_mean:1", (), 1),  # the first step's gradient
        ("bn_eval:1", (), 0),  # the init row evaluates
    ],
)
def test_each_error_starts_where_its_definition_puts_it(tmp_path, fault, both, start):
    network = get_network("examples/bn_32x32x3.toml" if fault.startswith("bn_") else NETWORK)
    run = load_run(write_run(tmp_path, "torch/torch", "r", CURVE, 0.9, validations=2) + "@r")  # 32 steps an epoch
    assert whole_runs.start_step(whole_runs.Error(fault, "", both), network, run, run, None) == start


def test_a_max_norm_starts_at_the_update_before_the_first_loss_that_leaves_torchs_own_run(tmp_path):
    honest = load_run(write_run(tmp_path, "torch/torch", "a", CURVE, 0.9, validations=2) + "@a")
    changed = CURVE.copy()
    changed[52:] *= 1 + 1e-7  # step 53's loss is the first the clamp after step 52's update moves
    error = load_run(write_run(tmp_path, "torch/torch", "m", changed, 0.9, validations=2) + "@m")
    fault = whole_runs.Error("maxnorm:9:2.4", "")
    assert whole_runs.start_step(fault, get_network(NETWORK), honest, error, honest) == 52


def test_a_fault_the_network_cannot_take_is_no_row_and_says_why():
    """digits_8x8's convolutions are 3x3 at stride 1: their `same` padding is 1 on both sides."""
    why = whole_runs.refused(whole_runs.Error("same_side:0", ""), get_network("examples/digits_8x8.toml"))
    assert "the same on both sides" in why
    assert whole_runs.refused(whole_runs.Error("same_side:2", ""), get_network("examples/bn_32x32x3.toml")) is None


def test_an_unknown_fault_in_errors_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        whole_runs.main(["--errors", "late_lr:4:0.5,slow:3"])
    assert stop.value.code == EXIT_INPUT_ERROR
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "slow:3: a --fault is one of" in error


@pytest.mark.slow
def test_a_late_error_is_caught_at_its_step_and_the_honest_pair_is_within_everywhere(tmp_path, capsys):
    """24 steps of the default run (batch 100: the shipped envelope covers it): an update
    skipped at step 19 (past the horizon at 16, and none of the steps the step check takes
    whole: 1, 12) is beyond at step 19 by the update rule, which the check holds
    at every step; TensorFlow against torch, both honest, is within drift to the horizon with
    every step within rounding."""
    argv = ["--cases", "default", "--only", "tensorflow,torch", "--no_variants", "--errors", "skip:19:100"]
    argv += ["--run_id", "t", "--results_dir", str(tmp_path), "--results_log", str(tmp_path / "results.log")]
    assert whole_runs.main(argv + ["--num_epochs", "1", "--max_steps", "24"]) == 0
    lines = capsys.readouterr().out.splitlines()
    error = table_row(lines, "torch, --fault skip:19:100")
    assert "beyond rounding at step 19 (torch/torch: the update rule)" in error and "step check at step 19" in error
    assert error.split()[-1] == "right" and " 19 " in error  # it starts at step 19
    honest = table_row(lines, "tensorflow vs torch")
    assert "within drift to step" in honest and "steps within rounding to 24" in honest
    assert honest.endswith("right")
    assert "errors called beyond at or after the step they start at: 1 of 1" in lines
    assert "honest pairs called beyond anywhere: 0 of 1" in lines
