"""Every form of data the docs offer trains end to end in Lasagne and Keras 2 on Theano
(tests/test_data_forms.py's check, in the legacy env): a CSV, a .csv.gz, a .zip, an .npz
and a folder of images (read from the cache the main env left beside it) to train on,
each scoring a test set of another form, labelled or not."""

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from tests.conftest import csv_suffix
from tests.helpers.data_forms import check_every_form

LEGACY = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]


@pytest.mark.parametrize("framework", LEGACY, ids=[csv_suffix(framework) for framework in LEGACY])
def test_every_data_form_trains_a_few_steps(framework, data_forms, tmp_path):
    check_every_form(framework, data_forms, str(tmp_path / "results"))
