"""run_all.py's console shows the harness, not the frameworks' start-up chatter: each
framework's stderr goes whole into its run's log file, and on the console less the
known start-up notices (algorithms/studies/child_output.py); --verbose shows it all."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from algorithms.paths import REPO_ROOT
from algorithms.studies.child_output import StartupNotices
from tests.conftest import run_script

# as TensorFlow and Caffe write them (TF_CPP_MIN_LOG_LEVEL=0, GLOG_minloglevel=0), 2026-12-01
NOTICES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796162577.895485   22551 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
    "I0000 00:00:1796162577.912345   22551 util.cc:169] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders.",
    "W0000 00:00:1796161760.609638   14533 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be "
    "optimized because the dataset does not implement the AsGraphDefInternal() method needed to apply optimizations.",
    "WARNING: Logging before InitGoogleLogging() is written to STDERR",
    "I20261201 22:07:45.700026 24546 solver.cpp:51] Initializing solver from parameters: ",
    'train_net: "/tmp/results/caffe/run/train.prototxt"',
    "base_lr: 0.05",
    'lr_policy: "fixed"',
    "I20261201 22:07:45.807104 24546 net.cpp:735] Ignoring source layer label",
]
# what must still show, wherever it comes: the harness's lines, real warnings and errors
SHOWN = [
    "error: --devices 3: something the run says",
    "W0000 00:00:1796161760.609638   14533 collective.cc:77] a warning nobody listed",
    "E20261201 22:07:45.807204 24546 net.cpp:90] Check failed: a Caffe error",
    "/work/keras/src/trainer.py:12: UserWarning: a Python warning",
    "Traceback (most recent call last):",
]


def test_the_filter_hides_the_known_notices_and_shows_everything_else():
    notices = StartupNotices()
    assert [line for line in NOTICES if not notices.is_notice(line)] == []
    solver_header = NOTICES[6]  # its record goes on over the lines after it
    for line in SHOWN:  # right after a notice, and so read as its continuation if anything were
        notices = StartupNotices()
        assert notices.is_notice(solver_header) and not notices.is_notice(line), line
    notices = StartupNotices()  # a Python warning's second line, after its first
    python_warning = [SHOWN[3], "  warnings.warn("]
    assert notices.is_notice(solver_header) and not any(notices.is_notice(line) for line in python_warning)


def test_run_all_help_names_verbose():
    proc = run_script("run_all.py", ["--help"])
    assert proc.returncode == 0 and re.search(r"--verbose\s+show every line the frameworks write", proc.stdout)


def test_reading_a_frameworks_support_leaves_the_suites_environment_as_it_was(monkeypatch):
    """caffe_wrapper sets glog's level for its own processes when imported: run_all.py reads
    every wrapper's supported(), and a level left behind in its environment would override the
    full logs it asks its children for (their log files had no solver lines)."""
    from algorithms.registry.capabilities import support
    from algorithms.registry.frameworks import FRAMEWORKS

    monkeypatch.delenv("GLOG_minloglevel", raising=False)
    before = dict(os.environ)
    for framework in FRAMEWORKS:
        support(framework)
        assert dict(os.environ) == before, framework.name


@pytest.mark.slow
def test_the_suite_console_has_no_start_up_notice_and_the_log_has_them(small_data, tmp_path):
    """Keras on TensorFlow and Caffe, two steps each: no notice between the console's
    lines; each framework's log file holds them (TF's absl lines, Caffe's solver dump)."""
    results = tmp_path / "results"
    flags = ["--only", "keras_tensorflow,caffe", "--train", str(small_data / "train.csv"), "--test", "none"]
    flags += ["--max_steps", "2", "--batch_size", "50", "--results_dir", str(results), "--run_id", "quiet"]
    levels = ("TF_CPP_MIN_LOG_LEVEL", "GLOG_minloglevel")
    env = {name: value for name, value in os.environ.items() if name not in levels}
    proc = subprocess.run(  # the frameworks' log levels left to the suite
        [sys.executable, "run_all.py", *flags], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = proc.stdout.splitlines() + proc.stderr.splitlines()
    logs = {name: results / "logs" / "quiet" / f"{name}.log" for name in ("keras_tensorflow", "caffe")}
    for name, log in logs.items():
        assert f"log: {log}" in proc.stdout
        logged = log.read_text().splitlines()
        notices = StartupNotices()
        hidden = [line for line in logged if notices.is_notice(line)]
        assert hidden, f"{name}: no start-up notice in {log}"
        assert not set(hidden) & set(console), set(hidden) & set(console)
    assert "solver.cpp" in logs["caffe"].read_text()
    assert not [line for line in console if re.match(r"^[IW]\d{4}", line)], console


DROPPED_BLOCK = """
import os, sys
from algorithms.run.notices import startup_notices_dropped
with startup_notices_dropped():
    os.write(2, ("\\n".join(sys.argv[2:]) + "\\n").encode())
    if sys.argv[1] == "raise":
        raise RuntimeError("the import failed")
print("after", file=sys.stderr)
"""


@pytest.mark.parametrize("mode", ["drop", "keep", "raise"])
def test_an_entry_script_drops_the_notices_written_while_the_framework_loads(mode):
    """What lands on file descriptor 2 inside startup_notices_dropped (absl and glog write
    there, not to sys.stderr): the known notices dropped and every other line kept, in order;
    every line kept when run_all.py asks for them (it logs them) or when the block raised."""
    lines = NOTICES[:4] + SHOWN[:2]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if mode == "keep":
        env["CNN_PARALLEL_KEEP_NOTICES"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", DROPPED_BLOCK, mode, *lines], env=env, capture_output=True, text=True, timeout=60
    )
    written = proc.stderr.splitlines()
    if mode == "drop":
        assert proc.returncode == 0 and written == SHOWN[:2] + ["after"], written
    elif mode == "keep":
        assert proc.returncode == 0 and written == lines + ["after"], written
    else:
        assert proc.returncode != 0 and written[: len(lines)] == lines
        assert "RuntimeError: the import failed" in written[-1]
