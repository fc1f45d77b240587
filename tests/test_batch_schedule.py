"""--batch_schedule in every framework of the main env (the legacy ones: tests/legacy),
its refusals, and --target_accuracy (time to accuracy)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from algorithms.config.run_config import parse_config
from algorithms.errors import InputError
from algorithms.paths import REPO_ROOT
from algorithms.contract.types import Runtime
from algorithms.dataset.data import Dataset
from algorithms.registry.frameworks import FRAMEWORKS, get
from algorithms.records import read_rows, results_csv_name
from algorithms.session.run_session import RunSession
from tests.conftest import csv_suffix, framework_param, run_module, run_script
from tests.helpers.flags import run_flags

SCHEDULE = "1:20,2:40"  # small_data at --validation_split 0.6: 240 training rows, 12 steps of 20, then 6 of 40
BATCHES = ((1, 20), (2, 40))
TRAIN_ROWS = 240
SLOW = {"keras_torch", "keras_jax", "keras_tensorflow", "tensorflow", "caffe"}  # 10-30 s each on 2 busy cores
MAIN = [framework for framework in FRAMEWORKS if framework.venv == "main"]


def run_schedule(framework, small_data, tmp_path, extra=()):
    """A 2-epoch run at SCHEDULE; returns (rows, results.log text)."""
    lr_flags = ["--lr_scaling", "linear"] if "--lr_scaling linear" in framework_flags(framework) else []
    args = run_flags(
        small_data / "train.csv",
        tmp_path / "results",
        num_epochs=2,
        validation_split=0.6,
        batch_schedule=SCHEDULE,
        threads=2,
    )
    result = run_script(framework.script, args + lr_flags + list(extra), framework.env)
    assert result.returncode == 0, result.stderr[-3000:]
    name = results_csv_name("cnn2d_3layer_fullconnected_3layer", framework.framework, framework.backend)
    return read_rows(str(tmp_path / "results" / name)), (tmp_path / "results.log").read_text()


def framework_flags(framework) -> tuple:
    from algorithms.registry.capabilities import capabilities

    return next(flags for name, _, flags in capabilities() if name == framework.name)


def check_schedule_rows(rows: list, log: str, lr_follows: bool) -> None:
    """Each epoch's rows carry its batch, its steps cover the training rows once, the
    lr doubles with the batch under --lr_scaling linear, and results.log names the
    phases with the time the new shape took to prepare."""
    learning_rates = []
    for epoch, batch in BATCHES:
        train = [row for row in rows if row["phase"] == "train" and row["epoch"] == epoch]
        val = [row for row in rows if row["phase"] == "val" and row["epoch"] == epoch]
        assert {row["global_batch"] for row in train + val} == {batch}
        assert len(train) == TRAIN_ROWS // batch
        assert sum(round(row["samples_per_sec"] * row["step_time_ms"] / 1000) for row in train) == TRAIN_ROWS
        learning_rates.append({row["learning_rate"] for row in train})
    if lr_follows:
        ((first,), (second,)) = learning_rates
        assert second == pytest.approx(2 * first)
    assert "batch schedule: epoch 1: batch 20; epoch 2: batch 40, re-trace/compile/reshape " in log


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
@pytest.mark.parametrize(
    "framework",
    [framework_param(f, slow=f.name in SLOW) for f in MAIN],
    ids=[csv_suffix(f) for f in MAIN],
)
def test_a_schedules_batches_are_in_every_row_and_each_epoch_covers_the_data_once(framework, small_data, tmp_path):
    rows, log = run_schedule(framework, small_data, tmp_path)
    check_schedule_rows(rows, log, "--lr_scaling linear" in framework_flags(framework))


@pytest.mark.slow
def test_torch_data_parallel_follows_the_schedule(small_data, tmp_path):
    rows, log = run_schedule(get("torch"), small_data, tmp_path, ["--strategy", "data", "--devices", "2"])
    check_schedule_rows(rows, log, lr_follows=True)


@pytest.mark.slow
def test_tensorflow_data_parallel_follows_the_schedule(small_data, tmp_path):
    """Its replica functions re-trace for the new slice in prepare_batch (a step on zeros, then restored)."""
    rows, log = run_schedule(get("tensorflow"), small_data, tmp_path, ["--strategy", "data", "--devices", "2"])
    check_schedule_rows(rows, log, lr_follows=True)


def trainer_state(framework: str, trainer) -> list:
    """Everything a step changes, as numpy arrays: weights, optimizer state (its step
    counter included) and, in torch, the generator's state."""
    if framework == "tensorflow":
        return [variable.numpy() for variable in list(trainer.variables) + list(trainer.optimizer.variables)]
    import torch

    optimizer = trainer.optimizer.state_dict()["state"]
    return (
        [tensor.detach().numpy().copy() for tensor in trainer._state_module().state_dict().values()]
        + [value.numpy().copy() for slot in optimizer.values() for value in slot.values() if torch.is_tensor(value)]
        + [torch.get_rng_state().numpy().copy()]
    )


def same_state(before: list, after: list) -> bool:
    return len(before) == len(after) and all(np.array_equal(a, b) for a, b in zip(before, after))


def check_a_step_on_zeros_is_undone(framework: str, flags: list, small_data, prepare) -> None:
    """After one real step (so the optimizer's slots hold something to lose), `prepare(trainer)`
    takes a step on zeros of batch 40 and must leave the state bit-equal; the same step
    taken plainly does not (the check can fail)."""
    from importlib import import_module

    from algorithms.dataset.data import load_dataset
    from algorithms.network.dropout import uniforms

    flags = flags + ["--batch_size", "20", "--threads", "2", "--train", str(small_data / "train.csv")]
    config = parse_config(flags, f"{framework}_script.py", "")
    dataset = load_dataset(config.train, None, None, config.validation_split, config.seed)
    trainer = import_module(f"{framework}_wrapper.trainer").build_trainer(config)
    trainer.step(
        [trainer.to_batch(dataset.train_x[:20], dataset.train_y[:20], uniforms(config.network, 0, 0, np.arange(20)))]
    )
    before = trainer_state(framework, trainer)
    prepare(trainer)
    assert same_state(before, trainer_state(framework, trainer))
    zeros = np.zeros((40, 28, 28), np.float32), np.zeros(40, np.int32), uniforms(config.network, 0, 0, np.arange(40))
    trainer.step([trainer.to_batch(*zeros)])
    assert not same_state(before, trainer_state(framework, trainer))


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_the_step_on_zeros_of_a_new_shape_is_undone_bit_for_bit(framework, small_data):
    """The shared half of prepare_batch (algorithms/run/loop.py) with each trainer's own
    snapshot and restore, on its uncompiled step."""
    from algorithms.run.loop import step_on_zeros_then_restore

    def prepare(trainer):
        step_on_zeros_then_restore(trainer, 40, trainer.network, trainer._snapshot, trainer._restore)

    check_a_step_on_zeros_is_undone(framework, [], small_data, prepare)


@pytest.mark.slow  # XLA and torch.compile build the step at both batch shapes
@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_prepare_batch_compiles_the_new_shape_and_leaves_the_state_bit_equal(framework, small_data):
    """--compile (XLA, torch.compile) builds each batch shape: prepare_batch takes one step on
    zeros of the new shape, then puts back every weight, optimizer slot and the RNG."""
    check_a_step_on_zeros_is_undone(framework, ["--compile"], small_data, lambda trainer: trainer.prepare_batch(40))


@pytest.mark.parametrize("script", ["torch_script.py", "tensorflow_script.py"])
def test_a_scheduled_batch_that_does_not_split_across_the_devices_is_refused(script, small_data, tmp_path):
    args = ["--train", str(small_data / "train.csv"), "--strategy", "data", "--devices", "2"]
    result = run_script(script, args + ["--batch_schedule", "1:40,2:81", "--results_dir", str(tmp_path)])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --batch_schedule 2:81: 81 does not divide evenly across the 2 data-parallel replicas; use 2:80 or 2:82"
    ]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "parallel, refusal",
    [
        (["--strategy", "data", "--devices", "2"], "1:101: 101 does not divide evenly across --devices (2); use 1:100"),
        (["--strategy", "async", "--devices", "3"], "1:101: 101 does not divide evenly across --devices (3); use 1:99"),
        (["--strategy", "hybrid", "--devices", "4"], "1:101: 101 does not divide evenly across the 2 data-parallel"),
    ],
)
def test_a_first_schedule_entry_that_does_not_split_is_refused_by_its_entry_not_by_batch_size(parallel, refusal):
    """The first entry is the run's starting batch: its refusal named --batch_size, a flag the
    command line does not have (the docs say the entry)."""
    with pytest.raises(InputError) as refused:
        parse_config(parallel + ["--batch_schedule", "1:101,3:200"], "torch_script.py", "")
    assert str(refused.value).startswith(f"--batch_schedule {refusal}") and "--batch_size" not in str(refused.value)


def test_run_all_passes_a_batch_schedule_on_and_says_where_linear_scaling_starts():
    """The main command's batch (100) is added only where no batch is given: added beside a
    --batch_schedule it made every run_all.py --batch_schedule a refusal (both given). With
    --lr_scaling linear the lr scales from the preset's batch (1000), in run_all.py as in an
    entry script, and the note under the command line says what it becomes."""
    from algorithms.studies.suite import main_command_flags

    network = parse_config([], "run_all.py", "").network
    schedule = ["--batch_schedule", "1:128,3:256", "--lr_scaling", "linear"]
    assert main_command_flags(network, schedule, "main") == (schedule, "")
    flags, note = main_command_flags(network, ["--lr_scaling", "linear"], "main")
    assert flags[-2:] == ["--batch_size", "100"]
    assert "scales the lr from the preset's batch, not from 100: 0.05 x 100/1000 = 0.005" in note
    # the runs it starts: the same lr as an entry script given the same flags
    for argv, rate in ((flags, 0.005), (schedule + ["--num_epochs", "4"], 0.05 * 128 / 1000)):
        config = parse_config(argv, "torch_script.py", "")
        schedule_of_run = config.learning_rate_schedule()
        schedule_of_run.start_epoch(0, config.effective_batch_at(0))
        assert schedule_of_run.at(0) == pytest.approx(rate)


def test_the_docs_say_which_batch_linear_scaling_starts_from():
    from algorithms.network.networks import NETWORKS

    with open(os.path.join(REPO_ROOT, "docs", "running.md"), encoding="utf-8") as handle:
        row = next(line for line in handle if line.startswith("| `--lr_scaling"))
    for network in NETWORKS.values():
        assert f"`{network.name}` {network.training.batch_size}" in row, row
    assert "run_all.py" in row and "batch-size.md#scaling-the-learning-rate" in row


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch_schedule", "2:40"], "the epochs must start at 1 and rise"),
        (["--batch_schedule", "1:40,3:80", "--num_epochs", "2"], "epoch 3 is past the run's 2 epochs"),
        (["--batch_schedule", "1:40", "--batch_size", "40"], "give one"),
        (["--target_accuracy", "1.5"], "must be in (0, 1]"),
    ],
)
def test_bad_schedules_are_one_line_errors(flags, message, small_data):
    result = run_script("torch_script.py", ["--train", str(small_data / "train.csv"), *flags])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_every_epoch_of_a_schedule_is_one_permutation_cut_at_its_batch(tmp_path):
    config = parse_config(
        ["--batch_schedule", "1:8,2:16,4:30", "--num_epochs", "4", "--accumulate", "2"], "torch_script.py", ""
    )
    rows = 100
    dataset = Dataset(np.zeros((rows, 28, 28), np.float32), np.zeros(rows, np.int32), np.zeros((5, 28, 28)), None)
    session = RunSession(config, dataset, Runtime("torch", "torch", {}, "cpu"), record=False)
    for epoch, batch in enumerate((8, 16, 16, 30)):
        steps = session.optimizer_batches(epoch)
        parts = [part for step in steps for part in step]
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(rows))
        assert all(len(part) == batch for part in parts[:-1]) and len(steps) == -(-rows // (2 * batch))


def test_target_accuracy_stops_at_the_first_validation_at_or_above_it(small_data, tmp_path):
    # a --train that exists: the run's settings record holds its fingerprint (a fresh clone has no data/ yet)
    flags = ["--train", str(small_data / "train.csv"), "--target_accuracy", "0.6", "--results_dir", str(tmp_path / "r")]
    config = parse_config(flags, "torch_script.py", "")
    val = np.zeros((10, 28, 28), np.float32)
    dataset = Dataset(np.zeros((50, 28, 28), np.float32), np.zeros(50, np.int32), val, np.zeros(10, np.int32))
    session = RunSession(config, dataset, Runtime("torch", "torch", {}, "cpu"))
    reached = []
    for epoch, accuracy in enumerate((0.3, 0.59999, 0.6, 0.7)):
        session.begin_epoch(epoch)
        for _ in range(5):
            session.train_step(epoch, 1.0, 0.5, 1.0, 0.0, 10)
        session.end_epoch(epoch, 1.0 - epoch / 10, accuracy, 1.0)
        reached.append(session.should_stop())
        if session.should_stop():
            break
    assert reached == [False, False, True]
    assert session.target_reached["epoch"] == 3 and session.target_reached["samples"] == 150
    session.finish(None, None, None)
    log = (tmp_path / "results.log").read_text()
    assert "time to accuracy: 0.6 reached at epoch 3, step 15: " in log and "150 samples" in log


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_a_real_run_ends_at_the_validation_that_reaches_the_target(small_data, tmp_path):
    args = ["--train", str(small_data / "train.csv"), "--test", "none", "--num_epochs", "3", "--batch_size", "120"]
    args += ["--target_accuracy", "0.01", "--results_dir", str(tmp_path / "results"), "--threads", "2"]
    result = run_script("torch_script.py", args)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_rows(str(tmp_path / "results" / "cnn2d_3layer_fullconnected_3layer_torch.csv"))
    assert [row["phase"] for row in rows] == ["init"] + ["train"] * 4 + ["val"]  # stopped after epoch 1 of 3
    log = (tmp_path / "results.log").read_text()
    assert f"{rows[-1]['wall_time_s']:.2f} s, 480 samples" in log


def test_lr_schedule_and_linear_scaling_set_each_epochs_learning_rate(tmp_path):
    flags = ["--batch_schedule", "1:50,2:100", "--lr_scaling", "linear", "--num_epochs", "3"]
    config = parse_config(flags + ["--lr_schedule", "1:0.1,3:0.01"], "torch_script.py", "")
    dataset = Dataset(np.zeros((200, 28, 28), np.float32), np.zeros(200, np.int32), np.zeros((5, 28, 28)), None)
    session = RunSession(config, dataset, Runtime("torch", "torch", {}, "cpu"), record=False)
    rates = []
    for epoch in range(3):
        session.begin_epoch(epoch)
        rates.append(session.learning_rate)
    # the preset's batch is 1000: lr x batch / 1000, on the epoch's --lr_schedule lr
    assert rates == pytest.approx([0.1 * 50 / 1000, 0.1 * 100 / 1000, 0.01 * 100 / 1000])


def test_the_batch_study_matches_each_lr_decay_with_a_batch_growth():
    from algorithms.studies.batch_study import arm_flags, parse_study_args

    name, args, epochs, forwarded = parse_study_args(["--batch", "50", "--factor", "5", "--threads", "1"])
    assert (name, epochs, forwarded) == ("torch", [3, 5], ["--threads", "1"])
    arms = arm_flags(args, epochs, 0.05)
    assert arms["lr decay"][-4:] == ["--batch_size", "50", "--lr_schedule", "1:0.05,3:0.01,5:0.002"]
    assert arms["batch growth"][-4:] == ["--batch_schedule", "1:50,3:250,5:1250", "--learning_rate", "0.05"]


def test_the_batch_study_refuses_a_framework_without_an_lr_hook():
    result = run_module("algorithms.studies.batch_study", ["--framework", "caffe"])
    assert result.returncode == 2 and "no per-step lr hook" in result.stderr


@pytest.mark.slow
def test_the_batch_study_prints_both_arms_and_plots(small_data, tmp_path):
    args = run_flags(
        small_data / "train.csv",
        tmp_path / "r",
        test=small_data / "test.csv",
        batch=120,
        num_epochs=2,
        decay_epochs=2,
        threads=2,
    )
    result = run_module("algorithms.studies.batch_study", args)
    assert result.returncode == 0, result.stderr[-2000:]
    table = result.stdout[result.stdout.index("arm  ") :].splitlines()
    decay, growth = table[2].split(), table[3].split()
    assert decay[:6] == ["lr", "decay", "120", "0.05", "->", "0.025"] and decay[6] == "8"  # 4 + 4 updates
    assert growth[:7] == ["batch", "growth", "120", "->", "240", "0.05", "6"]  # 4 + 2
    assert list((tmp_path / "r" / "batch_study").glob("*.png"))
