"""Your own network through every framework, real runs (issue 44's "Done when"):
scikit-learn's 8x8 digits train with examples/digits_8x8.toml in every framework; a model
defined in torch and exported with torch.onnx.export trains in every framework from its
exported weights, and its parity pairs are within drift; the batch-norm example
(examples/bn_32x32x3.toml) on 32x32x3 images: its parity pairs within drift against an
envelope `drift --envelope` measured for it, and the planted batch-norm and padding bugs
beyond drift and localised to their layer, the clean tree within."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from algorithms.registry.frameworks import FRAMEWORKS, get
from algorithms.records import read_rows, summarize_rows
from algorithms.studies import children
from scripts.example_data import colour_digits, digits_8x8
from tests.conftest import REPO_ROOT, framework_param, run_module, run_script
from tests.helpers.flags import run_flags

pytestmark = pytest.mark.slow  # every one starts framework processes

EXAMPLES = os.path.join(REPO_ROOT, "examples")
BN_NET = os.path.join(EXAMPLES, "bn_32x32x3.toml")


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> tuple:
    return digits_8x8(str(tmp_path_factory.mktemp("digits")))


@pytest.fixture(scope="module")
def colour(tmp_path_factory) -> tuple:
    return colour_digits(str(tmp_path_factory.mktemp("colour")))


def rows_of(results, network: str, name: str) -> list:
    return read_rows(children.results_csv(str(results), network, name))


@pytest.mark.parametrize("framework", [framework_param(f, slow=True) for f in FRAMEWORKS], ids=lambda f: f.name)
def test_the_8x8_digits_train_with_the_example_net(framework, digits, tmp_path):
    train, test = digits
    flags = run_flags(train, tmp_path / "results", test=test, network=os.path.join(EXAMPLES, "digits_8x8.toml"))
    proc = run_script(framework.script, flags + ["--num_epochs", "2"], env_extra=framework.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = summarize_rows(rows_of(tmp_path / "results", "digits_8x8", framework.name))
    assert summary["test_accuracy"] > 0.6, summary  # chance is 0.1: 10 classes, 360 test images


def test_the_batch_norm_example_trains_past_0_9_with_its_own_settings(colour, tmp_path):
    """examples/bn_32x32x3.toml as its file says (6 epochs, batch 64, sgd 0.05) in torch: its
    validation accuracy ends above 0.9 (three convolutions in five epochs ended at 0.64);
    docs/own-network.md has every framework's."""
    train, test = colour
    proc = run_script("torch_script.py", run_flags(train, tmp_path / "results", test=test, network=BN_NET))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = summarize_rows(rows_of(tmp_path / "results", "bn_32x32x3", "torch"))
    assert summary["epochs"] == 6 and summary["val_accuracy"] > 0.9, summary


# --------------------------------------------------------------------------- ONNX


def exported_model(path) -> tuple:
    """A small torch CNN for 8x8 digits with a batch norm and dropout, exported as ONNX."""
    import torch
    from torch import nn

    torch.manual_seed(11)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(16 * 2 * 2, 10),
    )
    model.train()
    torch.onnx.export(
        model,
        (torch.zeros(2, 1, 8, 8),),
        str(path),
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )
    return model, str(path)


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    return exported_model(tmp_path_factory.mktemp("onnx") / "digits_cnn.onnx")


@pytest.mark.parametrize("framework", [framework_param(f, slow=True) for f in FRAMEWORKS], ids=lambda f: f.name)
def test_a_torch_model_exported_to_onnx_trains_from_its_weights(framework, onnx_model, digits, tmp_path):
    """Its init row (the validation split at the initial weights, evaluation: running
    statistics) and its first step's loss (training: batch statistics, the shared batch order)
    are the torch model's own on the same rows, to float32 precision."""
    import copy

    import torch
    import torch.nn.functional as F

    from algorithms.dataset.data import batch_order, load_dataset

    model, path = onnx_model
    model = copy.deepcopy(model)  # its running statistics as exported: a training pass below moves them
    train, _ = digits
    flags = run_flags(train, tmp_path / "results", network=path, parity=True, max_steps=2, batch_size=32)
    proc = run_script(framework.script, flags, env_extra=framework.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rows_of(tmp_path / "results", "digits_cnn", framework.name)
    init = next(row for row in rows if row["phase"] == "init")
    first = next(row for row in rows if row["phase"] == "train" and row["step"] == 1)
    dataset = load_dataset(train, None, None, 0.2, 0)
    images = torch.from_numpy(dataset.val_x.transpose(0, 3, 1, 2).copy())
    with torch.no_grad():
        model.eval()
        val_loss = F.cross_entropy(model(images), torch.from_numpy(dataset.val_y.astype(np.int64))).item()
        model.train()
        model[7].p = 0.0  # --parity: dropout off
        rows_1 = batch_order(len(dataset.train_x), 32, 0, 0)[0]
        batch = torch.from_numpy(dataset.train_x[rows_1].transpose(0, 3, 1, 2).copy())
        step_loss = F.cross_entropy(model(batch), torch.from_numpy(dataset.train_y[rows_1].astype(np.int64))).item()
        model[7].p = 0.2
    assert init["loss"] == pytest.approx(val_loss, rel=1e-5), (init["loss"], val_loss)
    assert first["loss"] == pytest.approx(step_loss, rel=1e-5), (first["loss"], step_loss)


def measure_envelope(network: str, train: str, folder, only: str, steps: int = 8) -> str:
    """`drift --envelope` of `network` on `train` in parity mode, into `folder`: the yardstick
    a network of one's own needs (none ships), as docs/own-network.md says to make it."""
    proc = run_module(
        "algorithms.studies.drift",
        ["--envelope", "--modes", "parity", "--steps", str(steps), "--only", only, "--envelope_dir", str(folder)]
        + ["--network", network, "--train", train, "--test", "none", "--results_dir", str(folder / "runs")],
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return str(folder)


def verdicts(stdout: str) -> dict:
    """{framework/backend: its verdict line} of run_all's console."""
    block = stdout[stdout.index("verdicts against") :].split("\n\n")[0].splitlines()[1:]
    return {line.split()[0]: " ".join(line.split()[1:]) for line in block if line.startswith("  ") and "/" in line}


def run_all(flags: list) -> str:
    proc = run_script("run_all.py", flags, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_onnx_models_parity_pairs_are_within_drift(onnx_model, digits, tmp_path):
    _, path = onnx_model
    train, _ = digits
    envelope = measure_envelope(path, train, tmp_path / "envelope", "torch,caffe")
    flags = ["--network", path, "--train", train, "--test", "none", "--parity", "--max_steps", "8", "--no_epoch_check"]
    out = run_all(flags + ["--only", "torch,caffe,keras_jax", "--baseline", envelope, "--results_dir", str(tmp_path)])
    found = verdicts(out)
    assert set(found) == {"caffe/caffe", "keras/jax"}, out[-3000:]
    assert all(line.startswith("within drift") for line in found.values()), found


# --------------------------------------------------------------------------- the batch-norm example


@pytest.fixture(scope="module")
def bn_envelope(colour, tmp_path_factory) -> str:
    return measure_envelope(BN_NET, colour[0], tmp_path_factory.mktemp("bn_envelope"), "torch,caffe")


@pytest.fixture(scope="module")
def bn_parity_run(colour, bn_envelope, tmp_path_factory) -> tuple:
    """run_all --parity of the batch-norm example in torch and TensorFlow (which the envelope did
    not measure) against its envelope (torch's and Caffe's)."""
    results = tmp_path_factory.mktemp("bn_runs")
    flags = ["--network", BN_NET, "--train", colour[0], "--test", "none", "--parity", "--max_steps", "8"]
    flags += ["--only", "torch,tensorflow", "--no_epoch_check", "--baseline", bn_envelope]
    return results, run_all(flags + ["--results_dir", str(results)])


def test_the_batch_norm_examples_parity_pairs_are_within_drift(bn_parity_run):
    _, out = bn_parity_run
    found = verdicts(out)
    assert set(found) == {"tensorflow/tensorflow"}, out[-3000:]
    assert all(line.startswith("within drift") for line in found.values()), found
    assert "no drift envelope or seed band" not in out  # the note is for runs without a yardstick


def test_a_network_of_your_own_is_judged_with_no_command_before_it_and_the_next_run_pays_nothing(colour, tmp_path):
    """The first run at these settings measures the yardstick (a twin), every pair is judged
    (never `no band`), and a second run at the same settings reuses it at no cost; with
    --yardstick off, no yardstick: `no band`, and the note says how to make one."""
    flags = ["--network", BN_NET, "--train", colour[0], "--test", "none", "--max_steps", "6", "--no_epoch_check"]
    flags += ["--only", "torch,tensorflow", "--results_dir", str(tmp_path)]
    out = run_all(flags)
    assert "yardstick: measured here: a twin of the first 6 steps" in out, out[-3000:]
    assert "reused from" in out and "(0 s)" in out  # TensorFlow, the second framework, pays nothing
    assert verdicts(out)["tensorflow/tensorflow"].startswith("within drift"), out[-3000:]
    again = run_all(flags)
    assert "measured here" not in again and again.count("(0 s)") == 2, again[-3000:]
    assert verdicts(again)["tensorflow/tensorflow"].startswith("within drift")
    off = run_all(flags[:-2] + ["--results_dir", str(tmp_path / "off"), "--yardstick", "off"])
    assert verdicts(off)["tensorflow/tensorflow"].startswith("no band"), off[-3000:]
    note = " ".join(off[off.index("note: 1 pair(s) with no yardstick") :].split("\n\n")[0].split())
    assert f"python run_all.py --yardstick measure --network {BN_NET}" in note


PLANTED = {
    # fault: (the step its verdict names, the layer the localisation names, the pass it shows in)
    "bn_mean:1": (2, 1, "backward"),  # the first update uses the wrong gradient
    "bn_eval:1": (0, 1, "evaluation"),  # the init row: the validation split evaluated
    "same_side:2": (0, 2, "forward"),  # the forward pass, already at the initial weights
}


@pytest.mark.parametrize("fault", sorted(PLANTED))
def test_a_planted_batch_norm_or_padding_bug_is_beyond_drift_and_localised(fault, bn_parity_run, bn_envelope, colour):
    from algorithms.localisation.localise import localise

    results, _ = bn_parity_run
    torch_script = get("torch").script
    flags = ["--network", BN_NET, "--train", colour[0], "--test", "none", "--parity", "--max_steps", "8"]
    run_id = f"planted-{fault.split(':')[0]}"
    proc = run_script(torch_script, flags + ["--fault", fault, "--run_id", run_id, "--results_dir", str(results)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    clean = children.results_csv(str(results), "bn_32x32x3", "torch")
    first_run = next(row["run_id"] for row in read_rows(clean) if not row["run_id"].startswith("planted"))
    compared = run_module(
        "algorithms.analysis.compare",
        [f"{clean}@{first_run}", f"{clean}@{run_id}", "--baseline", bn_envelope, "--out", str(results / run_id)],
    )
    step, layer, direction = PLANTED[fault]
    assert re.search(rf"vs  torch/torch {run_id}: beyond drift at step {step}\b", compared.stdout), compared.stdout
    found = localise(["torch"], BN_NET, train_path=colour[0], faults={"torch": fault}).first_beyond("torch")
    assert (found.layer, found.direction) == (layer, direction), found


def test_the_clean_tree_is_within_tolerance_at_every_layer_of_the_batch_norm_example(colour):
    from algorithms.localisation.localise import localise

    result = localise(["torch", "tensorflow"], BN_NET, steps=2, train_path=colour[0])
    assert result.healthy(), [result.first_beyond(name) for name in result.frameworks]
    assert "evaluation" in result.directions()  # the batch norms' running statistics compared too
