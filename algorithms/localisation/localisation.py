"""Where a difference enters: each framework's per-layer outputs and parameter gradients
(its wrapper's `layer_outputs_and_gradients`) against the float64 reference of the spec
(algorithms/reference/reference.py), the first layer beyond float32 tolerance, and the table
a person reads. algorithms/localisation/localise.py runs the frameworks and fills it.

The error of a tensor is its largest difference from the reference over the reference's
largest magnitude, max|x - r| / max|r|: the error relative to the tensor's scale, so an
element near zero (a ReLU's output, a small gradient) neither hides nor inflates it.

What is not a number to compare is a finding of its own, on its layer: an output of
another shape, NaN or Inf where the reference is finite, a parameter the framework gave
no gradient for (frozen, detached), and a framework whose process stopped (the layers
it never reached, the last one it reported, and why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from algorithms.network.networks import Dropout, Network, layer_label

# float32 rounds each operation to 2^-24 ≈ 6e-8 of the value. A layer's output is a sum of
# up to 1,568 products (the first dense layer) over inputs already rounded by the layers
# before, and the frameworks sum in different orders (blocked GEMMs, Winograd and FFT
# convolutions): all eight frameworks measured on the default data reach 8.6e-7 forward
# and 9.6e-7 backward (docs/comparing.md has the table; a gradient sums over the batch and
# every pixel too, hence the wider backward margin). The tolerances sit a factor 20-100
# above that, and a factor 1,000 below the smallest error the known-answer faults cause
# (a kernel 10% off: 1e-1 at its layer).
FORWARD_TOLERANCE = 2e-5
BACKWARD_TOLERANCE = 1e-4

WITHIN, BEYOND, NON_FINITE, SHAPE, NO_GRADIENT, NOT_HELD, NOT_REACHED, UNCOMPARABLE = (
    "within",
    "beyond",
    "non-finite",
    "shape",
    "no gradient",  # the framework holds the parameter and computed no gradient for it
    "not held",  # by design: a fused layer, a parameter the model does not have
    "not reached",  # the framework's process stopped before it
    "reference non-finite",
)
FAULTY = (BEYOND, NON_FINITE, SHAPE, NO_GRADIENT)  # a cell of these kinds is where a difference shows
SEVERITY = {NOT_HELD: 0, UNCOMPARABLE: 0, WITHIN: 1, NOT_REACHED: 2, BEYOND: 3, NO_GRADIENT: 4, NON_FINITE: 5, SHAPE: 6}


@dataclass(frozen=True)
class Cell:
    kind: str
    error: float = math.nan
    note: str = ""  # the shapes that differ, "NaN" or "Inf", why a layer's output is not held
    part: str = ""  # a gradient's: "kernel", "bias" or "kernel and bias", the parameters the cell is of


@dataclass(frozen=True)
class Finding:
    """Where a framework's first difference entered: the step, the spec layer named, the
    pass, and the cell that showed it, at layer `seen_at`. A framework that holds no output
    at the layers before `seen_at` (a pad folded into its convolution, a ReLU moved past
    its pool) sees a difference only at the next boundary it holds; the layer named is
    then the first layer with weights in between (`span`: the layers the cell covers)."""

    step: int
    layer: int
    direction: str  # "forward" or "backward"
    cell: Cell
    seen_at: int
    span: tuple  # (first layer, last layer) the cell's difference may have entered in


def relative_error(got: np.ndarray, expected: np.ndarray, allowance=0.0, scale=None) -> float:
    """max(|got - expected| - allowance) over max|expected| (or `scale`), the difference a
    kink's other side may make (the reference's allowance, algorithms/reference/reference.py) left out."""
    if scale is None:
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    excess = np.maximum(np.abs(np.float64(got) - expected) - allowance, 0.0)
    difference = float(np.max(excess)) if expected.size else 0.0
    if scale == 0.0:
        return 0.0 if difference == 0.0 else math.inf
    return difference / scale


def compare_arrays(
    got: Optional[np.ndarray], expected: np.ndarray, tolerance: float, allowance=0.0, scale=None
) -> Cell:
    if got is None:
        return Cell(NOT_HELD)
    if got.shape != expected.shape:
        return Cell(SHAPE, math.inf, f"{got.shape}, spec {expected.shape}")
    if not np.all(np.isfinite(expected)):
        return Cell(UNCOMPARABLE)
    if not np.all(np.isfinite(got)):
        nan, inf = bool(np.isnan(got).any()), bool(np.isinf(got).any())
        return Cell(NON_FINITE, math.inf, " and ".join(name for name, held in (("NaN", nan), ("Inf", inf)) if held))
    error = relative_error(got, expected, allowance, scale)
    return Cell(BEYOND if error > tolerance else WITHIN, error)


def worst(cells: list) -> Cell:
    return max(cells, key=lambda cell: (SEVERITY[cell.kind], -1.0 if math.isnan(cell.error) else cell.error))


def compare_pass(
    network: Network,
    reference,
    outputs: dict,
    gradients: dict,
    complete: bool = True,
    input_gradients: Optional[dict] = None,
    evaluation_outputs: Optional[dict] = None,
) -> dict:
    """{(layer index, "forward" | "backward" | "evaluation"): Cell} of one pass of one
    framework; `backward` holds the worst of a layer's kernel, bias and input gradients
    (the input gradient where the framework gave any: then every layer has a backward
    cell), a kernel's and bias's error relative to the larger of the two (a bias before a
    BatchNormalization has a gradient of 0, which float32 meets only to its rounding);
    `evaluation` each layer's output in evaluation (BatchNormalization's running
    statistics), where the framework gave them. A gradient given as None (as a wrapper's
    LayerProbe gives it) is a NO_GRADIENT cell. `complete=False`: the framework's process
    stopped in this pass, so an output after the last one given and a gradient not given
    were never reached (NOT_REACHED), not left out by design (NOT_HELD)."""
    cells, last_output = {}, max(outputs, default=-1)
    for index in range(len(network.layers)):
        cell = compare_arrays(outputs.get(index), reference.outputs[index], FORWARD_TOLERANCE)
        if cell.kind == NOT_HELD:
            reached = complete or index < last_output
            cell = Cell(NOT_HELD, note=not_held_reason(network, index)) if reached else Cell(NOT_REACHED)
        cells[(index, "forward")] = cell
    input_gradients = input_gradients or {}
    parametric = {index for index, _, _ in network.parametric_layers()}
    backward = range(len(network.layers)) if input_gradients else sorted(parametric)
    for index in backward:
        by_role = {}
        if index in parametric:
            scale = max(float(np.max(np.abs(reference.gradients[(index, role)]))) for role in ("kernel", "bias"))
            for role in ("kernel", "bias"):
                given = gradients.get((index, role))
                if given is None and (index, role) in gradients:
                    cell = Cell(NO_GRADIENT, math.inf)
                elif given is None and not complete:
                    cell = Cell(NOT_REACHED)
                else:
                    expected = reference.gradients[(index, role)]
                    allowance = reference.allowances[(index, role)]
                    cell = compare_arrays(given, expected, BACKWARD_TOLERANCE, allowance, scale)
                by_role[role] = replace(cell, part=role)
        if index in input_gradients:
            expected = reference.input_gradients[index]
            cell = compare_arrays(
                input_gradients[index], expected, BACKWARD_TOLERANCE, reference.input_allowances[index]
            )
            by_role["input"] = replace(cell, part="input")
        if not by_role:
            cells[(index, "backward")] = Cell(NOT_HELD) if complete else Cell(NOT_REACHED)
            continue
        cell = worst(list(by_role.values()))
        parameters = [by_role[role] for role in ("kernel", "bias") if role in by_role]
        if cell.kind == NO_GRADIENT and len(parameters) == 2 and all(p.kind == NO_GRADIENT for p in parameters):
            cell = replace(cell, part="kernel and bias")  # both of the layer's parameters
        cells[(index, "backward")] = cell
    if evaluation_outputs:
        for index in range(len(network.layers)):
            cell = compare_arrays(evaluation_outputs.get(index), reference.evaluation_outputs[index], FORWARD_TOLERANCE)
            if cell.kind == NOT_HELD:
                cell = Cell(NOT_HELD, note=not_held_reason(network, index))
            cells[(index, "evaluation")] = cell
    return cells


def first_faulty(network: Network, cells: dict) -> Optional[tuple]:
    """(layer named, direction, layer seen at, span) where the difference entered: the
    first layer of the forward pass beyond tolerance (of the layers back to the output
    before it, the first with weights; a shape where it is seen), else the first layer the
    backward pass reaches (the last layer first) with a gradient beyond it (its kernel,
    bias or input gradient: a layer whose input gradient is the first wrong one passed a
    right gradient on wrongly), else the first layer of the evaluation pass beyond it (as
    the forward pass's); None when every cell is within."""
    found = _first_in_pass(network, cells, "forward")
    if found:
        return found
    backward = sorted((index for index, direction in cells if direction == "backward"), reverse=True)
    for index in backward:
        if cells[(index, "backward")].kind in FAULTY:
            return index, "backward", index, (index, index)
    return _first_in_pass(network, cells, "evaluation")


def _first_in_pass(network: Network, cells: dict, direction: str) -> Optional[tuple]:
    for index in range(len(network.layers)):
        kind = cells.get((index, direction), Cell(NOT_HELD)).kind
        if kind in FAULTY:
            start = index
            while start > 0 and cells.get((start - 1, direction), Cell(NOT_HELD)).kind == NOT_HELD:
                start -= 1
            weighted = [i for i, _, _ in network.parametric_layers() if start <= i <= index]
            # a shape is named where it is seen: a pad, a conv or a pool in the span may change it
            named = weighted[0] if weighted and kind != SHAPE else index
            return named, direction, index, (start, index)
    return None


@dataclass(frozen=True)
class Stop:
    """A framework whose process failed: the step it was in (None: after its last step was
    done), the last layer whose output it reported in that step (None: none) and why, in
    one line (its exit status and the error it caught, or its stderr's last line); `log`
    its whole stderr, the traceback included, which the table never shows."""

    step: Optional[int]
    last_output: Optional[int]
    reason: str
    log: str = ""


@dataclass
class Localisation:
    """Every framework's cells at every step, keyed by the spec's layer indexes (the
    network's own, dropout layers included; they run as the identity and are not rows)."""

    network: Network
    steps: int
    frameworks: list
    cells: dict = field(default_factory=dict)  # framework -> [one dict per step: (layer, direction) -> Cell]
    failures: dict = field(default_factory=dict)  # framework -> Stop: its process ended early (cells kept)
    structure: dict = field(default_factory=dict)  # framework -> the structural check's problems
    structure_layers: dict = field(default_factory=dict)  # framework -> the first layer they name, or None
    faults: dict = field(default_factory=dict)  # framework -> the fault put into it (text)

    def first_beyond(self, framework: str) -> Optional[Finding]:
        for step, cells in enumerate(self.cells.get(framework, []), start=1):
            found = first_faulty(self.network, cells)
            if found:
                layer, direction, seen_at, span = found
                return Finding(step, layer, direction, cells[(seen_at, direction)], seen_at, span)
        return None

    def worst_over_steps(self, framework: str, key: tuple) -> Cell:
        return worst([cells[key] for cells in self.cells.get(framework, []) if key in cells] or [Cell(NOT_HELD)])

    def rows(self) -> list:
        """(framework, step, layer, label, direction, kind, error, note, part) for every cell: the table as data."""
        return [
            (
                name,
                step,
                layer,
                layer_label(self.network.layers[layer]),
                direction,
                cell.kind,
                cell.error,
                cell.note,
                cell.part,
            )
            for name in self.frameworks
            for step, cells in enumerate(self.cells.get(name, []), start=1)
            for (layer, direction), cell in sorted(cells.items())
        ]

    def healthy(self) -> bool:
        return not self.failures and not any(self.structure.values()) and not any(map(self.first_beyond, self.cells))

    def directions(self) -> tuple:
        """The passes compared: forward and backward, and evaluation where a framework gave it."""
        given = {direction for steps in self.cells.values() for cells in steps for _, direction in cells}
        return ("forward", "backward") + (("evaluation",) if "evaluation" in given else ())

    def table_layers(self, direction: str) -> list:
        if direction == "backward":  # every layer where a framework gave input gradients
            given = {index for steps in self.cells.values() for cells in steps for index, d in cells if d == direction}
            parametric = {index for index, _, _ in self.network.parametric_layers()}
            return sorted((given | parametric) - self._dropout_layers())
        return [index for index, layer in enumerate(self.network.layers) if not isinstance(layer, Dropout)]

    def _dropout_layers(self) -> set:
        return {index for index, layer in enumerate(self.network.layers) if isinstance(layer, Dropout)}


def not_held_reason(network: Network, index: int) -> str:
    """Why a framework that builds the fused model holds no output at spec layer `index`."""
    if index + 1 in network.pads_folded_into_convs():
        return "in conv"  # the pad is the convolution's own padding
    if index in network.relus_after_pools():
        return "pre-relu"  # the ReLU runs after the pool: the conv's output there is before it
    return "-"


def cell_text(cell: Cell, first: bool) -> str:
    if cell.kind == NOT_HELD:
        return cell.note or "-"
    if cell.kind == NOT_REACHED:
        return "stopped"
    if cell.kind == SHAPE:
        text = "shape"
    elif cell.kind == NO_GRADIENT:
        text = "no grad"
    elif cell.kind == NON_FINITE:
        text = cell.note.lower().replace(" and ", "+")  # nan, inf, nan+inf
    elif cell.kind == UNCOMPARABLE:
        text = "ref n/f"
    else:
        text = f"{cell.error:.1e}" + ("!" if cell.kind == BEYOND else " ")
    return f"[{text.strip()}]" if first else text


def what_was_found(cell: Cell, direction: str) -> str:
    """A faulty cell's finding, after its layer's name: "no gradient", "NaN in the output"."""
    held = {"forward": "output", "evaluation": "output in evaluation"}.get(direction, "gradient")
    if cell.kind == NO_GRADIENT:
        return "no gradient"
    if cell.kind == SHAPE:
        return f"{held} shape {cell.note}"
    if cell.kind == NON_FINITE:
        return f"{cell.note} in the {held}"
    tolerance = BACKWARD_TOLERANCE if direction == "backward" else FORWARD_TOLERANCE
    return f"relative error {cell.error:.2e} in the {held}, beyond the tolerance {tolerance:g}"
