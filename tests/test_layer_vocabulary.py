"""Every layer of the spec's vocabulary (the kinds of algorithms/network/layers.py's Layer)
is in every wrapper: translated by its model.py, or refused in one line before the
framework loads (Support.layers_refused, docs/architecture.md#adding-a-layer). Read from
each wrapper's source for all five (no framework loads), and by behaviour: a small network
of each kind built and run through each main-env framework's probes (Lasagne and Keras 2 on
Theano in tests/legacy/test_layer_vocabulary_legacy.py)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from types import SimpleNamespace

import pytest

from algorithms.contract.types import Support
from algorithms.errors import InputError
from algorithms.machine.tuning import Tuning
from algorithms.paths import REPO_ROOT
from algorithms.registry.frameworks import FRAMEWORKS, get
from algorithms.run import entry
from tests.conftest import framework_param
from tests.helpers.layer_vocabulary_probe import NETWORKS, VOCABULARY

PACKAGES = sorted({framework.package for framework in FRAMEWORKS})
# Keras's model.py is one on every backend: jax's here, Theano's (Keras 2) in tests/legacy/
BUILT_HERE = [get(name) for name in ("tensorflow", "torch", "keras_jax", "caffe")]


def translations(framework, timeout: int = 300) -> dict:
    """tests/helpers/layer_vocabulary_probe.py for one registry framework, in its own process and environment."""
    proc = subprocess.run(
        [framework.python, "-m", "tests.helpers.layer_vocabulary_probe", framework.package],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_probe_has_a_network_of_every_layer_kind():
    """A new layer kind needs a small network in tests/helpers/layer_vocabulary_probe.py."""
    assert sorted(NETWORKS) == sorted(VOCABULARY)
    for kind, network in NETWORKS.items():
        assert kind in [type(layer).__name__ for layer in network.layers], kind
        network.output_shapes()  # the shapes work out


@pytest.mark.parametrize("package", PACKAGES)
def test_every_wrapper_names_every_layer_kind_or_refuses_it(package):
    """Read from the source: each kind is named in the wrapper's model.py (the translation's
    isinstance or table), or its Support refuses it."""
    with open(os.path.join(REPO_ROOT, package, "model.py"), encoding="utf-8") as handle:
        named = {node.id for node in ast.walk(ast.parse(handle.read())) if isinstance(node, ast.Name)}
    refused = __import__(package).supported().layers_refused
    assert [kind for kind in VOCABULARY if kind not in named and kind not in refused] == []


@pytest.mark.parametrize("framework", [framework_param(f) for f in BUILT_HERE], ids=[f.name for f in BUILT_HERE])
def test_every_wrapper_builds_and_runs_every_layer_kind_it_does_not_refuse(framework):
    assert translations(framework) == {kind: None for kind in VOCABULARY}


def test_a_refused_layer_kind_is_one_line_before_the_framework_loads(monkeypatch):
    refusal = "this framework has no global average pool; run it in torch or TensorFlow"
    support = Support(("single",), (), Tuning("none"), layers_refused={"GlobalAveragePooling2D": refusal})
    monkeypatch.setattr(entry, "support_of", lambda module: support)
    network = NETWORKS["GlobalAveragePooling2D"]
    config = SimpleNamespace(strategy="single", network=network, uses=lambda: {})
    with pytest.raises(InputError) as refused:
        entry.check_supported(config, "some_wrapper.train", "some_script.py")
    assert str(refused.value) == f"GlobalAveragePooling2D (layer 1 of {network.name}): {refusal}"
    entry.check_supported(SimpleNamespace(strategy="single", network=NETWORKS["Dense"], uses=lambda: {}), "w", "s")
