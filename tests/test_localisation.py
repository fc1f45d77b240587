"""The localisation's judgement and the structural check, with known answers and no
framework process: each cell's class (within, beyond, shape, non-finite, no gradient,
not reached) from arrays made to be so, where a difference entered (forward first, then
the backward pass's order), the non-finite class named against the finite frameworks, a
framework that stopped named by the last layer it reported, a bad --fault refused in one
line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algorithms.localisation.localisation import (
    BACKWARD_TOLERANCE,
    BEYOND,
    FORWARD_TOLERANCE,
    NO_GRADIENT,
    NON_FINITE,
    NOT_HELD,
    NOT_REACHED,
    SHAPE,
    UNCOMPARABLE,
    WITHIN,
    Cell,
    Localisation,
    Stop,
    compare_arrays,
    compare_pass,
    first_faulty,
)
from algorithms.localisation.localisation_report import format_localisation
from algorithms.network.networks import CNN2D_3LAYER
from algorithms.reference.reference import forward_backward
from algorithms.network.variants import parse_fault
from algorithms.network.weights import initial_weights
from algorithms.localisation import localise

NETWORK = CNN2D_3LAYER.without_dropout()


def test_each_cell_class_from_arrays_made_to_be_it():
    expected = np.linspace(-1.0, 2.0, 12).reshape(3, 4)
    assert compare_arrays(expected * (1 + 1e-7), expected, FORWARD_TOLERANCE).kind == WITHIN
    off = compare_arrays(expected + 0.01, expected, FORWARD_TOLERANCE)
    assert off.kind == BEYOND and off.error == pytest.approx(0.01 / 2.0)  # over the tensor's largest magnitude
    assert compare_arrays(expected[:, :3], expected, FORWARD_TOLERANCE) == Cell(SHAPE, math.inf, "(3, 3), spec (3, 4)")
    with_nan = expected.copy()
    with_nan[1, 2] = np.nan
    assert compare_arrays(with_nan, expected, FORWARD_TOLERANCE) == Cell(NON_FINITE, math.inf, "NaN")
    assert compare_arrays(expected * np.inf, expected, FORWARD_TOLERANCE).note == "Inf"  # no element is 0
    with_nan[0, 0] = -np.inf
    assert compare_arrays(with_nan, expected, FORWARD_TOLERANCE).note == "NaN and Inf"
    assert compare_arrays(expected, with_nan, FORWARD_TOLERANCE).kind == UNCOMPARABLE
    assert compare_arrays(None, expected, FORWARD_TOLERANCE).kind == NOT_HELD
    assert compare_arrays(np.zeros(3), np.zeros(3), FORWARD_TOLERANCE).kind == WITHIN


def reference_pass():
    rng = np.random.default_rng(0)
    return forward_backward(NETWORK, initial_weights(NETWORK, 0), rng.random((2, 28, 28)), np.array([1, 2]))


def test_where_a_difference_entered_forward_first_then_in_the_backward_passs_order():
    reference = reference_pass()
    outputs = dict(enumerate(reference.outputs))
    gradients = dict(reference.gradients)
    assert first_faulty(NETWORK, compare_pass(NETWORK, reference, outputs, gradients)) is None
    named = lambda cells: first_faulty(NETWORK, cells)[:3]  # noqa: E731 (layer named, direction, seen at)

    backward_only = dict(gradients)
    for key in ((1, "kernel"), (6, "bias")):  # the backward pass reaches layer 6 before layer 1
        backward_only[key] = gradients[key] * (1 + 10 * BACKWARD_TOLERANCE)
    cells = compare_pass(NETWORK, reference, outputs, backward_only)
    assert named(cells) == (6, "backward", 6)

    later = {index: value * 1.1 if index >= 4 else value for index, value in outputs.items()}
    cells = compare_pass(NETWORK, reference, later, backward_only)
    assert named(cells) == (4, "forward", 4)
    # held at 4 but not at 2 and 3 (a fused model): seen at 4, named the conv in between
    del later[2], later[3]
    assert named(compare_pass(NETWORK, reference, later, backward_only)) == (3, "forward", 4)


def faked(reference, factor_at: dict) -> list:
    """One step's cells of a framework whose layer outputs are the reference's times a factor."""
    with np.errstate(invalid="ignore"):  # inf times a ReLU's 0: nan, as in a framework
        outputs = {index: value * factor_at.get(index, 1.0) for index, value in enumerate(reference.outputs)}
    return [compare_pass(NETWORK, reference, outputs, dict(reference.gradients))]


def test_the_report_marks_the_first_layer_and_names_non_finite_values_as_their_own_class():
    reference = reference_pass()
    result = Localisation(NETWORK, 1, ["healthy", "scaled", "overflowing"])
    result.cells = {
        "healthy": faked(reference, {}),
        "scaled": faked(reference, {3: 1.1, 4: 1.1}),
        "overflowing": faked(reference, {9: np.inf}),
    }
    assert result.first_beyond("healthy") is None
    assert (result.first_beyond("scaled").layer, result.first_beyond("scaled").direction) == (3, "forward")
    assert result.first_beyond("overflowing").cell.kind == NON_FINITE
    text = format_localisation(result)
    assert "healthy: within float32 tolerance at every layer" in text
    assert (
        "scaled: layer 3 Conv2D 48 3x3: relative error 1.00e-01 in the output, beyond the tolerance 2e-05 "
        "(step 1, forward)" in text
    )
    assert (  # inf times a ReLU's zeros: NaN beside the Inf
        "overflowing: layer 9 Dense 128: NaN and Inf in the output (step 1, forward), where the reference and "
        "healthy, scaled are finite: a class of its own, not drift" in text
    )
    row = next(line for line in text.splitlines() if line.startswith(" 3 Conv2D 48 3x3"))
    assert "[1.0e-01!]" in row  # the first cell beyond, bracketed
    assert not result.healthy()


def test_the_first_step_with_a_difference_is_the_one_named():
    reference = reference_pass()
    result = Localisation(NETWORK, 2, ["late"])
    result.cells = {"late": faked(reference, {}) + faked(reference, {7: 1.01})}
    finding = result.first_beyond("late")
    assert (finding.step, finding.layer) == (2, 7)


def test_a_parameter_given_no_gradient_is_a_finding_on_its_layer_never_zeros():
    """None is how a wrapper says its framework computed no gradient (frozen, detached)."""
    reference = reference_pass()
    outputs = dict(enumerate(reference.outputs))
    frozen_bias = {**reference.gradients, (9, "bias"): None}
    cells = compare_pass(NETWORK, reference, outputs, frozen_bias)
    assert cells[(9, "backward")] == Cell(NO_GRADIENT, math.inf, part="bias")
    assert first_faulty(NETWORK, cells)[:3] == (9, "backward", 9)
    frozen_layer = {**frozen_bias, (1, "kernel"): None, (1, "bias"): None}
    result = Localisation(NETWORK, 1, ["frozen"])
    result.cells = {"frozen": [compare_pass(NETWORK, reference, outputs, frozen_layer)]}
    assert result.cells["frozen"][0][(1, "backward")].part == "kernel and bias"
    text = format_localisation(result)
    # the backward pass reaches layer 9 before layer 1
    assert "frozen: layer 9 Dense 128 bias: no gradient (step 1, backward)" in text
    backward_row = [line for line in text.splitlines() if line.startswith(" 9 Dense 128")][-1]
    assert backward_row.endswith("[no grad]")
    assert not result.healthy()


def test_a_framework_that_stopped_is_judged_as_far_as_it_got_and_named_by_its_last_layer():
    reference = reference_pass()
    held = {index: value for index, value in enumerate(reference.outputs) if index <= 4}
    result = Localisation(NETWORK, 2, ["died", "crashed", "scaled_then_died"])
    result.cells = {
        "died": faked(reference, {}) + [compare_pass(NETWORK, reference, held, {}, complete=False)],
        "scaled_then_died": [compare_pass(NETWORK, reference, {**held, 4: held[4] * 1.1}, {}, complete=False)],
    }
    second = result.cells["died"][1]
    assert [second[(index, "forward")].kind for index in (4, 5, 10)] == [WITHIN, NOT_REACHED, NOT_REACHED]
    assert second[(1, "backward")].kind == NOT_REACHED
    result.failures = {
        "died": Stop(2, 4, "exit 70: the last line it wrote", log="Traceback (most recent call last):\n..."),
        "crashed": Stop(1, None, "exit 1: ModuleNotFoundError: No module named 'caffe'"),
        "scaled_then_died": Stop(1, 4, "exit -11: (no message)"),
    }
    assert result.first_beyond("died") is None and not result.healthy()
    text = format_localisation(result)
    assert "died: stopped in step 2 after layer 4 MaxPool2D 2, the last output it reported: exit 70: the last" in text
    assert "crashed: not run: exit 1: ModuleNotFoundError: No module named 'caffe'" in text
    assert "scaled_then_died: layer 4 MaxPool2D 2: relative error 1.00e-01 in the output" in text  # its finding first
    assert "scaled_then_died: stopped in step 1 after layer 4 MaxPool2D 2" in text
    row = next(line for line in text.splitlines() if line.startswith("10 Dense 128"))
    assert row.split()[3:] == ["stopped", "not", "run", "stopped"]  # the worst of its two steps, then the others
    assert "Traceback" not in text


@pytest.mark.parametrize(
    "text, reason",
    [
        ("weights:10:1.1", "layer 10 (Dropout) has no weights"),
        ("weights:30:1.1", "layer 30 is not one of"),
        ("padding:4:2", "is not a convolution after a ZeroPad2D"),
        ("padding:1:1.5", "whole number of pixels"),
        ("shift:1:1", "expected KIND:LAYER:VALUE"),
        ("frozen:8", "layer 8 (Flatten) has no weights"),
        ("shape:3", "layer 3 (Conv2D) is not a MaxPool2D"),
        ("die:12", "layer 12 (Dropout) does not run here"),
        ("die:4:1", "expected KIND:LAYER:VALUE (bias/bn_mean/bn_eval/same_side/frozen/shape/die:LAYER)"),
    ],
)
def test_a_fault_that_does_not_fit_the_network_is_refused(text, reason):
    with pytest.raises(ValueError) as refused:
        parse_fault(text, CNN2D_3LAYER)
    assert reason in str(refused.value)


def test_the_command_refuses_a_bad_fault_in_one_line_with_status_2(capsys):
    assert localise.main(["--only", "torch", "--fault", "torch:weights:10:2"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    with pytest.raises(SystemExit) as stop:
        localise.main(["--only", "torch", "--fault", "caffe:weights:1:2"])
    assert stop.value.code == 2
