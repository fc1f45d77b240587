"""--tuned (algorithms/run/tuning.py): each framework's table entry is well-formed, the
setting's environment is applied before the framework loads and recorded in
results.log (torch, and Keras on jax through XLA_FLAGS), a bad name is one line and
status 2, and the benchmark puts a setting's row beside the defaults."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys

import pytest

from algorithms.run import tuning
from algorithms.registry.frameworks import NAMES
from tests.conftest import REPO_ROOT, run_script


def flags(small_data, tmp_path) -> list:
    return [
        "--train",
        str(small_data / "train.csv"),
        "--test",
        "none",
        "--results_dir",
        str(tmp_path / "results"),
        "--batch_size",
        "32",
        "--max_steps",
        "2",
        "--quiet",
    ]


def tuned_line(tmp_path) -> str:
    """The latest run's (results.log is appended to)."""
    with open(tmp_path / "results.log") as handle:
        return [line for line in handle if line.startswith("tuned:")][-1]


def test_every_framework_has_candidates_and_a_tuned_setting_among_them():
    assert set(tuning.CANDIDATES) == set(NAMES) == set(tuning.TUNED)
    for name in NAMES:
        assert tuning.TUNED[name] in tuning.settings(name), name
        assert all(setting.env or setting.options for setting in tuning.CANDIDATES[name]), name


def test_a_flag_list_is_appended_to_and_a_plain_variable_set():
    environ = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    line = tuning.apply(tuning.settings("keras_jax")["ynn_off"], environ)
    assert environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false " + tuning.YNN_OFF
    assert line == f"ynn_off: XLA_FLAGS={tuning.YNN_OFF}"
    tuning.apply(tuning.settings("tensorflow")["onednn_off"], environ)
    assert environ["TF_ENABLE_ONEDNN_OPTS"] == "0"


def test_torch_defaults_tuned_and_a_named_setting_are_each_recorded(small_data, tmp_path):
    proc = run_script("torch_script.py", flags(small_data, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "off: the framework's defaults" in tuned_line(tmp_path)
    proc = run_script("torch_script.py", flags(small_data, tmp_path) + ["--tuned", "omp_active"])
    assert proc.returncode == 0, proc.stderr
    line = tuned_line(tmp_path)
    assert "omp_active: OMP_WAIT_POLICY=ACTIVE OMP_PROC_BIND=true (a named candidate" in line
    assert "as set: OMP_WAIT_POLICY=ACTIVE OMP_PROC_BIND=true" in line  # in the training process itself
    proc = run_script("torch_script.py", flags(small_data, tmp_path) + ["--tuned"])
    assert proc.returncode == 0, proc.stderr
    best = tuning.settings("torch")[tuning.TUNED["torch"]]
    assert tuned_line(tmp_path).split(None, 1)[1].startswith(best.describe() + " (its best measured setting")


def test_keras_jax_tuned_sets_xla_flags_before_jax_loads(small_data, tmp_path):
    proc = run_script("keras_script.py", flags(small_data, tmp_path) + ["--tuned"], {"KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr
    line = tuned_line(tmp_path)
    assert tuning.TUNED["keras_jax"] != tuning.DEFAULT
    assert f"as set: XLA_FLAGS={tuning.YNN_OFF}" in line and "its best measured setting" in line


def test_an_unknown_setting_is_one_line_and_status_2(small_data, tmp_path):
    proc = run_script("torch_script.py", flags(small_data, tmp_path) + ["--tuned", "fastest"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --tuned fastest: torch has the settings default, omp_active, compile, compile_max_autotune; "
        f"drop the name for its best measured one ({tuning.TUNED['torch']})"
    ]
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # two probe processes
def test_benchmark_puts_a_setting_beside_the_defaults(small_data, tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "benchmark.py"), "--only", "torch", "--candidates", "omp_active"]
        + ["--train", str(small_data / "train.csv"), "--batch_size", "32", "--steps", "2", "--thread_steps", "0"]
        + ["--gemm", "256", "--data_rows", "300", "--skip_compiled", "--profile", "none", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (table,) = [path for path in glob.glob(str(out / "benchmark_*.csv")) if not path.endswith("_data.csv")]
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    default = "default (= tuned)" if tuning.TUNED["torch"] == tuning.DEFAULT else "default"
    assert [(row["framework"], row["setting"], row["status"]) for row in rows] == [
        ("torch", default, "ok"),
        ("torch", "omp_active" + (" (tuned)" if tuning.TUNED["torch"] == "omp_active" else ""), "ok"),
    ]
    assert all(float(row["ms_per_step"]) > 0 and row["gemm_gflops"] == rows[0]["gemm_gflops"] for row in rows)
