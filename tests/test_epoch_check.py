"""The epoch check (--epoch_check, algorithms/run/epoch_check.py): before the run, in its
process, the same net, seed and settings on the first 3 batches for up to 4 epochs, its
rows under the run's id in <results_dir>/epoch_check/ with a settings record naming the
part, and nothing else of its own (no results.log block, no predictions); a multi-process
run goes on to its own steps in the same process group; the asynchronous strategies run
none and say so."""

from __future__ import annotations

import pytest

from algorithms.records import check_csv, read_rows, read_settings
from algorithms.run.epoch_check import CHECK_EPOCHS, CHECK_STEPS
from tests.conftest import run_script
from tests.helpers.flags import run_flags

NETWORK = "cnn2d_3layer_fullconnected_3layer"


def test_the_epoch_check_trains_short_epochs_first_and_leaves_only_its_rows(small_data, tmp_path):
    results = tmp_path / "results"
    argv = run_flags(
        small_data / "train.csv",
        results,
        test=small_data / "test.csv",
        quiet=False,
        batch_size=32,
        max_steps=4,
        run_id="checked",
        epoch_check=True,
    )
    proc = run_script("torch_script.py", argv + ["--results_log", str(tmp_path / "results.log")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_csv = results / f"{NETWORK}_torch.csv"
    check = read_rows(check_csv(str(run_csv)), "checked")
    phases = [(row["phase"], row["step"]) for row in check]
    steps = CHECK_STEPS * CHECK_EPOCHS
    expected = [("init", 0)] + [
        item
        for epoch in range(CHECK_EPOCHS)
        for item in [("train", epoch * CHECK_STEPS + k) for k in range(1, CHECK_STEPS + 1)]
        + [("val", (epoch + 1) * CHECK_STEPS)]
    ]
    assert phases == expected and steps == 12  # every boundary inside the same-seed verdict's horizon
    assert all(row["global_batch"] == 32 for row in check if row["phase"] == "train")
    assert round(check[-1]["samples_per_sec"] * check[-1]["step_time_ms"] / 1000) == 120  # the split's all, < 200
    part = read_settings(check_csv(str(run_csv)))["checked"]["part"]
    assert part == f"epoch check: {CHECK_STEPS} steps per epoch on the first 96 training rows, validation on 120"
    assert "part" not in read_settings(str(run_csv))["checked"]  # the run's own record names no part
    run = read_rows(str(run_csv), "checked")  # the run itself, after it: its own rows, from step 1
    assert [row["phase"] for row in run][:2] == ["init", "train"] and max(row["step"] for row in run) == 4
    assert (tmp_path / "results.log").read_text().count("=== checked ") == 1  # one block: the run's
    assert len(list((results / "predictions").iterdir())) == 1  # the run's
    assert not (results / "epoch_check" / "predictions").exists()
    assert proc.stdout.startswith("epoch check: 4 epochs of 3 steps on the first 96 training rows")


@pytest.mark.slow  # torchrun and two ranks
def test_a_data_parallel_run_goes_on_from_its_epoch_check_in_the_same_process_group(small_data, tmp_path):
    results = tmp_path / "results"
    argv = run_flags(
        small_data / "train.csv", results, batch_size=32, max_steps=3, strategy="data", devices=2, epoch_check=True
    )
    proc = run_script("torch_script.py", argv + ["--run_id", "data", "--results_log", str(tmp_path / "results.log")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_csv = str(results / f"{NETWORK}_torch.csv")
    assert max(row["step"] for row in read_rows(check_csv(run_csv), "data")) == CHECK_STEPS * CHECK_EPOCHS
    assert max(row["step"] for row in read_rows(run_csv, "data")) == 3


def test_the_asynchronous_strategies_run_no_epoch_check_and_say_so(small_data, tmp_path):
    results = tmp_path / "results"
    argv = run_flags(
        small_data / "train.csv", results, quiet=False, batch_size=32, max_steps=2, strategy="async", devices=2
    )
    proc = run_script("torch_script.py", argv + ["--epoch_check", "--run_id", "async"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("epoch check: not run with --strategy async")
    assert not (results / "epoch_check").exists()
    assert read_rows(str(results / f"{NETWORK}_torch.csv"), "async")
