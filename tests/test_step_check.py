"""The step check (algorithms/run/step_check.py): each run's sampled steps taken again in
float64 from the framework's own state. Here: which steps it takes, how it judges a step,
the reference's dropout and its allowances at kinks within float32's rounding, the one
optimizer convention every wrapper converts to, and known answers on real torch runs: an
honest run within rounding at every checked step, and errors that act past the drift
envelope's horizon (a schedule, a momentum, a skipped update, a max-norm) each found at the
step it starts, in its part."""

from __future__ import annotations

import csv
import os
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from algorithms.records import STEP_CHECK_COLUMNS, read_step_checks, results_csv_name, step_check_csv
from algorithms.run.step_check import (
    FORWARD_REASONS,
    FORWARD_TOLERANCE,
    GRADIENT_TOLERANCE,
    UPDATE_TOLERANCE,
    Capture,
    StepCheck,
    _update_allowed,
    at_rate,
    compare_forward,
    judge,
    update_errors,
)
from algorithms.network.dropout import apply as apply_dropout, uniforms as dropout_uniforms
from algorithms.network.layers import Dense, Dropout, Flatten, Network, Optimizer, TrainingDefaults
from algorithms.reference.reference import forward, forward_backward
from algorithms.reference.reference_step import apply_update, implied_gradient, reference_forward, reference_step
from algorithms.reference.train_state import TrainState, from_update_units
from algorithms.network.weights import LayerWeights
from tests.conftest import run_script

DENSE = Network(
    name="dense_tiny",
    layers=(Flatten(), Dense(6), Dropout(0.5), Dense(3, activation="softmax")),
    training=TrainingDefaults(Optimizer("sgd", 0.1, momentum=0.9, nesterov=True), batch_size=4, epochs=1),
    input_shape=(2, 2, 1),
    num_classes=3,
)


def dense_weights(seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [
        LayerWeights(1, rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=6).astype(np.float32)),
        LayerWeights(3, rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)),
    ]


# ---------------------------------------------------------------------- which steps


def checker(steps_per_epoch: int, epochs: int, max_steps=None) -> StepCheck:
    """A StepCheck of a run that records nothing (the sampling alone)."""
    config = SimpleNamespace(
        step_check="on",
        part="run",
        strategy="single",
        precision="fp32",
        num_epochs=epochs,
        max_steps=max_steps,
        reference_network=None,
        network=DENSE,
    )
    session = SimpleNamespace(config=config, record=False, planned_steps=steps_per_epoch * config.num_epochs)
    return StepCheck(session)


def checked_steps(check: StepCheck, steps_per_epoch: int, epochs: int, rate) -> dict:
    found = {}
    for epoch in range(epochs):
        for index in range(steps_per_epoch):
            step = epoch * steps_per_epoch + index + 1
            why = check.why(step, epoch, index, rate(step))
            if why:
                found[step] = why
    return found


def test_the_first_step_every_epoch_start_both_sides_of_a_rate_change_and_the_middle_are_checked():
    # the default run's shape: 10 epochs of 32 steps; the rate halved from step 161 (epoch 6)
    found = checked_steps(checker(32, 10), 32, 10, lambda step: 0.05 if step <= 160 else 0.025)
    assert found[1] == "first steps" and 2 not in found
    assert all(found[1 + 32 * epoch] == "epoch start" for epoch in range(1, 10))
    assert found[161] == "epoch start"  # the change falls on an epoch's start: checked once, and the step after it
    assert found[162] == "after a learning rate change"
    assert sorted(step for step, why in found.items() if why == "spread") == [160]
    assert len(found) == 1 + 9 + 1 + 1


def test_epoch_starts_and_rate_changes_are_looked_at_by_their_forward_pass_the_others_whole():
    found = checked_steps(checker(32, 10), 32, 10, lambda step: 0.05 if step <= 160 else 0.025)
    whole = sorted(step for step, why in found.items() if why not in FORWARD_REASONS)
    assert whole == [1, 160]  # the first and the middle: every gradient
    assert {found[step] for step in found if step not in whole} == set(FORWARD_REASONS) - {"learning rate changes"}


def test_the_forward_reference_is_the_whole_steps_forward_and_catches_a_wrong_rate():
    """reference_forward's loss and accuracy are reference_step's; compare_forward calls an
    honest step (the spec's update applied) within, and one at 0.9 times the rate beyond by
    its update rule, naming the layer."""
    images = np.random.default_rng(1).normal(size=(4, 2, 2, 1)).astype(np.float32)
    labels = np.array([0, 1, 2, 1])
    rows = np.arange(4)
    uniforms = dropout_uniforms(DENSE, 0, 0, rows)
    optimizer = DENSE.training.optimizer
    velocity = {
        (w.layer_index, role): {"velocity": np.zeros_like(getattr(w, role))}
        for w in dense_weights(0)
        for role in ("kernel", "bias")
    }
    before = TrainState(dense_weights(0), velocity)
    whole = reference_step(DENSE, before, images, labels, uniforms, optimizer, 0.1)
    looked = reference_forward(DENSE, before, images, labels, uniforms)
    assert looked.loss == whole.loss and looked.accuracy == whole.accuracy and not looked.gradients
    capture = Capture(1, 0, 0, "epoch start", 0.1, before, 0.0)
    for rate, beyond in ((0.1, False), (0.09, True)):
        taken = reference_step(DENSE, before, images, labels, uniforms, optimizer, rate)
        after = TrainState(
            [replace(w, kernel=np.float32(w.kernel), bias=np.float32(w.bias)) for w in taken.weights],
            {key: {"velocity": np.float32(slot["velocity"])} for key, slot in taken.slots.items()},
        )
        found = judge(compare_forward(DENSE, optimizer, capture, after, looked, whole.loss, whole.accuracy, labels))
        assert bool(found.part) == beyond, found
    assert found.part == "the update rule" and "Dense" in found.where


def test_a_warm_up_is_checked_where_it_starts_and_the_step_after_it_ends():
    found = checked_steps(checker(32, 2), 32, 2, lambda step: 0.05 * min(1.0, step / 10))
    assert found[2] == "learning rate changes" and found[11] == "after a learning rate change"
    assert not set(range(3, 10)) & set(found)  # the rate moves at each warm-up step: its first change and its end


# ---------------------------------------------------------------------- judging a step


def errors(**changed) -> dict:
    base = {
        "structure": None,
        "forward_error": FORWARD_TOLERANCE / 100,
        "forward_allowed": FORWARD_TOLERANCE,
        "accuracy_error": 0.0,
        "gradient_error": GRADIENT_TOLERANCE / 100,
        "gradient_allowed": GRADIENT_TOLERANCE,
        "gradient_layer": "layer 9 Dense",
        "gradient_beyond": [],
        "gradient_layers": 6,
        "update_error": UPDATE_TOLERANCE / 100,
        "update_allowed": UPDATE_TOLERANCE,
        "update_layer": "layer 9 Dense",
        "state_error": None,
        "state_allowed": None,
        "state_layer": None,
    }
    return {**base, **changed}


def test_a_step_within_every_tolerance_is_within_and_says_its_worst_part():
    finding = judge(errors(gradient_error=GRADIENT_TOLERANCE / 2))
    assert finding.part == "" and finding.worst == pytest.approx(0.5) and finding.where == "layer 9 Dense gradient"


def test_a_gradient_the_specs_own_float32_rounding_moves_as_far_is_allowed_that_far():
    """A batch norm's float32 gradient differs from float64 by 2e-3 (measured in torch):
    the float32 pass of the reference shows it, and the allowance follows it."""
    assert judge(errors(gradient_error=2e-3, gradient_allowed=1e-2)).part == ""
    assert judge(errors(gradient_error=2e-2, gradient_allowed=1e-2, gradient_beyond=[9])).part.startswith("layer 9")


@pytest.mark.parametrize(
    "changed, part",
    [
        (dict(forward_error=FORWARD_TOLERANCE * 3, update_error=UPDATE_TOLERANCE * 3), "forward: the loss"),
        (dict(update_error=UPDATE_TOLERANCE * 3, gradient_error=GRADIENT_TOLERANCE * 3), "the update rule"),
        (dict(gradient_error=GRADIENT_TOLERANCE * 3, gradient_beyond=[9]), "layer 9 Dense gradient"),
        (
            dict(gradient_error=GRADIENT_TOLERANCE * 3, gradient_beyond=[1, 3, 6, 9, 11, 13]),
            "every layer's gradient",
        ),
        (dict(accuracy_error=5.0), "the step's accuracy"),
        (dict(structure="layer 3 Conv2D: the framework holds no bias"), "structure: layer 3 Conv2D"),
    ],
)
def test_the_first_part_beyond_its_tolerance_names_where_the_step_leaves_rounding(changed, part):
    finding = judge(errors(**changed))
    assert finding.part.startswith(part) and finding.worst > 1


# ---------------------------------------------------------------------- the reference


def test_the_reference_drops_the_units_the_shared_uniforms_drop():
    images = np.random.default_rng(1).random((4, 2, 2)).astype(np.float32)
    uniforms = dropout_uniforms(DENSE, 0, 0, np.arange(4))
    weights = dense_weights(0)
    hidden = np.maximum(images.reshape(4, 4) @ np.float64(weights[0].kernel) + weights[0].bias, 0)
    dropped = apply_dropout(hidden, uniforms[0], 0.5)
    expected = dropped @ np.float64(weights[1].kernel) + weights[1].bias
    result = forward_backward(DENSE, weights, images, np.array([0, 1, 2, 0]), kinks=False, uniforms=uniforms)
    np.testing.assert_allclose(result.outputs[-1], expected, rtol=1e-12)
    assert forward(DENSE, weights, images)[-1].shape == (4, 3)  # no uniforms: dropout is the identity


def test_the_reference_gradient_with_dropout_is_the_finite_difference_of_its_loss():
    images = np.random.default_rng(2).random((4, 2, 2))
    labels, uniforms = np.array([0, 1, 2, 0]), dropout_uniforms(DENSE, 3, 1, np.arange(4))
    weights = [replace(w, kernel=np.float64(w.kernel), bias=np.float64(w.bias)) for w in dense_weights(3)]
    result = forward_backward(DENSE, weights, images, labels, kinks=False, uniforms=uniforms)
    for position in ((0, 0), (2, 4), (3, 5)):
        step = 1e-6
        shifted = []
        for sign in (1, -1):
            kernel = weights[0].kernel.copy()
            kernel[position] += sign * step
            moved = [replace(weights[0], kernel=kernel), weights[1]]
            shifted.append(forward_backward(DENSE, moved, images, labels, kinks=False, uniforms=uniforms).loss)
        numeric = (shifted[0] - shifted[1]) / (2 * step)
        assert result.gradients[(1, "kernel")][position] == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_a_kink_within_float32_rounding_gets_an_allowance_that_covers_the_other_side():
    """A pre-activation a float32 framework cannot tell from 0: the reference's gradient takes
    one side, a float32 framework may take the other; the allowance covers exactly that."""
    weights = dense_weights(4)
    images = np.random.default_rng(5).random((4, 2, 2)).astype(np.float32)
    hidden = images.reshape(4, 4) @ np.float64(weights[0].kernel)
    bias = weights[0].bias.astype(np.float64).copy()
    bias[2] = -hidden[1, 2] + 3e-9 * np.abs(hidden[1, 2])  # sample 1, unit 2: a hair above 0, far below rounding
    weights[0] = replace(weights[0], bias=bias)
    labels = np.array([0, 1, 2, 1])
    rounding = forward_backward(DENSE, weights, images, labels, kinks="rounding")
    plain = forward_backward(DENSE, weights, images, labels, kinks=False)
    # the other side: that unit's ReLU stops the gradient (a float32 sum landing just below 0)
    other = replace(weights[0], bias=bias - 6e-9 * np.abs(hidden[1, 2]))
    flipped = forward_backward(DENSE, [other, weights[1]], images, labels, kinks=False)
    moved = np.abs(flipped.gradients[(1, "kernel")] - plain.gradients[(1, "kernel")])
    assert moved.max() > 1e-3 * np.abs(plain.gradients[(1, "kernel")]).max()  # the flip is no rounding
    scale = np.abs(plain.gradients[(1, "kernel")]).max()  # the nudge of the bias moves every value by ~1e-9 of it
    assert np.all(moved <= rounding.allowances[(1, "kernel")] + 1e-7 * scale)
    assert np.count_nonzero(rounding.allowances[(1, "kernel")]) <= 4  # that one unit's column, no other
    far = forward_backward(DENSE, dense_weights(4), images, labels, kinks="rounding")
    assert not any(np.any(value) for value in far.allowances.values())  # no value near a kink: no allowance


@pytest.mark.parametrize("nesterov", [False, True])
def test_a_velocity_kept_with_the_rate_inside_converts_to_the_one_convention_step_for_step(nesterov):
    """Keras's m = momentum * m - lr * g (w += m) and Caffe's h = momentum * h + lr * g
    (w -= h), converted at the coming step's rate, give torch's update exactly, through a
    change of the rate too."""
    rng = np.random.default_rng(6)
    optimizer = Optimizer("sgd", 0.05, momentum=0.9, nesterov=nesterov)
    w = rng.normal(size=5)
    m = np.zeros(5)
    for rate, gradient in ((0.05, rng.normal(size=5)), (0.05, rng.normal(size=5)), (0.02, rng.normal(size=5))):
        state = TrainState([LayerWeights(0, w, np.zeros(1))], {(0, "kernel"): {"velocity": from_update_units(m, rate)}})
        reference = replace(optimizer, learning_rate=rate)
        (after,), slots = apply_update(reference, rate, state, {(0, "kernel"): gradient, (0, "bias"): np.zeros(1)})
        m = 0.9 * m - rate * gradient  # Keras's rule
        keras_w = w + (0.9 * m - rate * gradient if nesterov else m)
        np.testing.assert_allclose(after.kernel, keras_w, rtol=1e-12)
        caffe = from_update_units(-m, rate, sign=1.0)  # Caffe's history is Keras's m with the sign turned
        np.testing.assert_allclose(caffe, slots[(0, "kernel")]["velocity"], rtol=1e-12)
        before = state.slots[(0, "kernel")]
        np.testing.assert_allclose(implied_gradient(optimizer, before, slots[(0, "kernel")]), gradient, rtol=1e-12)
        w = keras_w


def test_a_velocity_read_at_the_old_rate_is_judged_at_the_new_one_across_a_change():
    """A framework keeping the rate inside its velocity (TensorFlow, Keras, Lasagne) is read
    after a step at the rate it ran (0.05); the next step runs at 0.025 with Nesterov. Read as
    it is, its update leaves the rule (the momentum carries the old rate); brought to the
    step's rate (step_check.at_rate), the update rule holds to float64 rounding."""
    rng = np.random.default_rng(7)
    optimizer = Optimizer("sgd", 0.025, momentum=0.9, nesterov=True)
    w, m, gradient = rng.normal(size=(5, 1)), rng.normal(size=(5, 1)) * 0.01, rng.normal(size=(5, 1))
    bias = np.zeros(1)
    before = TrainState(
        [LayerWeights(1, w, bias)],
        {(1, "kernel"): {"velocity": from_update_units(m, 0.05)}, (1, "bias"): {"velocity": np.zeros(1)}},
        velocity_rate=0.05,
    )
    m = 0.9 * m - 0.025 * gradient  # Keras's step at the new rate
    after = TrainState(
        [LayerWeights(1, w + 0.9 * m - 0.025 * gradient, bias)],
        {(1, "kernel"): {"velocity": from_update_units(m, 0.025)}, (1, "bias"): {"velocity": np.zeros(1)}},
        velocity_rate=0.025,
    )
    network = Network(
        name="one", layers=(Flatten(), Dense(1)), training=DENSE.training, input_shape=(5, 1, 1), num_classes=1
    )
    errors = {}
    for state in (before, at_rate(before, 0.025)):
        capture = Capture(2, 0, 1, "", 0.025, state, 0.0)
        error, allowed = update_errors(network, optimizer, capture, after)[1]
        errors[state.velocity_rate] = error / allowed
    assert errors[0.05] > 1 and errors[0.025] < 1e-3, errors


def test_adams_update_is_allowed_its_bias_corrections_float32_rounding_early_on():
    """1 - beta_2 ** t cancels at small t: a float32 beta_2 ** t moves the whole step's
    update by 3e-5 of itself at t = 2, so the update rule is allowed 10x that there; by
    t = 1000 the flat tolerance holds again, and SGD's is the flat tolerance always."""
    adam = Optimizer("adam", 0.001)
    early = _update_allowed(adam, TrainState([], adam_updates=1))
    assert 2e-4 < early < 5e-4
    assert _update_allowed(adam, TrainState([], adam_updates=999)) == UPDATE_TOLERANCE
    assert _update_allowed(DENSE.training.optimizer, TrainState([])) == UPDATE_TOLERANCE


# ---------------------------------------------------------------------- real runs (torch)


def run_torch(tmp_path, *flags) -> list:
    """A short torch run of the default net at batch 16, 8 steps (the update rule checked at
    each, the whole step at 3 of them); its step check's rows, read back."""
    results = tmp_path / "results"
    proc = run_script(
        "torch_script.py",
        ["--batch_size", "16", "--num_epochs", "2", "--max_steps", "8", "--yardstick", "off", "--quiet"]
        + ["--results_dir", str(results), "--results_log", str(tmp_path / "results.log"), *flags],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    csv_path = os.path.join(results, results_csv_name("cnn2d_3layer_fullconnected_3layer", "torch", "torch"))
    with open(step_check_csv(csv_path)) as handle:
        assert next(csv.reader(handle)) == STEP_CHECK_COLUMNS
    with open(step_check_csv(csv_path)) as handle:
        run_id = next(csv.DictReader(handle))["run_id"]
    return read_step_checks(csv_path, run_id)


@pytest.mark.slow
def test_an_honest_torch_run_is_within_rounding_at_every_checked_step(tmp_path):
    rows = run_torch(tmp_path)
    assert [row["step"] for row in rows] == [1, 4]  # the first, and the middle of 8
    for row in rows:
        assert not row["part"] and row["worst"] < 0.2, row  # a factor 5 to spare, measured near 0.01
        assert abs(row["loss"] - row["reference_loss"]) / row["reference_loss"] < FORWARD_TOLERANCE
    with open(tmp_path / "results.log") as handle:
        log = " ".join(handle.read().split())  # results.log aligns its values after the key
    assert "step check: within rounding at every checked step" in log
    assert "2 steps of 8 re-taken in float64" in log and "the update rule at the 6 others" in log


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, step, part",
    [
        ("late_lr:1:0.9", 1, "the update rule"),  # a rate 10% off, every step
        ("skip:5:100", 5, "the update rule"),  # step 5 computes a gradient and applies nothing
        ("maxnorm:9:0.3", 1, "the update rule"),  # dense 9's units held to a norm of 0.3
        ("loss:sum", 1, "every layer's gradient"),
        ("late_momentum:2:0.5", 5, "the update rule"),  # 80 rows: from epoch 2, step 5, checked by its rule
        ("momentum_reset", 5, "the update rule"),  # 80 rows: 4 steps an epoch; Nesterov's term shows the reset
    ],
)
def test_an_error_in_the_training_step_is_found_at_its_step_and_named_by_its_part(tmp_path, fault, step, part):
    if step == 5 and fault != "skip:5:100":  # an epoch-bound error: 80 rows, 4 steps an epoch, epoch 2 at step 5
        rows = run_torch(tmp_path, "--fault", fault, "--train", str(small_train(tmp_path)))
    else:
        rows = run_torch(tmp_path, "--fault", fault)
    beyond = [row for row in rows if row["part"]]
    assert beyond and beyond[0]["step"] == step and beyond[0]["part"].startswith(part), rows
    assert all(not row["part"] for row in rows if row["step"] < step)


def small_train(tmp_path) -> str:
    """A training file of 80 rows: 64 to train on (4 steps of 16 an epoch), 16 held out."""
    from algorithms.paths import DEFAULT_TRAIN

    path = tmp_path / "train80.csv"
    with open(DEFAULT_TRAIN) as source, open(path, "w") as target:
        target.writelines(line for _, line in zip(range(81), source))
    return str(path)
