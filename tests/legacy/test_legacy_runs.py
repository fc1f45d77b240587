"""Real short runs of Lasagne and Keras-on-Theano through their entry scripts, held
to the same checks as the modern wrappers (tests/test_frameworks.py): the loss goes
down, every CSV row parses with the common schema, results.log and the predictions
are written. Plus what only these runs have: THEANO_FLAGS in results.log."""

import pytest

from algorithms.registry.frameworks import FRAMEWORKS, get
import tests.test_frameworks as modern
from tests.conftest import csv_suffix

LEGACY = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]


@pytest.mark.parametrize("framework", LEGACY, ids=[csv_suffix(framework) for framework in LEGACY])
def test_short_run_lowers_the_loss_and_records_every_step(framework, small_data, tmp_path):
    modern.test_short_run_lowers_the_loss_and_records_every_step(framework, small_data, tmp_path)
    log = (tmp_path / "results.log").read_text()
    assert "THEANO_FLAGS=" in log and "floatX float32" in log
    if framework.framework == "keras":
        # the backend column and the versions line come from keras.backend.backend()
        assert "versions:    keras 2.3.1, theano 1.1.2" in log


def test_a_lasagne_run_killed_and_resumed_gives_the_uninterrupted_losses(small_data, tmp_path):
    import tests.test_reliability as reliability

    reliability.test_a_run_killed_and_resumed_gives_the_uninterrupted_losses(get("lasagne"), [], small_data, tmp_path)


def test_a_keras_theano_run_killed_and_resumed_gives_the_uninterrupted_losses(small_data, tmp_path):
    import tests.test_reliability as reliability

    reliability.test_a_run_killed_and_resumed_gives_the_uninterrupted_losses(
        get("keras_theano"), [], small_data, tmp_path
    )
