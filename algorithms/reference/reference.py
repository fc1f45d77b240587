"""The spec's forward and backward pass in float64 numpy: the yardstick each framework's
per-layer outputs and gradients are measured against (algorithms/localisation/localise.py).

Canonical layout throughout (algorithms/network/weights.py): NHWC activations, HWIO conv
kernels, (in, out) dense kernels whose rows follow the NHWC flatten. Convolutions and
pools, BatchNormalization in training and in evaluation, follow the conventions of
network/layers.py (`same` padding TensorFlow's, its odd extra row and column at the bottom and
right; batch statistics with the biased variance, the running ones updated with the
unbiased). Where the maths leaves a choice, the choice every framework but Theano makes:
ReLU's gradient at 0 is 0, and a max-pool window's gradient goes to its first maximum
(row-major). Dropout is the identity unless a step's shared uniforms are given
(network/dropout.py's MASK_RULE, the numbers every framework draws from): the localisation
runs with dropout off; the step check (reference/reference_step.py) with the run's uniforms.

At those kinks a derivative jumps, and float32 cannot tell which side of one a value is
on when it lies within rounding of it: a pre-activation within KINK_WIDTH of 0, a pooling
window whose runner-up is within KINK_WIDTH of its maximum. A framework may take either
side there without being wrong. So each such kink's other side is carried back, alone,
through the layers below it, and the sum of the absolute changes it makes to each
parameter's gradient (and to each layer's input gradient) is that gradient's allowance.
Below a BatchNormalization a kink of one sample reaches every sample of the batch (the
batch statistics join them), and is carried back so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
from scipy.special import log_softmax

from algorithms.network.dropout import dropout_layers, scale
from algorithms.network.layers import (
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
from algorithms.network.weights import LayerWeights


# of the layer's largest magnitude: ten times the largest forward error a healthy framework
# shows (docs/comparing.md), so a value float32 could put on either side of a kink is here
KINK_WIDTH = 1e-5
# kinks carried back together: each needs its own copy of every parameter gradient below
# it (a dense kernel of 1,568 x 128 is 1.6 MB in float64), so 32 at once stays near 50 MB;
# below a BatchNormalization each also carries the whole batch, so fewer go at once there
KINKS_AT_ONCE = 32
# the step check's kinks: a value within this many standard deviations of float32's own
# rounding of it (rounding_spread) may lie on either side of a kink in a float32 framework
ROUNDING_SIGMAS = 256
FLOAT32_UNIT = 2.0**-24  # float32 rounds a result to within this fraction of itself
# the step check's kinks carried back at most, counted in samples' backward passes (a kink below a
# batch norm carries the whole batch): beyond it, the layers from that kink's down are not judged
ROUNDING_KINKS = 1024


@dataclass
class Pass:
    """One forward and backward pass: the mean cross-entropy, each layer's output (after
    its activation; the last layer's are the logits), each parameter's gradient and its
    allowance at the kinks (module docstring), both keyed (layer index, "kernel" | "bias"),
    each layer's input gradient (the loss's gradient with respect to the layer's input)
    and its allowance, keyed by layer index; each layer's output in evaluation (running
    statistics; the training outputs where the network has no BatchNormalization) and each
    BatchNormalization's batch statistics (mean, unbiased variance), for the running update."""

    loss: float
    outputs: list
    gradients: dict
    allowances: dict
    input_gradients: dict = field(default_factory=dict)
    input_allowances: dict = field(default_factory=dict)
    evaluation_outputs: list = field(default_factory=list)
    statistics: dict = field(default_factory=dict)
    # the step check's rounding kinks: the highest layer whose gradient (and every one below) has
    # more kinks within rounding than it carries back, so is not judged; None: all are judged
    unjudged_from: Optional[int] = None


def forward(
    network: Network, weights: list, images: np.ndarray, training: bool = False, uniforms: tuple = (), dtype=np.float64
) -> list:
    """Each layer's output (after its activation; the last layer's are the logits) for
    `images` (N, H, W) or (N, H, W, C); weights in the canonical layout. `training`: batch
    statistics in each BatchNormalization (else the running ones, as evaluation uses);
    `uniforms`: each Dropout layer's for these rows (else dropout is the identity)."""
    masks = {index: mask.astype(dtype) for index, mask in dropout_masks(network, uniforms).items()}
    return _forward_with_pre_activations(network, _float64(weights, dtype), images, training, masks)[0]


def training_forward(network: Network, weights: list, images: np.ndarray, uniforms: tuple = (), dtype=np.float64):
    """(logits, each training BatchNormalization's batch (mean, unbiased variance)) of the
    training forward pass alone: dropout by `uniforms`, batch statistics in every batch norm."""
    masks = {index: mask.astype(dtype) for index, mask in dropout_masks(network, uniforms).items()}
    outputs, _, caches = _forward_with_pre_activations(network, _float64(weights, dtype), images, True, masks)
    return outputs[-1], {index: (cache[0], cache[1]) for index, cache in caches.items()}


def forward_backward(
    network: Network,
    weights: list,
    images: np.ndarray,
    labels: np.ndarray,
    kinks=True,
    uniforms: tuple = (),
    dtype=np.float64,
) -> Pass:
    """The training forward pass, the mean cross-entropy and every gradient; `labels` (N,)
    ints. `kinks`: True, allowances for every value within KINK_WIDTH of a kink (the
    localisation's dithered inputs); "rounding", for those within ROUNDING_SIGMAS of float32's
    own rounding of it (rounding_spread: the step check's); False, none (every kink taken as
    the module docstring says). `uniforms`: each Dropout layer's for these rows
    (network/dropout.py), else dropout is the identity. `dtype`: float64, or float32 to see what
    float32 arithmetic of the spec itself makes of the same pass (the step check's rounding)."""
    params = _float64(weights, dtype)
    masks = {index: mask.astype(dtype) for index, mask in dropout_masks(network, uniforms).items()}
    outputs, pre_activations, caches = _forward_with_pre_activations(network, params, images, True, masks)
    inputs = [np.asarray(images, dtype).reshape(len(images), *network.input_shape)] + outputs[:-1]
    spread = rounding_spread(network, params, inputs, masks, caches) if kinks == "rounding" else None
    loss, grad = cross_entropy(outputs[-1], np.asarray(labels))
    context = (network, params, inputs, pre_activations, caches, masks)
    gradients, input_gradients, other_sides, unjudged_from = _backward_sweep(context, grad, kinks, spread)
    allowances, input_allowances = _allowances(context, gradients, input_gradients, other_sides, unjudged_from)
    statistics = {index: (cache[0], cache[1]) for index, cache in caches.items()}
    evaluation = forward(network, weights, images) if network.batch_normalizations() else outputs
    return Pass(
        loss, outputs, gradients, allowances, input_gradients, input_allowances, evaluation, statistics, unjudged_from
    )


def _backward_sweep(context: tuple, grad: np.ndarray, kinks, spread) -> tuple:
    """The backward pass from the loss's gradient `grad` down: (gradients, input gradients,
    the kinks' other sides found on the way, unjudged_from). The step check's kinks are
    carried back up to ROUNDING_KINKS; where a layer has more (a batch norm's near-zero
    background, shifted as one by its statistics' rounding), the gradients of that layer and
    those below it are not judged at this step (their allowance is infinite)."""
    network, params, inputs, pre_activations, caches, masks = context
    batch = len(inputs[0])
    gradients, input_gradients, other_sides = {}, {}, []
    unjudged_from, spent = None, 0
    for index in range(len(network.layers) - 1, -1, -1):
        layer = network.layers[index]
        # what is left of the budget, in kinks of this layer (one below a batch norm carries the whole batch)
        cost = batch if _normalised_below(network, index) else 1
        room = None if kinks != "rounding" else (ROUNDING_KINKS - spent) // cost
        if network.activation(index) == "relu":
            if kinks and unjudged_from is None:
                near = _near_zero(pre_activations[index], None if spread is None else spread[index])
                if room is not None and np.count_nonzero(near & (grad != 0)) > room:
                    unjudged_from = index
                else:
                    found = _relu_kinks(index, grad, near)
                    other_sides, spent = other_sides + found, spent + cost * len(found)
            grad = grad * (pre_activations[index] > 0)
        if kinks and unjudged_from is None and isinstance(layer, MaxPool2D):
            found = _pool_kinks(
                index, layer, inputs[index], grad, None if spread is None else spread[index - 1], limit=room
            )
            if found is None:
                unjudged_from = index - 1
            else:
                pool_cost = batch if _normalised_below(network, index - 1) else 1
                other_sides, spent = other_sides + found, spent + pool_cost * len(found)
        grad, kernel_grad, bias_grad = _backward(layer, inputs[index], grad, params.get(index), caches.get(index))
        if index in masks:
            grad = grad * masks[index]
        input_gradients[index] = grad
        if kernel_grad is not None:
            gradients[(index, "kernel")], gradients[(index, "bias")] = kernel_grad, bias_grad
    return gradients, input_gradients, other_sides, unjudged_from


def _allowances(context: tuple, gradients: dict, input_gradients: dict, other_sides: list, unjudged_from) -> tuple:
    """(allowances, input allowances): each kink's other side carried back alone, the sum of
    the absolute changes it makes to each gradient; infinite where not judged."""
    network, inputs = context[0], context[2]
    allowances = {
        key: np.full_like(gradient, np.inf)
        if unjudged_from is not None and key[0] <= unjudged_from
        else np.zeros_like(gradient)
        for key, gradient in gradients.items()
    }
    input_allowances = {index: np.zeros_like(gradient) for index, gradient in input_gradients.items()}
    groups = {}
    for start, at_pre_activation, sample, delta in other_sides:
        groups.setdefault((start, at_pre_activation), []).append((sample, delta))
    for (start, at_pre_activation), found in groups.items():
        batch = len(inputs[0])
        chunk_size = KINKS_AT_ONCE if not _normalised_below(network, start) else max(1, KINKS_AT_ONCE // batch)
        for first in range(0, len(found), chunk_size):
            chunk = found[first : first + chunk_size]
            samples = np.array([sample for sample, _ in chunk])
            deltas = np.concatenate([delta for _, delta in chunk])
            changes, input_changes = _carried_back(
                context,
                start,
                at_pre_activation,
                samples,
                deltas,
                stop=0 if unjudged_from is None else unjudged_from + 1,
            )
            for key, change in changes.items():
                allowances[key] += np.abs(change).sum(axis=0)
            for index, (rows, change) in input_changes.items():
                np.add.at(input_allowances[index], rows, np.abs(change))
    return allowances, input_allowances


def update_running(network: Network, weights: list, statistics: dict) -> list:
    """The weights with each BatchNormalization's running mean and variance moved by its
    step's batch statistics (network/layers.py's convention), in float64."""
    updated = []
    for w in weights:
        if w.layer_index in statistics:
            momentum = network.layers[w.layer_index].momentum
            mean, variance = statistics[w.layer_index]
            w = replace(
                w,
                running_mean=momentum * np.float64(w.running_mean) + (1 - momentum) * mean,
                running_var=momentum * np.float64(w.running_var) + (1 - momentum) * variance,
            )
        updated.append(w)
    return updated


def _float64(weights: list, dtype=np.float64) -> dict:
    """{layer index: (kernel, bias)} in float64 (or `dtype`); a BatchNormalization's (gamma,
    beta, running mean, running variance)."""
    return {
        w.layer_index: tuple(
            np.asarray(value, dtype) for value in (w.kernel, w.bias, w.running_mean, w.running_var) if value is not None
        )
        for w in weights
    }


def _normalised_below(network: Network, start: int) -> bool:
    return any(index <= start for index in network.batch_normalizations())


def dropout_masks(network: Network, uniforms: tuple) -> dict:
    """{Dropout layer index: its float64 multiplier per element} from a step's uniforms
    (MASK_RULE: kept where u > rate, times float32(1 / (1 - rate))); {} without uniforms."""
    if not uniforms:
        return {}
    return {
        index: np.where(u > np.float32(layer.rate), np.float64(scale(layer.rate)), 0.0)
        for (index, layer, _), u in zip(dropout_layers(network), uniforms)
    }


def _forward_with_pre_activations(
    network: Network, params: dict, images: np.ndarray, training: bool, masks: Optional[dict] = None
) -> tuple:
    """(each layer's output, each layer's value before its activation, each training
    BatchNormalization's cache: (mean, unbiased variance, x_hat, 1 / std)). `masks`: each
    Dropout layer's multiplier (dropout_masks), else dropout is the identity. The dtype of
    the weights in `params` is the pass's."""
    dtype = next(iter(params.values()))[0].dtype if params else np.float64
    x = np.asarray(images, dtype).reshape(len(images), *network.input_shape)
    outputs, pre_activations, caches = [], [], {}
    masks = masks or {}
    for index, layer in enumerate(network.layers):
        if index in masks:
            x = x * masks[index]
        elif isinstance(layer, BatchNormalization):
            x, cache = _batch_norm(layer, x, params[index], training)
            if cache is not None:
                caches[index] = cache
        else:
            x = _forward(layer, x, params.get(index))
        pre_activations.append(x)
        activation = network.activation(index)
        if activation not in (None, "relu"):
            raise ValueError(f"the reference has no {activation!r} activation inside the network (layer {index})")
        if activation == "relu":
            x = np.maximum(x, 0.0)
        outputs.append(x)
    return outputs, pre_activations, caches


def _batch_norm(layer: BatchNormalization, x: np.ndarray, params: tuple, training: bool) -> tuple:
    """(output, cache or None): the batch's statistics in training, the running ones otherwise."""
    gamma, beta, running_mean, running_var = params
    if not training:
        return gamma * (x - running_mean) / np.sqrt(running_var + layer.epsilon) + beta, None
    axes = tuple(range(x.ndim - 1))
    count = x.size // x.shape[-1]
    mean, variance = x.mean(axis=axes), x.var(axis=axes)
    inverse_std = 1.0 / np.sqrt(variance + layer.epsilon)
    normalised = (x - mean) * inverse_std
    unbiased = variance * count / (count - 1) if count > 1 else variance
    return gamma * normalised + beta, (mean, unbiased, normalised, inverse_std)


def rounding_spread(network: Network, params: dict, inputs: list, masks: dict, caches: dict) -> list:
    """Per layer, the spread (one standard deviation) of float32's rounding of each of its
    values before its activation, as a framework computing in float32 from float32 weights
    would have it: each product and sum rounds by FLOAT32_UNIT of itself, independently, and
    what a layer receives carries its input's spread on (a sum's variance is the sum of its
    terms'). A value of exactly no spread (a convolution of a zero patch) is exact in float32
    too. `inputs`: each layer's input in the forward pass already taken; costs one more
    forward pass of the variances, with the weights squared."""
    unit2 = FLOAT32_UNIT**2
    variance, spreads = np.zeros_like(inputs[0]), []
    for index, layer in enumerate(network.layers):
        if index in masks:
            variance = variance * masks[index] ** 2
        elif isinstance(layer, (Conv2D, Dense)):
            kernel, bias = params[index]
            x = inputs[index]
            variance = _forward(layer, variance + unit2 * x * x, (kernel * kernel, np.zeros_like(bias)))
        elif isinstance(layer, BatchNormalization):
            gamma, _, _, _ = params[index]
            mean, _, normalised, inverse_std = caches[index]
            variance = variance * (gamma * inverse_std) ** 2 + unit2 * (gamma * normalised) ** 2
            variance = variance + _statistics_rounding(inputs[index], mean, normalised, inverse_std, gamma)
        else:
            variance = _forward(layer, variance, params.get(index))
        spreads.append(np.sqrt(variance))
    return spreads


def _statistics_rounding(x: np.ndarray, mean, normalised, inverse_std, gamma) -> np.ndarray:
    """The variance a BatchNormalization's float32 batch statistics add to each of its outputs:
    its mean and variance are sums over the batch and the map (thousands of values), whose
    rounding grows with the square root of their count, and it moves every output of a channel
    the same way (x_hat = (x - mean) / std shifts by -dmean / std - x_hat * dstd / std): measured,
    TensorFlow's and the spec's differ enough to put a channel's near-zero background on the
    other side of its ReLU."""
    axes = tuple(range(x.ndim - 1))
    count = x.size // x.shape[-1]
    spread_mean = FLOAT32_UNIT * np.sqrt(count) * np.sqrt(np.mean(x * x, axis=axes))
    deviation2 = (x - mean) ** 2
    spread_variance = FLOAT32_UNIT * np.sqrt(count) * np.sqrt(np.mean(deviation2 * deviation2, axis=axes))
    shift_mean = spread_mean * inverse_std
    shift_std = spread_variance * inverse_std**2 / 2
    return gamma**2 * (shift_mean**2 + (normalised * shift_std) ** 2)


def _near_zero(pre_activation: np.ndarray, spread) -> np.ndarray:
    """Where a ReLU's input may lie on either side of 0: within KINK_WIDTH of the layer's
    largest magnitude, or (`spread` given) within ROUNDING_SIGMAS of its own rounding."""
    if spread is None:
        return np.abs(pre_activation) <= KINK_WIDTH * np.abs(pre_activation).max()
    return (np.abs(pre_activation) <= ROUNDING_SIGMAS * spread) & (spread > 0)


def _relu_kinks(index: int, grad: np.ndarray, near: np.ndarray) -> list:
    """(layer, at its pre-activation, sample, the gradient change) for each pre-activation
    `near` 0: the gradient its ReLU passes on one side and stops on the other."""
    kinks = []
    for position in map(tuple, np.argwhere(near & (grad != 0))):
        delta = np.zeros((1, *grad.shape[1:]))
        delta[(0, *position[1:])] = grad[position]
        kinks.append((index, True, position[0], delta))
    return kinks


def _pool_kinks(index: int, layer: MaxPool2D, x: np.ndarray, grad: np.ndarray, spread=None, limit=None):
    """(layer below the pool, at its output, sample, the gradient change) for each element
    within KINK_WIDTH of its window's first maximum (or, `spread` given, within
    ROUNDING_SIGMAS of the two values' rounding): the window's gradient moved to it; None
    where there are more than `limit`."""
    size = layer.pool_size
    windows = _windows(x, size)
    first = np.argmax(windows, axis=-1)
    top = windows.max(axis=-1, keepdims=True)
    others = np.arange(size * size) != first[..., None]
    if spread is None:
        width = KINK_WIDTH * np.abs(x).max()
        # a window of ReLU zeros ties too, but every one of them stops its gradient at its ReLU
        near = (windows >= top - width) & (top > width) & others
    else:
        spreads = _windows(spread, size)
        pair = np.sqrt(np.take_along_axis(spreads, first[..., None], axis=-1) ** 2 + spreads**2)
        # a tie of equal values (two equal patches) is a tie in float32 too: its first maximum wins there as here
        near = (windows >= top - ROUNDING_SIGMAS * pair) & (windows < top) & (pair > 0) & others
    if limit is not None and np.count_nonzero(near & (grad[..., None] != 0)) > limit:
        return None
    kinks = []
    for n, row, column, channel, element in map(tuple, np.argwhere(near & (grad[..., None] != 0))):
        delta = np.zeros((1, *x.shape[1:]))
        for place, sign in ((first[n, row, column, channel], -1.0), (element, 1.0)):
            delta[0, row * size + place // size, column * size + place % size, channel] += (
                sign * grad[n, row, column, channel]
            )
        kinks.append((index - 1, False, n, delta))
    return kinks


def _carried_back(
    context: tuple, start: int, at_pre_activation: bool, samples: np.ndarray, deltas, stop: int = 0
) -> tuple:
    """The change each gradient change `deltas[k]` (of sample `samples[k]`, at layer `start`'s
    output, or with `at_pre_activation` past its ReLU) makes to every parameter gradient
    below it, one row per k ({key: (K, ...)}), and to every layer's input gradient ({layer:
    (the batch rows it lands on, K x R flat, the changes there)}): the kinks of one layer
    carried back together, each alone. Each kink's gradient is held on R rows: its own
    sample's (R = 1) until a BatchNormalization spreads it over the whole batch (R = N)."""
    network, params, inputs, pre_activations, caches, masks = context
    changes, input_changes = {}, {}
    kinks, batch = len(samples), len(inputs[0])
    grad, rows = deltas[:, None], samples[:, None]  # (K, R, ...) and the batch row each of the R is
    for index in range(start, stop - 1, -1):  # to layer `stop` (below it nothing is judged)
        layer = network.layers[index]
        if network.activation(index) == "relu" and not (index == start and at_pre_activation):
            grad = grad * (pre_activations[index][rows] > 0)
        if isinstance(layer, BatchNormalization):
            if rows.shape[1] == 1:  # from here on every sample of the batch takes part
                full = np.zeros((kinks, batch, *grad.shape[2:]))
                full[np.arange(kinks), samples] = grad[:, 0]
                grad, rows = full, np.tile(np.arange(batch), (kinks, 1))
            grad, kernel_grad, bias_grad = _batch_norm_backward(layer, grad, params[index], caches[index], batched=True)
        else:
            flat_rows = rows.reshape(-1)
            flat, kernel_grad, bias_grad = _backward(
                layer, inputs[index][flat_rows], grad.reshape(-1, *grad.shape[2:]), params.get(index), per_sample=True
            )
            grad = flat.reshape(kinks, rows.shape[1], *flat.shape[1:])
            if index in masks:
                grad = grad * masks[index][rows]
            if kernel_grad is not None:
                kernel_grad = kernel_grad.reshape(kinks, rows.shape[1], *kernel_grad.shape[1:]).sum(axis=1)
                bias_grad = bias_grad.reshape(kinks, rows.shape[1], *bias_grad.shape[1:]).sum(axis=1)
        input_changes[index] = (rows.reshape(-1), grad.reshape(-1, *grad.shape[2:]))
        if kernel_grad is not None:
            changes[(index, "kernel")], changes[(index, "bias")] = kernel_grad, bias_grad
    return changes, input_changes


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple:
    """The mean over the batch of -log softmax(logits)[label], and its gradient."""
    log_probabilities = log_softmax(logits, axis=1)
    rows = np.arange(len(labels))
    loss = -log_probabilities[rows, labels].mean()
    grad = np.exp(log_probabilities)
    grad[rows, labels] -= 1.0
    return float(loss), grad / len(labels)


def _pad(x: np.ndarray, paddings: tuple) -> np.ndarray:
    (top, bottom), (left, right) = paddings
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))


# a convolution's columns are built this many values at a time at most (64 MB of float64)
COLUMN_VALUES = 8 << 20


def _sample_chunks(samples: int, values_per_sample: int) -> list:
    """Slices of the batch whose columns hold at most COLUMN_VALUES values (one sample at least)."""
    step = max(1, COLUMN_VALUES // max(1, values_per_sample))
    return [slice(start, min(start + step, samples)) for start in range(0, samples, step)]


def _columns(padded: np.ndarray, k: int, stride: int, out_h: int, out_w: int) -> np.ndarray:
    """(N * out_h * out_w, k * k * C): each output position's receptive field, in the HWIO
    kernel's (i, j, c) order, so one matrix product with the (k * k * C, O) kernel is the conv."""
    n, channels = len(padded), padded.shape[3]
    columns = np.empty((n, out_h, out_w, k, k, channels), padded.dtype)
    for i in range(k):
        for j in range(k):
            columns[:, :, :, i, j, :] = padded[_strided(padded, i, j, out_h, out_w, stride)]
    return columns.reshape(n * out_h * out_w, k * k * channels)


def _add_columns(target: np.ndarray, columns: np.ndarray, k: int, stride: int, out_h: int, out_w: int) -> None:
    """The inverse of _columns, summed: each column's values added back to the padded input's
    places (`target`, a view of the padded input gradient, written in place)."""
    n, channels = len(target), target.shape[3]
    columns = columns.reshape(n, out_h, out_w, k, k, channels)
    for i in range(k):
        for j in range(k):
            target[_strided(target, i, j, out_h, out_w, stride)] += columns[:, :, :, i, j, :]


def _strided(padded: np.ndarray, i: int, j: int, out_h: int, out_w: int, stride: int) -> tuple:
    """The index of the input pixels kernel offset (i, j) meets, at every output position."""
    return (slice(None), slice(i, i + stride * (out_h - 1) + 1, stride), slice(j, j + stride * (out_w - 1) + 1, stride))


def _forward(layer, x: np.ndarray, params) -> np.ndarray:
    if isinstance(layer, ZeroPad2D):
        p = layer.padding
        return _pad(x, ((p, p), (p, p)))
    if isinstance(layer, Conv2D):
        kernel, bias = params
        k, stride = layer.kernel_size, layer.stride
        padded = _pad(x, layer.paddings(x.shape[1:]))
        out_h, out_w = (padded.shape[1] - k) // stride + 1, (padded.shape[2] - k) // stride + 1
        flat_kernel = kernel.reshape(-1, kernel.shape[3])
        out = np.empty((len(x), out_h, out_w, kernel.shape[3]), x.dtype)
        for rows in _sample_chunks(len(x), out_h * out_w * flat_kernel.shape[0]):  # one matrix product a chunk
            out[rows] = (_columns(padded[rows], k, stride, out_h, out_w) @ flat_kernel).reshape(out[rows].shape)
        return out + bias
    if isinstance(layer, MaxPool2D):
        if layer.padding:  # only a known error pads a pool (--fault shape:...), and only a framework gets it
            raise ValueError("the reference pools without padding")
        return _windows(x, layer.pool_size).max(axis=-1)
    if isinstance(layer, AveragePooling2D):
        return _windows(x, layer.pool_size).mean(axis=-1)
    if isinstance(layer, GlobalAveragePooling2D):
        return x.mean(axis=(1, 2))
    if isinstance(layer, Flatten):
        return x.reshape(len(x), -1)
    if isinstance(layer, Dense):
        kernel, bias = params
        return x @ kernel + bias
    if isinstance(layer, Dropout):
        return x
    raise TypeError(f"the reference cannot run {layer!r}")


def _backward(layer, x: np.ndarray, grad: np.ndarray, params, cache=None, per_sample: bool = False) -> tuple:
    """(gradient of the layer's input, of its kernel, of its bias); None for weights it has not.
    `per_sample`: the kernel's and bias's gradients one row per sample, not summed over the batch."""
    if isinstance(layer, ZeroPad2D):
        p = layer.padding
        return grad[:, p : grad.shape[1] - p, p : grad.shape[2] - p, :], None, None
    if isinstance(layer, Conv2D):
        kernel, _ = params
        k, stride = layer.kernel_size, layer.stride
        (top, bottom), (left, right) = layer.paddings(x.shape[1:])
        padded = _pad(x, ((top, bottom), (left, right)))
        out_h, out_w = grad.shape[1], grad.shape[2]
        n, channels_in, channels_out = len(x), kernel.shape[2], kernel.shape[3]
        input_grad = np.zeros_like(padded)
        if per_sample:  # the kink carry-back's few samples: one (in, out) product per sample and offset
            kernel_grad = np.zeros((n, *kernel.shape), grad.dtype)
            rows_out = grad.reshape(n, -1, channels_out)
            for i in range(k):
                for j in range(k):
                    where = _strided(padded, i, j, out_h, out_w, stride)
                    window = padded[where]
                    kernel_grad[:, i, j] = window.reshape(n, -1, channels_in).transpose(0, 2, 1) @ rows_out
                    input_grad[where] += grad @ kernel[i, j].T
        else:  # the whole batch: the columns of each chunk of samples, one matrix product each way
            flat_kernel = kernel.reshape(-1, channels_out)
            flat_grad = np.zeros_like(flat_kernel)
            for rows in _sample_chunks(n, out_h * out_w * flat_kernel.shape[0]):
                columns = _columns(padded[rows], k, stride, out_h, out_w)
                grad_rows = grad[rows].reshape(-1, channels_out)
                flat_grad += columns.T @ grad_rows
                _add_columns(input_grad[rows], grad_rows @ flat_kernel.T, k, stride, out_h, out_w)
            kernel_grad = flat_grad.reshape(kernel.shape)
        input_grad = input_grad[:, top : top + x.shape[1], left : left + x.shape[2], :]
        return input_grad, kernel_grad, grad.sum(axis=(1, 2) if per_sample else (0, 1, 2))
    if isinstance(layer, BatchNormalization):
        return _batch_norm_backward(layer, grad[None], params, cache, batched=False)
    if isinstance(layer, MaxPool2D):
        size = layer.pool_size
        windows = _windows(x, size)
        first_max = np.argmax(windows, axis=-1)  # argmax: the first of tied maxima
        return _unpool((np.arange(size * size) == first_max[..., None]) * grad[..., None], x, size), None, None
    if isinstance(layer, AveragePooling2D):
        size = layer.pool_size
        spread = np.broadcast_to(grad[..., None] / (size * size), (*grad.shape, size * size))
        return _unpool(spread, x, size), None, None
    if isinstance(layer, GlobalAveragePooling2D):
        height, width = x.shape[1], x.shape[2]
        return np.broadcast_to(grad[:, None, None, :] / (height * width), x.shape).copy(), None, None
    if isinstance(layer, Flatten):
        return grad.reshape(x.shape), None, None
    if isinstance(layer, Dense):
        kernel, _ = params
        if per_sample:
            return grad @ kernel.T, x[:, :, None] * grad[:, None, :], grad
        return grad @ kernel.T, x.T @ grad, grad.sum(axis=0)
    if isinstance(layer, Dropout):
        return grad, None, None
    raise TypeError(f"the reference cannot run {layer!r}")


def _batch_norm_backward(layer, grad: np.ndarray, params: tuple, cache: tuple, batched: bool) -> tuple:
    """A training BatchNormalization's backward pass for K gradients at once, `grad` (K, N,
    ...): (input gradients (K, N, ...), gamma's and beta's (K, C)); `batched=False`: one
    gradient, (N, ...) in and out, gamma's and beta's (C,)."""
    gamma = params[0]
    _, _, normalised, inverse_std = cache
    axes = tuple(range(1, grad.ndim - 1))  # the batch and the map, per gradient k
    count = np.prod([grad.shape[axis] for axis in axes])
    beta_grad = grad.sum(axis=axes)
    gamma_grad = (grad * normalised).sum(axis=axes)
    shape = (grad.shape[0],) + (1,) * len(axes) + (grad.shape[-1],)
    input_grad = (
        gamma * inverse_std / count * (count * grad - beta_grad.reshape(shape) - normalised * gamma_grad.reshape(shape))
    )
    if batched:
        return input_grad, gamma_grad, beta_grad
    return input_grad[0], gamma_grad[0], beta_grad[0]


def _unpool(per_window: np.ndarray, x: np.ndarray, size: int) -> np.ndarray:
    """(N, H//size, W//size, C, size*size) values back to x's (N, H, W, C) places; 0 past the last window."""
    n, out_h, out_w, c, _ = per_window.shape
    placed = per_window.reshape(n, out_h, out_w, c, size, size).transpose(0, 1, 4, 2, 5, 3)
    result = np.zeros_like(x)
    result[:, : out_h * size, : out_w * size, :] = placed.reshape(n, out_h * size, out_w * size, c)
    return result


def _windows(x: np.ndarray, size: int) -> np.ndarray:
    """(N, H//size, W//size, C, size*size): each pooling window's values, row-major; the
    rows and columns past the last whole window left out, as every framework's pool does."""
    n, h, w, c = x.shape
    out_h, out_w = h // size, w // size
    cropped = x[:, : out_h * size, : out_w * size, :]
    return (
        cropped.reshape(n, out_h, size, out_w, size, c)
        .transpose(0, 1, 3, 5, 2, 4)
        .reshape(n, out_h, out_w, c, size * size)
    )


def sgd_or_adam_step(optimizer, weights: list, gradients: dict, state: dict, step: int) -> list:
    """One update of the spec's optimizer, in float64, for the reference trajectory
    (torch's formulation of momentum and Nesterov; Adam with bias correction).
    `state` holds the slots between calls; `step` counts from 1."""
    updated = []
    for w in weights:
        parts = []
        for role, value in (("kernel", w.kernel), ("bias", w.bias)):
            key, grad = (w.layer_index, role), gradients[(w.layer_index, role)]
            value = np.float64(value)
            if optimizer.name == "sgd":
                velocity = state[key] = optimizer.momentum * state.get(key, 0.0) + grad
                direction = grad + optimizer.momentum * velocity if optimizer.nesterov else velocity
                parts.append(value - optimizer.learning_rate * direction)
            elif optimizer.name == "adam":
                first, second = state.get(key, (0.0, 0.0))
                first = optimizer.beta_1 * first + (1 - optimizer.beta_1) * grad
                second = optimizer.beta_2 * second + (1 - optimizer.beta_2) * grad**2
                state[key] = (first, second)
                first_hat, second_hat = first / (1 - optimizer.beta_1**step), second / (1 - optimizer.beta_2**step)
                parts.append(value - optimizer.learning_rate * first_hat / (np.sqrt(second_hat) + optimizer.epsilon))
            else:
                raise ValueError(f"the reference has no optimizer {optimizer.name!r}")
        updated.append(LayerWeights(w.layer_index, *parts, w.running_mean, w.running_var))
    return updated
