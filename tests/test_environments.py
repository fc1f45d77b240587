"""An environment that cannot be built (the legacy venv, pycaffe) leaves its frameworks
out of run_all.py's table with the reason, the log and the fix, and the others still run.
The failures are made on purpose away from the shared envs: the legacy one in a copy of
the checkout that has no .venv-legacy, built with LEGACY_PYTHON=/nonexistent/python3.11."""

from __future__ import annotations

import subprocess
import sys

import pytest

from algorithms.registry.environments import apt_fix, check_caffe, reason_and_fix
from algorithms.paths import REPO_ROOT
from tests.conftest import outside_make, run_all_in


def run_all_without_legacy(copy, small_data, results, only: str):
    """run_all.py of the copy, its legacy env to be built with a Python that does not exist."""
    flags = ["--only", only, "--max_steps", "2", "--batch_size", "32", "--run_id", "env-test"]
    flags += ["--train", str(small_data / "train.csv"), "--test", str(small_data / "test.csv")]
    return run_all_in(copy, results, flags, timeout=300, LEGACY_PYTHON="/nonexistent/python3.11")


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_a_legacy_env_that_cannot_be_built_leaves_the_others_running(checkout_copy, small_data, tmp_path):
    proc = run_all_without_legacy(checkout_copy, small_data, tmp_path / "results", "torch,lasagne")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("framework"))
    torch_row, lasagne_row = lines[header + 2], lines[header + 3]
    assert torch_row.split()[:2] == ["torch", "torch"] and float(torch_row.split()[3]) > 0
    log = tmp_path / "results" / "build" / "legacy-setup.log"
    assert lasagne_row.split()[:2] == ["lasagne", "theano"] and lasagne_row.split(None, 2)[2] == "not run (below)"
    below = " ".join(proc.stdout[proc.stdout.index("lasagne/theano not run") :].split())  # wrapped to 160 columns
    assert below.startswith(
        "lasagne/theano not run: .venv-legacy could not be built (LEGACY_PYTHON=/nonexistent/python3.11 cannot be "
        f"run; log {log}); fix: make legacy-setup LEGACY_PYTHON=python3.11"
    )
    assert "cannot be run" in log.read_text() and not (checkout_copy / ".venv-legacy").exists()


def test_when_no_framework_could_run_the_exit_status_is_1(checkout_copy, small_data, tmp_path):
    proc = run_all_without_legacy(checkout_copy, small_data, tmp_path / "results", "lasagne,keras_theano")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("lasagne ", "keras "))]
    assert len(rows) == 2 and all(row.endswith("not run (below)") for row in rows)
    reasons = [line for line in proc.stdout.splitlines() if line.startswith(("  lasagne/theano ", "  keras/theano "))]
    assert len(reasons) == 2 and all("not run: .venv-legacy could not be built" in line for line in reasons)
    assert proc.stdout.count("[legacy-setup] creating") == 1  # built (tried) once for both


def test_a_caffe_build_that_fails_names_its_reason_and_fix(tmp_path):
    python = tmp_path / "python"  # no such file: the real build_caffe.sh stops at once
    missing = check_caffe(str(tmp_path), python=str(python))
    assert missing.what == "pycaffe could not be built" and missing.fix == "make caffe"
    assert missing.reason == f"PYTHON is not executable: {python}"
    assert missing.log == str(tmp_path / "caffe.log") and "FAILED in step" in open(missing.log).read()


def test_the_reason_is_the_line_that_says_what_failed():
    caffe_without_root = (
        "[caffe 1/7] checking system packages (apt) ... (t=0s)\n"
        "[caffe] installing missing packages: cmake libboost-python-dev\n"
        "[caffe] ERROR: not root and no sudo; install: cmake libboost-python-dev\n"
        "[caffe] FAILED in step [1/7 checking system packages (apt)] (exit 1, after 0s)\n"
    )
    assert reason_and_fix(caffe_without_root) == ("not root and no sudo; install: cmake libboost-python-dev", "")
    assert apt_fix(caffe_without_root, "make caffe") == "sudo apt-get install cmake libboost-python-dev && make caffe"
    pip_on_python_312 = (
        "ERROR: Could not find a version that satisfies the requirement numpy==1.23.5 (from versions: 1.26.0)\n"
        "ERROR: No matching distribution found for numpy==1.23.5\n"
        "make: *** [Makefile:39: .venv-legacy/.installed-91b93ccb03ba] Error 1\n"
    )
    assert reason_and_fix(pip_on_python_312) == ("ERROR: No matching distribution found for numpy==1.23.5", "")


def planned(target: str, *variables: str) -> str:
    """What `make target` would run, every prerequisite rebuilt (an outer `make test ARGS=...`
    would pass its ARGS down through MAKEFLAGS: left out); `variables`: NAME=VALUE for make."""
    return subprocess.run(
        ["make", "--no-print-directory", "-C", REPO_ROOT, "-n", "-B", target, "LEGACY_PYTHON=python3.11", *variables],
        env=outside_make(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_make_compare_builds_only_the_main_env_and_make_test_builds_every_one():
    compare, test = planned("compare"), planned("test")
    assert "run_all.py" in compare and "venv-legacy" not in compare and "build_caffe.sh" not in compare
    assert "python3.11 -m venv .venv-legacy" in test and "build_caffe.sh" in test


def test_make_test_fast_builds_neither_caffe_nor_the_legacy_env_and_make_test_runs_what_it_leaves_out():
    fast, test = planned("test-fast"), planned("test")
    assert "build_caffe.sh" not in fast and "venv-legacy" not in fast
    assert '-m pytest -q -n 2 --dist loadgroup -m "not slow and not caffe" tests' in fast
    # no filter; the 25 slowest tests printed (where the suite's time goes)
    assert "-m pytest -q -n 2 --dist loadgroup --durations=25 tests ;" in test and "-m pytest -q tests/legacy " in test
    one = planned("test", "XDIST=0")  # one process, one test at a time
    assert "-m pytest -q -p no:xdist --durations=25 tests ;" in one


def test_make_tests_workers_keep_each_file_together():
    """tests/conftest.py puts each file in one pytest-xdist group (its module-scoped runs
    train once): the group in every node id, and one worker for the whole file."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"]
        + ["tests/test_tables.py", "tests/test_argv.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    passed = [line.split() for line in proc.stdout.splitlines() if " PASSED " in line]
    workers = {}
    for words in passed:
        test = words[-1]
        assert test.endswith(("@test_tables.py", "@test_argv.py")), test
        workers.setdefault(test.rsplit("@", 1)[1], set()).add(words[0])
    assert set(workers) == {"test_tables.py", "test_argv.py"} and all(len(seen) == 1 for seen in workers.values())
