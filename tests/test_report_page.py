"""The HTML report a person reads, from result CSVs written by the recorder with known
answers (no training): opened in real headless Chromium at 1,280 px, it opens with its
answer, fits the window, its verdicts are coloured as they read (a pair that ends far apart
never green or grey) and link to their evidence, folded pair by pair with each pair's
picture, and no run id breaks inside; and no comparison's report replaces another's."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from algorithms.figures import pyplot
from algorithms.analysis.compare import main
from algorithms.analysis.drift_envelope import build_envelope, envelope_path, write_envelope
from algorithms.analysis.settings import Settings
from tests.helpers.headless_chromium import measure, screenshot
from tests.helpers.synthetic_runs import DEFAULT_SETTINGS, NETWORK, write_run

WINDOW = 1280
CURVE = np.linspace(2.3, 0.5, 40)
SEED_SHIFTS = (0.0, 0.02, -0.01, 0.01, -0.02)
# no space to break at: the page must wrap it inside its cell, not widen the table
LONG_ID = "near_" + "x" * 150
ESCAPED_ID = "twin<i>&amp;</i>"
PARITY_STEP = 3  # where the parity pair's difference enters
APART_ACCURACY = 0.23  # a parity run within drift of parity-a at every step, that ends far from its 0.90


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """Results CSVs and shipped baselines, each run's answer known, and the inputs in the order compared."""
    root = tmp_path_factory.mktemp("report")
    baseline, results = root / "baseline", root / "results"
    (baseline / "default").mkdir(parents=True)
    results.mkdir()
    for seed, shift in enumerate(SEED_SHIFTS):  # torch's five shipped seeds: its seed band
        accuracy = 0.90 + shift / 4
        write_run(baseline / "default", "torch/torch", f"baseline-seed{seed}", CURVE + shift, accuracy, seed=seed)
    steps = np.arange(1, len(CURVE) + 1)
    parity = {**DEFAULT_SETTINGS, "parity": True}
    envelope = build_envelope({"run_to_run": [(steps, np.full(len(steps), 1e-7))]}, Settings(parity))
    write_envelope(envelope, envelope_path(str(baseline), NETWORK, "parity"))
    parity_b = CURVE.copy()
    parity_b[PARITY_STEP - 1 :] *= 1.01
    inputs = [
        (write_run(results, "torch/torch", "mine", CURVE + 0.004, 0.901, seed=5), "mine"),
        (write_run(results, "keras/jax", LONG_ID, CURVE + 0.015, 0.905), LONG_ID),
        (write_run(results, "tensorflow/tensorflow", "far", CURVE + 0.5, 0.905), "far"),
        (write_run(results, "caffe/caffe", "hot", CURVE + 0.01, 0.90, learning_rate=0.025), "hot"),
        (write_run(results, "keras/torch", ESCAPED_ID, CURVE + 0.004, 0.901, seed=5), ESCAPED_ID),
        (write_run(results, "torch/torch", "drifted", CURVE + 0.3, 0.80, seed=6), "drifted"),
        (write_run(results, "torch/torch", "parity-a", CURVE, 0.90, parity=True), "parity-a"),
        (write_run(results, "keras/tensorflow", "parity-b", parity_b, 0.90, parity=True), "parity-b"),
        (write_run(results, "keras/torch", "apart", CURVE * (1 + 1e-8), APART_ACCURACY, parity=True), "apart"),
    ]
    return baseline, results, [f"{path}@{run_id}" for path, run_id in inputs]


def written(stdout: str) -> str:
    return re.search(r"^the report \(.*\n  (.+\.html)$", stdout, re.M).group(1)


@pytest.mark.slow  # Chromium, which `make test` installs and `make test-fast` does not
def test_the_report_opens_in_chromium_fits_1280_px_and_colours_each_verdict_as_it_reads(comparison, tmp_path, capsys):
    baseline, results, inputs = comparison
    heatmap = tmp_path / "localise.png"
    _heatmap_png(heatmap, width_px=2400)  # wider than the window: the page must scale it down
    assert main(inputs + ["--baseline", str(baseline), "--heatmap", str(heatmap)]) == 0
    out = capsys.readouterr().out
    page = written(out)
    layout = measure(page, WINDOW, 900, str(tmp_path / "profile"))
    pairs = len(inputs) * (len(inputs) - 1) // 2

    shot = tmp_path / "report.png"
    screenshot(page, str(shot), WINDOW, min(layout["scrollHeight"], 16000), str(tmp_path / "profile"))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(shot.read_bytes()[16:20], "big") == WINDOW

    assert layout["innerWidth"] == WINDOW and layout["scrollWidth"] <= WINDOW
    assert layout["tables"] and all(0 <= t["left"] and t["right"] <= WINDOW for t in layout["tables"])
    images = {image["alt"]: image for image in layout["images"]}
    assert images["per-layer localisation heatmap"]["naturalWidth"] == 2400
    assert all(image["naturalWidth"] > 0 and image["right"] <= WINDOW for image in images.values())

    # the answer first: one line under the title, what the console's summary opens with too
    answer = layout["answer"]
    console = out.split("\n\n")[0]  # the compare command's text opens with it, wrapped to the terminal
    assert answer["previous"] == "H1" and answer["text"] == " ".join(line.strip() for line in console.splitlines())
    assert layout["text"].index(answer["text"]) < layout["text"].index("Verdicts, pair by pair")

    # every verdict cell's colour is its class's: green agrees, red is beyond, orange ends far apart, grey no verdict
    for cell in layout["verdicts"]:
        red, green, blue = (int(v) for v in re.findall(r"\d+", cell["colour"])[:3])
        (kind,) = {"agree", "beyond", "apart", "none"} & set(cell["classes"])
        assert {
            "agree": green > red and green > blue,
            "beyond": red > green and red > blue and green == blue,
            "apart": red > green > blue,
        }.get(kind, red == green == blue), cell
    table = [cell for cell in layout["verdicts"] if cell["section"] == "verdicts"]
    assert len(table) == pairs  # every pair
    expected = {  # the known answers, against the first run where not said
        "within spread": "agree",  # keras/jax, as far from it as torch's seeds are
        "beyond spread": "beyond",  # tensorflow, 0.5 off the curve
        "settings differ: learning_rate 0.05 vs 0.025": "none",  # caffe at half the rate: no verdict
        "same": "agree",  # keras/torch, every loss the same
        "run-to-run": "none",  # torch against torch at one setting
        f"beyond drift at step {PARITY_STEP}": "beyond",  # parity-a vs parity-b, off by 1% from step 3
        # parity-a vs apart: within drift at every step, and 0.90 against 0.23 at the end: never green
        f"within drift; ends far apart: val acc gap {0.90 - APART_ACCURACY:.2f}": "apart",
    }
    for start, kind in expected.items():
        cells = [cell for cell in table if cell["text"].startswith(start)]
        assert cells and all(kind in cell["classes"] for cell in cells), (start, [cell["text"] for cell in table])
    # the answer counts the pairs the table shows red or orange, and names the first runs off
    differing = [cell for cell in table if {"beyond", "apart"} & set(cell["classes"])]
    assert answer["text"].startswith(f"{len(differing)} of {pairs} pairs differ for real: tensorflow/tensorflow far (")
    assert "beyond" in answer["classes"]

    # every in-page link reaches its target, and a verdict's target holds its numbers
    assert layout["links"] and all(link["target"] is not None for link in layout["links"])
    targets = {link["href"]: link["target"] for link in layout["links"]}
    for cell in table:
        assert cell["text"] in targets[cell["href"]] and "distance" in targets[cell["href"]]
    # parity-a vs parity-b (and parity-b vs apart, after it)
    parity = next(targets[cell["href"]] for cell in table if cell["text"] == f"beyond drift at step {PARITY_STEP}")
    assert f"step k (first step beyond){PARITY_STEP}" in parity and "drift envelope envelope_" in parity
    beyond = next(cell for cell in table if cell["text"].startswith("beyond spread"))
    assert (
        "p-value" in targets[beyond["href"]]
        and "seeds of torch/torch from the shipped baselines" in targets[beyond["href"]]
    )

    # each run against its own shipped seeds: reproduced, not, or not checked
    checks = {cell["text"].split(" ")[0]: cell for cell in layout["verdicts"] if cell["section"] == "baseline"}
    assert "agree" in checks["within"]["classes"] and "beyond" in checks["outside"]["classes"]
    assert "none" in checks["not"]["classes"]

    # text is text: a run id holding markup is shown as written, never parsed
    assert layout["italics"] == 0 and ESCAPED_ID in layout["text"] and LONG_ID in layout["text"]
    assert layout["text"].index("Verdicts, pair by pair") < layout["text"].index("Runs")  # what a reader wants first

    # no run id or backend broken inside, in any table or line (every fold opened); only an id no cell can hold may
    ids = layout["ids"]
    assert {"verdicts", "runs", "baseline", "evidence"} <= {i["section"] for i in ids}
    assert {ESCAPED_ID, "parity-b", "tensorflow/tensorflow", "keras"} <= {i["text"] for i in ids}
    assert all(i["lines"] == 1 for i in ids if "long" not in i["classes"]), [i for i in ids if i["lines"] != 1]
    assert {i["text"] for i in ids if "long" in i["classes"]} == {LONG_ID}

    # the evidence folds, pair by pair: closed, its first line the pair and its verdict, opened its picture
    folds = [fold for fold in layout["details"] if fold["section"] == "evidence"]
    assert [fold["inner"] for fold in folds] == [f"pair-{index}" for index in range(1, pairs + 1)]
    assert not any(fold["open"] for fold in folds) and all(fold["summaryHeight"] > 0 for fold in folds)
    for fold, cell in zip(folds, table):
        assert fold["summary"].startswith(f"{cell['href'][len('#pair-') :]}. ") and fold["summary"].endswith(
            cell["text"]
        )
    pictures = [image for image in layout["images"] if image["alt"].startswith("pair ")]
    assert [image["fold"] for image in pictures] == [fold["inner"] for fold in folds]
    assert all(image["naturalWidth"] > 800 and image["right"] <= WINDOW for image in pictures)
    # a verdict's link opens its pair's fold, and only that one
    (apart,) = [cell for cell in table if "apart" in cell["classes"]]
    linked = measure(page, WINDOW, 900, str(tmp_path / "profile"), fragment=apart["href"][1:])
    opened = [fold["inner"] for fold in linked["details"] if fold["open"]]
    assert opened == [apart["href"][1:]]


def test_no_comparison_replaces_another_report(comparison, capsys):
    baseline, results, inputs = comparison
    inputs = inputs[:4]  # what a report is named for, not every pair's picture: four runs are enough
    assert main(inputs + ["--baseline", str(baseline)]) == 0
    full = written(capsys.readouterr().out)
    with open(full, "rb") as handle:
        before = handle.read()
    # a later comparison that starts from the same run gets a file of its own
    assert main(inputs[:2] + ["--baseline", "none"]) == 0
    pair = written(capsys.readouterr().out)
    assert pair != full and os.path.dirname(pair) == os.path.dirname(full) == str(results / "compare")
    assert os.path.basename(pair).startswith("mine-") and os.path.basename(full).startswith("mine-")
    with open(full, "rb") as handle:
        assert handle.read() == before
    # named with --out, another comparison's file is refused, in one line, and left as it was
    assert main(inputs[:3] + ["--baseline", "none", "--out", full[: -len(".html")]]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{full} holds comparison " in error and "give another --out" in error
    with open(full, "rb") as handle:
        assert handle.read() == before
    # the same comparison again writes its own file again
    assert main(inputs[:2] + ["--baseline", "none"]) == 0
    assert written(capsys.readouterr().out) == pair
    # and a PNG no comparison wrote is not taken over
    stray = results / "compare" / "stray"
    (results / "compare" / "stray.png").write_bytes(b"\x89PNG other")
    assert main(inputs[:2] + ["--baseline", "none", "--out", str(stray)]) == 2
    assert "stray.png exists and is no comparison's plot" in capsys.readouterr().err


def test_a_report_is_named_for_every_run_it_compares_in_order():
    from types import SimpleNamespace

    from algorithms.analysis.report_files import comparison_key, default_prefix

    runs = [SimpleNamespace(path="r/a.csv", run_id="../x y/<z>"), SimpleNamespace(path="r/b.csv", run_id="b")]
    key = comparison_key(runs)
    # a run id is free text: no folder or markup reaches the file name
    assert default_prefix("out", runs) == os.path.join("out", f".._x_y_z_-{key}")
    assert key != comparison_key(runs[::-1]) and key != comparison_key(runs + [SimpleNamespace(path="c", run_id="c")])
    assert key != comparison_key([runs[0], SimpleNamespace(path="r/b.csv", run_id="b2")])


def test_a_missing_heatmap_is_refused_in_one_line(comparison, capsys):
    _, _, inputs = comparison
    assert main(inputs[:2] + ["--baseline", "none", "--heatmap", "/nowhere/heat.png"]) == 2
    assert "--heatmap /nowhere/heat.png: file not found" in capsys.readouterr().err


def _heatmap_png(path, width_px: int) -> None:
    """A frameworks x layers picture as wide as `width_px`: what the localisation writes."""
    figure, axis = pyplot().subplots(figsize=(width_px / 100, 3), dpi=100)
    axis.imshow(np.random.default_rng(0).random((4, 12)), aspect="auto")
    figure.savefig(path, dpi=100)
    pyplot().close(figure)
