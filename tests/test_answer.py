"""The answer first: the report's opening line (how many pairs differ for real, which run is
off), the rule that a same-seed pair ending far apart is never shown as agreeing, the step
and p the verdict table shows, and each pair's picture, on recorder-written runs with known
answers (no training); and the far-apart line measured again on the shipped runs."""

from __future__ import annotations

import html
import itertools
import os
import re

import numpy as np
import pytest

from algorithms.analysis.answer import (
    FAR_APART_AGREEMENT,
    FAR_APART_GAP,
    FAR_APART_MARGIN,
    HONEST_DISAGREEMENT,
    HONEST_GAP,
    answer,
    far_apart,
    findings,
    headline,
)
from algorithms.analysis.agreement import read_predictions
from algorithms.analysis.compare import build_report, format_against_first, format_report, write_outputs
from algorithms.analysis.drift_envelope import build_envelope, envelope_path, write_envelope
from algorithms.analysis.pair_figure import draw_pair, pair_folder
from algorithms.analysis.report_page import verdict_p, verdict_step
from algorithms.analysis.runs import load_run
from algorithms.analysis.settings import Settings
from algorithms.paths import BASELINE_DIR
from algorithms.records import run_ids
from tests.helpers.synthetic_runs import DEFAULT_SETTINGS, NETWORK, write_run, write_step_checks

STEPS = np.arange(1, 41)
CURVE = np.linspace(2.3, 0.5, len(STEPS))
# the envelope grows tenfold every 3 steps, as drift does: 10x it passes a 10% loss difference after step 15
ENVELOPE = 1e-7 * 10 ** (STEPS / 3)
HORIZON = 15
SHARED = {"dropout": "shared"}  # the same units dropped: what makes a pair of one seed a same-seed pair
OFF_STEP = 3


@pytest.fixture
def folders(tmp_path):
    """A results folder, and a baseline folder holding the runs' drift envelope (no seed band)."""
    baseline, results = tmp_path / "baseline", tmp_path / "results"
    results.mkdir()
    envelope = build_envelope({"run_to_run": [(STEPS, ENVELOPE)]}, Settings({**DEFAULT_SETTINGS, **SHARED}))
    write_envelope(envelope, envelope_path(str(baseline), NETWORK, "default"))
    return baseline, results


def write_check_envelope(baseline) -> None:
    """The epoch checks' own envelope (their 12 steps), as the run's grows."""
    settings = Settings({**DEFAULT_SETTINGS, **SHARED, "part": "epoch check"})
    envelope = build_envelope({"run_to_run": [(STEPS[:12], ENVELOPE[:12])]}, settings)
    write_envelope(envelope, envelope_path(str(baseline), NETWORK, "default_check"))


def honest(scale: float = 0.3) -> np.ndarray:
    """A loss curve that differs from CURVE by a share of the envelope: drift."""
    return CURVE * (1 + scale * ENVELOPE)


def off_from(step: int) -> np.ndarray:
    """A loss curve 1% off from `step` on: more than rounding."""
    losses = honest(0.1)
    losses[step - 1 :] *= 1.01
    return losses


def runs_of(results, curves: dict, accuracies: dict = None, run_id: str = "r", **settings) -> list:
    """`framework/backend` -> losses, each a run `run_id` of seed 0 (the frameworks' runs of one
    run_all.py run); the specs to compare."""
    accuracies = accuracies or {}
    return [
        f"{write_run(results, name, run_id, losses, accuracies.get(name, 0.9), **SHARED, **settings)}@{run_id}"
        for name, losses in curves.items()
    ]


def html_text(markup: str) -> str:
    """What a browser shows of `markup`: its tags dropped, its entities read."""
    return html.unescape(re.sub("<[^>]+>", "", markup))


def test_the_report_opens_with_how_many_pairs_differ_and_which_run_is_off(folders, tmp_path):
    baseline, results = folders
    specs = runs_of(
        results,
        {
            "torch/torch": honest(0.0),
            "tensorflow/tensorflow": honest(0.3),
            "keras/jax": honest(0.6),
            "keras/torch": off_from(OFF_STEP),
        },
        {"keras/torch": 0.19, "torch/torch": 0.64, "tensorflow/tensorflow": 0.64, "keras/jax": 0.64},
    )
    report = build_report(specs, [], str(baseline))
    line = (
        f"1 of 3 pairs differs for real: keras/torch (beyond drift at step {OFF_STEP}; val acc 0.19 against "
        "torch/torch's 0.64)"
    )
    assert headline(report) == line
    # the console's summary (run_all.py), the compare command's text and the page open with it
    assert format_against_first(report).splitlines()[0] == line
    assert format_report(report).splitlines()[0] == line
    _, page = write_outputs(report, str(tmp_path / "page"))
    markup = open(page, encoding="utf-8").read()
    answer = re.search(r"<p id='answer' class='answer (\w+)'>(.*?)</p>", markup)
    assert answer.group(1) == "beyond" and html_text(answer.group(2)) == line
    assert markup.index("id='answer'") < markup.index("id='verdicts'")  # before every table


def test_the_first_run_off_is_named_when_the_others_agree_among_themselves(folders):
    baseline, results = folders
    curves = {"torch/torch": off_from(OFF_STEP), "tensorflow/tensorflow": honest(0.0), "keras/jax": honest(0.3)}
    report = build_report(runs_of(results, curves), [], str(baseline))
    assert headline(report).startswith(f"2 of 2 pairs differ for real: torch/torch (beyond drift at step {OFF_STEP};")


def test_honest_runs_open_with_all_within_drift(folders):
    baseline, results = folders
    curves = {"torch/torch": honest(0.0), "tensorflow/tensorflow": honest(0.3), "keras/jax": honest(0.6)}
    assert answer(build_report(runs_of(results, curves), [], str(baseline))) == ("all 2 pairs within drift", "agree")
    # two runs at other settings: no verdict, and the line says why
    other = write_run(results, "caffe/caffe", "lr", honest(0.3), 0.9, learning_rate=0.025, **SHARED)
    torch = runs_of(results, {"torch/torch": honest(0.0)}, run_id="lr")
    report = build_report(torch + [f"{other}@lr"], [], str(baseline))
    line = "no pair of 1 differs for real: 0 within drift, 1 without a verdict (settings differ)"
    assert answer(report) == (line, "none")  # grey: nothing differs, and nothing is judged either


def test_a_pair_that_ends_far_apart_is_never_shown_agreeing_whatever_its_steps_said(folders, tmp_path):
    """The issue's case: torch 0.93 and TensorFlow 0.23 at 25% agreement, the same within the
    horizon, read `within drift to step 13, epoch check within drift; then not judged` in grey."""
    baseline, results = folders
    parted = honest(0.3)
    parted[HORIZON:] *= np.linspace(1.2, 4.0, len(STEPS) - HORIZON)  # past the horizon: no yardstick sees it
    write_check_envelope(baseline)
    accuracies = {"torch/torch": 0.93, "tensorflow/tensorflow": 0.23}
    specs = [
        f"{write_run(results, name, 'r', losses, accuracies[name], check_losses=CURVE[:12], **SHARED)}@r"
        for name, losses in {"torch/torch": honest(0.0), "tensorflow/tensorflow": parted}.items()
    ]
    report = build_report(specs, [], str(baseline))
    report["agreement"] = (["torch", "tensorflow"], [("tensorflow", "torch", 0.25)], 1000)  # run_all.py's matrix
    (finding,) = findings(report)
    verdict = finding.verdict
    assert verdict.text == (
        f"within drift to step {HORIZON}, epoch check within drift; then not judged (no seed band at these settings)"
    )
    assert not verdict.beyond and finding.css_class == "apart" and finding.differs
    assert finding.text.startswith(verdict.text + f"; ends far apart: val acc gap 0.70 > {FAR_APART_GAP:.4g}")
    assert "25.0% of the test predictions alike" in finding.text
    # two runs alone: which one is off, nothing here can tell
    assert headline(report) == (
        f"1 of 1 pair differs for real: torch/torch vs tensorflow/tensorflow (ends far apart, though {verdict.text}: "
        "val acc 0.93 against tensorflow/tensorflow's 0.23, 25.0% of the test predictions alike)"
    )
    _, page = write_outputs(report, str(tmp_path / "page"))
    markup = open(page, encoding="utf-8").read()
    assert re.search(r"<td class='verdict apart'><a href='#pair-1'>within drift to step", markup)
    assert "id='answer' class='answer apart'" in markup
    assert "ends far apart" in format_against_first(report)


def test_the_far_apart_line_is_the_measured_one_and_only_for_same_seed_pairs_at_equal_settings(folders):
    baseline, results = folders

    calls = itertools.count()

    def verdict_of(gap: float, **settings) -> tuple:
        run_id = f"r{next(calls)}"
        a = write_run(results, "torch/torch", run_id, honest(0.0), 0.9, **SHARED)
        b = write_run(results, "keras/jax", run_id, honest(0.3), 0.9 - gap, **{**SHARED, **settings})
        report = build_report([f"{a}@{run_id}", f"{b}@{run_id}"], [], str(baseline))
        return report["pairs"][0], report["verdicts"][0], findings(report)[0]

    pair, verdict, finding = verdict_of(HONEST_GAP)  # as far apart as the farthest honest pair: drift
    assert far_apart(pair.a, pair.b, verdict) is None and finding.css_class == "agree"
    pair, verdict, finding = verdict_of(FAR_APART_GAP + 0.01)
    assert far_apart(pair.a, pair.b, verdict) and finding.css_class == "apart"
    assert far_apart(pair.a, pair.b, verdict, agreement=0.99) and far_apart(pair.a, pair.b, verdict, 0.5)
    # a share alone, where the accuracies end together
    pair, verdict, _ = verdict_of(0.0)
    assert far_apart(pair.a, pair.b, verdict, agreement=0.5) and not far_apart(pair.a, pair.b, verdict, 0.97)
    # at another learning rate a run may end anywhere: no verdict, grey, not far apart
    _, verdict, finding = verdict_of(0.5, learning_rate=0.025)
    assert verdict.settings_line and finding.css_class == "none" and finding.apart is None
    # another seed: the seed band's to judge, on the same final accuracy
    _, _, finding = verdict_of(0.5, seed=1)
    assert finding.verdict.regime == "seed" and finding.apart is None
    # one run stopped early (--max_steps): its last validation is another step's, no end to compare
    a = write_run(results, "torch/torch", "short", honest(0.0)[:20], 0.6, **SHARED, max_steps=20)
    b = write_run(results, "keras/jax", "short", honest(0.3), 0.95, **SHARED)
    report = build_report([f"{a}@short", f"{b}@short"], [], str(baseline))
    (finding,) = findings(report)
    assert not finding.verdict.settings_line and finding.apart is None and finding.css_class == "agree"


def test_the_far_apart_line_is_measured_on_the_shipped_honest_pairs():
    """HONEST_GAP is the largest final val-accuracy gap of any two frameworks' runs of one seed
    among the shipped runs (results/baseline/default/), and FAR_APART_MARGIN x it clears even
    the largest gap between two seeds of them."""
    runs = []
    folder = os.path.join(BASELINE_DIR, "default")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".csv"):
            path = os.path.join(folder, name)
            runs += [load_run(f"{path}@{run_id}") for run_id in run_ids(path)]
    same_seed = [
        abs(a.final_val_accuracy - b.final_val_accuracy) for a, b in itertools.combinations(runs, 2) if a.seed == b.seed
    ]
    assert len(same_seed) == 154 and max(same_seed) == pytest.approx(HONEST_GAP, abs=1e-9)
    any_seed = [abs(a.final_val_accuracy - b.final_val_accuracy) for a, b in itertools.combinations(runs, 2)]
    assert max(any_seed) < FAR_APART_GAP == pytest.approx(FAR_APART_MARGIN * HONEST_GAP)


def test_the_far_apart_agreement_is_measured_on_the_shipped_honest_predictions():
    """HONEST_DISAGREEMENT is the largest share of test images two frameworks' runs of one seed
    label differently among the shipped predictions (results/baseline/agreement/), and
    FAR_APART_MARGIN x it clears every two seeds of them too."""
    folder = os.path.join(BASELINE_DIR, "agreement")
    runs = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".csv"):
            framework, seed = re.fullmatch(rf"{NETWORK}_(\w+?)_\d{{8}}T\d{{6}}Z-\w+-seed(\d+)\.csv", name).groups()
            runs[framework, int(seed)] = read_predictions(os.path.join(folder, name))
    pairs = list(itertools.combinations(runs, 2))
    apart = {(a, b): float(np.mean(runs[a] != runs[b])) for a, b in pairs}
    same_seed = [share for (a, b), share in apart.items() if a[1] == b[1]]
    assert len(same_seed) == 12 and max(same_seed) == pytest.approx(HONEST_DISAGREEMENT, abs=1e-9)
    assert max(apart.values()) < 1 - FAR_APART_AGREEMENT == pytest.approx(FAR_APART_MARGIN * HONEST_DISAGREEMENT)


def test_the_step_and_p_columns_say_which_test_gave_them(folders):
    baseline, results = folders
    specs = runs_of(results, {"torch/torch": honest(0.0), "keras/torch": honest(0.3)}, run_id="within")
    within = build_report(specs, [], str(baseline))["verdicts"][0]
    assert verdict_step(within) == (HORIZON, "horizon") and verdict_p(within) == (None, "")
    specs = runs_of(results, {"torch/torch": honest(0.0), "keras/jax": off_from(OFF_STEP)}, run_id="off")
    beyond = build_report(specs, [], str(baseline))["verdicts"][0]
    assert verdict_step(beyond) == (OFF_STEP, "drift test")
    # the step check names a step, and the run, past the horizon where the rows cannot
    specs = runs_of(results, {"torch/torch": honest(0.0), "keras/jax": honest(0.3)}, run_id="stepped")
    write_step_checks(specs[0].split("@")[0], "stepped", [(1, 0.1, ""), (30, 0.2, ""), (38, 0.1, "")])
    write_step_checks(specs[1].split("@")[0], "stepped", [(1, 0.1, ""), (30, 12.0, "the update rule")])
    report = build_report(specs, [], str(baseline))
    assert verdict_step(report["verdicts"][0]) == (30, "step check")
    assert headline(report).startswith("1 of 1 pair differs for real: keras/jax (beyond rounding at step 30 (")
    # with seed bands: the seed regime's p, on a pair of two seeds and past a same-seed pair's horizon
    (baseline / "default").mkdir()
    for seed, shift in enumerate((0.0, 0.02, -0.01, 0.01, -0.02)):
        for name in ("torch/torch", "keras/jax"):
            write_run(baseline / "default", name, f"seed{seed}", CURVE + shift, 0.9 + shift / 4, seed=seed, **SHARED)
    specs = runs_of(results, {"torch/torch": honest(0.0), "keras/jax": honest(0.3)}, run_id="banded")
    same_seed = build_report(specs, [], str(baseline))["verdicts"][0]
    assert same_seed.after is not None and verdict_p(same_seed) == (same_seed.after.p, "past the horizon")
    other = write_run(results, "keras/jax", "seed1", CURVE + 0.01, 0.9, seed=1, **SHARED)
    seeds = build_report([specs[0], f"{other}@seed1"], [], str(baseline))["verdicts"][0]
    assert seeds.regime == "seed" and seeds.p is not None and verdict_p(seeds) == (seeds.p, "seed regime")
    assert verdict_step(seeds) == (None, "")


def test_each_pair_has_its_picture_and_it_marks_what_the_verdict_says(folders, tmp_path):
    baseline, results = folders
    write_check_envelope(baseline)  # keras/torch's epoch check leaves it at step 2
    checks = {"torch/torch": CURVE[:12], "keras/jax": CURVE[:12], "keras/torch": CURVE[:12] * np.r_[1, [1.01] * 11]}
    curves = {"torch/torch": honest(0.0), "keras/jax": off_from(OFF_STEP), "keras/torch": honest(0.3)}
    specs = [
        f"{write_run(results, name, 'r', losses, 0.9, check_losses=checks[name], **SHARED)}@r"
        for name, losses in curves.items()
    ]
    write_step_checks(
        specs[2].split("@")[0], "r", [(1, 0.1, ""), (30, 12.0, "the update rule"), (38, 9.0, "the update rule")]
    )
    report = build_report(specs, [], str(baseline))
    _, page = write_outputs(report, str(tmp_path / "page"))
    folder = pair_folder(str(tmp_path / "page"))
    pictures = sorted(os.listdir(folder))
    assert pictures == ["pair-1.png", "pair-2.png", "pair-3.png"]  # one per pair, numbered as the table
    for name in pictures:
        with open(os.path.join(folder, name), "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert open(page, encoding="utf-8").read().count("data:image/png;base64,") == 1 + len(pictures)  # and the curves

    found = findings(report)
    off = draw_pair(1, found[0], report["yardsticks"], str(tmp_path / "off.png"))  # torch vs keras/jax
    assert (off.first_beyond, off.horizon) == (OFF_STEP, HORIZON) == (found[0].verdict.step, found[0].verdict.horizon)
    assert off.step_check_beyond == {}  # neither ran a step check
    stepped = draw_pair(2, found[1], report["yardsticks"], str(tmp_path / "stepped.png"))  # torch vs keras/torch
    assert stepped.first_beyond is None and stepped.horizon == HORIZON
    assert stepped.step_check_beyond == {"keras/torch": [30, 38]} and found[1].verdict.step == 30
    assert (stepped.check_first_beyond, stepped.check_horizon) == (2, 12) and found[1].verdict.check.step == 2
    assert (off.check_first_beyond, off.check_horizon) == (None, 12)  # the checks of torch and keras/jax agree


def test_a_pair_beyond_by_its_accuracies_alone_is_marked_where_the_verdict_says(folders, tmp_path):
    """The drift test judges a step's accuracies too: the picture marks that step though its
    losses stay within drift."""
    baseline, results = folders
    accuracies = np.full(len(STEPS), 0.5)
    accuracies[OFF_STEP + 1 :] = 0.7  # from step 5 on, 20 points of the batch's samples labelled otherwise
    a = write_run(results, "torch/torch", "acc", honest(0.0), 0.9, **SHARED)
    b = write_run(results, "keras/jax", "acc", honest(0.3), 0.9, accuracies=accuracies, **SHARED)
    report = build_report([f"{a}@acc", f"{b}@acc"], [], str(baseline))
    (finding,) = findings(report)
    assert finding.verdict.word == f"beyond drift at step {OFF_STEP + 2}"
    marks = draw_pair(1, finding, report["yardsticks"], str(tmp_path / "accuracy.png"))
    assert marks.first_beyond == OFF_STEP + 2
