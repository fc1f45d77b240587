"""The localisation command with real frameworks, each in its own process (the legacy
two from tests/legacy/): errors put into one framework through its real build path
(algorithms/network/variants.py) are found at the layer they were put in, while the healthy
frameworks stay within float32 tolerance at every layer; what is no number to compare (no
gradient, another shape, NaN, a process that dies) is a finding on its layer, with exit
status 1 and no traceback; and every framework's model passes the structural check and
the localisation, with the heatmap written beside earlier ones, never over them.

The tolerances (algorithms/localisation/localisation.py): 2e-5 forward and 1e-4 backward,
relative to each tensor's largest magnitude, 20 and 100 times the largest error a healthy
framework showed on the default data (8.6e-7 and 9.6e-7: float32 rounding through up to
1,568-term sums, in each framework's own order) and a thousand times below a kernel 10% off."""

from __future__ import annotations

import os

import pytest

from algorithms.localisation.localisation import BEYOND, FAULTY, NON_FINITE, SHAPE, WITHIN
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.network.networks import CNN2D_3LAYER
from algorithms.localisation import localise

BATCH = 4  # a few images: every layer sees real digits, and the test stays short
WEIGHTED = [layer for layer, _, _ in CNN2D_3LAYER.parametric_layers()]
HELD_EVERYWHERE = (1, 4, 7, 9, 11, 13)  # outputs even a fused model (torch, TensorFlow, Keras) and Caffe hold


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
    assert (caffe.layer, caffe.cell.kind, caffe.cell.note) == (1, SHAPE, "(4, 30, 30, 32), spec (4, 28, 28, 32)")

    jax = result.first_beyond("keras_jax")  # dense 9's kernel beyond float32's range: inf from there on
    assert (jax.layer, jax.direction, jax.cell.kind) == (9, "forward", NON_FINITE)
    held = [layer for layer in range(9) if layer not in CNN2D_3LAYER.outputs_fused_away()]  # fused, as torch's
    assert all(result.cells["keras_jax"][0][(layer, "forward")].kind == WITHIN for layer in held)
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


FOUND = {  # a failure put into torch -> the line that names it (then the table's cell)
    "frozen:9": ("torch (fault put in: frozen:9): layer 9 Dense 128 bias: no gradient (step 1, backward)", "[no grad]"),
    "shape:4": (  # the pool pads: 15x15 from 28x28; torch holds no output between layer 1's and the pool's
        "torch (fault put in: shape:4): layer 4 MaxPool2D 2: output shape (4, 15, 15, 48), spec (4, 14, 14, 48) "
        "(step 1, forward; the first output torch holds after layer 1)",
        "[shape]",
    ),
    "weights:3:nan": (
        "torch (fault put in: weights:3:nan): layer 3 Conv2D 48 3x3: NaN in the output (step 1, forward; seen at "
        "layer 4 MaxPool2D 2, the first output torch holds after layer 1), where the reference is finite",
        "[nan]",
    ),
    "die:4": (  # its outputs up to the pool were saved as they came, and are judged
        "torch (fault put in: die:4): stopped in step 1 after layer 4 MaxPool2D 2, the last output it reported: "
        "exit 70: localise_child: --fault die:4: the process ends here, as a crash would",
        "stopped",
    ),
    "shape:7": (  # a 2,048-wide flatten where dense 9 takes 1,568: torch cannot build the model
        "torch (fault put in: shape:7): stopped in step 1 before its first output: exit 1: RuntimeError: ",
        "stopped",
    ),
}


REFERENCES = {}


@pytest.fixture
def reference_once(monkeypatch):
    """The float64 reference of a batch computed once for every test here that asks for it
    (its kink allowances cost more than a torch process): the same function of the same
    inputs, so each test still judges the real framework against the real reference."""
    computed = localise.reference_trajectory

    def once(network, seed, chosen):
        key = (network, seed, tuple(images.tobytes() for images, _ in chosen))
        if key not in REFERENCES:
            REFERENCES[key] = computed(network, seed, chosen)
        return REFERENCES[key]

    monkeypatch.setattr(localise, "reference_trajectory", once)


@pytest.mark.slow  # a torch process each
@pytest.mark.parametrize("fault", FOUND)
def test_what_is_no_number_to_compare_is_a_finding_on_its_layer_with_status_1_and_no_traceback(
    fault, small_data, tmp_path, capsys, reference_once
):
    argv = ["--only", "torch", "--fault", f"torch:{fault}", "--batch_size", str(BATCH)]
    status = localise.main(argv + ["--train", str(small_data / "train.csv"), "--results_dir", str(tmp_path)])
    out, err = capsys.readouterr()
    line, cell = FOUND[fault]
    assert status == 1, out + err
    assert line in out, out
    assert "Traceback" not in out + err
    layer = {"frozen:9": " 9 Dense 128", "shape:4": " 4 MaxPool2D 2", "weights:3:nan": " 4 MaxPool2D 2"}
    rows = [row for row in out.splitlines() if row.startswith(layer.get(fault, "11 Dense 128"))]
    # the forward table's row (its first), or for a frozen parameter the backward one's (its last:
    # the backward table lists every layer too, with its input gradient where a framework gives it)
    row = rows[-1] if fault.startswith("frozen") else rows[0]
    assert row.endswith(cell), rows
    if fault == "die:4":  # what it gave before it died is judged: within tolerance
        forward = {row[:16].strip(): row[16:].strip() for row in out.split("backward:")[0].splitlines()}
        assert float(forward["1 Conv2D 32 3x3"]) < 2e-5 and float(forward["4 MaxPool2D 2"]) < 2e-5
        (log,) = tmp_path.glob("*.torch.log")  # its whole stderr, kept beside the table
        assert "the process ends here" in log.read_text()
