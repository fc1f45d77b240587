"""--batch_size auto's trial process for Lasagne and Keras on Theano (the search and
the choice are framework-neutral: tests/test_batch_finder.py)."""

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from tests.conftest import csv_suffix
from tests.test_batch_finder import assert_a_trial_measures_the_wrappers_steps_and_memory

LEGACY = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]


@pytest.mark.slow  # Theano compiles the train function in each trial process
@pytest.mark.parametrize("framework", LEGACY, ids=[csv_suffix(framework) for framework in LEGACY])
def test_a_legacy_trial_measures_the_wrappers_steps_and_memory(framework, tiny_train, tmp_path):
    assert_a_trial_measures_the_wrappers_steps_and_memory(framework, tiny_train, tmp_path)
