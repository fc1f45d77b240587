"""The localisation as a person reads it: two tables (each layer's output, each layer's
parameter gradients; a column per framework; the worst over the steps), a line per
framework saying where its first difference entered, the heatmap PNG and the CSV of every
cell (algorithms/analysis/localisation.py holds the data)."""

from __future__ import annotations

import csv
import math

import numpy as np

from algorithms.analysis.localisation import (
    BACKWARD_TOLERANCE,
    FORWARD_TOLERANCE,
    NON_FINITE,
    NOT_HELD,
    SHAPE,
    WITHIN,
    Localisation,
    cell_text,
)
from algorithms.spec.networks import layer_label
from algorithms.tables import text_table

TITLES = {
    "forward": f"forward: each layer's output, max relative error (tolerance {FORWARD_TOLERANCE:g})",
    "backward": f"backward: each layer's kernel and bias gradients, the worse (tolerance {BACKWARD_TOLERANCE:g})",
}
LEGEND = (
    "!: beyond tolerance; [ ]: where the framework's first difference entered; in conv: a pad folded into the "
    "convolution; pre-relu: the ReLU runs after the pool, so the conv's output is not the spec's there; -: no "
    "blob of its own (Caffe's flatten). Dropout is off: its layers are left out."
)


def format_localisation(localisation: Localisation) -> str:
    lines = []
    for direction in ("forward", "backward"):
        lines += ["", TITLES[direction] + (f", worst of {localisation.steps} steps" if localisation.steps > 1 else "")]
        lines += text_table(("layer", *localisation.frameworks), _table_rows(localisation, direction), rule=True)
    lines += ["", LEGEND, ""] + summary_lines(localisation)
    return "\n".join(lines)


def _table_rows(localisation: Localisation, direction: str) -> list:
    firsts = {name: localisation.first_beyond(name) for name in localisation.frameworks}
    rows = []
    for layer in localisation.table_layers(direction):
        row = [f"{layer:>2} {layer_label(localisation.network.layers[layer])}"]
        for name in localisation.frameworks:
            if name in localisation.failures:
                row.append("not run")
                continue
            first = firsts[name]
            is_first = first is not None and (first.seen_at, first.direction) == (layer, direction)
            row.append(cell_text(localisation.worst_over_steps(name, (layer, direction)), is_first))
        rows.append(tuple(row))
    return rows


def summary_lines(localisation: Localisation) -> list:
    """One line per framework: its fault, its structural problems, where its first difference entered."""
    lines = []
    for name in localisation.frameworks:
        fault = f" (fault put in: {localisation.faults[name]})" if name in localisation.faults else ""
        lines += [f"structure: {problem}" for problem in localisation.structure.get(name, [])]
        if name in localisation.failures:
            lines.append(f"{name}{fault}: not run: {localisation.failures[name]}")
            continue
        finding = localisation.first_beyond(name)
        if finding is None:
            structural = localisation.structure_layers.get(name)
            lines.append(
                f"{name}{fault}: "
                + (
                    f"its parameters differ from the spec's first at layer {structural} "
                    f"({layer_label(localisation.network.layers[structural])}: structure above); every value it holds "
                    "is within float32 tolerance"
                    if structural is not None
                    else "within float32 tolerance at every layer, forward and backward"
                )
            )
            continue
        layers = localisation.network.layers
        where = f"step {finding.step}, layer {finding.layer} ({layer_label(layers[finding.layer])}) {finding.direction}"
        if finding.seen_at != finding.layer:
            after = f" after layer {finding.span[0] - 1}" if finding.span[0] > 0 else ""
            where += (
                f", seen at layer {finding.seen_at} ({layer_label(layers[finding.seen_at])}), the first output "
                f"{name} holds{after}"
            )
        if finding.cell.kind == NON_FINITE:
            finite = [
                other
                for other in localisation.frameworks
                if other != name
                and other in localisation.cells
                and localisation.cells[other][finding.step - 1].get((finding.layer, finding.direction), None)
                and localisation.cells[other][finding.step - 1][(finding.layer, finding.direction)].kind != NON_FINITE
            ]
            lines.append(
                f"{name}{fault}: non-finite ({finding.cell.note}) from {where}, where the reference"
                + (f" and {', '.join(finite)} are" if finite else " is")
                + " finite: a class of its own, not drift"
            )
        elif finding.cell.kind == SHAPE:
            lines.append(f"{name}{fault}: first difference at {where}: shape {finding.cell.note}")
        else:
            lines.append(f"{name}{fault}: first beyond tolerance at {where}: relative error {finding.cell.error:.2e}")
    return lines


def write_cells_csv(localisation: Localisation, path: str) -> None:
    with open(path, "x", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["framework", "step", "layer", "label", "direction", "kind", "relative_error", "note"])
        for row in localisation.rows():
            writer.writerow([*row[:6], repr(row[6]), row[7]])


def plot_heatmap(localisation: Localisation, path: str) -> None:
    """Frameworks x layers, colour the log10 of the worst relative error over the steps,
    forward and backward side by side; a red frame on each cell beyond tolerance, a thick
    one on each framework's first; grey where a layer's output is not held."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor, ceiling = 1e-9, 1.0
    names = localisation.frameworks
    directions = [
        (direction, localisation.table_layers(direction), tolerance)
        for direction, tolerance in (("forward", FORWARD_TOLERANCE), ("backward", BACKWARD_TOLERANCE))
    ]
    widths = [len(layers) for _, layers, _ in directions]
    figure, axes = plt.subplots(
        1,
        2,
        figsize=(2.2 + 0.62 * sum(widths), 2.4 + 0.42 * len(names)),
        gridspec_kw={"width_ratios": widths},
        layout="constrained",  # the suptitle, the two titles and the colour bar each get their own room
    )
    for axis, (direction, layers, tolerance) in zip(axes, directions):
        values = np.full((len(names), len(layers)), np.nan)
        for row, name in enumerate(names):
            first = localisation.first_beyond(name)
            for column, layer in enumerate(layers):
                if name in localisation.failures:
                    continue
                cell = localisation.worst_over_steps(name, (layer, direction))
                if cell.kind == NOT_HELD:
                    axis.text(column, row, cell.note, ha="center", va="center", fontsize=6, color="dimgray")
                if cell.kind == NOT_HELD or math.isnan(cell.error):
                    continue
                values[row, column] = math.log10(min(max(cell.error, floor), ceiling))
                if cell.kind != WITHIN:
                    is_first = first is not None and (first.seen_at, first.direction) == (layer, direction)
                    axis.add_patch(
                        plt.Rectangle(
                            (column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=3 if is_first else 1
                        )
                    )
                if cell.kind in (NON_FINITE, SHAPE):
                    axis.text(column, row, "n/f" if cell.kind == NON_FINITE else "shape", ha="center", fontsize=7)
        colour_map = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
        image = axis.imshow(values, cmap=colour_map, vmin=math.log10(floor), vmax=0, aspect="auto")
        axis.set_xticks(
            range(len(layers)),
            [f"{layer} {layer_label(localisation.network.layers[layer])}" for layer in layers],
            rotation=60,
            ha="right",
            fontsize=7,
        )
        axis.set_yticks(range(len(names)), names if direction == "forward" else [], fontsize=8)
        axis.set_title(f"{direction} (tolerance {tolerance:g})", fontsize=9)
    figure.colorbar(image, ax=axes, label="log10 max relative error (grey: not held)", shrink=0.9)
    figure.suptitle(
        f"{localisation.network.name}: each framework against the float64 reference"
        + (f", worst of {localisation.steps} steps" if localisation.steps > 1 else ""),
        fontsize=10,
    )
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
