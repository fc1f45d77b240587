"""PyTorch's probes: the model build_model makes, seen from outside a run. Its own loss
and logits of the shared initial weights (the cross-framework tests), its parameters (the
structural check) and each layer's output and gradient in the spec's layout (the
localisation, algorithms/localisation/)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.contract.types import LayerProbe, ModelParameter
from algorithms.network.weights import gradients_from_channels_first, initial_weights, output_from_channels_first
from torch_wrapper.model import PARAMETER_MODULES, build_model, images_to_torch, layer_modules


@torch.no_grad()
def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """PyTorch's own cross-entropy and the logits of the shared initial weights, dropout off
    (evaluation: a BatchNormalization's running statistics)."""
    model = build_model(network, initial_weights(network, seed)).eval()
    logits = model(images_to_torch(network, images))
    return float(F.cross_entropy(logits, torch.from_numpy(labels.astype(np.int64)))), logits.numpy()


ROLES = {"weight": "kernel", "bias": "bias"}


def layout(module: nn.Module, name: str) -> str:
    if name == "bias" or isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "O"
    return "OIHW" if isinstance(module, nn.Conv2d) else "OI"


def parameter_module(modules: list):
    """The module of a spec layer's modules that holds its parameters (a conv may follow its pad), or None."""
    return next((module for module in modules if isinstance(module, PARAMETER_MODULES)), None)


def model_parameters(network) -> list:
    """The parameters of the model build_model makes, each with the spec layer whose modules hold it."""
    layers = layer_modules(network, initial_weights(network, 0))
    model = nn.Sequential(*[module for modules in layers for module in modules])
    owners = {id(module): index for index, modules in enumerate(layers) for module in modules}
    return [
        ModelParameter(
            f"{position}.{name}", owners[id(module)], ROLES[name], tuple(parameter.shape), layout(module, name)
        )
        for position, module in enumerate(model)
        for name, parameter in module.named_parameters(recurse=False)
    ]


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """The fused model training builds (pads in the convolutions, ReLUs after the pools),
    in training (a BatchNormalization on the batch's statistics), so its outputs are those at
    the boundaries where it holds the spec's values, each handed to `on_output` as the forward
    pass reaches it; each layer's input gradient where it holds that input. A parameter
    autograd gave no gradient (requires_grad off, or cut from the graph) has None. With a
    BatchNormalization, the same model in evaluation too (its running statistics)."""
    layers = layer_modules(network, weights)
    held = set(range(len(network.layers))) - network.outputs_fused_away()
    x, outputs, inputs = images_to_torch(network, images).requires_grad_(True), {}, {}
    for index, modules in enumerate(layers):
        if index == 0 or index - 1 in held:
            x.retain_grad()
            inputs[index] = x
        for module in modules:
            x = module(x)
        if index in held:
            outputs[index] = output_from_channels_first(network, index, x.detach().numpy().copy())
            if on_output is not None:
                on_output(index, outputs[index])
    loss = F.cross_entropy(x, torch.from_numpy(labels.astype(np.int64)))
    loss.backward()
    gradients = {}
    for index, modules in enumerate(layers):
        module = parameter_module(modules)
        if module is not None:
            for role, parameter in (("kernel", module.weight), ("bias", module.bias)):
                if parameter is not None:  # None: a layer built without its bias (--fault bias:...)
                    gradients[(index, role)] = None if parameter.grad is None else parameter.grad.numpy()
    input_gradients = {
        index: output_from_channels_first(network, index - 1, tensor.grad.numpy().copy())
        if index
        else np.ascontiguousarray(tensor.grad.numpy().transpose(0, 2, 3, 1))
        for index, tensor in inputs.items()
        if tensor.grad is not None
    }
    evaluation = {}
    if network.batch_normalizations():
        with torch.no_grad():
            x = images_to_torch(network, images)
            for index, modules in enumerate(layer_modules(network, weights)):
                for module in modules:
                    x = module.eval()(x)
                if index in held:
                    evaluation[index] = output_from_channels_first(network, index, x.numpy().copy())
    return LayerProbe(
        loss.item(), outputs, gradients_from_channels_first(network, gradients), input_gradients, evaluation
    )
