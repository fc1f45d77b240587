"""The main job's driver: runs the chosen frameworks and prints the table from their CSVs."""

from algorithms.recorder import read_rows
from tests.conftest import run_script


def test_run_all_prints_a_table_row_per_framework(small_data, tmp_path):
    proc = run_script(
        "run_all.py",
        [
            "--only",
            "torch,tensorflow",
            "--train",
            str(small_data / "train.csv"),
            "--test",
            str(small_data / "test.csv"),
            "--num_epochs",
            "1",
            "--batch_size",
            "64",
            "--results_dir",
            str(tmp_path / "results"),
            "--run_id",
            "suite-test",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("framework"))
    assert lines[header].split()[:4] == ["framework", "backend", "val", "acc"]
    torch_row = lines[header + 2].split()
    rows = read_rows(str(tmp_path / "results" / "cnn2d_3layer_fullconnected_3layer_torch.csv"), "suite-test")
    (test_row,) = [r for r in rows if r["phase"] == "test"]
    assert torch_row[:2] == ["torch", "torch"] and float(torch_row[3]) == round(test_row["accuracy"], 4)
    assert lines[header + 3].split()[:2] == ["tensorflow", "tensorflow"]
    # the main job ends with the comparison of the run it made
    against = lines.index("against torch/torch suite-test:")
    assert lines[against + 1].split()[:2] == ["tensorflow/tensorflow", "suite-test"]
    assert (tmp_path / "results" / "compare" / "suite-test.png").stat().st_size > 10_000
    assert "tensorflow/tensorflow suite-test" in (tmp_path / "results" / "compare" / "suite-test.html").read_text()
    # and the run's curves reach TensorBoard, one run directory per framework
    assert sorted(p.name for p in (tmp_path / "results" / "tensorboard" / "suite-test").iterdir()) == [
        "tensorflow",
        "torch",
    ]


def test_run_all_rejects_an_unknown_framework(tmp_path):
    proc = run_script("run_all.py", ["--only", "torch,mxnet"])
    assert proc.returncode == 2 and "--only: unknown mxnet" in proc.stderr


def test_the_readme_table_of_what_each_framework_runs_is_current():
    import os

    from algorithms.capabilities import markdown_table
    from algorithms.paths import REPO_ROOT

    with open(os.path.join(REPO_ROOT, "README.md")) as handle:
        assert markdown_table() in handle.read(), "README is stale: paste `python -m algorithms.capabilities`"
