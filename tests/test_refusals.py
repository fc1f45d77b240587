"""What a user can get wrong, tried with real torch runs on small data: flag
combinations, --resume of another run, results that cannot be written (read-only,
a full disk), input that changes while it is read. Each ends in one line on stderr
with status 2 (input) or 3 (resources), nothing half-written, every finished row kept."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time

import pytest

from algorithms.dataset.data import load_dataset
from algorithms.network.parallel import layer_stages
from algorithms.paths import REPO_ROOT
from algorithms.records import CSV_COLUMNS, read_rows
from algorithms.network.networks import NETWORKS, Conv2D, Dense, ZeroPad2D
from tests.conftest import run_script

CSV_NAME = "cnn2d_3layer_fullconnected_3layer_torch.csv"
SHORT = ["--max_steps", "2", "--batch_size", "32", "--quiet"]


def _common(small_data, tmp_path, test: bool = False) -> list:
    return [
        "--train",
        str(small_data / "train.csv"),
        "--test",
        str(small_data / "test.csv") if test else "none",
        "--results_dir",
        str(tmp_path / "results"),
    ]


def _one_line(proc, status: int, expected: str) -> None:
    err = proc.stderr.strip()
    assert proc.returncode == status and err.startswith("error: ") and "\n" not in err, proc.stderr[-2000:]
    assert expected in err, err


def _blocks(log) -> int:
    return sum(line.startswith("=== ") for line in log.read_text().splitlines()) if log.exists() else 0


# --------------------------------------------------------------------------- a folder for a file


def test_a_folder_for_each_input_is_refused_as_docs_running_md_says(small_data, tmp_path):
    """running.md said any directory is refused with "is a directory"; only --test_labels
    is (--train and --test take a folder of images). Each input flag given an empty folder:
    the page names the flags whose refusal says "is a directory", and quotes the others'."""
    from algorithms.errors import InputError
    from algorithms.run.entry import prepare

    folder = tmp_path / "empty"
    folder.mkdir()
    train, test = str(small_data / "train.csv"), str(small_data / "test.csv")
    refusals = {}
    for flag, argv in (
        ("--train", ["--train", str(folder)]),
        ("--test", ["--train", train, "--test", str(folder)]),
        ("--test_labels", ["--train", train, "--test", test, "--test_labels", str(folder)]),
    ):
        with pytest.raises(InputError) as refused:
            prepare(argv + ["--results_dir", str(tmp_path / "results")], "torch_script.py", "")
        message = str(refused.value)
        assert message.startswith(f"{folder}: "), message
        refusals[flag] = message.removeprefix(f"{folder}: ").split(";")[0]
    with open(os.path.join(REPO_ROOT, "docs", "running.md"), encoding="utf-8") as handle:
        text = " ".join(handle.read().split())
    start = text.find("- a directory")
    assert start >= 0, "docs/running.md: no line on a directory given as input"
    claim = text[start:].split(" - ")[0]
    for flag, reason in refusals.items():
        assert f'"{reason}' in claim, (flag, reason, claim)
        assert (f'`{flag}` ("is a directory' in claim) == (reason == "is a directory"), (flag, claim)
    assert not (tmp_path / "results").exists()


# --------------------------------------------------------------------------- flag combinations


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--strategy", "data", "--devices", "3"], "--batch_size 32 does not divide evenly across --devices (3)"),
        (["--strategy", "hybrid", "--devices", "4", "--batch_size", "33"], "the 2 data-parallel replicas"),
        (["--strategy", "pipeline", "--devices", "2", "--micro_batches", "64"], "more than the batch of 32"),
        (["--strategy", "data", "--devices", "1"], "--strategy data needs --devices 2 or more"),
        (["--devices", "0"], "--devices: must be 1 or more"),
        (["--devices", "2"], "strategy 'single' runs on one device"),
        (["--strategy", "model", "--devices", "9"], "only 6 layers with weights"),
        (["--strategy", "tensor", "--devices", "64"], "use --devices 32 or fewer"),
        (["--accumulate", "40"], "= 1280 samples per optimizer step, more than the 480 training rows"),
        (["--batch_size", "5000"], "--batch_size 5000: more than the 480 training rows"),
    ],
)
def test_a_flag_combination_that_cannot_run_is_one_line(small_data, tmp_path, flags, expected):
    proc = run_script("torch_script.py", _common(small_data, tmp_path) + SHORT + flags)
    _one_line(proc, 2, expected)
    assert not (tmp_path / "results").exists() and not (tmp_path / "results.log").exists()


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_the_presets_batch_above_the_training_rows_still_runs(small_data, tmp_path):
    """Small files at the preset's settings (batch 1000 on 480 rows): every step takes them all."""
    proc = run_script("torch_script.py", _common(small_data, tmp_path) + ["--max_steps", "1", "--quiet"])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_stages_never_split_a_padded_convolution_and_each_trains_something():
    for network in NETWORKS.values():
        weighted = sum(isinstance(layer, (Conv2D, Dense)) for layer in network.layers)
        for count in range(3, weighted + 1):
            stages = layer_stages(network, count)
            assert len(stages) == count and stages[0][0] == 0 and stages[-1][1] == len(network.layers)
            for start, stop in stages:
                assert start == 0 or not isinstance(network.layers[start - 1], ZeroPad2D), (count, stages)
                assert any(isinstance(layer, (Conv2D, Dense)) for layer in network.layers[start:stop]), stages


@pytest.mark.slow
def test_model_parallel_on_three_devices_runs(small_data, tmp_path):
    """It cut between a ZeroPad2D and its conv: the ranks died in gloo with a size mismatch."""
    proc = run_script(
        "torch_script.py", _common(small_data, tmp_path) + SHORT + ["--strategy", "model", "--devices", "3"]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in read_rows(str(tmp_path / "results" / CSV_NAME)) if r["phase"] == "train"] == [1, 2]


# --------------------------------------------------------------------------- --resume


@pytest.fixture
def checkpointed(small_data, tmp_path):
    """A 2-step torch run r1 checkpointed at both steps; returns its flags."""
    common = _common(small_data, tmp_path) + ["--batch_size", "32", "--quiet"]
    done = run_script("torch_script.py", common + ["--max_steps", "2", "--checkpoint_every", "1", "--run_id", "r1"])
    assert done.returncode == 0, done.stderr[-2000:]
    return common


def _unchanged(tmp_path, run):
    csv_path, log = tmp_path / "results" / CSV_NAME, tmp_path / "results.log"
    before = (csv_path.read_bytes(), log.read_bytes())
    run()
    assert (csv_path.read_bytes(), log.read_bytes()) == before, "a refused resume wrote results"


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
def test_resume_of_an_unknown_id_or_past_max_steps_is_refused(checkpointed, tmp_path):
    def unknown():
        proc = run_script("torch_script.py", checkpointed + ["--resume", "nope"])
        _one_line(proc, 2, "--resume nope: no complete checkpoint in")
        assert "(runs with checkpoints there: r1)" in proc.stderr

    def past_max_steps():  # it trained a step 3 past --max_steps 2
        proc = run_script("torch_script.py", checkpointed + ["--resume", "r1", "--max_steps", "2"])
        _one_line(proc, 2, "--resume r1 --max_steps 2: its latest checkpoint is at step 2 already")

    def other_flags():
        proc = run_script("torch_script.py", checkpointed + ["--resume", "r1", "--accumulate", "2"])
        _one_line(proc, 2, "the flags differ from the checkpointed run's: accumulate 1 -> 2")

    for attempt in (unknown, past_max_steps, other_flags):
        _unchanged(tmp_path, attempt)


@pytest.mark.slow
def test_resume_of_a_torch_run_with_tensorflow_names_the_framework(checkpointed, tmp_path):
    def with_tensorflow():
        proc = run_script("tensorflow_script.py", checkpointed + ["--resume", "r1"])
        err = proc.stderr.strip().splitlines()[-1]  # TensorFlow's own start-up lines come first
        assert proc.returncode == 2 and err.startswith("error: "), proc.stderr[-2000:]
        assert "run r1 was checkpointed as cnn2d_3layer_fullconnected_3layer_torch" in err

    _unchanged(tmp_path, with_tensorflow)


# --------------------------------------------------------------------------- results that cannot be written


def _read_only_run(folder, argv: list):
    """Runs torch_script.py with `folder` read-only: a read-only bind mount in a
    private mount namespace (root can write through a chmod), else chmod."""
    command = [sys.executable, os.path.join(REPO_ROOT, "torch_script.py"), *argv]
    if shutil.which("unshare") and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0:
        mount = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
        command = ["unshare", "-rm", "sh", "-c", mount, "sh", *command]
    elif os.geteuid() == 0:
        pytest.skip("root without unshare: no way to make a folder read-only")
    else:
        os.chmod(folder, 0o555)
    try:
        return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    finally:
        os.chmod(folder, 0o755)


@pytest.mark.parametrize("which", ["results_dir", "results_log"])
def test_a_read_only_results_folder_is_one_line_status_3(small_data, tmp_path, which):
    folder = tmp_path / "read_only"
    folder.mkdir()
    argv = _common(small_data, tmp_path) + SHORT
    argv += ["--results_dir", str(folder)] if which == "results_dir" else ["--results_log", str(folder / "r.log")]
    proc = _read_only_run(folder, argv)
    _one_line(proc, 3, f"--{which} {folder}: cannot be written (")
    assert "pass a writable --" in proc.stderr
    assert list(folder.iterdir()) == [] and not (tmp_path / "results" / CSV_NAME).exists()


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_results_paths_of_the_wrong_kind(small_data, tmp_path):
    (tmp_path / "a_file").write_text("")
    proc = run_script(
        "torch_script.py", _common(small_data, tmp_path) + SHORT + ["--results_dir", str(tmp_path / "a_file")]
    )
    _one_line(proc, 2, "is a file, not a folder")
    (tmp_path / "log_folder").mkdir()
    proc = run_script(
        "torch_script.py", _common(small_data, tmp_path) + SHORT + ["--results_log", str(tmp_path / "log_folder")]
    )
    _one_line(proc, 2, "is a folder; pass a file name")
    assert not (tmp_path / "results").exists()
    # a --results_log in a folder that does not exist: made, like --results_dir
    log = tmp_path / "new" / "sub" / "results.log"
    proc = run_script("torch_script.py", _common(small_data, tmp_path) + SHORT + ["--results_log", str(log)])
    assert proc.returncode == 0 and _blocks(log) == 1, proc.stderr[-2000:]


def _run_with_file_size_limit(small_data, tmp_path, limit: int, steps: int):
    """The disk full after `limit` bytes of any one file (RLIMIT_FSIZE; Python ignores
    SIGXFSZ, so a write past it is cut short, then fails with EFBIG)."""
    load_dataset(str(small_data / "train.csv"), None, None, 0.2, 0)  # its cache exists: the limit hits the results
    command = [sys.executable, os.path.join(REPO_ROOT, "torch_script.py")]
    command += _common(small_data, tmp_path) + ["--max_steps", str(steps), "--batch_size", "32", "--quiet"]
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )


def _whole_rows(csv_path) -> list:
    text = csv_path.read_text()
    assert text.endswith("\n"), "a half-written row"
    assert all(line.count(",") == len(CSV_COLUMNS) - 1 for line in text.splitlines())
    return read_rows(str(csv_path))


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_a_disk_full_midway_keeps_every_finished_row_and_says_why(small_data, tmp_path):
    proc = _run_with_file_size_limit(small_data, tmp_path, 4000, steps=30)
    _one_line(proc, 3, "error: cannot write ")
    assert "free some space" in proc.stderr
    rows = _whole_rows(tmp_path / "results" / CSV_NAME)
    steps = [r["step"] for r in rows if r["phase"] == "train"]
    assert 5 < len(steps) < 30 and steps == list(range(1, len(steps) + 1))
    assert f"after step {len(steps)} " in proc.stderr and f"the rows of the {len(steps)} finished steps" in proc.stderr
    log = (tmp_path / "results.log").read_text()
    assert _blocks(tmp_path / "results.log") == 1 and f"status:      failed: cannot write {tmp_path}" in log


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_a_disk_too_full_for_the_log_block_leaves_no_half_block(small_data, tmp_path):
    proc = _run_with_file_size_limit(small_data, tmp_path, 1500, steps=10)
    _one_line(proc, 3, "(no results.log block: ")
    _whole_rows(tmp_path / "results" / CSV_NAME)
    assert (tmp_path / "results.log").read_text() == ""


def test_a_disk_full_before_the_header_leaves_no_csv(small_data, tmp_path):
    proc = _run_with_file_size_limit(small_data, tmp_path, 100, steps=2)
    _one_line(proc, 3, f"{CSV_NAME}: cannot be written (")
    assert list((tmp_path / "results").iterdir()) == [] and not (tmp_path / "results.log").exists()


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            ",".join(CSV_COLUMNS[::-1]) + "\n",
            "other columns than this version writes (has the columns in another order)",
        ),
        ("step,loss\n", "other columns than this version writes (lacks run_id, "),
        (",".join(CSV_COLUMNS) + "\nr0,torch,torch,cnn", "its last line is cut off (no line end)"),
    ],
)
def test_a_results_csv_rows_cannot_be_appended_to_is_refused(small_data, tmp_path, content, expected):
    csv_path = tmp_path / "results" / CSV_NAME
    csv_path.parent.mkdir()
    csv_path.write_text(content)
    proc = run_script("torch_script.py", _common(small_data, tmp_path) + SHORT)
    _one_line(proc, 2, expected)
    assert csv_path.read_text() == content and not (tmp_path / "results.log").exists()


# --------------------------------------------------------------------------- input files


def test_a_train_csv_that_grows_while_it_is_read_is_refused(full_data, tmp_path):
    growing = tmp_path / "train.csv"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "lines = open(sys.argv[1]).readlines()\n"
            "out = open(sys.argv[2], 'w'); out.writelines(lines[:2001]); out.flush()\n"
            "i = 1\n"
            "while True:\n"
            "    out.write(lines[i]); out.flush(); i = i % 2000 + 1; time.sleep(0.001)\n",
            str(full_data / "train.csv"),
            str(growing),
        ]
    )
    try:
        while not growing.exists() or growing.stat().st_size < 3_000_000:
            time.sleep(0.05)
        proc = run_script(
            "torch_script.py",
            ["--train", str(growing), "--test", "none", "--results_dir", str(tmp_path / "results")] + SHORT,
        )
    finally:
        writer.kill()
        writer.wait()
    _one_line(proc, 2, f"{growing}: changed while it was read (")
    assert not (tmp_path / "results").exists() and not os.path.exists(str(growing) + ".cache")


@pytest.mark.parametrize(
    "labels, expected", [(150, "no label for ImageId 151 (50 missing)"), (201, "201 labels for the 200 images of")]
)
def test_test_labels_that_do_not_match_the_test_file(small_data, tmp_path, labels, expected):
    lines = (small_data / "test_labels.csv").read_text().splitlines()[1:]
    rows = [lines[i % len(lines)].split(",")[1] for i in range(labels)]
    path = tmp_path / "labels.csv"
    path.write_text("ImageId,Label\n" + "".join(f"{i},{label}\n" for i, label in enumerate(rows, start=1)))
    proc = run_script(
        "torch_script.py", _common(small_data, tmp_path, test=True) + SHORT + ["--test_labels", str(path)]
    )
    _one_line(proc, 2, expected)
    assert f"{small_data / 'test.csv'}" in proc.stderr and not (tmp_path / "results").exists()
