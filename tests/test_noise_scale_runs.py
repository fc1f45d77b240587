"""--noise_scale in real 2-device runs: torch DDP (torchrun, gloo) and TensorFlow
MirroredStrategy (two logical CPUs) log B_simple per epoch (progress line and
results.log) and a final critical-batch line. The training file has one global
batch per epoch, so epoch 1's estimate is exactly step 1's: with --parity (dropout
off) it must equal the same norms computed here with torch autograd on one process,
and TensorFlow's must equal torch's (same weights, same batch)."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algorithms.config.run_config import parse_config
from algorithms.dataset.data import batch_order, load_dataset
from algorithms.network.weights import initial_weights
from algorithms.session.noise_scale import GradientNorms, unbiased_estimates
from tests.conftest import run_script
from torch_wrapper.model import build_model

pytestmark = pytest.mark.slow  # torchrun and MirroredStrategy runs

BATCH, EPOCHS = 32, 2
EPOCH_LINE = re.compile(r"epoch (\d+): B_simple (\S+) \(\|G\|\^2 (\S+), tr\(Sigma\) (\S+)\)")


def noise_scale_run(script: str, train, tmp_path, env=None):
    results = tmp_path / "results"
    proc = run_script(
        script,
        ["--strategy", "data", "--devices", "2", "--noise_scale", "--parity", "--train", str(train), "--test", "none"]
        + ["--batch_size", str(BATCH), "--num_epochs", str(EPOCHS), "--results_dir", str(results)],
        env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    epoch_lines = [line for line in proc.stdout.splitlines() if line.startswith("Epoch ") and "steps -" in line]
    assert len(epoch_lines) == EPOCHS and all(" - B_simple: " in line for line in epoch_lines), proc.stdout
    assert re.search(r"gradient noise scale: critical batch ≈ (\d+|n/a) samples", proc.stdout), proc.stdout
    log_line = next(line for line in (tmp_path / "results.log").read_text().splitlines() if line.startswith("noise"))
    epochs = [(int(e), b, float(g), float(t)) for e, b, g, t in EPOCH_LINE.findall(log_line)]
    assert [epoch for epoch, *_ in epochs] == list(range(1, EPOCHS + 1)), log_line
    assert "critical batch ≈" in log_line and f"over {EPOCHS} steps" in log_line
    return epochs


def autograd_first_step(train) -> tuple:
    """(|G|^2, tr(Sigma)) of step 1 from the whole batch's gradient and each half's, on one process."""
    config = parse_config(["--train", str(train), "--test", "none", "--parity"], "test", "")
    dataset = load_dataset(config.train, None, None, config.validation_split, config.seed)
    indices = batch_order(len(dataset.train_x), BATCH, 0, config.seed)[0]
    model = build_model(config.network, initial_weights(config.network, config.seed)).train()

    def gradient(rows):
        model.zero_grad()
        images = torch.from_numpy(np.ascontiguousarray(dataset.train_x[rows].transpose(0, 3, 1, 2)))
        F.cross_entropy(model(images), torch.from_numpy(dataset.train_y[rows].astype(np.int64))).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()

    whole, first, second = gradient(indices), gradient(indices[:16]), gradient(indices[16:])
    small_sq = float(first @ first + second @ second) / 2
    return unbiased_estimates(GradientNorms(16, small_sq, BATCH, float(whole @ whole)))


def test_torch_ddp_and_tf_mirrored_log_the_same_noise_scale(tiny_train, tmp_path):
    gradient_sq, trace = autograd_first_step(tiny_train)
    torch_epochs = noise_scale_run("torch_script.py", tiny_train, tmp_path / "torch", {"OMP_NUM_THREADS": "1"})
    _, _, torch_gradient_sq, torch_trace = torch_epochs[0]
    assert torch_gradient_sq == pytest.approx(gradient_sq, rel=1e-3)  # the log keeps 4 digits
    assert torch_trace == pytest.approx(trace, rel=1e-3)
    tf_epochs = noise_scale_run("tensorflow_script.py", tiny_train, tmp_path / "tf")
    for (_, _, tf_g, tf_t), (_, _, torch_g, torch_t) in zip(tf_epochs, torch_epochs):
        assert tf_g == pytest.approx(torch_g, rel=2e-3) and tf_t == pytest.approx(torch_t, rel=2e-3)


def test_noise_scale_outside_data_parallel_is_one_line(small_data):
    for script, extra in (("torch_script.py", ["--strategy", "model", "--devices", "2"]), ("tensorflow_script.py", [])):
        proc = run_script(script, ["--train", str(small_data / "train.csv"), "--noise_scale", *extra])
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("error: --noise_scale with --strategy") and proc.stderr.count("\n") == 1
    proc = run_script(
        "keras_script.py", ["--strategy", "data", "--devices", "2", "--noise_scale"], {"KERAS_BACKEND": "jax"}
    )
    assert proc.returncode == 2 and "--noise_scale: not available in keras_script.py" in proc.stderr
