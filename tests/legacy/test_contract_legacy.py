"""The wrapper contract for the legacy env's frameworks (Lasagne, Keras 2 on Theano),
each in its own process, as tests/test_contract.py does for the main env's."""

from __future__ import annotations

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from tests.test_contract import assert_meets_the_contract

LEGACY_ENV = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]


@pytest.mark.parametrize("framework", LEGACY_ENV, ids=[f.name for f in LEGACY_ENV])
def test_every_legacy_wrapper_meets_the_contract(framework):
    assert_meets_the_contract(framework, timeout=600)
