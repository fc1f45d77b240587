"""--batch_size auto (algorithms/run/batch_finder.py): the search on a known memory and
speed curve (doubling, then bisecting; the choice within the budget), and real
trials: a full torch run that chooses and trains at its choice (the CSV rows show
it; the choice is framework-neutral), TensorFlow's and each Keras backend's trial
process (the framework-specific part: the wrapper's own steps and their memory),
and the one-line refusals."""

import json
import os
import subprocess
import sys

import pytest

from algorithms.run.batch_finder import MIN_STEPS_PER_EPOCH, START_BATCH, Trial, largest_batch, search
from algorithms.registry.frameworks import get
from algorithms.paths import REPO_ROOT
from algorithms.records import read_rows
from tests.conftest import csv_suffix, framework_param, run_script
from tests.helpers.flags import run_flags

NETWORK = "cnn2d_3layer_fullconnected_3layer"


def curve(batch: int) -> Trial:
    """Memory 300 MB + 1 MB per sample; speed saturating at batch 200, then falling."""
    samples_per_s = 1000.0 * min(batch, 200) / 200 - max(0, batch - 200)
    return Trial(batch, batch * 1000.0 / samples_per_s, samples_per_s, 300.0 + batch)


def test_search_doubles_then_bisects_and_chooses_the_fastest_batch_within_the_budget():
    trials, budget, chosen = search(curve, lambda first: 700.0, most=4000)
    batches = [trial.batch for trial in trials]
    assert batches[:6] == [16, 32, 64, 128, 256, 512]  # 512 needs 812 MB: the first that does not fit
    assert batches[6:] == [384, 448, 416]  # bisecting between 256 and 512 to within 256 / 8
    assert budget == 700.0 and all(trial.peak_mb <= 700.0 for trial in trials if trial.fits(budget))
    assert chosen.batch == 256  # the fastest of those that fit (speed falls past 200)
    assert chosen.samples_per_s == max(t.samples_per_s for t in trials if t.fits(budget))


def test_search_stops_at_the_training_rows_and_out_of_memory_does_not_fit():
    trials, _, chosen = search(curve, lambda first: 10**6, most=100)
    assert [t.batch for t in trials] == [16, 32, 64, 100] and chosen.batch == 100

    def out_of_memory_above_40(batch):
        return curve(batch) if batch <= 40 else Trial(batch, None, None, None)

    trials, _, chosen = search(out_of_memory_above_40, lambda first: 10**6, most=1000)
    assert [t.batch for t in trials] == [16, 32, 64, 48, 40, 44] and chosen.batch == 40
    trials, _, chosen = search(curve, lambda first: first.peak_mb - 1, most=1000)
    assert [t.batch for t in trials] == [START_BATCH] and chosen is None


# --------------------------------------------------------------------------- real trials


def finder_run(script, train, tmp_path, *extra, env=None):
    results = tmp_path / "results"
    proc = run_script(
        script,
        ["--batch_size", "auto", "--train", str(train), "--test", "none", "--num_epochs", "1"]
        + ["--results_dir", str(results), *extra],
        env,
        timeout=600,
    )
    return proc, results


def trial_lines(stdout: str) -> dict:
    """batch -> (ms/step, samples/s, peak MB, verdict) from the printed trial table."""
    table = {}
    for line in stdout.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0].isdigit() and line.startswith("  "):
            table[int(cells[0])] = (float(cells[1]), float(cells[2]), float(cells[3]), " ".join(cells[4:]))
    return table


@pytest.mark.slow  # three trial processes and a run
def test_the_finder_trains_with_its_choice_and_leaves_it_ten_steps_an_epoch(small_data, tmp_path):
    """480 training rows: the finder tries no batch above 48, so the run makes at least 10
    optimizer steps an epoch (it tried up to all 480, one step an epoch, and chose from there)."""
    proc, results = finder_run("torch_script.py", small_data / "train.csv", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = trial_lines(proc.stdout)
    assert largest_batch(480, 1) == 480 // MIN_STEPS_PER_EPOCH == 48
    assert sorted(table) == [16, 32, 48], proc.stdout
    chosen = [batch for batch, (*_, verdict) in table.items() if verdict == "chosen"]
    assert len(chosen) == 1 and table[chosen[0]][1] == max(samples for _, samples, _, _ in table.values())
    assert all(peak > 50 for _, _, peak, _ in table.values())  # a whole framework process's RSS
    rows = [row for row in read_rows(str(results / f"{NETWORK}_torch.csv")) if row["phase"] == "train"]
    assert rows and {row["global_batch"] for row in rows} == {chosen[0]}
    assert len(rows) == 480 // chosen[0] >= MIN_STEPS_PER_EPOCH  # the epoch at the chosen batch covers the rows
    log = (tmp_path / "results.log").read_text()
    assert f"batch_size={chosen[0]} " in log
    line = next(line for line in log.splitlines() if line.startswith("batch size auto:"))
    assert "16: " in line and "48: " in line and f"chosen {chosen[0]}; budget " in line
    assert line.endswith("; batches up to 48: 10 steps an epoch of 480 rows"), line


TRIED_HERE = [get(name) for name in ("tensorflow", "keras_tensorflow", "keras_jax", "keras_torch", "caffe")]


def run_trial(framework, train, tmp_path, batch: int):
    """One trial process (the finder's `python -m algorithms.run.probe PACKAGE --mode trial`)
    at `batch`, 3 timed steps: (its JSON, its CSV rows)."""
    out = tmp_path / "trial.json"
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.run.probe", framework.package, "--out", str(out), "--mode", "trial"]
        + ["--steps", "3", "--block", "1", "--gemm", "0", "--skip_compiled", "--train", str(train)]
        + ["--batch_size", str(batch), "--test", "none", "--results_dir", str(tmp_path / "results"), "--quiet"],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(str(tmp_path / "results" / f"{NETWORK}_{csv_suffix(framework)}.csv"))
    return json.loads(out.read_text()), rows


def assert_a_trial_measures_the_wrappers_steps_and_memory(framework, train, tmp_path):
    """At batch 16: the wrapper's own steps, recorded in its CSV, and the process's peak RSS."""
    result, rows = run_trial(framework, train, tmp_path, 16)
    assert result["batch"] == 16 and result["steps_timed"] == 3 and result["harness_ms"] > 0
    assert result["device_memory"] is None and result["peak_rss_mb"] > 50  # on the CPU: the peak RSS
    warmup = 4 if framework.framework == "keras" else 1  # Keras: one model.fit call of 4 steps (STEPS_PER_CALL)
    assert len(rows) == warmup + 3 and {row["global_batch"] for row in rows} == {16}


@pytest.mark.slow  # a framework process each
@pytest.mark.parametrize(
    "framework", [framework_param(f) for f in TRIED_HERE], ids=[framework.name for framework in TRIED_HERE]
)
def test_a_trial_measures_the_wrappers_steps_and_memory(framework, tiny_train, tmp_path):
    assert_a_trial_measures_the_wrappers_steps_and_memory(framework, tiny_train, tmp_path)


@pytest.mark.slow  # two framework processes
@pytest.mark.parametrize("name", ["torch", "keras_tensorflow"])
def test_a_trial_times_whole_batches_only_and_what_a_call_costs_beside_them(name, tiny_train, tmp_path):
    """Batch 12 on 32 training rows: each epoch is 12, 12 and a short step of 8. A trial
    timed that short step as a step of 12 (the issue's 'batch 2048' timed on 1,152-row
    steps: 3,425 samples/s that no run saw); now every step it runs trains 12 rows. Keras
    runs a fit call per epoch: the trial measures the call's time beside its steps and
    counts it once per epoch of the run (3 steps here), as the run pays it."""
    framework = get(name)
    result, rows = run_trial(framework, tiny_train, tmp_path, 12)
    trained = [round(row["samples_per_sec"] * row["step_time_ms"] / 1000) for row in rows if row["phase"] == "train"]
    assert trained and set(trained) == {12} and {row["global_batch"] for row in rows} == {12}, trained
    assert result["steps_timed"] == 3
    if framework.framework == "keras":
        assert result["call_overhead_ms"] > 0  # fit's own setup, before its first step
    else:
        assert result["call_overhead_ms"] == 0  # each step timed whole


def test_a_short_last_step_says_its_own_rows(small_data, tmp_path):
    """480 training rows at batch 100: four steps of 100 and one of 80, and the 80-row
    step's row said global_batch 100; its validation row keeps the epoch's batch."""
    proc = run_script(
        "torch_script.py", run_flags(small_data / "train.csv", tmp_path / "r", batch_size=100, num_epochs=1)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(str(tmp_path / "r" / f"{NETWORK}_torch.csv"))
    phases = [(row["phase"], row["global_batch"]) for row in rows]
    assert phases == [("init", 100)] + [("train", 100)] * 4 + [("train", 80), ("val", 100)]
    assert [round(row["samples_per_sec"] * row["step_time_ms"] / 1000) for row in rows[1:6]] == [100] * 4 + [80]


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_a_budget_nothing_fits_in_and_the_finder_outside_one_device_are_one_line(tiny_train, tmp_path):
    proc, results = finder_run("torch_script.py", tiny_train, tmp_path, "--memory_budget_mb", "1")
    assert proc.returncode == 2 and not results.exists()
    first = min(START_BATCH, largest_batch(32, 1))  # 32 training rows: 3, for 10 steps an epoch
    assert proc.stderr.startswith(f"error: --batch_size auto: batch {first} already peaked at "), proc.stderr
    assert "over the budget of 1 MB (--memory_budget_mb)" in proc.stderr and proc.stderr.count("\n") == 1
    for extra, message in (
        (["--strategy", "data", "--devices", "2"], "error: --batch_size auto with --strategy data: "),
        (["--resume", "x"], "error: --batch_size auto with --resume x: "),
    ):
        proc, _ = finder_run("torch_script.py", tiny_train, tmp_path, *extra)
        assert proc.returncode == 2 and proc.stderr.startswith(message) and proc.stderr.count("\n") == 1
    proc = run_script("torch_script.py", ["--memory_budget_mb", "100"])
    assert proc.returncode == 2 and "only with --batch_size auto" in proc.stderr
