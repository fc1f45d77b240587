"""The localisation's judgement and the structural check, with known answers and no
framework process: each cell's class (within, beyond, shape, non-finite) from arrays
made to be so, where a difference entered (forward first, then the backward pass's
order), the non-finite class named against the finite frameworks, a bad --fault refused
in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algorithms.analysis.localisation import (
    BACKWARD_TOLERANCE,
    BEYOND,
    FORWARD_TOLERANCE,
    NON_FINITE,
    NOT_HELD,
    SHAPE,
    UNCOMPARABLE,
    WITHIN,
    Cell,
    Localisation,
    compare_arrays,
    compare_pass,
    first_faulty,
)
from algorithms.analysis.localisation_report import format_localisation
from algorithms.spec.networks import CNN2D_3LAYER
from algorithms.spec.reference import forward_backward
from algorithms.spec.variants import parse_fault
from algorithms.spec.weights import initial_weights
from algorithms.studies import localise

NETWORK = CNN2D_3LAYER.without_dropout()


def test_each_cell_class_from_arrays_made_to_be_it():
    expected = np.linspace(-1.0, 2.0, 12).reshape(3, 4)
    assert compare_arrays(expected * (1 + 1e-7), expected, FORWARD_TOLERANCE).kind == WITHIN
    off = compare_arrays(expected + 0.01, expected, FORWARD_TOLERANCE)
    assert off.kind == BEYOND and off.error == pytest.approx(0.01 / 2.0)  # over the tensor's largest magnitude
    assert compare_arrays(expected[:, :3], expected, FORWARD_TOLERANCE).kind == SHAPE
    with_nan = expected.copy()
    with_nan[1, 2] = np.nan
    assert compare_arrays(with_nan, expected, FORWARD_TOLERANCE) == Cell(NON_FINITE, math.inf, "nan")
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
    assert "scaled: first beyond tolerance at step 1, layer 3 (Conv2D 48 3x3) forward: relative error 1.00e-01" in text
    assert (
        "overflowing: non-finite (nan) from step 1, layer 9 (Dense 128) forward, where the reference and healthy, "
        "scaled are finite: a class of its own, not drift" in text
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


@pytest.mark.parametrize(
    "text, reason",
    [
        ("weights:10:1.1", "layer 10 (Dropout) has no weights"),
        ("weights:30:1.1", "layer 30 is not one of"),
        ("padding:4:2", "is not a convolution after a ZeroPad2D"),
        ("padding:1:1.5", "whole number of pixels"),
        ("shift:1:1", "expected KIND:LAYER:VALUE"),
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
