"""Initial weights, made once in numpy, and their layout conversions.

Scheme (Keras's defaults, which train this net well in every framework):
Glorot-uniform kernels, limit sqrt(6 / (fan_in + fan_out)), with
fan_in = k*k*in_channels and fan_out = k*k*out_channels for a convolution,
and zero biases. One `numpy.random.default_rng(seed)` draws the kernels in
layer order, so the same seed gives the same weights everywhere. A
BatchNormalization draws nothing: gamma 1, beta 0, running mean 0 and variance 1
(so adding one leaves every other layer's weights as they were). A network read
from an ONNX model starts from the model's weights instead (Network.given_weights),
whatever the seed.

Canonical layout (what `initial_weights` returns): conv kernels HWIO
(kh, kw, in, out); dense kernels (in, out) whose input rows follow the
NHWC flatten order (h, w, c). TensorFlow and Keras use it as is;
`to_channels_first` gives the layout of channels-first frameworks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from typing import Optional

from algorithms.network.layers import BatchNormalization, Conv2D, Network, weight_shapes


@dataclass
class LayerWeights:
    """One parametric layer's: a convolution's or dense layer's kernel and bias, or a
    BatchNormalization's gamma (in `kernel`) and beta (in `bias`) with its running mean and
    variance (state the training updates, not trained)."""

    layer_index: int  # index into Network.layers
    kernel: np.ndarray
    bias: np.ndarray
    running_mean: Optional[np.ndarray] = None
    running_var: Optional[np.ndarray] = None


def glorot_uniform(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    if len(shape) == 4:  # HWIO
        receptive = shape[0] * shape[1]
        fan_in, fan_out = receptive * shape[2], receptive * shape[3]
    else:
        fan_in, fan_out = shape
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def initial_weights(network: Network, seed: int) -> list:
    """One LayerWeights per parametric layer, in layer order (module docstring)."""
    if network.given_weights is not None:
        return _given(network)
    rng = np.random.default_rng(seed)
    scales = dict(network.init_scales)
    weights = []
    weighted = 0  # the k of init_scales: conv and dense layers only
    for index, layer, in_shape in network.parametric_layers():
        kernel_shape, bias_shape = weight_shapes(layer, in_shape)
        if isinstance(layer, BatchNormalization):
            weights.append(batch_norm_weights(index, kernel_shape[0]))
            continue
        kernel = glorot_uniform(rng, kernel_shape)
        if weighted in scales:  # a known error, on purpose (--fault weights:...)
            with np.errstate(over="ignore"):  # a factor past float32's range is meant: inf weights
                kernel = np.float32(kernel * scales[weighted])
        weighted += 1
        weights.append(LayerWeights(index, _perturbed(network, kernel, seed, index), np.zeros(bias_shape, np.float32)))
    return weights


def _perturbed(network: Network, kernel: np.ndarray, seed: int, index: int) -> np.ndarray:
    """The kernel times 1 +- Network.init_perturbation, a sign per value drawn from (seed,
    layer) apart from the weights' own generator (so the draw of every other layer is
    unchanged); the kernel itself where there is none."""
    if not network.init_perturbation:
        return kernel
    signs = np.random.default_rng([seed, 0x7718, index]).integers(0, 2, size=kernel.shape) * 2 - 1
    return np.float32(kernel * (1.0 + network.init_perturbation * signs))


def batch_norm_weights(index: int, channels: int) -> LayerWeights:
    """A BatchNormalization's start: gamma 1, beta 0, running mean 0, running variance 1."""
    ones, zeros = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    return LayerWeights(index, ones, zeros.copy(), zeros, ones.copy())


def _given(network: Network) -> list:
    """The file's weights (one per parametric layer, in order) at this network's layer
    indexes (without_dropout moves them), each a copy, a known error's scale applied."""
    scales = dict(network.init_scales)
    weights, weighted = [], 0
    for (index, layer, _), given in zip(network.parametric_layers(), network.given_weights):
        kernel = given.kernel.copy()
        if not isinstance(layer, BatchNormalization):
            if weighted in scales:
                with np.errstate(over="ignore"):
                    kernel = np.float32(kernel * scales[weighted])
            weighted += 1
            kernel = _perturbed(network, kernel, 0, index)
        weights.append(replace(given, layer_index=index, kernel=kernel, bias=given.bias.copy()))
    return weights


def to_channels_first(network: Network, weights: list) -> list:
    """Canonical weights in the layout of NCHW frameworks (PyTorch, Caffe, Lasagne):
    conv kernels OIHW, dense kernels (out, in), and the first dense layer after a
    flatten of an (H, W, C) map re-ordered to the (C, H, W) flatten order."""
    converted = []
    for w in weights:
        layer = network.layers[w.layer_index]
        if isinstance(layer, BatchNormalization):  # per channel: the same in every layout
            converted.append(replace(w, bias=None if w.bias is None else w.bias.copy()))
            continue
        if isinstance(layer, Conv2D):
            kernel = w.kernel.transpose(3, 2, 0, 1)
        else:
            kernel = w.kernel
            flattened_from = network.flattened_map_shape(w.layer_index)
            if flattened_from is not None:
                h, wd, c = flattened_from
                kernel = kernel.reshape(h, wd, c, -1).transpose(2, 0, 1, 3).reshape(h * wd * c, -1)
            kernel = kernel.T
        converted.append(
            replace(w, kernel=np.ascontiguousarray(kernel), bias=None if w.bias is None else w.bias.copy())
        )
    return converted


def from_channels_first(network: Network, weights: list) -> list:
    """The inverse of to_channels_first: an NCHW framework's weights, or their gradients,
    in the canonical layout (HWIO kernels, (in, out) dense kernels with (H, W, C) rows)."""
    converted = []
    for w in weights:
        layer = network.layers[w.layer_index]
        if isinstance(layer, BatchNormalization):
            converted.append(replace(w, bias=None if w.bias is None else w.bias.copy()))
            continue
        if isinstance(layer, Conv2D):
            kernel = w.kernel.transpose(2, 3, 1, 0)
        else:
            kernel = w.kernel.T
            flattened_from = network.flattened_map_shape(w.layer_index)
            if flattened_from is not None:
                h, wd, c = flattened_from
                kernel = kernel.reshape(c, h, wd, -1).transpose(1, 2, 0, 3).reshape(h * wd * c, -1)
        converted.append(
            replace(w, kernel=np.ascontiguousarray(kernel), bias=None if w.bias is None else w.bias.copy())
        )
    return converted


def output_from_channels_first(network: Network, layer_index: int, output: np.ndarray) -> np.ndarray:
    """Layer `layer_index`'s output (N, ...) from an NCHW framework in the spec's layout:
    NHWC maps, and a map flattened in (C, H, W) order re-ordered to (H, W, C)."""
    if output.ndim == 4:
        return np.ascontiguousarray(output.transpose(0, 2, 3, 1))
    if layer_index + 1 >= len(network.layers):
        return output
    flattened_from = network.flattened_map_shape(layer_index + 1)
    if flattened_from is None:
        return output
    h, wd, c = flattened_from
    return np.ascontiguousarray(output.reshape(-1, c, h, wd).transpose(0, 2, 3, 1).reshape(len(output), -1))


def gradients_from_channels_first(network: Network, gradients: dict) -> dict:
    """{(layer index, "kernel" | "bias"): gradient} of an NCHW framework in the canonical
    layout; a gradient of None (the framework computed none) stays None."""
    converted = {}
    for (index, role), value in gradients.items():
        if value is not None and role == "kernel" and not isinstance(network.layers[index], BatchNormalization):
            value = from_channels_first(network, [LayerWeights(index, value, None)])[0].kernel
        converted[(index, role)] = None if value is None else np.array(value)
    return converted


# A framework's parameter layouts, as the structural check reads them (each from the
# canonical shape: HWIO conv kernels, IO dense kernels, O biases)
LAYOUT_AXES = {"HWIO": (0, 1, 2, 3), "OIHW": (3, 2, 0, 1), "IO": (0, 1), "OI": (1, 0), "O": (0,)}


def shape_in_layout(canonical: tuple, layout: str) -> tuple:
    """A canonical weight shape as a framework that keeps `layout` (LAYOUT_AXES) holds it."""
    return tuple(canonical[axis] for axis in LAYOUT_AXES[layout])
