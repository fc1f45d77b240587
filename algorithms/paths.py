"""Where things live in the checkout, built from this file's place once; every other
module imports its paths from here."""

from __future__ import annotations

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA_DIR = os.path.join(REPO_ROOT, "data")
DEFAULT_TRAIN = os.path.join(DEFAULT_DATA_DIR, "train.csv")
DEFAULT_TEST = os.path.join(DEFAULT_DATA_DIR, "test.csv")
RESULTS_DIR = os.path.join(REPO_ROOT, "results")
BASELINE_DIR = os.path.join(RESULTS_DIR, "baseline")
LEGACY_VENV = os.path.join(REPO_ROOT, ".venv-legacy")  # theano-pymc, Lasagne, Keras 2 (see legacy_env.py)
LEGACY_PYTHON = os.path.join(LEGACY_VENV, "bin", "python")
REQUIREMENTS = os.path.join(REPO_ROOT, "requirements.txt")  # the main env's pins
# the environments of other releases (run_all.py --versions; registry/release_env.py), one a release set
RELEASES_CACHE = os.environ.get(
    "CNN_PARALLEL_RELEASES", os.path.join(os.path.expanduser("~"), ".cache", "cnn-parallel", "releases")
)
