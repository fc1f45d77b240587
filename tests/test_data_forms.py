"""Every form of data the docs offer trains end to end in every framework of the main env
(the legacy env's: tests/legacy/test_data_forms_legacy.py): a CSV, a .csv.gz, a .zip
holding a CSV, an .npz and a folder of images to train on, each scoring a test set of
another form, labelled or not (tests/helpers/data_forms.py says which). Each run trains two
steps; its rows, predictions and settings record (the training data's fingerprint, a
folder's by its files) are read back."""

from __future__ import annotations

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from tests.conftest import framework_param
from tests.helpers.data_forms import check_every_form

MAIN = [framework for framework in FRAMEWORKS if framework.venv == "main"]


@pytest.mark.parametrize("framework", [framework_param(f, slow=True) for f in MAIN], ids=lambda f: f.name)
def test_every_data_form_trains_a_few_steps(framework, data_forms, tmp_path):
    check_every_form(framework, data_forms, str(tmp_path / "results"))
