"""Where two releases of one framework part: each release's forward and backward pass on the
same weights and batch (localise.py's child, each in its release's environment:
registry/release_env.py), compared with each other layer by layer, and each with the
float64 reference.

The rows of the result (a Localisation, so its table, heatmap and CSV are the localiser's):
each release against the float64 reference, then the later release against the first,
cell by cell, at the localiser's float32 tolerances. The first layer where the two
releases differ beyond them is where the new release changed the arithmetic, said as

    layer 6 (BatchNorm) bias gradient, 3.0e-02 against rounding 2.0e-07

the two releases' relative difference there against the smaller of their own errors from
the float64 reference at that cell (the rounding one release shows there: an honest change
of kernels moves a layer by about that much, a changed formula by far more)."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import replace
from typing import Optional

from algorithms.localisation.localisation import Localisation, compare_pass
from algorithms.localisation.localise import (
    DEFAULT_BATCH,
    batches,
    read_child,
    read_step,
    reference_trajectory,
    run_child,
    write_inputs,
)
from algorithms.network.networks import Dropout, layer_label, network_for_data


def difference_label(releases: list) -> str:
    """The row of the releases' own difference: `keras 3.15.1 vs 3.14.0`."""
    return f"{releases[-1][0]} vs {releases[0][0]}"


def localise_releases(
    name: str,
    releases: list,
    network_name: str,
    train_path: str,
    steps: int = 1,
    batch_size: int = DEFAULT_BATCH,
    seed: int = 0,
) -> Localisation:
    """Registry framework `name` under each of `releases`, [(label, its environment's python)]
    (two), on the reference trajectory's first `steps` batches. Rows: each release's label,
    then difference_label(releases)."""
    spec = network_for_data(network_name, train_path)
    network = spec.without_dropout()
    kept = [index for index, layer in enumerate(spec.layers) if not isinstance(layer, Dropout)]
    labels = [label for label, _ in releases]
    result = Localisation(spec, steps, [*labels, difference_label(releases)])
    with tempfile.TemporaryDirectory(prefix="localise-releases-") as scratch:
        chosen = batches(train_path, spec, steps, batch_size, seed)
        starts, passes = reference_trajectory(network, seed, chosen)
        job = {
            "network": network_name,
            "train": train_path,
            "steps": steps,
            "structure_only": False,
            "inputs": write_inputs(os.path.join(scratch, "inputs.npz"), chosen, starts),
            "fault": None,
            "spec_fault": None,
            "fault_text": "",
        }
        children = []
        for index, (label, python) in enumerate(releases):
            child = run_child(name, job, scratch, python=python, tag=f"_release{index}")
            cells, stop = read_child(child, network, kept, passes)
            if cells:
                result.cells[label] = cells
            if stop:
                result.failures[label] = stop
            children.append(child)
        if not any(label in result.failures for label in labels):
            result.cells[result.frameworks[-1]] = _difference_cells(network, kept, passes, children)
    return result


def _difference_cells(network, kept: list, passes: list, children: list) -> list:
    """Per step: the later release's arrays against the first's, cell by cell (where the first
    holds no array, against the float64 reference's: the same wrapper holds the same layers)."""
    per_step = []
    for step, reference in enumerate(passes, start=1):
        _, outputs, gradients, inputs, evaluation = read_step(children[0].outputs, network, step)
        first = replace(
            reference,
            outputs=[outputs.get(index, value) for index, value in enumerate(reference.outputs)],
            gradients={
                key: gradients.get(key) if gradients.get(key) is not None else value
                for key, value in reference.gradients.items()
            },
            input_gradients={key: inputs.get(key, value) for key, value in reference.input_gradients.items()},
            evaluation_outputs=[
                evaluation.get(index, value) for index, value in enumerate(reference.evaluation_outputs)
            ],
        )
        record, outputs, gradients, inputs, evaluation = read_step(children[-1].outputs, network, step)
        cells = compare_pass(network, first, outputs, gradients, bool(record.get("complete")), inputs, evaluation)
        per_step.append({(kept[index], direction): cell for (index, direction), cell in cells.items()})
    return per_step


def first_difference(result: Localisation) -> Optional[str]:
    """`layer 6 (BatchNorm) bias gradient, 3.0e-02 against rounding 2.0e-07` (module
    docstring), None where the releases agree to rounding everywhere; where a release's
    child failed, why."""
    labels, difference = result.frameworks[:-1], result.frameworks[-1]
    for label in labels:
        if label in result.failures:
            return f"not localised: {label}'s probe failed ({result.failures[label].reason})"
    finding = result.first_beyond(difference)
    if finding is None:
        return None
    what = {"forward": "output", "backward": "gradient", "evaluation": "output in evaluation"}[finding.direction]
    if finding.direction == "backward" and finding.cell.part in ("kernel", "bias", "input"):
        what = f"{finding.cell.part} gradient"
    key = (finding.seen_at, finding.direction)
    own = [result.cells[label][finding.step - 1].get(key) for label in labels]
    rounding = min((cell.error for cell in own if cell is not None and not math.isnan(cell.error)), default=math.nan)
    step = f" at step {finding.step}" if result.steps > 1 else ""
    layer = f"layer {finding.layer} ({layer_label(result.network.layers[finding.layer])})"
    return f"{layer} {what}{step}, {finding.cell.error:.1e} against rounding {rounding:.1e}"
