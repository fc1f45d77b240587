"""Where a difference enters: each framework's per-layer outputs and parameter gradients
(its wrapper's `layer_outputs_and_gradients`) against the float64 reference of the spec
(algorithms/spec/reference.py), the first layer beyond float32 tolerance, and the table
a person reads. algorithms/studies/localise.py runs the frameworks and fills it.

The error of a tensor is its largest difference from the reference over the reference's
largest magnitude, max|x - r| / max|r|: the error relative to the tensor's scale, so an
element near zero (a ReLU's output, a small gradient) neither hides nor inflates it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from algorithms.spec.networks import Dropout, Network, layer_label

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

WITHIN, BEYOND, NON_FINITE, SHAPE, NOT_HELD, UNCOMPARABLE = (
    "within",
    "beyond",
    "non-finite",
    "shape",
    "not held",
    "reference non-finite",
)
FAULTY = (BEYOND, NON_FINITE, SHAPE)  # a cell of these kinds is where a difference shows
SEVERITY = {NOT_HELD: 0, UNCOMPARABLE: 0, WITHIN: 1, BEYOND: 2, NON_FINITE: 3, SHAPE: 4}


@dataclass(frozen=True)
class Cell:
    kind: str
    error: float = math.nan
    note: str = ""  # the shape that differs; why a layer's output is not held


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


def relative_error(got: np.ndarray, expected: np.ndarray, allowance=0.0) -> float:
    """max(|got - expected| - allowance) over max|expected|, the difference a kink's other
    side may make (the reference's allowance, algorithms/spec/reference.py) left out."""
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    excess = np.maximum(np.abs(np.float64(got) - expected) - allowance, 0.0)
    difference = float(np.max(excess)) if expected.size else 0.0
    if scale == 0.0:
        return 0.0 if difference == 0.0 else math.inf
    return difference / scale


def compare_arrays(got: Optional[np.ndarray], expected: np.ndarray, tolerance: float, allowance=0.0) -> Cell:
    if got is None:
        return Cell(NOT_HELD)
    if got.shape != expected.shape:
        return Cell(SHAPE, math.inf, f"{got.shape[1:] if got.ndim > 1 else got.shape} not {expected.shape[1:]}")
    if not np.all(np.isfinite(expected)):
        return Cell(UNCOMPARABLE)
    if not np.all(np.isfinite(got)):
        return Cell(NON_FINITE, math.inf, "nan" if np.isnan(got).any() else "inf")
    error = relative_error(got, expected, allowance)
    return Cell(BEYOND if error > tolerance else WITHIN, error)


def worst(cells: list) -> Cell:
    return max(cells, key=lambda cell: (SEVERITY[cell.kind], -1.0 if math.isnan(cell.error) else cell.error))


def compare_pass(network: Network, reference, outputs: dict, gradients: dict) -> dict:
    """{(layer index, "forward" | "backward"): Cell} of one pass of one framework;
    `backward` holds the worse of a layer's kernel and bias gradients."""
    cells = {}
    for index in range(len(network.layers)):
        cell = compare_arrays(outputs.get(index), reference.outputs[index], FORWARD_TOLERANCE)
        cells[(index, "forward")] = (
            Cell(NOT_HELD, note=not_held_reason(network, index)) if cell.kind == NOT_HELD else cell
        )
    for index, _, _ in network.parametric_layers():
        cells[(index, "backward")] = worst(
            [
                compare_arrays(
                    gradients.get((index, role)),
                    reference.gradients[(index, role)],
                    BACKWARD_TOLERANCE,
                    reference.allowances[(index, role)],
                )
                for role in ("kernel", "bias")
            ]
        )
    return cells


def first_faulty(network: Network, cells: dict) -> Optional[tuple]:
    """(layer named, direction, layer seen at, span) where the difference entered: the
    first layer of the forward pass beyond tolerance, else the first parameter the
    backward pass reaches (the last layer first) beyond it; None when every cell is within."""
    for index in range(len(network.layers)):
        if cells.get((index, "forward"), Cell(NOT_HELD)).kind in FAULTY:
            start = index
            while start > 0 and cells.get((start - 1, "forward"), Cell(NOT_HELD)).kind == NOT_HELD:
                start -= 1
            weighted = [i for i, _, _ in network.parametric_layers() if start <= i <= index]
            return (weighted[0] if weighted else index), "forward", index, (start, index)
    for index, _, _ in reversed(network.parametric_layers()):
        if cells.get((index, "backward"), Cell(NOT_HELD)).kind in FAULTY:
            return index, "backward", index, (index, index)
    return None


@dataclass
class Localisation:
    """Every framework's cells at every step, keyed by the spec's layer indexes (the
    network's own, dropout layers included; they run as the identity and are not rows)."""

    network: Network
    steps: int
    frameworks: list
    cells: dict = field(default_factory=dict)  # framework -> [one dict per step: (layer, direction) -> Cell]
    failures: dict = field(default_factory=dict)  # framework -> why it gave no cells
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
        """(framework, step, layer, label, direction, kind, error, note) for every cell: the table as data."""
        return [
            (name, step, layer, layer_label(self.network.layers[layer]), direction, cell.kind, cell.error, cell.note)
            for name in self.frameworks
            for step, cells in enumerate(self.cells.get(name, []), start=1)
            for (layer, direction), cell in sorted(cells.items())
        ]

    def healthy(self) -> bool:
        return not self.failures and not any(self.structure.values()) and not any(map(self.first_beyond, self.cells))

    def table_layers(self, direction: str) -> list:
        if direction == "backward":
            return [index for index, _, _ in self.network.parametric_layers()]
        return [index for index, layer in enumerate(self.network.layers) if not isinstance(layer, Dropout)]


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
    if cell.kind == SHAPE:
        text = "shape"
    elif cell.kind == NON_FINITE:
        text = cell.note
    elif cell.kind == UNCOMPARABLE:
        text = "ref n/f"
    else:
        text = f"{cell.error:.1e}" + ("!" if cell.kind == BEYOND else " ")
    return f"[{text.strip()}]" if first else text
