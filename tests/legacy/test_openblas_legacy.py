"""Theano's GEMMs run on the OpenBLAS core the project named (algorithms/machine/openblas.py):
the legacy wrappers' Support.thread_environment, then a real Theano dot, then the
libopenblas that dot mapped into the process read back; a user's OPENBLAS_CORETYPE wins;
and a real Lasagne run's results.log and settings record say which core ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from algorithms.machine.openblas import SYSTEM_OPENBLAS, choose, probe
from algorithms.machine.tuning import cpu_flags
from algorithms.records import read_settings
from tests.conftest import REPO_ROOT, run_script
from tests.helpers.flags import run_flags

# in a fresh legacy process: the wrapper's environment, a Theano dot (Dot22: the C BLAS),
# then every libopenblas mapped into the process and the core each runs
THEANO_DOT = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "theano"
import importlib
support = importlib.import_module(sys.argv[1]).supported()
support.thread_environment(2)
from backends import theano_backend
import numpy as np, theano, theano.tensor as T
a, b = T.matrix("a"), T.matrix("b")
product = theano.function([a, b], T.dot(a, b))(np.ones((64, 32), np.float32), np.ones((32, 16), np.float32))
assert product.shape == (64, 16) and float(product[0, 0]) == 32.0
from algorithms.machine.openblas import Library
mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line})
print(json.dumps({path: Library.loaded(path).core for path in mapped}))
"""


def theano_dot_cores(package: str, environ: dict) -> dict:
    child = subprocess.run(
        [sys.executable, "-c", THEANO_DOT, package],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def without_coretype() -> dict:
    return {key: value for key, value in os.environ.items() if key != "OPENBLAS_CORETYPE"}


def expected_core() -> str:
    """The core the project's choice leaves the system library on, on this CPU."""
    library = probe(SYSTEM_OPENBLAS)
    return choose({}, cpu_flags(), library).coretype or library.core


def test_theanos_gemm_runs_on_the_core_the_project_chose():
    system = probe(SYSTEM_OPENBLAS)
    for package in ("lasagne_wrapper", "keras_wrapper"):
        cores = theano_dot_cores(package, without_coretype())
        assert system.path in cores, f"Theano's dot did not map {system.path}: {cores}"
        assert cores[system.path].lower() == expected_core().lower(), package


def test_a_users_coretype_is_the_core_theano_runs():
    system = probe(SYSTEM_OPENBLAS)
    cores = theano_dot_cores("lasagne_wrapper", {**os.environ, "OPENBLAS_CORETYPE": "Prescott"})
    assert cores[system.path] == "Prescott"


def test_a_lasagne_run_records_the_core_it_ran(small_data, tmp_path):
    results = tmp_path / "results"
    proc = run_script(
        "lasagne_script.py",
        run_flags(small_data / "train.csv", results, batch_size=32, max_steps=2),
        without_coretype(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    system = probe(SYSTEM_OPENBLAS)
    kernels = f"OpenBLAS {system.version} {expected_core()} kernels"
    log = (tmp_path / "results.log").read_text()
    device = next(line for line in log.splitlines() if line.startswith("device:"))
    assert kernels in device
    assert f"{kernels} (" in log and system.path in log  # the devices line: why that core, and the file
    (settings,) = read_settings(str(next(results.glob("*_lasagne_theano.csv")))).values()
    assert kernels in settings["device_detail"]
