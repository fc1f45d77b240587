"""The structural check (algorithms/localisation/structure.py), with known answers: torch's real
model passes it, and the same model with one layer's bias removed or one kernel transposed
is named, layer and all. The missing bias goes in through the real path, the spec variant
--fault bias:3 that torch's builder translates into nn.Conv2d(..., bias=False); the
transposed kernel through a test-only path, torch's own builder (layer_modules) patched
here to hold dense 9's kernel with its axes swapped as nn.Linear(out, in) would;
model_parameters then reads torch's own parameter objects, as the command does before
anything trains."""

from __future__ import annotations

from algorithms.localisation.structure import first_structural_layer, structural_problems
from algorithms.network.networks import CNN2D_3LAYER, Conv2D, weight_shapes
from algorithms.network.variants import apply_fault, parse_fault


def test_the_structural_check_passes_torchs_model_and_names_a_missing_bias_and_a_transposed_kernel(monkeypatch):
    import torch
    from torch import nn

    import torch_wrapper.probes as torch_probes

    healthy = torch_probes.model_parameters(CNN2D_3LAYER)
    assert structural_problems("torch", CNN2D_3LAYER, healthy) == []
    assert first_structural_layer("torch", CNN2D_3LAYER, healthy) is None
    without_bias = torch_probes.model_parameters(apply_fault(parse_fault("bias:3", CNN2D_3LAYER), CNN2D_3LAYER, [])[0])
    assert structural_problems("torch", CNN2D_3LAYER, without_bias) == [
        "torch: layer 3 (Conv2D 48 3x3): no bias (the spec's: (48,), canonical layout)",
        "torch: 11 parameter tensors holding 246,634 values; the spec has 12 holding 246,682",
    ]
    assert first_structural_layer("torch", CNN2D_3LAYER, without_bias) == 3
    builder = torch_probes.layer_modules

    def transposed(network, weights, *rest, **options):
        layers = builder(network, weights, *rest, **options)
        linear = layers[9][0]
        linear.weight = nn.Parameter(torch.empty(linear.in_features, linear.out_features))  # nn.Linear(out, in)
        return layers

    monkeypatch.setattr(torch_probes, "layer_modules", transposed)
    assert structural_problems("torch", CNN2D_3LAYER, torch_probes.model_parameters(CNN2D_3LAYER)) == [
        "torch: layer 9 (Dense 128): kernel (1568, 128) expected (128, 1568) (OI): transposed"
    ]


def test_the_structural_check_reads_each_layout_and_names_a_parameter_no_layer_owns():
    from algorithms.contract.types import ModelParameter

    tf_like = [
        ModelParameter(f"{role}_{index}", index, role, shape, layout)
        for index, layer, in_shape in CNN2D_3LAYER.parametric_layers()
        for role, shape, layout in zip(
            ("kernel", "bias"), weight_shapes(layer, in_shape), ("HWIO" if isinstance(layer, Conv2D) else "IO", "O")
        )
    ]
    assert structural_problems("tensorflow", CNN2D_3LAYER, tf_like) == []
    extra = tf_like + [ModelParameter("scale_4", 4, "kernel", (48,), "O")]
    assert structural_problems("tensorflow", CNN2D_3LAYER, extra)[0] == (
        "tensorflow: scale_4 (48,): no spec layer has this parameter (layer 4, role kernel)"
    )
