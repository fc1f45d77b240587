"""Result rows: appended, never rewritten; parsed back; a foreign file refused."""

import os

import pytest

from algorithms.errors import InputError
from algorithms.records import (
    CSV_COLUMNS,
    WARMUP_STEPS,
    read_rows,
    results_csv_name,
    run_ids,
    steady_state_ms,
    summarize_rows,
)
from algorithms.session.recorder import ResultsCsv

IDENTITY = {
    "framework": "torch",
    "backend": "torch",
    "network": "net",
    "strategy": "single",
    "devices": 1,
    "global_batch": 4,
}


def test_csv_name_carries_the_backend_only_when_it_differs():
    assert results_csv_name("net", "keras", "jax") == "net_keras_jax.csv"
    assert results_csv_name("net", "torch", "torch") == "net_torch.csv"


def test_a_second_run_appends_and_rows_parse_back(tmp_path):
    path = str(tmp_path / "r" / "net_torch.csv")
    for run, losses in (("a", [2.3, 2.1]), ("b", [2.2])):
        writer = ResultsCsv(path, {"run_id": run, **IDENTITY})
        for step, loss in enumerate(losses, start=1):
            writer.write(
                epoch=1,
                step=step,
                phase="train",
                loss=loss,
                accuracy=0.5,
                learning_rate=0.05,
                step_time_ms=10.0,
                data_time_ms=1.0,
                samples_per_sec=400.0,
                wall_time_s=0.1 * step,
            )
        writer.write(epoch=1, step=len(losses), phase="val", loss=1.5, accuracy=0.75)
        writer.close()
    with open(path) as handle:
        lines = handle.read().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS) and len(lines) == 1 + 3 + 2  # one header, both runs' rows
    assert run_ids(path) == ["a", "b"]
    rows = read_rows(path, "a")
    assert [r["loss"] for r in rows] == [2.3, 2.1, 1.5] and rows[0]["devices"] == 1
    assert rows[-1]["step_time_ms"] is None  # empty cells read back as None
    summary = summarize_rows(rows)
    assert summary["val_accuracy"] == 0.75 and summary["train_loss"] == pytest.approx(2.2)


def test_floats_round_trip_exactly(tmp_path):
    path = str(tmp_path / "net_torch.csv")
    writer = ResultsCsv(path, {"run_id": "x", **IDENTITY})
    value = 0.1 + 0.2  # 0.30000000000000004: a rounded format would lose it
    writer.write(epoch=1, step=1, phase="train", loss=value)
    writer.close()
    assert read_rows(path)[0]["loss"] == value


def test_a_file_with_other_columns_is_refused(tmp_path):
    path = tmp_path / "net_torch.csv"
    path.write_text("step,loss\n1,2.3\n")
    with pytest.raises(InputError, match="net_torch.csv:1: this results file has other columns"):
        ResultsCsv(str(path), {"run_id": "x", **IDENTITY})


def test_steady_state_median_skips_the_warmup_steps():
    times = [900.0, 500.0, 300.0] + [10.0, 12.0, 11.0]
    assert WARMUP_STEPS == 3 and steady_state_ms(times) == 11.0
    assert steady_state_ms([5.0, 7.0]) == 6.0  # too few steps: all of them


OLD_COLUMNS = CSV_COLUMNS[: CSV_COLUMNS.index("comm_time_ms") + 1]  # before worker, staleness, loss_scale, device


def old_schema_file(path) -> str:
    text = ",".join(OLD_COLUMNS) + "\n" + "old,torch,torch,net,single,1,4,1,1,train,2.3,0.5,0.05,10.0,1.0,400.0,0.1,\n"
    text += "old,torch,torch,net,single,1,4,1,1,val,2.2,0.5,0.05,5.0,,800.0,0.2,\n"
    path.write_text(text)
    return text


def test_rows_of_the_schema_before_worker_and_staleness_read_as_synchronous_ones(tmp_path):
    path = tmp_path / "net_torch.csv"
    old_schema_file(path)
    train, val = read_rows(str(path))
    assert (train["worker"], train["staleness"], train["loss"]) == (0, 0, 2.3)
    assert (val["worker"], val["staleness"]) == (None, None)


def test_appending_to_an_older_schema_file_rewrites_it_with_todays_columns_keeping_its_rows(tmp_path, capsys):
    path = tmp_path / "net_torch.csv"
    old_schema_file(path)
    writer = ResultsCsv(str(path), {"run_id": "new", **IDENTITY, "strategy": "async", "device": "cuda:0"})
    writer.write(epoch=1, step=1, phase="train", loss=2.0, worker=1, staleness=3)
    writer.close()
    note = capsys.readouterr().err
    assert "written by an earlier version without the worker, staleness, loss_scale, device columns" in note
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS) and all(line.count(",") == len(CSV_COLUMNS) - 1 for line in lines)
    old_train, old_val, new = read_rows(str(path))
    assert (old_train["run_id"], old_train["loss"], old_train["wall_time_s"], old_train["staleness"]) == (
        "old",
        2.3,
        0.1,
        0,
    )
    assert old_val["phase"] == "val" and (new["worker"], new["staleness"], new["loss"]) == (1, 3, 2.0)
    # the rows from before the device column trained on the CPU (the only builds there were)
    assert (old_train["device"], old_val["device"], new["device"]) == ("cpu", "cpu", "cuda:0")
    ResultsCsv(str(path), {"run_id": "again", **IDENTITY}).close()  # today's header: appended to as it is
    assert path.read_text().splitlines()[: len(lines)] == lines


def test_a_writer_that_opened_the_older_file_before_another_upgraded_it_appends_to_the_upgraded_one(tmp_path):
    from algorithms.session.recorder import _upgraded_if_older

    path = tmp_path / "net_torch.csv"
    old_schema_file(path)
    waiting_fd = os.open(str(path), os.O_RDWR | os.O_APPEND)  # a second run, opened before the first renamed it
    first = ResultsCsv(str(path), {"run_id": "a", **IDENTITY})
    upgraded = path.read_text()
    second_fd = _upgraded_if_older(waiting_fd, str(path))
    assert os.fstat(second_fd).st_ino == os.stat(path).st_ino and path.read_text() == upgraded  # no second rewrite
    os.close(second_fd)
    first.write(epoch=1, step=1, phase="train", loss=1.0)
    first.close()
    assert [r["run_id"] for r in read_rows(str(path))] == ["old", "old", "a"]


def test_updates_per_second_come_from_wall_time_and_staleness_from_its_column():
    train = [
        {"phase": "train", "epoch": 1, "step": i + 1, "loss": 1.0, "accuracy": 0.5, "step_time_ms": 100.0,
         "global_batch": 4, "wall_time_s": 10.0 + 0.5 * i, "staleness": s}
        for i, s in enumerate([0, 1, 1, 2, 1, 0, 3, 1, 1, 1, 2])
    ]  # fmt: skip
    summary = summarize_rows(train)
    assert summary["updates_per_sec"] == pytest.approx(2.0)  # 10 intervals in 5 s, whatever each step's time
    assert (summary["staleness_median"], summary["staleness_p95"]) == (1, 3)


def test_an_older_file_that_cannot_be_rewritten_is_a_one_line_resource_error_and_stays_as_it_was(tmp_path):
    import resource
    import signal

    from algorithms.errors import ResourceError

    path = tmp_path / "net_torch.csv"
    text = old_schema_file(path)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(text) // 2, limits[1]))  # the rewritten copy cannot be written
    try:
        with pytest.raises(ResourceError, match="net_torch.csv: cannot be written"):
            ResultsCsv(str(path), {"run_id": "new", **IDENTITY})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert path.read_text() == text and [p.name for p in tmp_path.iterdir()] == ["net_torch.csv"]


def test_results_logs_data_line_counts_the_rows_before_the_split_and_those_held_out(small_data, tmp_path):
    """It read "(1150 rows, 287 held out for validation)", 1,150 being what was left after
    the split: the file's rows, then the two parts, which add up to them."""
    import numpy as np

    from algorithms.config.run_config import parse_config
    from algorithms.contract.types import Runtime
    from algorithms.records import read_log_field
    from algorithms.session.run_session import RunSession
    from algorithms.dataset.data import load_dataset

    train = str(small_data / "train.csv")
    config = parse_config(["--train", train, "--results_dir", str(tmp_path / "r"), "--run_id", "r1"], "t.py", "")
    dataset = load_dataset(train, None, None, config.validation_split, seed=0)
    session = RunSession(config, dataset, Runtime("torch", "torch", {}, "cpu"))
    session.begin_epoch(0)
    session.train_step(0, 1.0, 0.5, 1.0, 0.0, 10)
    session.end_epoch(0, 1.0, 0.5, 1.0)
    session.finish(None, None, None)
    line = read_log_field(str(tmp_path / "results.log"), "r1", "torch/torch", "data")
    assert line == f"train {train} (600 rows: 480 to train on, 120 held out for validation)", line
    assert len(dataset.train_x) + len(dataset.val_x) == 600 and np.isclose(len(dataset.val_x) / 600, 0.2)
