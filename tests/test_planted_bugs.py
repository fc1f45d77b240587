"""The default comparison catches a real bug hidden in wrapper code, with no flag and no
settings record to give it away: a copy of the checkout with torch's learning rate halved
where its optimizer is made, then with TensorFlow's ReLU made leaky, each run through plain
`run_all.py` (its defaults: dropout on, the epoch check) on the default data, against the
shipped drift envelope. The bug's framework is `beyond drift` at the step it first acts:
the first update (step 2) for the learning rate, the forward pass for the ReLU: already the
init row's (step 0: the validation split scored at the initial weights)."""

import os

import pytest

from tests.conftest import run_all_in

pytestmark = pytest.mark.slow  # two run_all.py of two frameworks each, in a copy of the checkout


def plant(path, honest: str, bug: str) -> None:
    text = path.read_text()
    assert text.count(honest) == 1, f"{path}: the line to plant the bug in moved: {honest}"
    path.write_text(text.replace(honest, bug))


def plain_run_all(copy, full_data, results, only: str):
    """run_all.py of the copy with its defaults, 3 steps, on the default data."""
    flags = ["--only", only, "--max_steps", "3", "--train", str(full_data / "train.csv"), "--test", "none"]
    return run_all_in(copy, results, flags)


def verdict_line(stdout: str, name: str) -> str:
    lines = stdout[stdout.index("verdicts against") :].splitlines()
    return " ".join(" ".join(lines[1:4]).split()) if lines[1].strip().startswith(name) else ""


def test_a_bug_planted_in_wrapper_code_is_beyond_drift_in_the_default_comparison(checkout_copy, full_data, tmp_path):
    copy = checkout_copy
    assert os.path.isfile(
        copy / "results" / "baseline" / "drift" / "envelope_cnn2d_3layer_fullconnected_3layer_default.csv"
    )
    torch_model = copy / "torch_wrapper" / "model.py"
    honest = "torch.optim.SGD(parameters, lr=spec.learning_rate, "
    plant(torch_model, honest, "torch.optim.SGD(parameters, lr=spec.learning_rate * 0.5, ")
    proc = plain_run_all(copy, full_data, tmp_path / "lr", "tensorflow,torch")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = verdict_line(proc.stdout, "torch/torch")
    assert line.startswith("torch/torch beyond drift at step 2"), proc.stdout[-3000:]
    assert "settings differ" not in line  # the bug hides in the code: the settings are the same

    plant(torch_model, "lr=spec.learning_rate * 0.5, ", "lr=spec.learning_rate, ")  # torch honest again
    leaky = '"relu": tf.nn.leaky_relu,'
    plant(copy / "tensorflow_wrapper" / "model.py", '"relu": tf.nn.relu,', leaky)
    proc = plain_run_all(copy, full_data, tmp_path / "relu", "torch,tensorflow")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert verdict_line(proc.stdout, "tensorflow/tensorflow").startswith(
        "tensorflow/tensorflow beyond drift at step 0"
    ), proc.stdout[-3000:]
