"""Dropout's random numbers, drawn once in numpy and fed to every framework, as the
initial weights (weights.py) and the batch order (dataset/data.py) already are: two runs of one
seed then drop the same units of the same samples in every framework, so a run with
dropout on is a same-seed run that the drift envelope can judge step by step.

Each Dropout layer of a training step gets one float32 uniform in [0, 1) per element of
its input, in the spec's layout ((N, units), or (N, H, W, C) after a convolution; a
channels-first wrapper transposes). The number is a function of (seed, epoch, layer,
sample, element) only: a counter-based generator (SplitMix64's finaliser over the
element's counter, as jax's and TensorFlow's stateless generators hash a counter), so a
sample's numbers do not depend on the batch it lands in, how a strategy splits that
batch across replicas, accumulated parts or micro-batches, or which worker of an
asynchronous strategy takes it.

Channels-first frameworks hold a map as (N, C, H, W) and a flattened map's units in (C,
H, W) order: `channels_first` gives each layer's uniforms in their layout, so the same
unit gets the same number everywhere.

Every wrapper applies them the same way (`MASK_RULE`): the unit is kept where u > rate
and multiplied by SCALE = float32(1 / (1 - rate)), dropped (0) elsewhere: one float32
multiply per element, so the frameworks' masked activations are bit-identical.
"""

from __future__ import annotations

from math import prod

import numpy as np

from algorithms.network.layers import Dropout, Network

MASK_RULE = "keep where u > rate, times float32(1 / (1 - rate)); 0 elsewhere"
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's increment
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_FRACTION_BITS = 24  # float32's significand: every u is k / 2**24, exactly a float32


def dropout_layers(network: Network) -> list:
    """(layer index, Dropout, its input shape) of every Dropout layer, in layer order: the
    order of a step's uniforms."""
    return [
        (index, layer, shape)
        for index, (layer, shape) in enumerate(zip(network.layers, network.input_shapes()))
        if isinstance(layer, Dropout)
    ]


def scale(rate: float) -> np.float32:
    """What a kept unit is multiplied by: float32(1 / (1 - rate))."""
    return np.float32(1.0 / (1.0 - rate))


def _mix(values):
    """SplitMix64's finaliser on uint64 arrays (wrapping multiplies)."""
    values = (values ^ (values >> np.uint64(30))) * _MIX1
    values = (values ^ (values >> np.uint64(27))) * _MIX2
    return values ^ (values >> np.uint64(31))


def _key(seed: int, epoch: int, layer_index: int) -> int:
    """One 64-bit key per (seed, epoch, layer): each part mixed into the last."""
    key = 0
    for part in (seed, epoch, layer_index):
        key = int(_mix(np.array([(key + _GOLDEN * (part + 1)) & _MASK64], np.uint64))[0])
    return key


def layer_uniforms(seed: int, epoch: int, layer_index: int, shape: tuple, rows: np.ndarray) -> np.ndarray:
    """float32 uniforms in [0, 1), (len(rows), *shape): row i belongs to training sample
    rows[i] (its index in the training split)."""
    elements = prod(shape)
    counters = np.asarray(rows, np.uint64)[:, None] * np.uint64(elements) + np.arange(elements, dtype=np.uint64)
    bits = _mix(counters + np.uint64(_key(seed, epoch, layer_index)))
    uniforms = (bits >> np.uint64(64 - _FRACTION_BITS)).astype(np.float32) * np.float32(2.0**-_FRACTION_BITS)
    return uniforms.reshape(len(rows), *shape)


def uniforms(network: Network, seed: int, epoch: int, rows: np.ndarray) -> tuple:
    """The uniforms of every Dropout layer of `network` for these training rows in this
    epoch (0-based), in layer order; () for a network without dropout (a --parity run's)."""
    return tuple(layer_uniforms(seed, epoch, index, shape, rows) for index, _, shape in dropout_layers(network))


def apply(x: np.ndarray, u: np.ndarray, rate: float) -> np.ndarray:
    """The mask rule in numpy (the reference every wrapper's dropout equals)."""
    return x * np.where(u > np.float32(rate), scale(rate), np.float32(0.0)).astype(x.dtype)


def channels_first(network: Network, uniforms: tuple) -> tuple:
    """The spec-layout uniforms of a step ((N, H, W, C) maps, (N, units) vectors) as a
    channels-first framework's units are laid out: maps transposed to (N, C, H, W), and the
    units of a vector flattened from an (H, W, C) map put in (C, H, W) order. float32."""
    converted = []
    for (index, _, _), u in zip(dropout_layers(network), uniforms):
        if u.ndim == 4:
            u = u.transpose(0, 3, 1, 2)
        else:
            flattened_from = network.flattened_map_shape(index)
            if flattened_from is not None:
                u = u.reshape(len(u), *flattened_from).transpose(0, 3, 1, 2).reshape(len(u), -1)
        converted.append(np.ascontiguousarray(u, np.float32))
    return tuple(converted)
