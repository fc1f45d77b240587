"""--tuned (algorithms/machine/tuning.py, each wrapper's Support.tuning): every framework's table is well-formed, the
setting's environment is applied before the framework loads and recorded in
results.log (torch, and Keras on jax through XLA_FLAGS), a bad name is one line and
status 2, and the benchmark puts a setting's row beside the defaults."""

from __future__ import annotations

import csv
import json
import os

import pytest

from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import FRAMEWORKS, get
from algorithms.machine import tuning
from backends import jax_backend
from backends.tuning import YNN_OFF
from tests.conftest import REPO_ROOT, run_script, run_small_benchmark
from tests.helpers.flags import run_flags


def two_step_flags(small_data, tmp_path) -> list:
    return run_flags(small_data / "train.csv", tmp_path / "results", batch_size=32, max_steps=2)


def tuned_line(tmp_path) -> str:
    """The latest run's (results.log is appended to)."""
    with open(tmp_path / "results.log") as handle:
        return [line for line in handle if line.startswith("tuned:")][-1]


def table(name: str) -> tuning.Tuning:
    return support(get(name)).tuning


def test_every_framework_has_candidates_and_a_tuned_setting_among_them():
    for framework in FRAMEWORKS:
        found = table(framework.name)
        assert found.framework == framework.name
        assert found.candidates and found.best in found.settings(), framework.name
        assert all(setting.env or setting.options for setting in found.candidates), framework.name
        assert os.path.isfile(os.path.join(REPO_ROOT, found.measured)), found.measured


def test_a_flag_list_is_appended_to_and_a_plain_variable_set():
    environ = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    line = tuning.apply(table("keras_jax").settings()["onednn"], environ, table("keras_jax").lists)
    assert environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false --xla_cpu_use_onednn=true"
    assert line == "onednn: XLA_FLAGS=--xla_cpu_use_onednn=true"
    tuning.apply(table("tensorflow").settings()["onednn_off"], environ, table("tensorflow").lists)
    assert environ["TF_ENABLE_ONEDNN_OPTS"] == "0"


def test_a_setting_the_cpu_cannot_take_is_refused_by_name_and_passed_over_by_a_bare_tuned():
    """OpenBLAS's AVX-512 kernels on a CPU without avx512f would stop the process: named,
    one line; as the table's best, --tuned falls back to the defaults and says why."""
    avx2 = tuning.flags_in("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\nflags\t: avx512f\n")
    assert avx2 == {"fpu", "sse2", "avx", "avx2", "fma"}  # the first processor's line only
    caffe = table("caffe")
    setting = caffe.settings()["openblas_avx512"]
    assert setting.env == {"OPENBLAS_CORETYPE": "SkylakeX"} and setting.lacking(avx2 | {"avx512f"}) == ""
    with pytest.raises(tuning.InputError) as refused:
        caffe.resolve("openblas_avx512", avx2)
    assert str(refused.value) == (
        "--tuned openblas_avx512: openblas_avx512 needs the CPU's avx512f, which this CPU lacks; "
        "drop it, or --tuned alone for what this CPU takes"
    )
    best_is_it = tuning.Tuning("caffe", caffe.candidates, "openblas_avx512")
    assert best_is_it.resolve(tuning.BEST, avx2).name == tuning.DEFAULT
    assert best_is_it.resolve(tuning.BEST, avx2 | {"avx512f"}).name == "openblas_avx512"
    assert "cannot be read here" in setting.lacking(None)


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_torch_defaults_tuned_and_a_named_setting_are_each_recorded(small_data, tmp_path):
    proc = run_script("torch_script.py", two_step_flags(small_data, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "off: the framework's defaults" in tuned_line(tmp_path)
    proc = run_script("torch_script.py", two_step_flags(small_data, tmp_path) + ["--tuned", "omp_active"])
    assert proc.returncode == 0, proc.stderr
    line = tuned_line(tmp_path)
    assert "omp_active: OMP_WAIT_POLICY=ACTIVE OMP_PROC_BIND=true (a named candidate" in line
    assert "as set: OMP_WAIT_POLICY=ACTIVE OMP_PROC_BIND=true" in line  # in the training process itself
    proc = run_script("torch_script.py", two_step_flags(small_data, tmp_path) + ["--tuned"])
    assert proc.returncode == 0, proc.stderr
    best = table("torch").resolve(tuning.BEST)
    assert tuned_line(tmp_path).split(None, 1)[1].startswith(best.describe() + " (its best measured setting")


def test_keras_jax_cpu_default_turns_ynnpack_off_unless_the_user_names_it(monkeypatch):
    """Keras on jax's CPU default (backends/jax_backend.cpu_environment): YNNPACK fusions off
    after the thread flags; the user's own choice of fusion types stands; a jaxlib it was not
    measured with keeps XLA's defaults (an XLA that does not know a flag stops at start)."""
    monkeypatch.setattr(jax_backend, "_jaxlib", lambda: "0.10.2")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    jax_backend.cpu_environment(1)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false " + YNN_OFF
    assert jax_backend.xla_cpu_kernels() == "XLA CPU, YNNPACK fusions off"
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=individual_dot")
    jax_backend.cpu_environment(2)
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type=individual_dot"
    assert jax_backend.xla_cpu_kernels() == "XLA CPU, YNNPACK fusions individual_dot"
    monkeypatch.setattr(jax_backend, "_jaxlib", lambda: "0.12.0")
    monkeypatch.delenv("XLA_FLAGS")
    jax_backend.cpu_environment(2)
    assert "XLA_FLAGS" not in os.environ and jax_backend.xla_cpu_kernels() == "XLA CPU"


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_keras_jax_default_run_trains_with_ynnpack_off_and_records_it(small_data, tmp_path):
    proc = run_script("keras_script.py", two_step_flags(small_data, tmp_path), {"KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr
    assert "off: the framework's defaults" in tuned_line(tmp_path)
    (path,) = (tmp_path / "results").glob("*keras_jax.settings.jsonl")
    with open(path) as handle:
        (record,) = [json.loads(line) for line in handle]
    assert record["settings"]["device_detail"].endswith("(XLA CPU, YNNPACK fusions off)")


def test_an_unknown_setting_is_one_line_and_status_2(small_data, tmp_path):
    proc = run_script("torch_script.py", two_step_flags(small_data, tmp_path) + ["--tuned", "fastest"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --tuned fastest: torch has the settings default, omp_active, compile, compile_max_autotune; "
        f"drop the name for its best measured one ({table('torch').best})"
    ]
    assert not (tmp_path / "results").exists()


@pytest.mark.slow  # two probe processes
def test_benchmark_puts_a_setting_beside_the_defaults(small_data, tmp_path):
    proc, tables = run_small_benchmark(
        small_data, tmp_path / "bench", ["--only", "torch", "--candidates", "omp_active"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (csv_path,) = tables
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    best = table("torch").best
    default = "default (= tuned)" if best == tuning.DEFAULT else "default"
    assert [(row["framework"], row["setting"], row["status"]) for row in rows] == [
        ("torch", default, "ok"),
        ("torch", "omp_active" + (" (tuned)" if best == "omp_active" else ""), "ok"),
    ]
    assert all(float(row["ms_per_step"]) > 0 and row["gemm_gflops"] == rows[0]["gemm_gflops"] for row in rows)
