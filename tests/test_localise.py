"""The localisation command with real frameworks, each in its own process (the legacy
two from tests/legacy/): errors put into one framework through its real build path
(algorithms/spec/variants.py) are found at the layer they were put in, while the healthy
frameworks stay within float32 tolerance at every layer; and every framework's model
passes the structural check and the localisation, with the heatmap written beside
earlier ones, never over them.

The tolerances (algorithms/analysis/localisation.py): 2e-5 forward and 1e-4 backward,
relative to each tensor's largest magnitude, 20 and 100 times the largest error a healthy
framework showed on the default data (8.6e-7 and 9.6e-7: float32 rounding through up to
1,568-term sums, in each framework's own order) and a thousand times below a kernel 10% off."""

from __future__ import annotations

import os

import pytest

from algorithms.analysis.localisation import BEYOND, FAULTY, NON_FINITE, SHAPE, WITHIN
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.spec.networks import CNN2D_3LAYER
from algorithms.studies import localise

BATCH = 4  # a few images: every layer sees real digits, and the test stays short
WEIGHTED = [layer for layer, _, _ in CNN2D_3LAYER.parametric_layers()]
HELD_EVERYWHERE = (1, 4, 7, 9, 11, 13)  # outputs even a fused model (torch, TensorFlow) and Caffe hold


def assert_within_everywhere(result, name: str) -> None:
    assert name not in result.failures, result.failures
    assert result.structure[name] == []
    assert len(result.cells[name]) == result.steps
    for cells in result.cells[name]:
        assert all(cell.kind not in FAULTY for cell in cells.values()), name
        assert all(cells[(layer, "backward")].kind == WITHIN for layer in WEIGHTED), name
        assert all(cells[(layer, "forward")].kind == WITHIN for layer in HELD_EVERYWHERE), name


@pytest.mark.slow  # a process per framework, the float64 reference's backward pass
def test_an_error_put_into_one_framework_is_found_at_its_layer_and_the_healthy_one_stays_within(small_data):
    result = localise.localise(
        ["tensorflow", "torch", "caffe", "keras_jax"],
        batch_size=BATCH,
        train_path=str(small_data / "train.csv"),
        faults={"torch": "weights:3:1.1", "caffe": "padding:1:2", "keras_jax": "weights:9:1e39"},
    )
    assert_within_everywhere(result, "tensorflow")

    torch = result.first_beyond("torch")  # conv 3's kernel 10% off, in torch's fused model
    assert (torch.step, torch.layer, torch.direction, torch.cell.kind) == (1, 3, "forward", BEYOND)
    assert torch.seen_at == 4  # torch holds no conv-3 output of the spec's: its ReLU runs after the pool
    assert torch.cell.error == pytest.approx(0.1, rel=1e-3)  # relu(1.1 x) = 1.1 relu(x)

    caffe = result.first_beyond("caffe")  # conv 1 padded by 2, not 1: a 30x30 map where the spec has 28x28
    assert (caffe.layer, caffe.cell.kind, caffe.cell.note) == (1, SHAPE, "(30, 30, 32) not (28, 28, 32)")

    jax = result.first_beyond("keras_jax")  # dense 9's kernel beyond float32's range: inf from there on
    assert (jax.layer, jax.direction, jax.cell.kind) == (9, "forward", NON_FINITE)
    assert all(result.cells["keras_jax"][0][(layer, "forward")].kind == WITHIN for layer in range(9))
    assert result.structure == {name: [] for name in result.frameworks}  # faults change values, not shapes
    assert not result.healthy()


@pytest.mark.slow  # every main-env framework, two steps
def test_every_main_env_framework_is_within_tolerance_everywhere_and_the_heatmap_never_overwrites(
    small_data, tmp_path, capsys
):
    names = [framework.name for framework in FRAMEWORKS if framework.venv == "main"]
    argv = ["--only", ",".join(names), "--steps", "2", "--batch_size", str(BATCH)]
    argv += ["--train", str(small_data / "train.csv"), "--results_dir", str(tmp_path)]
    assert localise.main(argv) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    for name in names:
        assert f"{name}: within float32 tolerance at every layer, forward and backward" in out
    assert " 3 Conv2D 48 3x3" in out and "pre-relu" in out and "in conv" in out
    (png,) = [file for file in os.listdir(tmp_path) if file.endswith(".png")]
    assert (tmp_path / png).stat().st_size > 10_000
    first = sorted(os.listdir(tmp_path))
    assert localise.main(argv[:-2] + ["--results_dir", str(tmp_path), "--only", "torch"]) == 0
    after = sorted(os.listdir(tmp_path))
    assert set(first) < set(after) and len(after) == len(first) + 2  # a new .png and .csv, the old ones kept


@pytest.mark.slow  # a torch process
def test_a_missing_bias_is_named_by_the_structural_check_and_refused_where_it_cannot_be_built(small_data, capsys):
    """At the shared zero initial biases a layer without its bias computes every value the
    spec does: the structural check names it, from torch's own parameter objects."""
    result = localise.localise(
        ["torch"], batch_size=BATCH, train_path=str(small_data / "train.csv"), faults={"torch": "bias:3"}
    )
    assert result.first_beyond("torch") is None and result.structure_layers["torch"] == 3
    assert (
        result.structure["torch"][0] == "torch: layer 3 (Conv2D 48 3x3): no bias (the spec's: (48,), canonical layout)"
    )
    assert ("torch", 1, 3, "Conv2D 48 3x3", "backward") not in [row[:5] for row in result.rows() if row[5] != "within"]
    assert localise.main(["--only", "tensorflow", "--fault", "tensorflow:bias:3"]) == 2
    assert (
        capsys.readouterr().err.strip() == "error: --fault tensorflow:bias:3: tensorflow does not build it; torch does"
    )
