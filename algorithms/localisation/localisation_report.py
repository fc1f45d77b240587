"""The localisation as a person reads it: two tables (each layer's output, each layer's
parameter gradients; a column per framework; the worst over the steps), a line per
framework saying where its first difference entered and, for one whose process stopped,
the last layer it reported and why, the heatmap PNG and the CSV of every cell
(algorithms/localisation/localisation.py holds the data)."""

from __future__ import annotations

import csv
import math

import numpy as np

from algorithms.figures import pyplot, save_figure
from algorithms.localisation.localisation import (
    BACKWARD_TOLERANCE,
    BEYOND,
    FORWARD_TOLERANCE,
    NO_GRADIENT,
    NON_FINITE,
    NOT_HELD,
    NOT_REACHED,
    SHAPE,
    WITHIN,
    Localisation,
    cell_text,
    what_was_found,
)
from algorithms.network.networks import layer_label
from algorithms.tables import text_table

TITLES = {
    "forward": f"forward: each layer's output, max relative error (tolerance {FORWARD_TOLERANCE:g})",
    "backward": f"backward: each layer's kernel and bias gradients (and its input gradient, where a framework "
    f"gives it), the worst (tolerance {BACKWARD_TOLERANCE:g})",
    "evaluation": f"evaluation: each layer's output with the running statistics (tolerance {FORWARD_TOLERANCE:g})",
}
TOLERANCES = {"forward": FORWARD_TOLERANCE, "backward": BACKWARD_TOLERANCE, "evaluation": FORWARD_TOLERANCE}
LEGEND = (
    "!: beyond tolerance; [ ]: where the framework's first difference entered; shape: another shape than the "
    "spec's; nan, inf: non-finite where the reference is finite; no grad: the framework gave no gradient for a "
    "parameter it holds; stopped: its process ended before this layer; in conv: a pad folded into the "
    "convolution; pre-relu: the ReLU runs after the pool, so the conv's output is not the spec's there; -: no "
    "blob of its own (Caffe's flatten). Dropout is off: its layers are left out."
)


def format_localisation(localisation: Localisation) -> str:
    lines = []
    for direction in localisation.directions():
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
            if not localisation.cells.get(name):
                row.append("not run")
                continue
            first = firsts[name]
            is_first = first is not None and (first.seen_at, first.direction) == (layer, direction)
            row.append(cell_text(localisation.worst_over_steps(name, (layer, direction)), is_first))
        rows.append(tuple(row))
    return rows


def summary_lines(localisation: Localisation) -> list:
    """Per framework: its structural problems, then where its first difference entered
    ("layer 9 Dense 128 bias: no gradient"), and where its process stopped, if it did."""
    lines = []
    for name in localisation.frameworks:
        fault = f" (fault put in: {localisation.faults[name]})" if name in localisation.faults else ""
        lines += [f"structure: {problem}" for problem in localisation.structure.get(name, [])]
        stop = localisation.failures.get(name)
        if stop is not None and not localisation.cells.get(name):
            lines.append(f"{name}{fault}: not run: {stop.reason}")
            continue
        finding = localisation.first_beyond(name)
        if finding is not None:
            lines.append(f"{name}{fault}: {finding_line(localisation, name, finding)}")
        elif stop is None:
            lines.append(f"{name}{fault}: {healthy_line(localisation, name)}")
        if stop is not None and stop.step is None:
            lines.append(f"{name}{fault}: its process failed after its last step: {stop.reason}")
        elif stop is not None:
            layers = localisation.network.layers
            after = (
                f"after layer {stop.last_output} {layer_label(layers[stop.last_output])}, the last output it reported"
                if stop.last_output is not None
                else "before its first output"
            )
            lines.append(f"{name}{fault}: stopped in step {stop.step} {after}: {stop.reason}")
    return lines


def finding_line(localisation: Localisation, name: str, finding) -> str:
    """The first difference on its layer: "layer 9 Dense 128 bias: no gradient (step 1, backward)"."""
    layers = localisation.network.layers
    part = f" {finding.cell.part}" if finding.direction == "backward" else ""
    where = f"step {finding.step}, {finding.direction}"
    after = f" after layer {finding.span[0] - 1}" if finding.span[0] > 0 else ""
    if finding.seen_at != finding.layer:
        where += f"; seen at layer {finding.seen_at} {layer_label(layers[finding.seen_at])}, the first output"
        where += f" {name} holds{after}"
    elif finding.span[0] < finding.layer:
        where += f"; the first output {name} holds{after}"
    line = f"layer {finding.layer} {layer_label(layers[finding.layer])}{part}: "
    line += f"{what_was_found(finding.cell, finding.direction)} ({where})"
    if finding.cell.kind == NON_FINITE:
        finite = [
            other
            for other in localisation.frameworks
            if other != name
            and len(localisation.cells.get(other, [])) >= finding.step
            and localisation.cells[other][finding.step - 1].get((finding.seen_at, finding.direction))
            and localisation.cells[other][finding.step - 1][(finding.seen_at, finding.direction)].kind
            in (WITHIN, BEYOND)
        ]
        line += (
            ", where the reference"
            + (f" and {', '.join(finite)} are" if finite else " is")
            + " finite: a class of its own, not drift"
        )
    return line


def healthy_line(localisation: Localisation, name: str) -> str:
    structural = localisation.structure_layers.get(name)
    if structural is None:
        return "within float32 tolerance at every layer, forward and backward"
    return (
        f"its parameters differ from the spec's first at layer {structural} "
        f"({layer_label(localisation.network.layers[structural])}: structure above); every value it holds "
        "is within float32 tolerance"
    )


def write_cells_csv(localisation: Localisation, path: str) -> None:
    with open(path, "x", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["framework", "step", "layer", "label", "direction", "kind", "relative_error", "note", "part"])
        for row in localisation.rows():
            writer.writerow([*row[:6], repr(row[6]), *row[7:]])


def plot_heatmap(localisation: Localisation, path: str) -> None:
    """Frameworks x layers, colour the log10 of the worst relative error over the steps,
    forward and backward side by side; a red frame on each cell beyond tolerance, a thick
    one on each framework's first; grey where a layer's output is not held."""
    import matplotlib

    plt = pyplot()
    floor, ceiling = 1e-9, 1.0
    names = localisation.frameworks
    directions = [
        (direction, localisation.table_layers(direction), TOLERANCES[direction])
        for direction in localisation.directions()
    ]
    widths = [len(layers) for _, layers, _ in directions]
    figure, axes = plt.subplots(
        1,
        len(directions),
        figsize=(2.2 + 0.62 * sum(widths), 2.4 + 0.42 * len(names)),
        gridspec_kw={"width_ratios": widths},
        layout="constrained",  # the suptitle, the two titles and the colour bar each get their own room
    )
    for axis, (direction, layers, tolerance) in zip(axes, directions):
        values = np.full((len(names), len(layers)), np.nan)
        for row, name in enumerate(names):
            first = localisation.first_beyond(name)
            for column, layer in enumerate(layers):
                if not localisation.cells.get(name):
                    continue
                cell = localisation.worst_over_steps(name, (layer, direction))
                if cell.kind in (NOT_HELD, NOT_REACHED):
                    text = cell.note if cell.kind == NOT_HELD else "stopped"
                    axis.text(column, row, text, ha="center", va="center", fontsize=6, color="dimgray")
                if cell.kind in (NOT_HELD, NOT_REACHED) or math.isnan(cell.error):
                    continue
                values[row, column] = math.log10(min(max(cell.error, floor), ceiling))
                if cell.kind != WITHIN:
                    is_first = first is not None and (first.seen_at, first.direction) == (layer, direction)
                    axis.add_patch(
                        plt.Rectangle(
                            (column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=3 if is_first else 1
                        )
                    )
                if cell.kind in (NON_FINITE, SHAPE, NO_GRADIENT):
                    text = {NON_FINITE: "n/f", SHAPE: "shape", NO_GRADIENT: "no grad"}[cell.kind]
                    axis.text(column, row, text, ha="center", fontsize=7)
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
    save_figure(figure, path, tight_layout=False, bbox_inches="tight")
