"""The structural check, which costs nothing: every parameter tensor of a framework's
model (its wrapper's `model_parameters`, read from the framework's own parameter
objects) against the spec's (`parametric_layers`, `weight_shapes`), each shape converted
to the layout the framework keeps (weights.LAYOUT_AXES). A missing bias, a transposed
or mis-sized kernel, a parameter no spec layer owns: each named, one line, before any
step runs. A square kernel transposed keeps its shape: the localisation finds that one."""

from __future__ import annotations

from math import prod

from algorithms.contract.types import ModelParameter
from algorithms.network.networks import Network, layer_label, weight_shapes
from algorithms.network.weights import LAYOUT_AXES, shape_in_layout

ROLES = ("kernel", "bias")


def structural_problems(framework: str, network: Network, parameters: list) -> list:
    """One line per way `parameters` (ModelParameter, or their dicts) differ from the spec's."""
    return [text for _, text in structural_findings(framework, network, parameters)]


def first_structural_layer(framework: str, network: Network, parameters: list):
    """The first spec layer whose parameters differ from the spec's; None: none does."""
    layers = [layer for layer, _ in structural_findings(framework, network, parameters) if layer is not None]
    return min(layers) if layers else None


def structural_findings(framework: str, network: Network, parameters: list) -> list:
    """(spec layer index or None, one line) per way `parameters` differ from the spec's."""
    parameters = [p if isinstance(p, ModelParameter) else ModelParameter(**p) for p in parameters]
    problems = []
    owned = {index: layer for index, layer, _ in network.parametric_layers()}
    for index, layer, in_shape in network.parametric_layers():
        where = f"{framework}: layer {index} ({layer_label(layer)})"
        for role, canonical in zip(ROLES, weight_shapes(layer, in_shape)):
            found = [p for p in parameters if p.layer_index == index and p.role == role]
            if not found:
                problems.append((index, f"{where}: no {role} (the spec's: {canonical}, canonical layout)"))
                continue
            problems += [(index, f"{where}: a second {role}, {p.name} {tuple(p.shape)}") for p in found[1:]]
            problems += [(index, text) for text in _shape_problem(where, role, found[0], canonical)]
    problems += [
        (
            p.layer_index if p.layer_index in owned else None,
            f"{framework}: {p.name} {tuple(p.shape)}: no spec layer has this parameter (layer {p.layer_index}, "
            f"role {p.role or 'none'})",
        )
        for p in parameters
        if p.layer_index not in owned or p.role not in ROLES
    ]
    values, tensors = sum(prod(p.shape) for p in parameters), len(parameters)
    expected_tensors = len(ROLES) * len(owned)
    if problems and (values, tensors) != (network.param_count(), expected_tensors):
        problems.append(
            (
                None,
                f"{framework}: {tensors} parameter tensors holding {values:,} values; "
                f"the spec has {expected_tensors} holding {network.param_count():,}",
            )
        )
    return problems


def _shape_problem(where: str, role: str, parameter: ModelParameter, canonical: tuple) -> list:
    axes = LAYOUT_AXES.get(parameter.layout)
    if axes is None or len(axes) != len(canonical):
        return [
            f"{where}: {role} {parameter.name} {tuple(parameter.shape)} in layout {parameter.layout!r}, "
            f"not a {len(canonical)}-d one of {', '.join(LAYOUT_AXES)}"
        ]
    expected = shape_in_layout(canonical, parameter.layout)
    if tuple(parameter.shape) == expected:
        return []
    transposed = sorted(parameter.shape) == sorted(expected)
    return [
        f"{where}: {role} {tuple(parameter.shape)} expected {expected} ({parameter.layout})"
        + (": transposed" if transposed else "")
    ]
