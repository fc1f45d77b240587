"""The loss checks are right both ways: quiet on the first epochs of every preset on
the default data, and still naming the real problems (unnormalised pixels, labels
shuffled apart from their images, a learning rate of 10). Real torch runs, the
lightest entry script; the rule itself (faults.stuck_loss_problem) on loss curves.
The runs that reach the judgement on the default data are slow; each warning has a
fast real check too (a few steps on the small data), or its rule's checks on curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algorithms.session.faults import (
    STUCK_MIN_SAMPLES,
    STUCK_MIN_UPDATES,
    EpochEvidence,
    first_loss_problem,
    near_chance_problem,
    stuck_loss_problem,
)
from algorithms.network.networks import CNN2D_2LAYER, CNN2D_3LAYER
from tests.conftest import run_python, run_script
from tests.helpers.flags import run_flags

CHANCE = math.log(10)
VAL_LABELS = np.arange(800) % 10  # the default data's validation rows are about this balanced


def _evidence(epoch, updates_per_epoch, batch, train_loss, val_loss, val_accuracy, previous=None, rows=3200):
    updates, before = (epoch + 1) * updates_per_epoch, epoch * updates_per_epoch
    return EpochEvidence(
        epoch=epoch,
        updates=updates,
        samples=min(updates * batch, (epoch + 1) * rows),
        updates_before=before,
        samples_before=min(before * batch, epoch * rows),
        train_loss=train_loss,
        val_loss=val_loss,
        val_accuracy=val_accuracy,
        val_labels=VAL_LABELS,
        previous_losses=previous,
    )


def _train(tmp_path, train, *flags):
    proc = run_script("torch_script.py", run_flags(train, tmp_path / "results") + list(flags))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


# --------------------------------------------------------------------------- quiet on healthy runs


@pytest.mark.slow  # 6 epochs of the default data
def test_the_3_layer_preset_is_not_called_stuck_before_or_at_the_judgement(full_data, tmp_path):
    """Batch 1000 on the 3,200 default rows: 4 updates an epoch, judged at the end of
    epoch 5 (20 updates); its first epoch (val_loss 2.28) used to be called stuck."""
    assert CNN2D_3LAYER.training.batch_size == 1000 and STUCK_MIN_UPDATES == 20
    err = _train(tmp_path, full_data / "train.csv", "--num_epochs", "6")
    assert "warning" not in err, err
    assert "diagnostics: none" in (tmp_path / "results.log").read_text()


@pytest.mark.slow  # 40 steps of batch 50: the judgement's 2,000 samples
def test_the_2_layer_preset_is_quiet_after_its_first_steps(full_data, tmp_path):
    """Batch 50: 40 updates (2,000 samples) reach the judgement within the first epoch."""
    assert CNN2D_2LAYER.training.batch_size * 40 >= STUCK_MIN_SAMPLES
    err = _train(tmp_path, full_data / "train.csv", "--network", CNN2D_2LAYER.name, "--max_steps", "40")
    assert "warning" not in err, err


# --------------------------------------------------------------------------- still warns on real problems


@pytest.mark.slow  # an epoch of the default data: the judgement's 2,000 samples
def test_labels_shuffled_apart_from_their_images_are_named(full_data, tmp_path):
    lines = (full_data / "train.csv").read_text().splitlines()
    labels = [line.split(",", 1)[0] for line in lines[1:]]
    order = np.random.default_rng(0).permutation(len(labels))
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text(
        "\n".join(
            [lines[0]] + [labels[order[index]] + "," + line.split(",", 1)[1] for index, line in enumerate(lines[1:])]
        )
        + "\n"
    )
    err = _train(tmp_path, shuffled, "--batch_size", "100", "--num_epochs", "1")  # 32 updates, 3,200 samples
    assert "warning: after 32 updates (3,200 samples) the validation accuracy is" in err, err
    assert "the net learned nothing" in err and "labels shuffled apart from their images" in err


@pytest.mark.slow  # 2 epochs of the default data
def test_a_learning_rate_of_10_is_named(full_data, tmp_path):
    err = _train(tmp_path, full_data / "train.csv", "--learning_rate", "10", "--num_epochs", "2")
    assert "warning: the loss became" in err and "the learning rate (10) is likely too high" in err, err
    assert err.count("warning: the loss became") == 1, err  # named once, at the epoch it diverged


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_a_learning_rate_of_10_is_named_after_one_epoch_of_the_small_data(small_data, tmp_path):
    err = _train(tmp_path, small_data / "train.csv", "--learning_rate", "10", "--batch_size", "32", "--num_epochs", "1")
    assert "warning: the loss became" in err and "the learning rate (10) is likely too high" in err, err
    assert err.count("warning: the loss became") == 1, err


# --------------------------------------------------------------------------- a run that ends near chance


def test_a_run_that_ends_near_chance_says_so_on_the_console_and_in_results_log(small_data, tmp_path):
    """Two steps learn nothing: the final validation and test accuracies are within 3
    standard errors of guessing (the 'learned nothing' check above does not judge a run
    this short; the end of a run is judged whatever its length)."""
    err = _train(tmp_path, small_data / "train.csv", "--test", str(small_data / "test.csv"), "--max_steps", "2")
    assert "warning: ended near chance: the final validation accuracy" in err and "and test accuracy" in err, err
    assert "after 2 updates the net has learned nothing usable" in err
    (line,) = [line for line in (tmp_path / "results.log").read_text().splitlines() if line.startswith("diagnostics:")]
    assert line.startswith("diagnostics: ended near chance: the final validation accuracy"), line


@pytest.mark.slow  # 30 steps: make test-fast leaves it out (its other half, the near-chance run, is fast)
def test_a_short_healthy_run_is_not_called_near_chance(small_data, tmp_path):
    """Two epochs of the small data (30 steps) end well above guessing: nothing said."""
    err = _train(
        tmp_path,
        small_data / "train.csv",
        "--test",
        str(small_data / "test.csv"),
        "--batch_size",
        "32",
        "--num_epochs",
        "2",
    )
    assert "warning" not in err, err
    assert "diagnostics: none" in (tmp_path / "results.log").read_text()


def test_near_chance_is_guessing_plus_three_standard_errors_of_the_rows_scored():
    labels = np.arange(800) % 10  # balanced: guessing scores 0.1; 3 standard errors on 800 rows: 0.0318
    assert (
        near_chance_problem(
            [
                (
                    "validation",
                    0.131,
                    labels,
                )
            ],
            10,
            600,
        )
        is not None
    )
    assert near_chance_problem([("validation", 0.133, labels)], 10, 600) is None
    skewed = np.array([0] * 300 + list(np.arange(500) % 10))  # the commonest class: 0.4375
    assert "guessing scores 0.438" in near_chance_problem([("validation", 0.45, skewed)], 10, 600)
    assert near_chance_problem([("validation", None, labels), ("test", 0.9, labels)], 10, 600) is None


UNNORMALISED_RUN = """
import sys
import algorithms.dataset.data as data
from algorithms.run.entry import run_entry_point
load = data.load_images
data.load_images = lambda *args: (lambda images, *rest: (images * 255, *rest))(*load(*args))
sys.exit(run_entry_point("torch_wrapper.train", "torch_script.py", "x255", sys.argv[1:]))
"""


def _train_unnormalised(tmp_path, train, **flags) -> str:
    """The loader scales pixels to [0, 1] (data.load_images); patched to leave them 0-255."""
    proc = run_python(["-c", UNNORMALISED_RUN, *run_flags(train, tmp_path / "results", **flags)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning: the first step's loss is" in proc.stderr and "input not normalised" in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.slow  # an epoch of the default data
def test_pixels_fed_as_0_255_are_named(full_data, tmp_path):
    _train_unnormalised(tmp_path, full_data / "train.csv", num_epochs=1)


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
def test_pixels_fed_as_0_255_are_named_at_the_first_step(small_data, tmp_path):
    _train_unnormalised(tmp_path, small_data / "train.csv", max_steps=1)


# --------------------------------------------------------------------------- the rule on loss curves


def test_the_rule_waits_for_enough_updates_and_samples():
    # an epoch at chance (val_acc 0.12, val_loss 2.29) after the 3-layer preset's first 4 updates: too early to tell
    assert stuck_loss_problem(_evidence(0, 4, 1000, 2.3005, 2.2892, 0.12), 10, 0.05) is None
    # the same numbers at its epoch 5 (20 updates, 16,000 samples): a net that learned nothing
    assert "learned nothing" in stuck_loss_problem(_evidence(4, 4, 1000, 2.3005, 2.2892, 0.12), 10, 0.05)
    # ... judged once: not again at epoch 6
    assert stuck_loss_problem(_evidence(5, 4, 1000, 2.3005, 2.2892, 0.12), 10, 0.05) is None
    # 20 updates at batch 8 are 160 samples, too few; at 250 updates (2,000 samples) it is judged
    assert stuck_loss_problem(_evidence(0, 20, 8, 2.31, 2.318, 0.104), 10, 0.05) is None
    assert "after 250 updates (2,000 samples)" in stuck_loss_problem(_evidence(0, 250, 8, 2.31, 2.31, 0.10), 10, 0.05)


def test_the_rule_on_healthy_and_broken_curves():
    # healthy, seed 2 of the 3-layer preset at its epoch 5: a dip to val_acc 0.25 is still learning
    assert stuck_loss_problem(_evidence(4, 4, 1000, 1.9315, 2.0988, 0.2512), 10, 0.05) is None
    # dead ReLUs (learning rate too high, finite loss): a constant guess of the prior
    dead = stuck_loss_problem(_evidence(4, 4, 1000, 2.3026, 2.3026, 0.1), 10, 0.5)
    assert "learned nothing" in dead and "learning rate too high (0.5: the ReLUs died) or far too low" in dead
    # accuracy at chance but the loss well below ln(10): learning has begun, not named
    assert stuck_loss_problem(_evidence(4, 4, 1000, 2.0, 2.0, 0.13), 10, 0.05) is None


def test_unnormalised_pixels_and_divergence_are_named_from_the_curve():
    # the x255 run: first step's loss 38.8, then the epoch mean 1e35 and a val loss of nan
    assert "input not normalised" in first_loss_problem(38.795, 10)
    diverged = stuck_loss_problem(_evidence(0, 4, 1000, 1.03e35, float("nan"), 0.105), 10, 0.05)
    assert "the loss became 1.03e+35 during the first epoch" in diverged and "not normalised" in diverged
    # named at the epoch it diverged, not again after
    nan = float("nan")
    assert stuck_loss_problem(_evidence(1, 4, 1000, nan, nan, 0.105, previous=(1.03e35, nan)), 10, 0.05) is None
    later = stuck_loss_problem(_evidence(2, 4, 1000, nan, nan, 0.105, previous=(0.9, 0.8)), 10, 0.05)
    assert "during epoch 3" in later
