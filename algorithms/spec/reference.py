"""The spec's forward and backward pass in float64 numpy: the yardstick each framework's
per-layer outputs and gradients are measured against (algorithms/localisation/localise.py).

Canonical layout throughout (algorithms/spec/weights.py): NHWC activations, HWIO conv
kernels, (in, out) dense kernels whose rows follow the NHWC flatten. Convolutions and
pools, BatchNormalization in training and in evaluation, follow the conventions of
layers.py (`same` padding TensorFlow's, its odd extra row and column at the bottom and
right; batch statistics with the biased variance, the running ones updated with the
unbiased). Where the maths leaves a choice, the choice every framework but Theano makes:
ReLU's gradient at 0 is 0, and a max-pool window's gradient goes to its first maximum
(row-major). Dropout is the identity: the reference runs with dropout off.

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

import numpy as np

from algorithms.spec.layers import (
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
from algorithms.spec.weights import LayerWeights


# of the layer's largest magnitude: ten times the largest forward error a healthy framework
# shows (docs/comparing.md), so a value float32 could put on either side of a kink is here
KINK_WIDTH = 1e-5
# kinks carried back together: each needs its own copy of every parameter gradient below
# it (a dense kernel of 1,568 x 128 is 1.6 MB in float64), so 32 at once stays near 50 MB;
# below a BatchNormalization each also carries the whole batch, so fewer go at once there
KINKS_AT_ONCE = 32


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


def forward(network: Network, weights: list, images: np.ndarray, training: bool = False) -> list:
    """Each layer's output (after its activation; the last layer's are the logits) for
    `images` (N, H, W) or (N, H, W, C); weights in the canonical layout. `training`: batch
    statistics in each BatchNormalization (else the running ones, as evaluation uses)."""
    return _forward_with_pre_activations(network, _float64(weights), images, training)[0]


def forward_backward(
    network: Network, weights: list, images: np.ndarray, labels: np.ndarray, kinks: bool = True
) -> Pass:
    """The training forward pass, the mean cross-entropy and every gradient; `labels` (N,)
    ints. `kinks=False`: no allowances (every kink taken as the module docstring says)."""
    params = _float64(weights)
    outputs, pre_activations, caches = _forward_with_pre_activations(network, params, images, True)
    inputs = [np.asarray(images, np.float64).reshape(len(images), *network.input_shape)] + outputs[:-1]
    loss, grad = cross_entropy(outputs[-1], np.asarray(labels))
    gradients, input_gradients, other_sides = {}, {}, []
    for index in range(len(network.layers) - 1, -1, -1):
        layer = network.layers[index]
        if network.activation(index) == "relu":
            if kinks:
                other_sides += _relu_kinks(index, pre_activations[index], grad)
            grad = grad * (pre_activations[index] > 0)
        if kinks and isinstance(layer, MaxPool2D):
            other_sides += _pool_kinks(index, layer, inputs[index], grad)
        grad, kernel_grad, bias_grad = _backward(layer, inputs[index], grad, params.get(index), caches.get(index))
        input_gradients[index] = grad
        if kernel_grad is not None:
            gradients[(index, "kernel")], gradients[(index, "bias")] = kernel_grad, bias_grad
    allowances = {key: np.zeros_like(gradient) for key, gradient in gradients.items()}
    input_allowances = {index: np.zeros_like(gradient) for index, gradient in input_gradients.items()}
    groups = {}
    for start, at_pre_activation, sample, delta in other_sides:
        groups.setdefault((start, at_pre_activation), []).append((sample, delta))
    context = (network, params, inputs, pre_activations, caches)
    for (start, at_pre_activation), found in groups.items():
        chunk_size = KINKS_AT_ONCE if not _normalised_below(network, start) else max(1, KINKS_AT_ONCE // len(images))
        for first in range(0, len(found), chunk_size):
            chunk = found[first : first + chunk_size]
            samples = np.array([sample for sample, _ in chunk])
            deltas = np.concatenate([delta for _, delta in chunk])
            changes, input_changes = _carried_back(context, start, at_pre_activation, samples, deltas)
            for key, change in changes.items():
                allowances[key] += np.abs(change).sum(axis=0)
            for index, (rows, change) in input_changes.items():
                np.add.at(input_allowances[index], rows, np.abs(change))
    statistics = {index: (cache[0], cache[1]) for index, cache in caches.items()}
    evaluation = forward(network, weights, images) if network.batch_normalizations() else outputs
    return Pass(loss, outputs, gradients, allowances, input_gradients, input_allowances, evaluation, statistics)


def update_running(network: Network, weights: list, statistics: dict) -> list:
    """The weights with each BatchNormalization's running mean and variance moved by its
    step's batch statistics (layers.py's convention), in float64."""
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


def _float64(weights: list) -> dict:
    """{layer index: (kernel, bias)} in float64; a BatchNormalization's (gamma, beta, running
    mean, running variance)."""
    return {
        w.layer_index: tuple(
            np.float64(value) for value in (w.kernel, w.bias, w.running_mean, w.running_var) if value is not None
        )
        for w in weights
    }


def _normalised_below(network: Network, start: int) -> bool:
    return any(index <= start for index in network.batch_normalizations())


def _forward_with_pre_activations(network: Network, params: dict, images: np.ndarray, training: bool) -> tuple:
    """(each layer's output, each layer's value before its activation, each training
    BatchNormalization's cache: (mean, unbiased variance, x_hat, 1 / std))."""
    x = np.asarray(images, np.float64).reshape(len(images), *network.input_shape)
    outputs, pre_activations, caches = [], [], {}
    for index, layer in enumerate(network.layers):
        if isinstance(layer, BatchNormalization):
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


def _relu_kinks(index: int, pre_activation: np.ndarray, grad: np.ndarray) -> list:
    """(layer, at its pre-activation, sample, the gradient change) for each pre-activation
    within KINK_WIDTH of 0: the gradient its ReLU passes on one side and stops on the other."""
    near = np.abs(pre_activation) <= KINK_WIDTH * np.abs(pre_activation).max()
    kinks = []
    for position in map(tuple, np.argwhere(near & (grad != 0))):
        delta = np.zeros((1, *pre_activation.shape[1:]))
        delta[(0, *position[1:])] = grad[position]
        kinks.append((index, True, position[0], delta))
    return kinks


def _pool_kinks(index: int, layer: MaxPool2D, x: np.ndarray, grad: np.ndarray) -> list:
    """(layer below the pool, at its output, sample, the gradient change) for each element
    within KINK_WIDTH of its window's first maximum: the window's gradient moved to it."""
    size = layer.pool_size
    windows = _windows(x, size)
    first = np.argmax(windows, axis=-1)
    top = windows.max(axis=-1, keepdims=True)
    width = KINK_WIDTH * np.abs(x).max()
    # a window of ReLU zeros ties too, but every one of them stops its gradient at its ReLU
    near = (windows >= top - width) & (top > width) & (np.arange(size * size) != first[..., None])
    kinks = []
    for n, row, column, channel, element in map(tuple, np.argwhere(near & (grad[..., None] != 0))):
        delta = np.zeros((1, *x.shape[1:]))
        for place, sign in ((first[n, row, column, channel], -1.0), (element, 1.0)):
            delta[0, row * size + place // size, column * size + place % size, channel] += (
                sign * grad[n, row, column, channel]
            )
        kinks.append((index - 1, False, n, delta))
    return kinks


def _carried_back(context: tuple, start: int, at_pre_activation: bool, samples: np.ndarray, deltas) -> tuple:
    """The change each gradient change `deltas[k]` (of sample `samples[k]`, at layer `start`'s
    output, or with `at_pre_activation` past its ReLU) makes to every parameter gradient
    below it, one row per k ({key: (K, ...)}), and to every layer's input gradient ({layer:
    (the batch rows it lands on, K x R flat, the changes there)}): the kinks of one layer
    carried back together, each alone. Each kink's gradient is held on R rows: its own
    sample's (R = 1) until a BatchNormalization spreads it over the whole batch (R = N)."""
    network, params, inputs, pre_activations, caches = context
    changes, input_changes = {}, {}
    kinks, batch = len(samples), len(inputs[0])
    grad, rows = deltas[:, None], samples[:, None]  # (K, R, ...) and the batch row each of the R is
    for index in range(start, -1, -1):
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
            if kernel_grad is not None:
                kernel_grad = kernel_grad.reshape(kinks, rows.shape[1], *kernel_grad.shape[1:]).sum(axis=1)
                bias_grad = bias_grad.reshape(kinks, rows.shape[1], *bias_grad.shape[1:]).sum(axis=1)
        input_changes[index] = (rows.reshape(-1), grad.reshape(-1, *grad.shape[2:]))
        if kernel_grad is not None:
            changes[(index, "kernel")], changes[(index, "bias")] = kernel_grad, bias_grad
    return changes, input_changes


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple:
    """The mean over the batch of -log softmax(logits)[label], and its gradient."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -log_probabilities[rows, labels].mean()
    grad = np.exp(log_probabilities)
    grad[rows, labels] -= 1.0
    return float(loss), grad / len(labels)


def _pad(x: np.ndarray, paddings: tuple) -> np.ndarray:
    (top, bottom), (left, right) = paddings
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))


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
        out = np.zeros((len(x), out_h, out_w, kernel.shape[3])) + bias
        for i in range(k):  # one matrix product per kernel offset
            for j in range(k):
                out += padded[_strided(padded, i, j, out_h, out_w, stride)] @ kernel[i, j]
        return out
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
        kernel_grad = np.zeros((n, *kernel.shape)) if per_sample else np.zeros_like(kernel)
        input_grad = np.zeros_like(padded)
        rows_out = grad.reshape(n, -1, channels_out)
        for i in range(k):
            for j in range(k):
                where = _strided(padded, i, j, out_h, out_w, stride)
                window = padded[where]
                if per_sample:  # one (in, out) product per sample: the batched matmul
                    kernel_grad[:, i, j] = window.reshape(n, -1, channels_in).transpose(0, 2, 1) @ rows_out
                else:
                    kernel_grad[i, j] = np.tensordot(window, grad, axes=([0, 1, 2], [0, 1, 2]))
                input_grad[where] += grad @ kernel[i, j].T
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
