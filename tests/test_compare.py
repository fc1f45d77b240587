"""The compare command on real result CSVs: a CSV against itself is the same, two
seeds are told apart, and the printed numbers are recomputed here from the rows."""

import numpy as np
import pytest

from algorithms.analysis.compare import build_report, format_report, main
from algorithms.records import read_rows, run_ids
from tests.conftest import run_script

NETWORK = "cnn2d_3layer_fullconnected_3layer"


def torch_runs(small_data, results, runs: dict) -> str:
    """Real torch runs on the small data, 4 epochs at batch 32 (60 steps: the seeds are past
    chance, and apart from a run that is not), run id -> its extra flags, in one CSV."""
    for run_id, extra in runs.items():
        flags = ["--train", str(small_data / "train.csv"), "--test", "none", "--num_epochs", "4", "--batch_size", "32"]
        proc = run_script(
            "torch_script.py", flags + extra + ["--results_dir", str(results), "--run_id", run_id, "--quiet"]
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    return str(results / f"{NETWORK}_torch.csv")


@pytest.fixture(scope="module")
def two_seeds(small_data, tmp_path_factory):
    """Two real torch runs, seeds 0 and 1, in one CSV."""
    results = tmp_path_factory.mktemp("compare") / "results"
    return torch_runs(small_data, results, {f"seed{seed}": ["--seed", str(seed)] for seed in (0, 1)})


@pytest.fixture(scope="module")
def more_seeds(small_data, tmp_path_factory):
    """Seeds 2-9 of the same run (with two_seeds' 0 and 1, ten), in one CSV."""
    results = tmp_path_factory.mktemp("more_seeds") / "results"
    return torch_runs(small_data, results, {f"seed{seed}": ["--seed", str(seed)] for seed in range(2, 10)})


@pytest.fixture(scope="module")
def at_chance(small_data, tmp_path_factory):
    """The same run at learning rate 1.0, 20 times the default: it learns nothing (run id `hot`)."""
    results = tmp_path_factory.mktemp("at_chance") / "results"
    return torch_runs(small_data, results, {"hot": ["--learning_rate", "1.0"]})


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
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
    verdict = report["verdicts"][0]
    assert verdict.word == "run-to-run" and any("this pair measures the band" in line for line in verdict.evidence)

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


# the at-chance rule's edges on the small data's 120 validation rows (spread.chance_line): guessing
# scores 0.1, at chance up to 3 standard errors above (0.182), and seeds learned from 6 above (0.264)
CHANCE_EDGE, LEARNED_EDGE = 0.1 + 3 * (0.09 / 120) ** 0.5, 0.1 + 6 * (0.09 / 120) ** 0.5


@pytest.mark.slow  # real torch runs: ten seeds, a rerun, one at chance, one at another batch
def test_a_run_is_checked_against_the_baseline_band(two_seeds, more_seeds, at_chance, small_data, tmp_path):
    """Seeds 0, 1 and 2 as the baseline: seed 0 rerun is within the band; a learning rate
    20x too high is not judged against a band at another learning rate (one line says
    so), and the same run with the baselines' settings recorded (a hidden 20x learning
    rate) is outside: it ended at chance where the seeds learned, which the prediction
    interval's 2 degrees of freedom alone could not call (on the issue's machine: 15 seed
    sd off, p = 0.012); another batch size is not checked (and says why). Known answers
    far from every threshold: the rerun is a draw of seed 0, |t| <= 1 by algebra for a
    member of 3 seeds (p >= 0.4); the hot run ends at or under 0.15, the chance edge
    0.182, and the seeds above 0.6, the learned edge 0.264."""
    import shutil

    from algorithms.analysis.baseline import check_run
    from algorithms.analysis.runs import load_run
    from algorithms.records import sidecar_path
    from tests.helpers.synthetic_runs import relabel

    baseline_dir = tmp_path / "baseline"
    baseline_dir.mkdir()
    for path in (two_seeds, sidecar_path(two_seeds)):
        shutil.copy(path, baseline_dir)
    relabel(more_seeds, "seed2", baseline_dir, "seed2")
    path = torch_runs(small_data, tmp_path / "new", {"rerun": [], "wide": ["--batch_size", "64"]})
    rerun = check_run(load_run(f"{path}@rerun"), str(baseline_dir))
    assert rerun.verdict == "within" and rerun.p > 0.1, rerun.detail
    hot = check_run(load_run(f"{at_chance}@hot"), str(baseline_dir))
    assert hot.verdict == "not checked" and "settings differ: learning_rate 1 vs 0.05" in hot.detail, hot.detail
    hidden = relabel(at_chance, "hot", tmp_path, "hidden", learning_rate=0.05)
    hidden_run = load_run(f"{hidden}@hidden")
    seeds = [load_run(f"{baseline_dir}/{NETWORK}_torch.csv@seed{seed}") for seed in range(3)]
    assert hidden_run.final_val_accuracy <= 0.15 < CHANCE_EDGE, hidden_run.final_val_accuracy
    assert min(seed.final_val_accuracy for seed in seeds) >= 0.6 > LEARNED_EDGE, [s.final_val_accuracy for s in seeds]
    hidden_check = check_run(hidden_run, str(baseline_dir))
    assert hidden_check.verdict == "outside" and hidden_check.at_chance, hidden_check.detail
    assert "at chance: torch/torch hidden's final val accuracy" in hidden_check.short(), hidden_check.short()
    wide = check_run(load_run(f"{path}@wide"), str(baseline_dir))
    assert wide.verdict == "not checked" and "the baselines ran at batch 32" in wide.detail
    report = build_report([f"{path}@rerun", f"{hidden}@hidden"], [], str(baseline_dir))
    assert "within the baseline band" in format_report(report) and "outside the baseline band" in format_report(report)


@pytest.mark.slow  # the ten seeds and the run at chance of the test above
def test_a_run_at_chance_is_never_within_its_seeds_at_3_5_or_10(two_seeds, more_seeds, at_chance, tmp_path):
    """The real run at chance (its settings record saying 0.05) against the first 3, 5 and
    10 real seeds: outside at each, by the at-chance rule; and without that rule, at 3
    seeds, still not within (the gap is one 3 seeds cannot call: not checked, or outside)."""
    from algorithms.analysis.baseline import check_run, matching_baselines
    from algorithms.analysis.runs import load_run
    from algorithms.analysis.spread import reproduction_test
    from tests.helpers.synthetic_runs import relabel

    run = load_run(f"{relabel(at_chance, 'hot', tmp_path, 'hidden', learning_rate=0.05)}@hidden")
    assert run.final_val_accuracy <= 0.15 < CHANCE_EDGE, run.final_val_accuracy
    for count in (3, 5, 10):
        folder = tmp_path / f"band{count}"
        folder.mkdir()
        for seed in range(count):
            relabel(two_seeds if seed < 2 else more_seeds, f"seed{seed}", folder, f"baseline-seed{seed}")
        seeds = matching_baselines(run, str(folder))
        assert len(seeds) == count and min(seed.final_val_accuracy for seed in seeds) >= 0.6 > LEARNED_EDGE
        check = check_run(run, str(folder))
        assert check.verdict == "outside" and check.at_chance, (count, check.detail)
        if count == 3:
            alone = reproduction_test(run, seeds, chance_rule=False)
            assert alone.beyond or alone.undecided, alone.evidence


def test_the_shipped_baselines_cover_every_framework_and_both_networks():
    """results/baseline/ holds three seeds of 3 epochs per framework/backend and network,
    made by `make baseline`, and the compare command reads them."""
    import os

    from algorithms.analysis.baseline import baseline_runs
    from algorithms.registry.frameworks import FRAMEWORKS
    from algorithms.paths import BASELINE_DIR
    from algorithms.network.networks import NETWORKS

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
                shown = (network.main_command_batch, "single", 1, 10)
                default = [
                    run
                    for run in every
                    if tuple(run.shown.get(key) for key in ("batch", "strategy", "devices", "epochs")) == shown
                ]
                # seeds 0-9 of the main env's frameworks, 0-2 of the legacy ones (the Makefile, docs/comparing.md)
                seeds = range(3) if framework.name in ("lasagne", "keras_theano", "caffe") else range(10)
                assert [run.run_id for run in default] == [f"baseline-seed{seed}" for seed in seeds], name
                assert all(run.path.startswith(os.path.join(BASELINE_DIR, "default")) for run in default)
                assert all(run.final_val_accuracy > 0.9 for run in default), name
    assert "baseline-seed2" in open(os.path.join(BASELINE_DIR, "results.log")).read()
    assert "baseline-seed2" in open(os.path.join(BASELINE_DIR, "default", "results.log")).read()


def test_every_shipped_baseline_records_todays_settings_of_its_command():
    """Every run in results/baseline/ has a settings record, and it is what `make baseline`'s
    command records today (seed aside): so no check of a healthy default run against them
    says "unknown settings", and a change of the default run (its dropout, say) shows here
    until `make baseline` is run again."""
    import os

    from algorithms.analysis.settings import NOT_COMPARED_ACROSS_SEEDS
    from algorithms.paths import BASELINE_DIR, DEFAULT_TRAIN
    from algorithms.registry.frameworks import FRAMEWORKS
    from algorithms.config.run_config import parse_config
    from algorithms.records import results_csv_name, run_ids, read_settings
    from algorithms.session.settings_record import settings_of
    from algorithms.network.networks import NETWORKS

    def today(flags: list) -> dict:
        settings = settings_of(parse_config(["--train", DEFAULT_TRAIN, *flags], "run_all.py", ""))
        return {name: value for name, value in settings.items() if name not in NOT_COMPARED_ACROSS_SEEDS}

    commands = {  # the Makefile's baseline target: the presets for 3 epochs, and the main command's default
        (BASELINE_DIR, network.name): today(["--network", network.name, "--num_epochs", "3"])
        for network in NETWORKS.values()
    }
    main_command = (os.path.join(BASELINE_DIR, "default"), "cnn2d_3layer_fullconnected_3layer")
    commands[main_command] = today(["--batch_size", "100"])
    for (folder, network), expected in commands.items():
        for framework in FRAMEWORKS:
            path = os.path.join(folder, results_csv_name(network, framework.framework, framework.backend))
            records = read_settings(path)
            assert sorted(records) == sorted(run_ids(path)), f"{path}: a run without its settings record"
            for run_id, recorded in records.items():
                recorded = {name: value for name, value in recorded.items() if name not in NOT_COMPARED_ACROSS_SEEDS}
                assert recorded == expected, (path, run_id, set(recorded.items()) ^ set(expected.items()))


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


def test_the_band_is_every_two_seeds_distance_and_their_accuracies():
    """The seed regime's null: the distances of every two seeds (their typical one is the
    geometric mean) and the seeds' accuracies; one seed spans no band."""
    from scipy import stats

    from algorithms.analysis.runs import curve_distance
    from algorithms.analysis.spread import SeedBand, pair_test

    seeds = [
        synthetic_run("torch/torch", CURVE + shift, accuracy, f"s{i}")
        for i, (shift, accuracy) in enumerate(((0.0, 0.90), (0.02, 0.93), (-0.01, 0.91)))
    ]
    assert curve_distance(seeds[0], seeds[1]) == pytest.approx(0.02)
    other = synthetic_run("keras/jax", CURVE + 0.005, 0.92, "k")
    test = pair_test(seeds[0], other, [SeedBand(tuple(seeds), "three seeds")])
    typical = (0.02 * 0.01 * 0.03) ** (1 / 3)  # seeds 0-1, 0-2 and 1-2, on every step
    assert f"typical {typical:.4f} (3 pairs)" in test.evidence[1]
    sd = np.std([0.90, 0.93, 0.91], ddof=1)
    assert test.p_accuracy == pytest.approx(2 * stats.t.sf(0.02 / (sd * np.sqrt(2)), df=2))
    assert pair_test(seeds[0], other, [SeedBand(tuple(seeds[:1]), "one seed")]) is None  # one run spans no band


def test_a_cross_framework_pair_is_judged_against_the_band_and_never_from_a_fixed_threshold():
    from algorithms.analysis.verdict import Yardsticks, judge

    shifts = (0.0, 0.02, -0.01, 0.01, -0.02)
    seeds = [synthetic_run("torch/torch", CURVE + s, 0.90 + s / 4, f"s{i}") for i, s in enumerate(shifts)]
    near = synthetic_run("keras/jax", CURVE + 0.015, 0.905)  # as far from seed 0 as its seeds are
    far = synthetic_run("keras/jax", CURVE + 0.5, 0.905, "far")  # 30 times the typical seed distance
    verdict = judge(seeds[0], near, Yardsticks(seeds + [near]))
    assert verdict.word == f"within spread (p={verdict.p:.2g})" and verdict.p > 0.1
    verdict = judge(seeds[0], far, Yardsticks(seeds + [far]))
    assert verdict.word.startswith("beyond spread (p=") and verdict.p < 0.01
    assert any("curve distance 0.5000 vs seed pairs' typical" in line for line in verdict.evidence)
    # an accuracy gap beyond the seeds' is beyond spread, however close the curves
    wrong = synthetic_run("keras/jax", CURVE + 0.01, 0.80, "wrong")
    assert judge(seeds[0], wrong, Yardsticks(seeds + [wrong])).word.startswith("beyond spread")
    # no band at all: no verdict, whatever the distance (fixed thresholds used to call this "different")
    lone = synthetic_run("torch/torch", CURVE, 0.90)
    verdict = judge(lone, far, Yardsticks([lone, far]))
    assert verdict.word == "no band" and "distance 0.5000" in verdict.evidence[0]
    # runs of different settings share no band, and the line says which setting
    other = synthetic_run("keras/jax", CURVE + 0.01, 0.90, "b64", batch=64)
    assert judge(seeds[0], other, Yardsticks(seeds + [other])).word == "settings differ: batch 32 vs 64"


def test_the_band_comes_from_the_shipped_baselines_at_the_same_settings(two_seeds, tmp_path):
    """Seeds 0 and 1 shipped as baselines, or given: the inputs' own seeds come first at equal count."""
    import shutil

    from algorithms.analysis.compare import format_against_first
    from algorithms.records import sidecar_path

    baseline_dir = tmp_path / "baseline" / "default"
    baseline_dir.mkdir(parents=True)
    for path in (two_seeds, sidecar_path(two_seeds)):
        shutil.copy(path, baseline_dir)
    report = build_report([f"{two_seeds}@seed0", f"{two_seeds}@seed1"], [], str(tmp_path / "baseline"))
    assert report["verdicts"][0].word == "run-to-run"
    band = report["yardsticks"].band(report["runs"][0])
    assert "the 2 runs given (seed0, seed1)" in band.source  # the inputs' own seeds come first
    text = " ".join(format_against_first(report, verbose=True).split())
    assert "yardsticks: 2 seeds of torch/torch from the 2 runs given" in text
    assert "verdicts: same = every aligned loss bit-identical" in text


def test_a_run_that_only_stopped_sooner_names_its_epochs_not_another_baselines_batch(full_data, tmp_path):
    """The README's `run_all.py --only torch,keras_jax --num_epochs 3` runs at the main
    command's batch (100) for 3 epochs; the shipped baselines ran at batch 100 for 10
    epochs and (older files) at batch 1000 for 3. Its check named the batch-1000 files
    (`settings differ: batch 100 vs 1000`), which tie on the count of differences; a
    difference in where a run stops is nearer than one in how it trains."""
    from algorithms.analysis.baseline import check_run
    from algorithms.analysis.runs import load_run

    results = tmp_path / "results"
    flags = ["--train", str(full_data / "train.csv"), "--test", "none", "--batch_size", "100", "--num_epochs", "3"]
    proc = run_script("torch_script.py", flags + ["--max_steps", "3", "--results_dir", str(results), "--run_id", "r"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = check_run(load_run(f"{results / NETWORK}_torch.csv@r"))
    assert check.verdict == "not checked" and "settings differ: epochs 3 vs 10; max_steps 3 vs none" in check.detail
    assert "batch 100 vs 1000" not in check.detail, check.detail


def test_the_cases_example_compares_the_files_its_two_runs_write(monkeypatch):
    """docs/comparing.md's `results/cases/` example: the compare command reads exactly the
    CSVs and run ids the two runs before it write (it named files under results/cases/
    that the runs, writing to results/, never made)."""
    import os
    import shlex

    from algorithms.paths import REPO_ROOT
    from algorithms.registry.frameworks import FRAMEWORKS
    from algorithms.config.run_config import parse_config
    from algorithms.records import results_csv_name

    monkeypatch.chdir(REPO_ROOT)
    with open(os.path.join(REPO_ROOT, "docs", "comparing.md")) as handle:
        page = handle.read()
    block = page.split("### Measured: the issue's cases, rerun", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines()]
    written = set()
    for command in commands[:-1]:
        (framework,) = [f for f in FRAMEWORKS if f.script == command[1] and not f.env]
        config = parse_config(command[2:], command[1], "")
        csv_name = results_csv_name(config.network.name, framework.framework, framework.backend)
        written.add(f"{os.path.join(config.results_dir, csv_name)}@{config.run_id}")
    assert commands[-1][1:3] == ["-m", "algorithms.analysis.compare"]
    read = {os.path.abspath(path.split("@")[0]) + "@" + path.split("@")[1] for path in commands[-1][3:]}
    assert read == written and len(read) == 2, (read, written)
