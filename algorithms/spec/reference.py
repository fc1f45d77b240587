"""The spec's forward and backward pass in float64 numpy: the yardstick each framework's
per-layer outputs and gradients are measured against (algorithms/localisation/localise.py).

Canonical layout throughout (algorithms/spec/weights.py): NHWC activations, HWIO conv
kernels, (in, out) dense kernels whose rows follow the NHWC flatten. Convolutions have
stride 1; "same" pads (k - 1) // 2 on every side (odd kernels only, as the spec's are).
Where the maths leaves a choice, the choice every framework but Theano makes: ReLU's
gradient at 0 is 0, and a max-pool window's gradient goes to its first maximum
(row-major). Dropout is the identity: the reference runs with dropout off.

At those kinks a derivative jumps, and float32 cannot tell which side of one a value is
on when it lies within rounding of it: a pre-activation within KINK_WIDTH of 0, a pooling
window whose runner-up is within KINK_WIDTH of its maximum. A framework may take either
side there without being wrong. So each such kink's other side is carried back, alone,
through the layers below it, and the sum of the absolute changes it makes to each
parameter's gradient is that gradient's allowance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from algorithms.spec.networks import Conv2D, Dense, Dropout, Flatten, MaxPool2D, Network, ZeroPad2D
from algorithms.spec.weights import LayerWeights


# of the layer's largest magnitude: ten times the largest forward error a healthy framework
# shows (docs/comparing.md), so a value float32 could put on either side of a kink is here
KINK_WIDTH = 1e-5
# kinks carried back together: each needs its own copy of every parameter gradient below
# it (a dense kernel of 1,568 x 128 is 1.6 MB in float64), so 32 at once stays near 50 MB
KINKS_AT_ONCE = 32


@dataclass
class Pass:
    """One forward and backward pass: the mean cross-entropy, each layer's output (after
    its activation; the last layer's are the logits), each parameter's gradient and its
    allowance at the kinks (module docstring), both keyed (layer index, "kernel" | "bias")."""

    loss: float
    outputs: list
    gradients: dict
    allowances: dict


def forward(network: Network, weights: list, images: np.ndarray) -> list:
    """Each layer's output (after its activation; the last layer's are the logits) for
    `images` (N, H, W) or (N, H, W, C); weights in the canonical layout."""
    return _forward_with_pre_activations(network, _float64(weights), images)[0]


def forward_backward(
    network: Network, weights: list, images: np.ndarray, labels: np.ndarray, kinks: bool = True
) -> Pass:
    """The forward pass, the mean cross-entropy and every parameter's gradient; `labels` (N,)
    ints. `kinks=False`: no allowances (every kink taken as the module docstring says)."""
    params = _float64(weights)
    outputs, pre_activations = _forward_with_pre_activations(network, params, images)
    inputs = [np.asarray(images, np.float64).reshape(len(images), *network.input_shape)] + outputs[:-1]
    loss, grad = cross_entropy(outputs[-1], np.asarray(labels))
    gradients, other_sides = {}, []
    for index in range(len(network.layers) - 1, -1, -1):
        layer = network.layers[index]
        if network.activation(index) == "relu":
            if kinks:
                other_sides += _relu_kinks(index, pre_activations[index], grad)
            grad = grad * (pre_activations[index] > 0)
        if kinks and isinstance(layer, MaxPool2D):
            other_sides += _pool_kinks(index, layer, inputs[index], grad)
        grad, kernel_grad, bias_grad = _backward(layer, inputs[index], grad, params.get(index))
        if kernel_grad is not None:
            gradients[(index, "kernel")], gradients[(index, "bias")] = kernel_grad, bias_grad
    allowances = {key: np.zeros_like(gradient) for key, gradient in gradients.items()}
    groups = {}
    for start, at_pre_activation, sample, delta in other_sides:
        groups.setdefault((start, at_pre_activation), []).append((sample, delta))
    for (start, at_pre_activation), kinks in groups.items():
        for first in range(0, len(kinks), KINKS_AT_ONCE):
            chunk = kinks[first : first + KINKS_AT_ONCE]
            samples = np.array([sample for sample, _ in chunk])
            deltas = np.concatenate([delta for _, delta in chunk])
            changes = _carried_back(network, params, inputs, pre_activations, start, at_pre_activation, samples, deltas)
            for key, change in changes.items():
                allowances[key] += np.abs(change).sum(axis=0)
    return Pass(loss, outputs, gradients, allowances)


def _float64(weights: list) -> dict:
    return {w.layer_index: (np.float64(w.kernel), np.float64(w.bias)) for w in weights}


def _forward_with_pre_activations(network: Network, params: dict, images: np.ndarray) -> tuple:
    """(each layer's output, each layer's value before its activation)."""
    x = np.asarray(images, np.float64).reshape(len(images), *network.input_shape)
    outputs, pre_activations = [], []
    for index, layer in enumerate(network.layers):
        x = _forward(layer, x, params.get(index))
        pre_activations.append(x)
        activation = network.activation(index)
        if activation not in (None, "relu"):
            raise ValueError(f"the reference has no {activation!r} activation inside the network (layer {index})")
        if activation == "relu":
            x = np.maximum(x, 0.0)
        outputs.append(x)
    return outputs, pre_activations


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


def _carried_back(network, params, inputs, pre_activations, start, at_pre_activation, samples, deltas) -> dict:
    """The change each gradient change `deltas[k]` (of sample `samples[k]`, at layer `start`'s
    output, or with `at_pre_activation` past its ReLU) makes to every parameter gradient
    below it, one row per k: the kinks of one layer carried back together, each alone."""
    changes, grad = {}, deltas
    lowest = min(index for index, _, _ in network.parametric_layers())
    for index in range(start, lowest - 1, -1):
        if network.activation(index) == "relu" and not (index == start and at_pre_activation):
            grad = grad * (pre_activations[index][samples] > 0)
        grad, kernel_grad, bias_grad = _backward(
            network.layers[index], inputs[index][samples], grad, params.get(index), per_sample=True
        )
        if kernel_grad is not None:
            changes[(index, "kernel")], changes[(index, "bias")] = kernel_grad, bias_grad
    return changes


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple:
    """The mean over the batch of -log softmax(logits)[label], and its gradient."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -log_probabilities[rows, labels].mean()
    grad = np.exp(log_probabilities)
    grad[rows, labels] -= 1.0
    return float(loss), grad / len(labels)


def _conv_padding(layer: Conv2D) -> int:
    if layer.padding == "valid":
        return 0
    if layer.kernel_size % 2 == 0:
        raise ValueError(f"the reference pads 'same' symmetrically: kernel {layer.kernel_size} is even")
    return (layer.kernel_size - 1) // 2


def _forward(layer, x: np.ndarray, params) -> np.ndarray:
    if isinstance(layer, ZeroPad2D):
        p = layer.padding
        return np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    if isinstance(layer, Conv2D):
        kernel, bias = params
        p, k = _conv_padding(layer), layer.kernel_size
        padded = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
        out_h, out_w = padded.shape[1] - k + 1, padded.shape[2] - k + 1
        out = np.zeros((len(x), out_h, out_w, kernel.shape[3])) + bias
        for i in range(k):  # one matrix product per kernel offset
            for j in range(k):
                out += padded[:, i : i + out_h, j : j + out_w, :] @ kernel[i, j]
        return out
    if isinstance(layer, MaxPool2D):
        if layer.padding:  # only a known error pads a pool (--fault shape:...), and only a framework gets it
            raise ValueError("the reference pools without padding")
        return _windows(x, layer.pool_size).max(axis=-1)
    if isinstance(layer, Flatten):
        return x.reshape(len(x), -1)
    if isinstance(layer, Dense):
        kernel, bias = params
        return x @ kernel + bias
    if isinstance(layer, Dropout):
        return x
    raise TypeError(f"the reference cannot run {layer!r}")


def _backward(layer, x: np.ndarray, grad: np.ndarray, params, per_sample: bool = False) -> tuple:
    """(gradient of the layer's input, of its kernel, of its bias); None for weights it has not.
    `per_sample`: the kernel's and bias's gradients one row per sample, not summed over the batch."""
    if isinstance(layer, ZeroPad2D):
        p = layer.padding
        return grad[:, p : grad.shape[1] - p, p : grad.shape[2] - p, :], None, None
    if isinstance(layer, Conv2D):
        kernel, _ = params
        p, k = _conv_padding(layer), layer.kernel_size
        padded = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
        out_h, out_w = grad.shape[1], grad.shape[2]
        n, channels_in, channels_out = len(x), kernel.shape[2], kernel.shape[3]
        kernel_grad = np.zeros((n, *kernel.shape)) if per_sample else np.zeros_like(kernel)
        input_grad = np.zeros_like(padded)
        rows_out = grad.reshape(n, -1, channels_out)
        for i in range(k):
            for j in range(k):
                window = padded[:, i : i + out_h, j : j + out_w, :]
                if per_sample:  # one (in, out) product per sample: the batched matmul
                    kernel_grad[:, i, j] = window.reshape(n, -1, channels_in).transpose(0, 2, 1) @ rows_out
                else:
                    kernel_grad[i, j] = np.tensordot(window, grad, axes=([0, 1, 2], [0, 1, 2]))
                input_grad[:, i : i + out_h, j : j + out_w, :] += grad @ kernel[i, j].T
        input_grad = input_grad[:, p : input_grad.shape[1] - p, p : input_grad.shape[2] - p, :]
        return input_grad, kernel_grad, grad.sum(axis=(1, 2) if per_sample else (0, 1, 2))
    if isinstance(layer, MaxPool2D):
        size = layer.pool_size
        windows = _windows(x, size)
        first_max = np.argmax(windows, axis=-1)  # argmax: the first of tied maxima
        return _unpool((np.arange(size * size) == first_max[..., None]) * grad[..., None], x, size), None, None
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
        updated.append(LayerWeights(w.layer_index, *parts))
    return updated
