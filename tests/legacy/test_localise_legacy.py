"""The localisation of the legacy env's frameworks (Lasagne, Keras 2 on Theano), each in
its own process as the command runs them: their models pass the structural check and
every layer's output and gradients stay within float32 tolerance of the float64
reference, as tests/test_localise.py holds for the main env's; and a frozen or detached
parameter has no gradient (None) in their layer_outputs_and_gradients, as
tests/test_no_gradient.py holds for the main env's."""

from __future__ import annotations

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.localisation import localise
from tests.test_localise import BATCH, assert_within_everywhere
from tests.test_no_gradient import NO_BIAS_GRADIENT, probe_gradients

LEGACY_ENV = [framework.name for framework in FRAMEWORKS if framework.venv == "legacy"]


def test_the_legacy_frameworks_are_within_tolerance_at_every_layer(small_data):
    result = localise.localise(LEGACY_ENV, steps=2, batch_size=BATCH, train_path=str(small_data / "train.csv"))
    for name in LEGACY_ENV:
        assert_within_everywhere(result, name)


@pytest.mark.parametrize("name", LEGACY_ENV)
def test_a_frozen_or_detached_parameter_has_no_gradient(name):
    """Lasagne: no `trainable` tag, or Theano's disconnected_grad; Keras 2: out of the trainable
    weights, or its backend's stop_gradient; Theano's grad says None (return_disconnected)."""
    found = probe_gradients(next(framework for framework in FRAMEWORKS if framework.name == name))
    assert found == {"frozen": NO_BIAS_GRADIENT, "detached": NO_BIAS_GRADIENT}
