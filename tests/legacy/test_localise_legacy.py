"""The localisation of the legacy env's frameworks (Lasagne, Keras 2 on Theano), each in
its own process as the command runs them: their models pass the structural check and
every layer's output and gradients stay within float32 tolerance of the float64
reference, as tests/test_localise.py holds for the main env's."""

from __future__ import annotations

from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.studies import localise
from tests.test_localise import BATCH, assert_within_everywhere

LEGACY_ENV = [framework.name for framework in FRAMEWORKS if framework.venv == "legacy"]


def test_the_legacy_frameworks_are_within_tolerance_at_every_layer(small_data):
    result = localise.localise(LEGACY_ENV, steps=2, batch_size=BATCH, train_path=str(small_data / "train.csv"))
    for name in LEGACY_ENV:
        assert_within_everywhere(result, name)
