"""The spec translated to torch.nn modules. Weights come from algorithms/network/weights.py,
converted to the channels-first layout (OIHW kernels, (out, in) dense, CHW flatten).

`layer_modules` gives each spec layer its own modules, so a strategy can place a
range of layers (a stage) or keep only a slice of a layer's output channels (a
tensor-parallel shard) without re-deciding anything the plan already decided.

Built for speed (`fused`, the default): a ZeroPad2D before a valid convolution
becomes the convolution's own padding and a ReLU before a max-pool runs after it
(exact: spec.py says why), ReLUs work in place, and conv weights are channels-last
(NHWC), the layout oneDNN's fastest CPU convolutions take. That changes only the
convolutions' summation order, alike in every strategy's layers.

Dropout draws its mask from the uniforms that come with the rows (algorithms/network/dropout.py),
so every module stack here is a `SpecStack`: an nn.Sequential whose forward takes the
batch's uniforms beside its input and hands them to each `SharedDropout`, whichever
stage, shard, block or replica holds it."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import numpy as np

from algorithms.dataset.data import as_channels_first
from algorithms.network.dropout import channels_first, dropout_layers, scale as dropout_scale
from algorithms.network.weights import to_channels_first
from algorithms.network.networks import (
    AveragePooling2D,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAveragePooling2D,
    MaxPool2D,
    Network,
    ZeroPad2D,
)

# the modules that hold a spec layer's weights
PARAMETER_MODULES = (nn.Conv2d, nn.Linear, nn.modules.batchnorm._BatchNorm)
ACTIVATIONS = {"relu": lambda: nn.ReLU(inplace=True), "softmax": lambda: nn.Softmax(dim=1)}


class SharedDropout(nn.Module):
    """Inverted dropout by the shared mask rule (network/dropout.py): in training, x times
    float32(1 / (1 - rate)) where the row's uniform exceeds the rate and 0 elsewhere; the
    uniform is the `position`-th of the batch's (its Dropout layer's place among the
    network's). In evaluation (model.eval()), x."""

    def __init__(self, rate: float, position: int):
        super().__init__()
        self.rate, self.position = rate, position
        self.scale = float(dropout_scale(rate))

    def forward(self, x, uniforms):
        if not self.training:
            return x
        mask = torch.where(uniforms[self.position] > self.rate, self.scale, 0.0)  # float32, as the rule says
        return x * mask.to(x.dtype)

    def extra_repr(self) -> str:
        return f"rate={self.rate:g}, uniforms[{self.position}]"


class SpecStack(nn.Sequential):
    """An nn.Sequential whose forward takes the batch's dropout uniforms (a tuple, one
    tensor per Dropout layer of the network, channels first: `uniforms_to_torch`) beside its
    input, and passes them to the modules that use them."""

    def forward(self, x, uniforms=()):
        for module in self:
            x = module(x, uniforms) if isinstance(module, TAKES_UNIFORMS) else module(x)
        return x


def uniforms_to_torch(network: Network, uniforms: tuple, device=None) -> tuple:
    """The spec's (N, H, W, C) / (N, units) uniforms as tensors in the models' layout:
    channels first, (N, C, H, W), a flattened map's units in (C, H, W) order (network/dropout.py)."""
    return tuple(torch.from_numpy(u).to(device) for u in channels_first(network, uniforms))


def images_to_torch(network: Network, images: np.ndarray, device=None) -> torch.Tensor:
    """(N, H, W, C) images (or (N, H, W) of one channel) as the models take them: (N, C, H, W) float32."""
    return torch.from_numpy(as_channels_first(images, network.input_shape)).to(device)


def layer_modules(network: Network, weights: list, channels: Optional[dict] = None, fused: bool = True) -> list:
    """One list of modules per spec layer (the layer, then its activation; empty
    for a padding folded into the next convolution). With `channels` (layer index
    -> (start, stop)), a conv or dense layer keeps only those output channels /
    units: its tensor-parallel shard. `fused=False`: the spec's layers one by one."""
    loaded = {w.layer_index: w for w in to_channels_first(network, weights)}
    channels = channels or {}
    positions = {index: k for k, (index, _, _) in enumerate(dropout_layers(network))}
    folded_pads = network.pads_folded_into_convs() if fused else {}
    late_relus = network.relus_after_pools() if fused else set()
    layers = []
    for index, (layer, in_shape) in enumerate(zip(network.layers, network.input_shapes())):
        if isinstance(layer, ZeroPad2D):
            modules = [] if index + 1 in folded_pads else [nn.ZeroPad2d(layer.padding)]
        elif isinstance(layer, Conv2D):
            start, stop = channels.get(index, (0, layer.filters))
            modules = []
            padding = folded_pads.get(index, layer.symmetric_padding(in_shape))
            if padding is None:  # `same` with its odd pixel at the bottom and right: padded first, explicitly
                (top, bottom), (left, right) = layer.paddings(in_shape)
                modules, padding = [nn.ZeroPad2d((left, right, top, bottom))], 0
            conv = nn.Conv2d(
                in_shape[-1], stop - start, layer.kernel_size, stride=layer.stride, padding=padding, bias=layer.bias
            )
            if fused:
                conv = conv.to(memory_format=torch.channels_last)
            modules.append(_load(conv, loaded[index], start, stop, layer.bias_frozen))
        elif isinstance(layer, BatchNormalization):
            modules = [_load_batch_norm(batch_norm(layer, in_shape), loaded[index])]
            if isinstance(modules[0], tuple(_FAULTY.values())):
                modules[0].mean_in_gradient, modules[0].evaluation = layer.mean_in_gradient, layer.evaluation
        elif isinstance(layer, MaxPool2D):
            modules = [nn.MaxPool2d(layer.pool_size, padding=layer.padding)]  # padding: --fault shape:...
        elif isinstance(layer, AveragePooling2D):
            modules = [nn.AvgPool2d(layer.pool_size)]
        elif isinstance(layer, GlobalAveragePooling2D):
            modules = [GlobalAveragePool()]
        elif isinstance(layer, Flatten):
            modules = [nn.Flatten()]
        elif isinstance(layer, Dense):
            start, stop = channels.get(index, (0, layer.units))
            dense = nn.Linear(in_shape[0], stop - start, bias=layer.bias)
            modules = [_load(dense, loaded[index], start, stop, layer.bias_frozen)]
        elif isinstance(layer, Dropout):
            modules = [SharedDropout(layer.rate, positions[index])]
        else:
            raise TypeError(f"torch_wrapper cannot translate {layer!r}")
        activation = network.activation(index)
        if index - 1 in late_relus:
            modules.append(ACTIVATIONS["relu"]())
        if activation and index not in late_relus:
            modules.append(ACTIVATIONS[activation]())
        layers.append(modules)
    return layers


class GlobalAveragePool(nn.Module):
    """(N, C, H, W) -> (N, C): the mean over each channel's map."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


def batch_norm(layer: BatchNormalization, in_shape: tuple) -> nn.Module:
    """torch's own BatchNorm2d (a map) or BatchNorm1d (a vector) with the spec's convention
    mapped to torch's: torch's momentum is the weight of the batch's statistic, 1 - the
    spec's (Keras's), and torch already normalises with the biased variance and keeps the
    unbiased one running, as the spec says. A known error put in on purpose (--fault
    bn_mean, bn_eval: network/variants.py) builds the subclass that makes it."""
    base = nn.BatchNorm2d if len(in_shape) == 3 else nn.BatchNorm1d
    kind = base if layer.mean_in_gradient and layer.evaluation == "running" else _FAULTY[base]
    return kind(in_shape[-1], eps=layer.epsilon, momentum=1.0 - layer.momentum)


def _faulty_batch_norm(base):
    class FaultyBatchNorm(base):
        """A BatchNormalization with a known error (network/variants.py): the batch mean cut
        from the gradient (mean_in_gradient False), or the batch's statistics in evaluation
        too (evaluation "batch"), set after it is built (`fault`)."""

        mean_in_gradient, evaluation = True, "running"

        def forward(self, x):
            if not self.training and self.evaluation == "batch":  # the known error: eval on the batch
                return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)
            if not self.training or self.mean_in_gradient:
                return super().forward(x)
            axes = [0] + list(range(2, x.dim()))
            mean = x.mean(dim=axes, keepdim=True).detach()  # the known error: a constant to autograd
            variance = ((x - mean) ** 2).mean(dim=axes, keepdim=True)
            with torch.no_grad():
                count = x.numel() // x.shape[1]
                unbiased = variance.flatten() * count / max(count - 1, 1)
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean.flatten())
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * unbiased)
            shape = [1, -1] + [1] * (x.dim() - 2)
            normalised = (x - mean) / torch.sqrt(variance + self.eps)
            return normalised * self.weight.view(shape) + self.bias.view(shape)

    FaultyBatchNorm.__name__ = f"Faulty{base.__name__}"
    return FaultyBatchNorm


_FAULTY = {base: _faulty_batch_norm(base) for base in (nn.BatchNorm1d, nn.BatchNorm2d)}


def _load_batch_norm(module: nn.Module, weights) -> nn.Module:
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(weights.kernel))
        module.bias.copy_(torch.from_numpy(weights.bias))
        module.running_mean.copy_(torch.from_numpy(np.float32(weights.running_mean)))
        module.running_var.copy_(torch.from_numpy(np.float32(weights.running_var)))
    return module


def build_model(network: Network, weights: list, fused: bool = True) -> SpecStack:
    """A SpecStack emitting logits (a final softmax is left to the loss)."""
    return SpecStack(*[module for modules in layer_modules(network, weights, fused=fused) for module in modules])


def build_stage(network: Network, weights: list, start: int, stop: int) -> SpecStack:
    """Spec layers start..stop-1 as one SpecStack (a model- or pipeline-parallel stage)."""
    return SpecStack(*[module for modules in layer_modules(network, weights)[start:stop] for module in modules])


def build_blocks(network: Network, weights: list, blocks: tuple, checkpointing: bool) -> SpecStack:
    """The whole model as consecutive blocks (layer ranges), each recomputed in the
    backward pass instead of keeping its activations when `checkpointing`."""
    stages = [build_stage(network, weights, start, stop) for start, stop in blocks]
    return SpecStack(*[Checkpointed(stage) if checkpointing else stage for stage in stages])


class Checkpointed(nn.Module):
    """Gradient checkpointing: keeps only the block's input (and the batch's uniforms, so
    the recomputation drops the same units); the block runs again when its gradient is needed."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, inputs, uniforms=()):
        if not isinstance(self.block, SpecStack):  # a tensor-parallel shard's own layers: no dropout
            run, arguments = self.block, (inputs,)
        else:
            run, arguments = self.block, (inputs, uniforms)
        if not torch.is_grad_enabled():
            return run(*arguments)
        return checkpoint(run, *arguments, use_reentrant=False)


TAKES_UNIFORMS = (SharedDropout, SpecStack, Checkpointed)


def _load(module: nn.Module, weights, start: int, stop: int, bias_frozen: bool = False) -> nn.Module:
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(weights.kernel[start:stop]))
        if module.bias is not None:  # None: a layer built without its bias (--fault bias:...)
            module.bias.copy_(torch.from_numpy(weights.bias[start:stop]))
    if bias_frozen:  # --fault frozen:...: autograd leaves the bias out
        module.bias.requires_grad_(False)
    return module


def make_optimizer(spec, parameters):
    if spec.name == "sgd":
        return torch.optim.SGD(parameters, lr=spec.learning_rate, momentum=spec.momentum, nesterov=spec.nesterov)
    if spec.name == "adam":
        return torch.optim.Adam(parameters, lr=spec.learning_rate, betas=(spec.beta_1, spec.beta_2), eps=spec.epsilon)
    raise ValueError(f"unknown optimizer {spec.name!r}")
