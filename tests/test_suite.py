"""The main job's driver: runs the chosen frameworks and prints the table from their CSVs."""

import os
import re

import pytest

from algorithms.records import read_rows
from tests.conftest import run_script
from tests.helpers.flags import flags, run_flags


def run_all_on_torch_and_tensorflow(small_data, tmp_path, run_id: str, **more):
    """run_all.py: one epoch of each at batch 64 on the small data, its test file included."""
    argv = flags(only="torch,tensorflow", **more) + run_flags(
        small_data / "train.csv",
        tmp_path / "results",
        test=small_data / "test.csv",
        quiet=False,
        num_epochs=1,
        batch_size=64,
        run_id=run_id,
    )
    proc = run_script("run_all.py", argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_run_all_prints_a_table_row_per_framework(small_data, tmp_path):
    proc = run_all_on_torch_and_tensorflow(small_data, tmp_path, "suite-test")
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("framework"))
    assert lines[header].split()[:5] == ["framework", "backend", "device", "val", "acc"]
    torch_row = lines[header + 2].split()
    rows = read_rows(str(tmp_path / "results" / "cnn2d_3layer_fullconnected_3layer_torch.csv"), "suite-test")
    (test_row,) = [r for r in rows if r["phase"] == "test"]
    assert torch_row[:3] == ["torch", "torch", "cpu"] and float(torch_row[4]) == round(test_row["accuracy"], 4)
    assert lines[header + 3].split()[:2] == ["tensorflow", "tensorflow"]
    # the main job ends with the comparison of the run it made: the agreement as a matrix, a verdict per
    # framework against the first, a line per baseline check, then where the evidence is
    matrix = lines.index("test predictions agree (% of the 200 test images two frameworks label alike):")
    assert lines[matrix + 1].split() == ["torch", "tf"] and lines[matrix + 2].split()[:2] == ["torch", "-"]
    assert lines[matrix + 4].startswith("  median ") and "lowest" in lines[matrix + 4]
    against = lines.index("verdicts against torch/torch (the rule, the yardsticks and the evidence: the report):")
    assert lines[against + 1].split()[0] == "tensorflow/tensorflow"
    # the answer first (wrapped to the terminal): whether the one pair differs for real, then the verdicts it counts
    start = max(i for i in range(against) if not lines[i].strip()) + 1
    answer = " ".join(line.strip() for line in lines[start:against])
    assert re.fullmatch(r"the pair is within drift|1 of 1 pair differs for real: .+|no pair of 1 differs .+", answer)
    pictures = lines[lines.index("each pair's picture:") + 1].strip()
    assert os.listdir(pictures) == ["pair-1.png"]
    page = lines[next(i for i, line in enumerate(lines) if line.startswith("the evidence: the report")) + 1].strip()
    assert os.path.dirname(page) == str(tmp_path / "results" / "compare")
    assert os.path.basename(page).startswith("suite-test-")  # its run id, then the key of the runs compared
    assert os.path.getsize(page[: -len(".html")] + ".png") > 10_000
    html = open(page).read()
    assert "tensorflow/tensorflow suite-test" in html and "How often the frameworks' test predictions agree" in html
    assert "verdicts: same = every aligned loss bit-identical" in html  # the rule: on the page, not the console
    # after the runs, every line fits a 160-column terminal but a path too long for it, alone on its line
    summary = lines[header:]
    assert not [line for line in summary if len(line) >= 160 and len(line.split()) > 1], summary
    assert not any("unknown settings" in line for line in lines)
    # it ends with where its wall time went: each framework's process split from its rows
    split = lines.index(next(line for line in lines if line.startswith("framework       start-up s")))
    assert lines[split - 1].startswith("wall time: ") or lines[split - 2].startswith("wall time: ")
    for offset, name in enumerate(("torch", "tensorflow"), start=2):
        cells = lines[split + offset].split()
        start_up, check, training, test, total = (float(cell) for cell in cells[1:])
        assert cells[0] == name and abs(start_up + check + training + test - total) < 0.25
        table_row = lines[header + offset].split()
        assert abs(total - float(table_row[8])) <= 0.5  # the table's wall s: the same process
        rows = read_rows(str(tmp_path / "results" / f"cnn2d_3layer_fullconnected_3layer_{name}.csv"), "suite-test")
        assert training == round(max(r["wall_time_s"] for r in rows if r["phase"] != "test"), 1)
        assert check > 0 and test > 0 and start_up > 0
    assert lines[split + 4].startswith("all frameworks")
    assert not any(line.startswith("BLAS") for line in lines)  # neither framework computes in OpenBLAS
    # and the run's curves reach TensorBoard, one run directory per framework
    assert sorted(p.name for p in (tmp_path / "results" / "tensorboard" / "suite-test").iterdir()) == [
        "tensorflow",
        "torch",
    ]


def test_run_all_rejects_an_unknown_framework(tmp_path):
    proc = run_script("run_all.py", ["--only", "torch,mxnet"])
    assert proc.returncode == 2 and "--only: unknown mxnet" in proc.stderr


def test_the_readme_table_of_what_each_framework_runs_is_current():
    from algorithms.registry.capabilities import markdown_table
    from algorithms.paths import REPO_ROOT

    with open(os.path.join(REPO_ROOT, "README.md")) as handle:
        assert markdown_table() in handle.read(), "README is stale: paste `python -m algorithms.registry.capabilities`"


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_run_all_with_seeds_judges_same_seed_pairs_by_drift_and_other_seeds_by_their_band(small_data, tmp_path):
    """--seeds 0,1: every framework twice. No shipped envelope covers the small data, so the
    first run measures its own yardstick and each same-seed pair gets a drift verdict; a pair
    of two seeds is judged against the seeds' spread (in the report); the test predictions'
    agreement is printed from the submissions."""
    import re

    out = run_all_on_torch_and_tensorflow(small_data, tmp_path, "seeds", seeds="0,1").stdout
    for seed in (0, 1):
        rows = read_rows(str(tmp_path / "results" / "cnn2d_3layer_fullconnected_3layer_torch.csv"), f"seeds-seed{seed}")
        assert rows and rows[0]["run_id"] == f"seeds-seed{seed}"
    verdicts = out[out.index("verdicts against torch/torch") :].split("\n\n")[0].splitlines()
    (line,) = [line for line in verdicts if line.strip().startswith("tensorflow/tensorflow ") and "seed1" not in line]
    assert re.search(r"(within|beyond) drift.* · val acc gap [0-9.]+", line), line
    assert "run-to-run" in out  # torch's seed 1 against its seed 0
    (report,) = (tmp_path / "results" / "compare").glob("seeds-seed0-*.html")
    spread = re.findall(r"(?:within|beyond) spread \(p=[0-9.e+-]+\)", report.read_text())
    assert spread, "no pair of two seeds judged against the seeds' band in the report"
    agreement = re.search(r"  median ([0-9.]+)%; lowest", out)
    assert agreement and 0 <= float(agreement.group(1)) <= 100, out


def test_the_main_command_converges_by_default_and_keeps_the_preset_one_flag_away():
    from algorithms.network.networks import CNN2D_2LAYER, CNN2D_3LAYER
    from algorithms.studies.suite import main_command_flags

    flags, note = main_command_flags(CNN2D_3LAYER, ["--num_epochs", "3"], "main")
    assert flags == ["--num_epochs", "3", "--batch_size", "100"] and "--preset original" in note
    assert main_command_flags(CNN2D_3LAYER, [], "original") == ([], "")
    assert main_command_flags(CNN2D_3LAYER, ["--batch_size", "32"], "main") == (["--batch_size", "32"], "")
    assert main_command_flags(CNN2D_2LAYER, [], "main") == ([], "")  # its preset (batch 50) converges


def test_run_all_rejects_bad_seeds():
    for seeds, message in (
        ("0", "give two or more different seeds"),
        ("0,x", "expected whole numbers"),
        ("1,1", "give two or more different seeds"),
    ):
        proc = run_script("run_all.py", ["--seeds", seeds])
        assert proc.returncode == 2 and message in proc.stderr, (seeds, proc.stderr)
    proc = run_script("run_all.py", ["--seeds", "0,1", "--seed", "3"])
    assert proc.returncode == 2 and "--seeds and --seed" in proc.stderr


def test_pairwise_agreement_of_test_predictions(tmp_path):
    import numpy as np
    import pytest

    from algorithms.analysis.agreement import format_agreement, pairwise_agreement, read_predictions
    from algorithms.errors import InputError
    from algorithms.session.recorder import write_predictions

    labels = np.arange(100) % 10
    other = labels.copy()
    other[:7] = (other[:7] + 1) % 10  # 7 of 100 differ
    for name, values in (("a", labels), ("b", other)):
        write_predictions(str(tmp_path / f"{name}.csv"), values)
    shuffled = tmp_path / "a_shuffled.csv"
    lines = (tmp_path / "a.csv").read_text().splitlines()
    shuffled.write_text("\n".join([lines[0]] + lines[1:][::-1]) + "\n")  # ImageId order restored on reading
    predictions = {name: read_predictions(str(tmp_path / f"{name}.csv")) for name in ("a", "b", "a_shuffled")}
    pairs = {(a, b): share for a, b, share in pairwise_agreement(predictions)}
    assert pairs[("a", "b")] == pytest.approx(0.93) and pairs[("a", "a_shuffled")] == 1.0
    assert "lowest 93.0% (a vs b)" in format_agreement(list(pairwise_agreement(predictions)), 100)
    (tmp_path / "bad.csv").write_text("id,label\n1,2\n")
    with pytest.raises(InputError, match="expected the header ImageId,Label"):
        read_predictions(str(tmp_path / "bad.csv"))
