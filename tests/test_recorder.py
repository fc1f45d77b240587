"""Result rows: appended, never rewritten; parsed back; a foreign file refused."""

import pytest

from algorithms.errors import InputError
from algorithms.recorder import (
    CSV_COLUMNS,
    WARMUP_STEPS,
    ResultsCsv,
    read_rows,
    results_csv_name,
    run_ids,
    steady_state_ms,
    summarize_rows,
)

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
