"""The compare command on results CSVs: a CSV against itself is the same, two seeds
are told apart, the printed numbers are recomputed here from the rows, and a run is
judged against the baselines' band. The CSVs are written by the recorder's own writer
(tests/synthetic_runs.py); one slow test checks the band on real torch runs."""

import shutil

import numpy as np
import pytest

from algorithms.analysis.baseline import check_run
from algorithms.analysis.compare import build_report, format_report, main
from algorithms.analysis.runs import load_run
from algorithms.run.recorder import read_rows, run_ids
from tests.conftest import run_script
from tests.flags import run_flags
from tests.synthetic_runs import NETWORK, seed_curve, stuck_curve, write_run


@pytest.fixture
def two_seeds(tmp_path):
    """Two torch runs, seeds 0 and 1, in one CSV."""
    path = tmp_path / "results" / f"{NETWORK}_torch.csv"
    for seed in (0, 1):
        write_run(path, f"seed{seed}", *seed_curve(seed))
    return str(path)


def test_a_run_against_itself_is_the_same(two_seeds, tmp_path, capsys):
    assert main([f"{two_seeds}@seed0", f"{two_seeds}@seed0", "--out", str(tmp_path / "self")]) == 0
    out = capsys.readouterr().out
    assert ": same" in out and "max 0.000e+00, mean 0.000e+00" in out
    assert (tmp_path / "self.png").stat().st_size > 10_000
    html = (tmp_path / "self.html").read_text()
    assert html.startswith("<!doctype html>") and "data:image/png;base64," in html


def test_two_seeds_are_told_apart_and_the_numbers_are_recomputed(two_seeds):
    assert run_ids(two_seeds) == ["seed0", "seed1"]
    report = build_report([f"{two_seeds}@seed0", f"{two_seeds}@seed1"], [0.5])
    (pair,) = report["pairs"]
    word, evidence = report["verdicts"][0]
    assert word == "run-to-run" and any("this pair measures the band" in line for line in evidence)

    rows = {run: [r for r in read_rows(two_seeds, run) if r["phase"] == "train"] for run in ("seed0", "seed1")}
    expected = np.abs(np.array([r["loss"] for r in rows["seed0"]]) - np.array([r["loss"] for r in rows["seed1"]]))
    assert pair.abs_diff.max() == pytest.approx(expected.max()) and pair.abs_diff.mean() == pytest.approx(
        expected.mean()
    )
    assert expected.max() > 1e-3  # different seeds: different weights, batches and dropout
    text = format_report(report)
    assert f"max {expected.max():.3e}, mean {expected.mean():.3e}" in text
    val = [r for r in read_rows(two_seeds, "seed1") if r["phase"] == "val"]
    assert f"{val[-1]['accuracy']:.4f}" in text


def test_the_latest_run_is_the_default_and_unknown_runs_are_named(two_seeds, capsys):
    report = build_report([two_seeds, f"{two_seeds}@seed0"], [])
    assert [run.run_id for run in report["runs"]] == ["seed1", "seed0"]
    assert main([f"{two_seeds}@nope", two_seeds]) == 2
    assert "no run 'nope'; runs in it: seed0, seed1" in capsys.readouterr().err


def test_summation_order_changes_the_float32_sum_by_a_measured_amount():
    from algorithms.analysis.compare import serial_sum, sharded_sum, summation_order, tree_sum

    values = np.full(1 << 20, 0.1, np.float32)  # 2^20 copies of 0.1: serial float32 addition drifts visibly
    exact = float(np.float32(0.1)) * (1 << 20)
    assert abs(float(tree_sum(values)) - exact) < 1e-6 * exact  # every tree level adds equal halves
    assert abs(float(serial_sum(values)) - exact) > 1e-3 * exact
    assert abs(float(sharded_sum(values, 8)) - exact) < abs(float(serial_sum(values)) - exact)
    count, rows = summation_order("cnn2d_3layer_fullconnected_3layer")
    assert count == 246_682 - (32 + 48 + 32 + 128 + 128 + 10)  # kernels only, no biases
    totals = {name: total for name, total, _ in rows}
    assert len(set(totals.values())) > 1  # the order matters in float32


def as_baselines(seeds_csv: str, tmp_path) -> str:
    """A baseline folder holding these seeds' runs."""
    baseline_dir = tmp_path / "baseline"
    baseline_dir.mkdir()
    shutil.copy(seeds_csv, baseline_dir / f"{NETWORK}_torch.csv")
    return str(baseline_dir)


def assert_rerun_within_and_hot_outside(path, baseline_dir: str) -> None:
    rerun = check_run(load_run(f"{path}@rerun"), baseline_dir)
    assert rerun.verdict == "within", rerun.detail
    hot = check_run(load_run(f"{path}@hot"), baseline_dir)
    assert hot.verdict == "outside", hot.detail
    report = build_report([f"{path}@rerun", f"{path}@hot"], [], baseline_dir)
    assert "within the baseline band" in format_report(report) and "outside the baseline band" in format_report(report)


def test_a_run_is_checked_against_the_baseline_band(two_seeds, tmp_path):
    """Seeds 0 and 1 as the baseline: seed 0 rerun is within the band, a run that learned
    nothing is outside, another batch size is not checked (and says why)."""
    baseline_dir = as_baselines(two_seeds, tmp_path)
    path = tmp_path / "new" / f"{NETWORK}_torch.csv"
    write_run(path, "rerun", *seed_curve(0))
    write_run(path, "hot", *stuck_curve())
    write_run(path, "wide", *seed_curve(0), global_batch=64)
    assert_rerun_within_and_hot_outside(path, baseline_dir)
    wide = check_run(load_run(f"{path}@wide"), baseline_dir)
    assert wide.verdict == "not checked" and "the baselines ran at batch 32" in wide.detail


@pytest.mark.slow  # four real torch runs
def test_real_runs_seed_band_holds_a_rerun_and_excludes_a_learning_rate_20x_too_high(small_data, tmp_path):
    """What only real runs show: the band two real seeds span is wide enough for a real
    rerun of seed 0 and narrow enough to exclude a real run at 20x the learning rate."""
    seeds, new = tmp_path / "seeds", tmp_path / "new"
    for results, run_id, extra in (
        (seeds, "seed0", ["--seed", "0"]),
        (seeds, "seed1", ["--seed", "1"]),
        (new, "rerun", []),
        (new, "hot", ["--learning_rate", "1.0"]),
    ):
        argv = run_flags(small_data / "train.csv", results, num_epochs=2, batch_size=32, run_id=run_id) + extra
        proc = run_script("torch_script.py", argv)
        assert proc.returncode == 0, proc.stderr[-3000:]
    baseline_dir = as_baselines(str(seeds / f"{NETWORK}_torch.csv"), tmp_path)
    assert_rerun_within_and_hot_outside(new / f"{NETWORK}_torch.csv", baseline_dir)


def test_the_shipped_baselines_cover_every_framework_and_both_networks():
    """results/baseline/ holds three seeds of 3 epochs per framework/backend and network,
    made by `make baseline`, and the compare command reads them."""
    import os

    from algorithms.analysis.baseline import baseline_runs
    from algorithms.registry.frameworks import FRAMEWORKS
    from algorithms.paths import BASELINE_DIR
    from algorithms.spec.networks import NETWORKS

    for network in NETWORKS.values():
        for framework in FRAMEWORKS:
            name = framework.name
            every = baseline_runs(network.name, framework.framework, framework.backend)
            runs = [run for run in every if len(run.val) == 3]
            assert [run.run_id for run in runs] == ["baseline-seed0", "baseline-seed1", "baseline-seed2"], (
                network.name,
                name,
            )
            for run in runs:
                assert run.config_key == (network.name, network.training.batch_size, "single", 1)
                assert len(run.val) == 3 and run.losses[-1] < run.losses[0], (network.name, name, run.run_id)
            if network.main_command_batch:  # and the main command's default, in results/baseline/default/
                default = [run for run in every if run.settings[1:] == (network.main_command_batch, "single", 1, 10)]
                assert [run.run_id for run in default] == ["baseline-seed0", "baseline-seed1", "baseline-seed2"], name
                assert all(run.path.startswith(os.path.join(BASELINE_DIR, "default")) for run in default)
                assert all(run.final_val_accuracy > 0.9 for run in default), name
    assert "baseline-seed2" in open(os.path.join(BASELINE_DIR, "results.log")).read()
    assert "baseline-seed2" in open(os.path.join(BASELINE_DIR, "default", "results.log")).read()


# --------------------------------------------------------------------------- verdicts against the band


def synthetic_run(name: str, losses, val_accuracy: float, run_id: str = "r", batch: int = 32):
    """A Run with these per-step losses (steps 1..N) and one validation at the end."""
    from algorithms.analysis.runs import Run

    losses = np.asarray(losses, dtype=float)
    steps = np.arange(1, len(losses) + 1)
    framework, _, backend = name.partition("/")
    return Run(
        path=f"/nowhere/{framework}.csv",
        run_id=run_id,
        label=f"{name} {run_id}",
        backend_key=(framework, backend, NETWORK),
        config_key=(NETWORK, batch, "single", 1),
        steps=steps,
        losses=losses,
        val=[(len(losses), 0.0, val_accuracy)],
    )


CURVE = np.linspace(2.3, 0.5, 40)


def test_the_band_is_the_largest_seed_to_seed_distance_and_accuracy_gap():
    from algorithms.analysis.compare import band_of
    from algorithms.analysis.runs import curve_distance

    seeds = [
        synthetic_run("torch/torch", CURVE + shift, accuracy, f"s{i}")
        for i, (shift, accuracy) in enumerate(((0.0, 0.90), (0.02, 0.93), (-0.01, 0.91)))
    ]
    band = band_of(seeds, "three seeds")
    assert band.loss_distance == pytest.approx(0.03)  # seeds 1 and 2: 0.02 - (-0.01), on every step
    assert band.accuracy_gap == pytest.approx(0.03)
    assert curve_distance(seeds[0], seeds[1]) == pytest.approx(0.02)
    assert band_of(seeds[:1], "one seed") is None  # one run spans no band


def test_a_cross_framework_pair_is_judged_against_the_band_and_never_from_a_fixed_threshold():
    from algorithms.analysis.compare import SPREAD_FACTOR, diff_pair, run_to_run_bands, verdict

    seeds = [synthetic_run("torch/torch", CURVE + shift, 0.90, f"s{i}") for i, shift in enumerate((0.0, 0.02))]
    near = synthetic_run("keras/jax", CURVE + 0.025, 0.905)  # 0.025 <= 1.5 x 0.02
    far = synthetic_run("keras/jax", CURVE + 0.2, 0.905, "far")  # ten times the band
    bands = run_to_run_bands(seeds + [near], None)
    assert verdict(diff_pair(seeds[0], near), bands)[0] == "within spread"
    word, evidence = verdict(diff_pair(seeds[0], far), run_to_run_bands(seeds + [far], None))
    assert word == "beyond spread" and any(f"{SPREAD_FACTOR:g}x the largest seed-to-seed" in e for e in evidence)
    # an accuracy gap beyond the seeds' (and the 0.01 margin) is beyond spread, however close the curves
    wrong = synthetic_run("keras/jax", CURVE + 0.01, 0.80, "wrong")
    assert verdict(diff_pair(seeds[0], wrong), run_to_run_bands(seeds + [wrong], None))[0] == "beyond spread"
    # no band at all: no verdict, whatever the distance (fixed thresholds used to call this "different")
    lone = synthetic_run("torch/torch", CURVE, 0.90)
    word, evidence = verdict(diff_pair(lone, far), run_to_run_bands([lone, far], None))
    assert word == "no band" and "distance 0.2000" in evidence[0]
    # runs of different settings share no band
    other = synthetic_run("keras/jax", CURVE + 0.01, 0.90, "b64", batch=64)
    assert verdict(diff_pair(seeds[0], other), run_to_run_bands(seeds + [other], None))[0] == "no band"


def test_the_band_comes_from_the_shipped_baselines_at_the_same_settings(two_seeds, tmp_path):
    """Seeds 0 and 1 shipped as baselines give the band a single new run is judged against."""
    from algorithms.analysis.compare import format_against_first

    baseline_dir = tmp_path / "baseline" / "default"
    baseline_dir.mkdir(parents=True)
    shutil.copy(two_seeds, baseline_dir / f"{NETWORK}_torch.csv")
    report = build_report([f"{two_seeds}@seed0", f"{two_seeds}@seed1"], [], str(tmp_path / "baseline"))
    assert report["verdicts"][0][0] == "run-to-run"
    (band,) = report["bands"].values()
    assert "2 runs given here" in band.source  # the inputs' own seeds come first
    text = format_against_first(report)
    assert "bands from: 2 runs given here" in text and "verdicts: same = every aligned loss bit-identical" in text
