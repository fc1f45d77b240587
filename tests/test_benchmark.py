"""The benchmark (benchmark.py, algorithms/run/probe.py): that its native loop and
harness step do the same work, that its table reads back, and the --threads,
--malloc and --compile flags it relies on. No timed assertions: the speed goals are the
benchmark's printed ratios."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys

import numpy as np
import pytest

from algorithms.run.timing import paired_ratio, step_schedule
from algorithms.records import read_rows
from algorithms.run.entry import prepare
from tests.conftest import REPO_ROOT, run_script, run_small_benchmark
from tests.helpers.flags import run_flags


def small_flags(small_data, tmp_path) -> list:
    return run_flags(small_data / "train.csv", tmp_path / "results", batch_size=32)


def test_torch_native_loop_and_harness_step_give_the_same_losses(small_data, tmp_path):
    native_module = pytest.importorskip("torch_wrapper.native")
    config, dataset = prepare(small_flags(small_data, tmp_path), "test", "")
    from algorithms.session.run_session import RunSession
    from torch_wrapper.train import describe_runtime

    session = RunSession(config, dataset, describe_runtime())
    schedule = step_schedule(session, 4)
    native = native_module.Native(config, dataset, schedule)
    native.run(schedule)
    harness = native_module.Harness(config, session)  # reseeds dropout as the wrapper does
    harness.run(schedule)
    harness_losses = [row["loss"] for row in read_rows(session.csv_path, session.run_id)]
    native_losses = [float(loss) for loss in native.losses]
    assert len(harness_losses) == 4
    assert native_losses == pytest.approx(harness_losses, rel=1e-5)
    assert len(set(native_losses)) > 1  # it trained


def test_tensorflows_profile_names_each_op_with_the_shapes_of_its_native_step(small_data, tmp_path):
    """profile_ops traces the native step with a real batch (images, labels and their
    dropout uniforms) to name each op's input shapes."""
    from tensorflow_wrapper import native as native_module
    from tensorflow_wrapper.train import describe_runtime
    from algorithms.session.run_session import RunSession

    config, dataset = prepare(small_flags(small_data, tmp_path), "test", "")
    schedule = step_schedule(RunSession(config, dataset, describe_runtime()), 3)
    profiler, ops = native_module.profile_ops(config, dataset, schedule, 1)
    assert profiler.startswith("tf.profiler") and ops and all(ms >= 0 for _, ms in ops)
    assert any("Conv2D" in label for label, _ in ops), ops[:10]
    assert any(label.startswith("Greater") and "[32,128]" in label for label, _ in ops), ops[:10]  # the dropout mask


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_benchmark_table_reads_back(small_data, tmp_path):
    out = tmp_path / "bench"
    flags = ["--only", "torch", "--block", "1", "--thread_steps", "1", "--profile", "all", "--profile_steps", "2"]
    proc, tables = run_small_benchmark(small_data, out, flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tables[0], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["framework"], row["backend"], row["status"]) for row in rows] == [("torch", "torch", "ok")]
    row = rows[0]
    for column in (
        "ms_per_step",
        "native_ms",
        "harness_over_native",
        "gflops",
        "pct_of_peak",
        "pct_of_own_gemm",
        "peak_rss_mb",
        "one_thread_ms",
        "gemm_gflops",
        "machine_peak_gflops",
        "data_share_pct",
    ):
        assert float(row[column]) >= 0, column
    assert float(row["ms_per_step"]) > 0 and float(row["peak_rss_mb"]) > 50
    assert int(row["steps_timed"]) == 2
    low, high = map(float, row["ratio_ci95"].split("-"))  # what the interval means: test_paired_ratio_*
    assert 0 < low <= high
    with open(glob.glob(str(out / "benchmark_*_profile.csv"))[0], newline="") as handle:
        ops = list(csv.DictReader(handle))
    assert ops and all(op["framework"] == "torch" and float(op["ms_per_step"]) > 0 for op in ops)
    assert [float(op["ms_per_step"]) for op in ops] == sorted((float(op["ms_per_step"]) for op in ops), reverse=True)
    assert any("convolution" in op["op"] for op in ops[:3])  # a conv net's time is in its convolutions
    assert "where the time goes" in proc.stdout
    with open(glob.glob(str(out / "benchmark_*_data.csv"))[0], newline="") as handle:
        data = next(csv.DictReader(handle))
    assert float(data["csv_s"]) > 0 and float(data["cache_s"]) > 0
    assert "harness_over_native" in proc.stdout and "cached" in proc.stdout


def test_threads_flag_is_applied_and_recorded(small_data, tmp_path):
    proc = run_script("torch_script.py", small_flags(small_data, tmp_path) + ["--max_steps", "2", "--threads", "1"])
    assert proc.returncode == 0, proc.stderr
    log = open(tmp_path / "results.log").read()
    assert "threads=1" in log and "OMP_NUM_THREADS=1" in log
    assert "cpu (1 thread)" in log  # what torch itself reports
    assert "peak rss" in log
    assert "--malloc reuse; MALLOC_MMAP_MAX_=0" in log


FAULTS_PROBE = """
import resource, subprocess, sys
import numpy as np
from algorithms.machine.threads import set_malloc
print(set_malloc(sys.argv[1]), file=sys.stderr)
def step():  # a training step's worth of large temporaries, written and freed
    for _ in range(4):
        np.ones(10_000_000, dtype=np.float32)  # 40 MB: over glibc's largest mmap threshold
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('MALLOC_MMAP_MAX_'))"],
                       capture_output=True, text=True).stdout.strip()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5, child)
"""


def test_malloc_reuse_keeps_freed_pages_so_steps_stop_faulting():
    """Four freed 40 MB blocks per 'step' (batch-1000 activations are 150 MB):
    glibc's default maps and faults in every one again (thousands of faults a
    step; fewer than 4 x 9,800 where the kernel backs it with huge pages);
    --malloc reuse serves them from the pages the previous step freed, and passes
    the setting on to child processes."""

    def faults(policy):
        proc = subprocess.run(
            [sys.executable, "-c", FAULTS_PROBE, policy],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": REPO_ROOT},
        )
        assert proc.returncode == 0, proc.stderr
        per_step, child = proc.stdout.split()
        return float(per_step), child, proc.stderr

    released, released_child, said = faults("release")
    assert released > 1000 and released_child == "None" and "glibc defaults" in said
    reused, reused_child, said = faults("reuse")
    assert reused < 10 and reused_child == "0" and "MALLOC_MMAP_MAX_=0" in said


@pytest.mark.parametrize(
    "script, backend, mode",
    [
        pytest.param("caffe_script.py", None, ["--compile"], marks=pytest.mark.caffe),
        ("keras_script.py", "jax", ["--execution", "graph"]),
    ],
)
def test_an_execution_mode_a_framework_lacks_is_refused_in_one_line(small_data, tmp_path, script, backend, mode):
    """Caffe is graph-only; Keras on jax is compiled (its default) or eager, with no graph mode."""
    proc = run_script(
        script,
        small_flags(small_data, tmp_path) + mode + ["--max_steps", "1"],
        {"KERAS_BACKEND": backend} if backend else None,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and mode[0] in proc.stderr
    assert not os.path.exists(tmp_path / "results.log")


def test_paired_ratio_of_a_constant_slowdown_is_exactly_that_slowdown():
    ratio, interval = paired_ratio([100.0] * 10, [110.0] * 10)
    assert ratio == pytest.approx(1.1, rel=1e-12) and interval == pytest.approx((1.1, 1.1), rel=1e-12)
    # the machine slows both sides of a pair alike: the pairs still say 1.1, with no spread
    slow_spells = [100.0, 180.0, 95.0, 160.0, 100.0, 210.0, 90.0, 100.0, 140.0, 100.0]
    ratio, interval = paired_ratio(slow_spells, [1.1 * ms for ms in slow_spells])
    assert ratio == pytest.approx(1.1, rel=1e-12) and interval == pytest.approx((1.1, 1.1), rel=1e-12)


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_paired_ratio_interval_covers_the_true_median_and_not_a_value_far_from_it():
    """Ratios drawn from N(1.2, 0.05) over machine speeds that vary 2.5x: the 95%
    interval of the median holds 1.2 in most of 50 draws (a percentile bootstrap of
    a median from 101 values covers about 90-95%) and never 1.15 or 1.25, several
    half-widths away; with 4x the noise it is wider."""
    covered, widths, noisy_widths = 0, [], []
    for seed in range(50):
        rng = np.random.default_rng(seed)
        native = rng.uniform(80.0, 200.0, 101)
        _, (low, high) = paired_ratio(list(native), list(native * rng.normal(1.2, 0.05, 101)))
        covered += low <= 1.2 <= high
        assert not low <= 1.15 <= high and not low <= 1.25 <= high, (seed, low, high)
        widths.append(high - low)
        _, (low, high) = paired_ratio(list(native), list(native * rng.normal(1.2, 0.2, 101)))
        noisy_widths.append(high - low)
    assert covered >= 43, f"the true median in {covered} of 50 intervals"
    assert np.median(noisy_widths) > 2 * np.median(widths)


def test_paired_ratio_with_blocks_divides_block_sums():
    """Blocks of 2 steps: (110+30)/(100+10), (60+60)/(50+50), (30+30)/(20+20) have the
    median 140/110; the per-step ratios (1.1, 3, 1.2, 1.2, 1.5, 1.5) would say 1.35."""
    native, harness = [100.0, 10.0, 50.0, 50.0, 20.0, 20.0], [110.0, 30.0, 60.0, 60.0, 30.0, 30.0]
    assert paired_ratio(native, harness, block=1)[0] == pytest.approx(1.35)
    ratio, (low, high) = paired_ratio(native, harness, block=2)
    assert ratio == pytest.approx(140.0 / 110.0)
    assert low == pytest.approx(1.2) and high == pytest.approx(1.5)  # the block ratios' range: 3 values resampled
