"""The spec translated to torch.nn modules. Weights come from algorithms/init.py,
converted to the channels-first layout (OIHW kernels, (out, in) dense, CHW flatten)."""
from __future__ import annotations

import torch
from torch import nn

from algorithms.init import to_channels_first
from algorithms.spec import Conv2D, Dense, Dropout, Flatten, MaxPool2D, Network, ZeroPad2D

ACTIVATIONS = {"relu": nn.ReLU, "softmax": lambda: nn.Softmax(dim=1)}


def build_model(network: Network, weights: list) -> nn.Sequential:
    """An nn.Sequential emitting logits (a final softmax is left to the loss)."""
    modules, channels = [], network.input_shape[-1]
    loaded = {w.layer_index: w for w in to_channels_first(network, weights)}
    last_index = len(network.layers) - 1
    for index, (layer, in_shape) in enumerate(zip(network.layers, network.input_shapes())):
        if isinstance(layer, ZeroPad2D):
            modules.append(nn.ZeroPad2d(layer.padding))
        elif isinstance(layer, Conv2D):
            conv = nn.Conv2d(in_shape[-1], layer.filters, layer.kernel_size, padding=layer.padding)
            modules.append(_load(conv, loaded[index]))
        elif isinstance(layer, MaxPool2D):
            modules.append(nn.MaxPool2d(layer.pool_size))
        elif isinstance(layer, Flatten):
            modules.append(nn.Flatten())
        elif isinstance(layer, Dense):
            linear = nn.Linear(in_shape[0], layer.units)
            modules.append(_load(linear, loaded[index]))
        elif isinstance(layer, Dropout):
            modules.append(nn.Dropout(layer.rate))
        else:
            raise TypeError(f"torch_wrapper cannot translate {layer!r}")
        activation = getattr(layer, "activation", None)
        if activation and not (activation == "softmax" and index == last_index):
            modules.append(ACTIVATIONS[activation]())
    return nn.Sequential(*modules)


def _load(module: nn.Module, weights) -> nn.Module:
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(weights.kernel))
        module.bias.copy_(torch.from_numpy(weights.bias))
    return module


def make_optimizer(spec, parameters):
    if spec.name == "sgd":
        return torch.optim.SGD(parameters, lr=spec.learning_rate, momentum=spec.momentum, nesterov=spec.nesterov)
    if spec.name == "adam":
        return torch.optim.Adam(parameters, lr=spec.learning_rate, betas=(spec.beta_1, spec.beta_2), eps=spec.epsilon)
    raise ValueError(f"unknown optimizer {spec.name!r}")
