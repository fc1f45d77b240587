"""Each wrapper's layer_outputs_and_gradients says "no gradient" (None), never zeros and
never a crash, for a parameter its framework computed none for: dense 9's bias built
frozen through the real build path (--fault frozen:9), and the same bias cut from the
graph by the framework's own stop-gradient (tests/helpers/gradient_probe.py, one process per
framework: a Keras backend is fixed at import; the legacy env's two in tests/legacy/).
The localiser's table names either as "layer 9 Dense 128 bias: no gradient"
(tests/test_localise.py holds that for torch). jax differentiates every input it is
given, so Keras on jax's cut bias reads zeros: a gradient beyond tolerance on that
layer, not "no gradient"."""

import json
import os
import subprocess

import pytest

from algorithms.paths import REPO_ROOT
from algorithms.registry.frameworks import FRAMEWORKS
from tests.conftest import csv_suffix, framework_param

pytestmark = pytest.mark.slow  # a framework process each

MAIN = [framework for framework in FRAMEWORKS if framework.venv == "main"]  # tests/legacy/ runs the others
NO_BIAS_GRADIENT = {"none": [[9, "bias"]], "zeros": [], "held": 12}


def probe_gradients(framework) -> dict:
    """tests/helpers/gradient_probe.py's JSON for one framework, run by its own Python."""
    proc = subprocess.run(
        [framework.python, "-m", "tests.helpers.gradient_probe", framework.package],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("framework", [framework_param(f) for f in MAIN], ids=[csv_suffix(f) for f in MAIN])
def test_a_frozen_or_detached_parameter_has_no_gradient_in_every_wrapper(framework):
    found = probe_gradients(framework)
    assert found["frozen"] == NO_BIAS_GRADIENT
    if framework.name == "keras_jax":
        assert found["detached"] == {"none": [], "zeros": [[9, "bias"]], "held": 12}
    elif framework.name == "caffe":  # its one way: lr_mult 0 (frozen), no graph to cut
        assert "detached" not in found
    else:
        assert found["detached"] == NO_BIAS_GRADIENT
