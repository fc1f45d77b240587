"""Every layer of the spec's vocabulary built and run by the legacy env's frameworks
(Lasagne, Keras 2 on Theano), or refused in one line, as tests/test_layer_vocabulary.py
does for the main env's."""

from __future__ import annotations

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from tests.helpers.layer_vocabulary_probe import VOCABULARY
from tests.test_layer_vocabulary import translations

LEGACY_ENV = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]


@pytest.mark.parametrize("framework", LEGACY_ENV, ids=[f.name for f in LEGACY_ENV])
def test_every_legacy_wrapper_builds_and_runs_every_layer_kind_it_does_not_refuse(framework):
    assert translations(framework, timeout=600) == {kind: None for kind in VOCABULARY}
