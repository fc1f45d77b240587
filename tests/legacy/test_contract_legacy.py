"""The wrapper contract for the legacy env's frameworks (Lasagne, Keras 2 on Theano),
each in its own process, as tests/test_contract.py does for the main env's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from algorithms.frameworks import FRAMEWORKS
from algorithms.paths import REPO_ROOT

LEGACY_ENV = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]


@pytest.mark.parametrize("framework", LEGACY_ENV, ids=[f.name for f in LEGACY_ENV])
def test_every_legacy_wrapper_meets_the_contract(framework):
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.contract", framework.package],
        cwd=REPO_ROOT,
        env={**os.environ, **framework.env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "meets the wrapper contract" in proc.stdout
