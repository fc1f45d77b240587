"""The benchmark's precision axis (benchmark.py --precision, algorithms/bench/precision.py):
the CPU's low-precision units read from /proc/cpuinfo's text, a precision a framework lacks
is a row saying why, each precision has its own peak, the speedup columns divide the right
rows, and the native loops train at the precision the wrapper's own step does."""

from __future__ import annotations

import csv
import importlib
import os
import subprocess
import sys

import pytest

from algorithms.bench import precision
from algorithms.bench.benchmark import COLUMNS
from algorithms.run.timing import step_schedule
from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import get
from algorithms.run.entry import prepare
from algorithms.records import read_rows
from algorithms.session.run_session import RunSession
from tests.conftest import REPO_ROOT, run_small_benchmark

# the first flags line of /proc/cpuinfo on two real machines (abridged around the units)
AVX2_EPYC = "flags\t\t: fpu vme sse sse2 avx f16c fma avx2 bmi2 sha_ni vaes vpclmulqdq rdpid fsrm\n"
SAPPHIRE_RAPIDS = (
    "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
    "processor\t: 1\nflags\t\t: fpu avx2\n"
)


def test_the_cpu_units_are_read_from_the_first_processors_flags():
    assert precision.cpu_units(AVX2_EPYC) == []
    assert precision.cpu_units(SAPPHIRE_RAPIDS) == ["amx_bf16", "amx_tile", "avx512_bf16", "avx512_fp16"]
    assert precision.cpu_units("processor\t: 0\n") == []
    assert precision.machine_units("/nonexistent/cpuinfo") == "unknown"


def test_the_machine_units_are_read_from_the_cpuinfo_file_given(tmp_path):
    (tmp_path / "epyc").write_text("processor\t: 0\n" + AVX2_EPYC)
    (tmp_path / "spr").write_text(SAPPHIRE_RAPIDS)
    assert precision.machine_units(str(tmp_path / "epyc")) == "none"
    assert precision.machine_units(str(tmp_path / "spr")) == "amx_bf16 amx_tile avx512_bf16 avx512_fp16"


@pytest.mark.parametrize(
    "asked, message",
    [
        ("fp32,fp8", "error: --precision: fp8; choose from fp32, bf16, fp16 (see benchmark.py --help)"),
        (",", "error: --precision: none given; choose from fp32, bf16, fp16 (see benchmark.py --help)"),
    ],
)
def test_an_unknown_precision_is_one_line_and_status_2(asked, message):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "benchmark.py"), "--precision", asked],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == message


def test_a_framework_that_trains_in_fp32_only_is_refused_with_its_own_reason():
    caffe, torch = support(get("caffe")), support(get("torch"))
    assert precision.refusal(caffe, "bf16") == "Caffe trains in float32 only here; drop --precision"
    assert precision.refusal(caffe, "fp32") == ""
    assert precision.refusal(torch, "bf16") == precision.refusal(torch, "fp16") == ""


def row(framework, setting, at, ms, gemm, status="ok"):
    return dict(framework=framework, backend=framework, setting=setting, precision=at, ms_per_step=ms,
                gemm_gflops=gemm, status=status, speedup_over_fp32="", gemm_speedup_over_fp32="")  # fmt: skip


def test_speedups_divide_by_the_fp32_row_of_the_same_framework_and_setting():
    rows = [
        row("torch", "default", "fp32", "100.0", "200.0"),
        row("torch", "compile", "fp32", "80.0", "200.0"),
        row("torch", "default", "bf16", "50.0", "1200.0"),
        row("torch", "compile", "bf16", "160.0", "100.0"),
        row("tensorflow", "default", "fp32", "", "", status="timed out after 300 s"),
        row("tensorflow", "default", "bf16", "900.0", "20.0"),
        row("caffe", "default", "bf16", "", "", status="not run: Caffe trains in float32 only here"),
    ]
    precision.add_speedups(rows)
    speedups = [(r["speedup_over_fp32"], r["gemm_speedup_over_fp32"]) for r in rows]
    assert speedups == [
        ("1.00", "1.00"),
        ("1.00", "1.00"),
        ("2.00", "6.00"),  # bf16 twice as fast as its own fp32 row, its matmul 6x
        ("0.50", "0.50"),  # against the compile row's fp32, not the default's
        ("", ""),
        ("", ""),  # no fp32 row that ran: nothing to divide by
        ("", ""),
    ]
    assert precision.peaks({"fp32": [150.0, 200.0], "bf16": [1200.0, 20.0], "fp16": []}) == {
        "fp32": 200.0,
        "bf16": 1200.0,
        "fp16": 0.0,
    }


@pytest.mark.slow  # four probe processes
def test_benchmark_rows_at_each_precision_and_a_row_for_a_precision_a_framework_lacks(small_data, tmp_path):
    flags = ["--only", "torch,caffe", "--precision", "fp32,bf16"]
    proc, tables = run_small_benchmark(small_data, tmp_path / "bench", flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = tables
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = {(row["framework"], row["precision"]): row for row in reader}
    assert reader.fieldnames == COLUMNS
    for column in ("precision", "speedup_over_fp32", "gemm_speedup_over_fp32", "cpu_units"):
        assert column in reader.fieldnames, column
    assert list(rows) == [("torch", "fp32"), ("caffe", "fp32"), ("torch", "bf16"), ("caffe", "bf16")]
    assert rows["caffe", "bf16"]["status"] == "not run: Caffe trains in float32 only here; drop --precision"
    assert rows["caffe", "bf16"]["ms_per_step"] == "" and rows["caffe", "fp32"]["status"] == "ok"
    torch_fp32, torch_bf16 = rows["torch", "fp32"], rows["torch", "bf16"]
    assert torch_bf16["status"] == "ok" and float(torch_bf16["harness_over_native"]) > 0
    assert float(torch_bf16["speedup_over_fp32"]) == pytest.approx(
        float(torch_fp32["ms_per_step"]) / float(torch_bf16["ms_per_step"]), abs=0.01
    )
    assert float(torch_bf16["gemm_speedup_over_fp32"]) == pytest.approx(
        float(torch_bf16["gemm_gflops"]) / float(torch_fp32["gemm_gflops"]), abs=0.01
    )
    # each precision's peak is its own best GEMM: torch's bf16 matmul, whatever caffe's fp32 one did
    assert float(torch_bf16["machine_peak_gflops"]) == pytest.approx(float(torch_bf16["gemm_gflops"]), abs=0.5)
    assert torch_fp32["cpu_units"] == precision.machine_units()
    assert f"CPU units for bf16 / fp16 matmuls ({', '.join(precision.LOW_PRECISION_UNITS)})" in proc.stdout
    assert "GEMM peak (bf16 256x256" in proc.stdout and "caffe bf16: not run" in proc.stdout


def step_losses(package: str, small_data, tmp_path, at: str, steps: int = 3) -> tuple:
    """The native loop's and the harness's losses over the same `steps` batches at precision `at`."""
    native_module = importlib.import_module(f"{package}.native")
    results = str(tmp_path / at)
    flags = ["--train", str(small_data / "train.csv"), "--test", "none", "--results_dir", results, "--quiet"]
    config, dataset = prepare(flags + ["--batch_size", "16", "--precision", at], "test", "")
    session = RunSession(config, dataset, importlib.import_module(f"{package}.train").describe_runtime())
    schedule = step_schedule(session, steps)
    native = native_module.Native(config, dataset, schedule)
    native.run(schedule)
    native_module.Harness(config, session).run(schedule)
    harness = [row["loss"] for row in read_rows(session.csv_path, session.run_id)]
    return [float(loss) for loss in native.losses], harness


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
@pytest.mark.parametrize("package", ["torch_wrapper", "tensorflow_wrapper"])
def test_the_native_loop_trains_at_the_wrappers_precision(package, small_data, tmp_path):
    """bf16 native and harness steps give the same losses, and they are not fp32's: the
    benchmark's harness/native ratio at bf16 compares two bf16 steps."""
    native, harness = step_losses(package, small_data, tmp_path, "bf16")
    assert native == pytest.approx(harness, rel=1e-5) and len(set(native)) == len(native)
    full, _ = step_losses(package, small_data, tmp_path, "fp32")
    relative = [abs(low - high) / high for low, high in zip(native, full)]
    assert max(relative) > 1e-5 and relative[0] < 2e-2  # bfloat16's rounding, as tests/test_precision.py bounds it
