"""keras_wrapper builds the spec's two exact rewrites (keras_wrapper/model.py) on every Keras
backend, Keras 2 on Theano too: a pad that amounts to 'same' padding has no layer of its own
(its convolution pads 'same'), a pad that does not is kept, and a ReLU before a max-pool runs
in the pool's layer. In training, the fused model's loss and its outputs at every layer it
holds (all but Network.outputs_fused_away) equal the spec's layers built one by one
(`build_model(fused=False)`) bit for bit, and each weight's gradient equals theirs to float32
summation order (measured: at most 7e-7 relative, on torch and tensorflow; bit for bit on
Theano). Each backend runs in its own process (tests/helpers/keras_fused_probe.py)."""

import json
import subprocess

import pytest

from algorithms.registry.frameworks import get
from algorithms.network.networks import CNN2D_3LAYER
from tests.conftest import REPO_ROOT, script_env

pytestmark = pytest.mark.slow  # a process per Keras backend, Theano's compiling both models

KERAS = [get(name) for name in ("keras_tensorflow", "keras_torch", "keras_jax", "keras_theano")]
GRADIENT_RELATIVE = 1e-5  # float32 summation order of a convolution's gradient (measured at most 7e-7)


def probe(framework) -> dict:
    proc = subprocess.run(
        [framework.python, "-m", "tests.helpers.keras_fused_probe"],
        cwd=REPO_ROOT,
        env=script_env(framework.env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("framework", KERAS, ids=[f.name for f in KERAS])
def test_the_fused_keras_model_computes_the_spec_layers_loss_outputs_and_gradients(framework):
    report = probe(framework)
    assert report["backend"] == framework.backend
    default = report[CNN2D_3LAYER.name]
    # the three pads (layers 0, 2, 5) folded into 'same' convolutions; the pools carry the ReLUs
    assert [name for name, kind in default["plain_layers"] if kind == "ZeroPadding2D"] == [
        "layer_0",
        "layer_2",
        "layer_5",
    ]
    assert [name for name, _ in default["fused_layers"]] == [
        f"layer_{index}" for index in (1, 3, 4, 6, 7, 8, 9, 10, 11)
    ]
    # the probe's pad of 2 before a 3x3 convolution is not 'same': kept as its own layer
    assert [name for name, kind in report["fused_probe"]["fused_layers"] if kind == "ZeroPadding2D"] == ["layer_6"]
    for name, found in report.items():
        if name == "backend":
            continue
        plain_loss, fused_loss = found["loss"]
        assert fused_loss == plain_loss, name
        assert found["outputs_held"], name
        assert all(found["outputs_equal"].values()), (name, found["outputs_relative"])
        assert max(found["gradients_relative"]) <= GRADIENT_RELATIVE, (name, found["gradients_relative"])
    assert default["outputs_held"] == sorted(set(range(12)) - CNN2D_3LAYER.without_dropout().outputs_fused_away())
