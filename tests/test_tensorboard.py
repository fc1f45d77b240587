"""Results CSVs reach TensorBoard: the rows written by the real recorder, converted,
read back with TensorBoard's own reader, equal the CSV's values and steps; a run
converted twice is not doubled; two frameworks of one run are two run directories."""

import os
import subprocess
import sys
from datetime import datetime, timezone

import numpy as np
import pytest

from algorithms.paths import REPO_ROOT
from algorithms.session.recorder import ResultsCsv
from algorithms.records import read_rows, results_csv_name
from algorithms.analysis.tensorboard import TAGS, export_run, load_writer, main, write_run

pytest.importorskip("tensorboard", reason="tensorboard is in requirements.txt: pip install -r requirements.txt")
load_writer()  # before the reader, so that both use TensorBoard's pure-Python file layer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

RUN = "20260102T030405Z-ab12"


def write_csv(results_dir, framework, backend, run_id=RUN, steps=4, steps_per_epoch=2):
    """A run's rows as a session writes them: train steps, a validation row per epoch, a test row."""
    identity = dict(framework=framework, backend=backend, network="net", strategy="single", devices=1, global_batch=8)
    path = str(results_dir / results_csv_name("net", framework, backend))
    writer = ResultsCsv(path, {"run_id": run_id, **identity})
    for step in range(1, steps + 1):
        epoch = (step - 1) // steps_per_epoch + 1
        writer.write(
            epoch=epoch,
            step=step,
            phase="train",
            loss=2.3 / step,
            accuracy=0.1 * step,
            learning_rate=0.05,
            step_time_ms=10.0 + step,
            data_time_ms=0.5,
            samples_per_sec=800.0 - step,
            wall_time_s=0.25 * step,
        )
        if step % steps_per_epoch == 0:
            writer.write(
                epoch=epoch,
                step=step,
                phase="val",
                loss=1.0 / step,
                accuracy=0.5 + 0.01 * step,
                wall_time_s=0.25 * step + 0.1,
            )
    writer.write(epoch=epoch, step=steps, phase="test", loss=0.7, accuracy=0.8, wall_time_s=0.25 * steps + 0.2)
    writer.close()
    return path


def read_events(directory) -> dict:
    """tag -> [(step, value, wall time)] as TensorBoard reads the run directory."""
    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)), e.wall_time) for e in accumulator.Tensors(tag)]
        for tag in accumulator.Tags()["tensors"]
    }


def expected_events(path, run_id=RUN) -> dict:
    expected = {}
    for row in read_rows(path, run_id):
        for tag, column in TAGS[row["phase"]].items():
            if row[column] is not None:
                expected.setdefault(tag, []).append((row["step"], float(np.float32(row[column]))))
    return expected


def test_every_row_reaches_tensorboard_with_its_step_and_value(tmp_path):
    path = write_csv(tmp_path, "torch", "torch")
    logdir = tmp_path / "tb"
    assert main([f"{path}@{RUN}", "--logdir", str(logdir)]) == 0
    events = read_events(logdir / RUN / "torch")
    assert {tag: [(step, value) for step, value, _ in points] for tag, points in events.items()} == expected_events(
        path
    )
    assert set(events) == {
        "train/loss",
        "train/accuracy",
        "train/learning_rate",
        "time/step_time_ms",
        "time/data_time_ms",
        "time/samples_per_sec",
        "val/loss",
        "val/accuracy",
        "test/loss",
        "test/accuracy",
    }  # no comm_time_ms: a single-device run has none
    # wall time: the run id's start (no results.log here) plus the row's wall_time_s
    start = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    assert [wall for _, _, wall in events["train/loss"]] == pytest.approx([start + 0.25 * s for s in range(1, 5)])


def test_the_start_comes_from_results_log_when_it_has_the_run(tmp_path):
    results = tmp_path / "results"
    path = write_csv(results, "torch", "torch", run_id="my-run")
    (tmp_path / "results.log").write_text(
        "=== my-run · net · torch/torch · completed\nstart:  2026-03-04 05:06:07 UTC\n"
    )
    export_run([path], "my-run", str(tmp_path / "tb"))
    (first, *_) = read_events(tmp_path / "tb" / "my-run" / "torch")["train/loss"]
    assert first[2] == pytest.approx(datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone.utc).timestamp() + 0.25)


def test_converting_a_run_twice_replaces_it(tmp_path):
    path = write_csv(tmp_path, "torch", "torch")
    logdir = tmp_path / "tb"
    assert main([path, "--logdir", str(logdir)]) == 0
    assert main([path, "--logdir", str(logdir)]) == 0
    directory = logdir / RUN / "torch"
    assert len(os.listdir(directory)) == 1
    assert [step for step, _, _ in read_events(directory)["train/loss"]] == [1, 2, 3, 4]


def test_a_conversion_that_fails_half_way_leaves_the_previous_one_whole(tmp_path):
    path = write_csv(tmp_path, "torch", "torch")
    logdir = tmp_path / "tb"
    assert main([path, "--logdir", str(logdir)]) == 0
    (previous,) = os.listdir(logdir / RUN / "torch")

    class FullDisk(load_writer()):
        def add_scalar(self, tag, *args, **kwargs):
            if tag == "val/loss":
                raise OSError(28, "No space left on device")
            super().add_scalar(tag, *args, **kwargs)

    with pytest.raises(OSError):
        write_run(FullDisk, path, RUN, str(logdir))
    assert os.listdir(logdir / RUN / "torch") == [previous]
    assert [step for step, _, _ in read_events(logdir / RUN / "torch")["train/loss"]] == [1, 2, 3, 4]


def test_two_frameworks_of_one_run_are_two_run_directories_the_legacy_env_too(tmp_path, capsys):
    torch_csv = write_csv(tmp_path, "torch", "torch")
    lasagne_csv = write_csv(tmp_path, "lasagne", "theano", steps=6, steps_per_epoch=3)  # written in .venv-legacy
    export_run([torch_csv, lasagne_csv], RUN, str(tmp_path / "tb"))
    assert sorted(os.listdir(tmp_path / "tb" / RUN)) == ["lasagne", "torch"]
    lasagne = read_events(tmp_path / "tb" / RUN / "lasagne")
    assert {tag: [(s, v) for s, v, _ in points] for tag, points in lasagne.items()} == expected_events(lasagne_csv)
    assert f"--logdir {tmp_path / 'tb' / RUN}" in capsys.readouterr().out


def test_every_run_of_a_file_without_a_run_id(tmp_path):
    path = write_csv(tmp_path, "keras", "jax", run_id="a")
    write_csv(tmp_path, "keras", "jax", run_id="b", steps=2)
    assert main([path, "--logdir", str(tmp_path / "tb")]) == 0
    assert [s for s, _, _ in read_events(tmp_path / "tb" / "b" / "keras_jax")["train/loss"]] == [1, 2]
    assert len(read_events(tmp_path / "tb" / "a" / "keras_jax")["train/loss"]) == 4


def cli(*args):
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from algorithms.analysis.tensorboard import main; code = main(sys.argv[1:]); "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'; sys.exit(code)",
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_loads_no_framework_and_prints_how_to_look(tmp_path):
    path = write_csv(tmp_path, "caffe", "caffe")
    proc = cli(path, "--logdir", str(tmp_path / "tb"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith(f"tensorboard --logdir {tmp_path / 'tb'}")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: [write_csv(d, "torch", "torch"), str(d / "missing.csv")], "missing.csv: file not found"),
        (lambda d: [str(d)], "is a directory"),
        (lambda d: [(d / "x.csv").write_text("a,b\n1,2\n") and str(d / "x.csv")], "x.csv:1: not a results CSV"),
        (lambda d: [(d / "x.csv").write_bytes(b"\x1f\x8b\x08\xff\xfe") and str(d / "x.csv")], "not a text file"),
        (lambda d: [write_csv(d, "torch", "torch") + "@nope"], "no run 'nope'"),
    ],
)
def test_a_bad_input_is_one_line_and_exit_2_and_nothing_written(tmp_path, make, message):
    proc = cli(*make(tmp_path), "--logdir", str(tmp_path / "tb"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "tb").exists()


def test_without_tensorboard_the_main_command_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    def missing():
        raise ImportError("No module named 'tensorboard'")

    monkeypatch.setattr("algorithms.analysis.tensorboard.load_writer", missing)
    export_run([write_csv(tmp_path, "torch", "torch")], RUN, str(tmp_path / "tb"))
    assert capsys.readouterr().out.strip().splitlines() == [
        "tensorboard: not installed in this Python, so no event files; "
        "pip install -r requirements.txt (or make setup) installs it"
    ]
    assert not (tmp_path / "tb").exists()
