"""The spec translated to TensorFlow ops. Weights come from algorithms/network/weights.py in
their canonical layout, which is TensorFlow's own (HWIO kernels, NHWC flatten).
Two exact rewrites the spec allows (spec.py) save copies: a ZeroPad2D before a valid
convolution that amounts to 'same' padding is a 'SAME' convolution, and a ReLU before a
max-pool runs after it, on a quarter of the elements. A pad is folded only where it is
'SAME': TensorFlow's oneDNN has no gradient kernels for an explicitly padded
convolution, so Eigen's run instead (in bfloat16, generic and many times slower), while
'SAME' and Pad + 'VALID' take oneDNN's forward and both gradients.

A convolution's 'SAME' is the spec's `same` at any stride (TensorFlow's convention is the
spec's). BatchNormalization is built from primitives (tf.nn.moments,
tf.nn.batch_normalization, its running statistics tf.Variables assigned in the training
forward pass), since the spec keeps the running variance unbiased where Keras's layer
keeps it biased.

Two things here serve the parallel strategies:
- `layer_devices` pins each layer's variables and ops to a device (model
  parallel: the plan's stages on two devices); TensorFlow inserts the transfers.
- Dropout draws its mask from the uniforms that come with the rows
  (algorithms/network/dropout.py), cut with them wherever the batch is cut, so a sample's
  mask does not depend on how the batch is split across replicas, accumulation parts
  or micro-batches: N-device and accumulated steps equal the 1-device step even with
  dropout on, and every framework drops the same units.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from algorithms.network.dropout import dropout_layers, scale as dropout_scale
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

ACTIVATIONS = {None: tf.identity, "relu": tf.nn.relu, "softmax": tf.nn.softmax}


class SpecModel(tf.Module):
    """Forward pass of a Network; returns logits (a final softmax is left to the loss)."""

    def __init__(
        self, network: Network, weights: list, seed: int, layer_devices: list | None = None, compute_dtype=tf.float32
    ):
        super().__init__(name="spec_model")
        self.network = network
        # --precision bf16 / fp16: the float32 variables are cast to compute_dtype where they
        # are used (what a Keras mixed policy's AutoCastVariable does); logits come back float32
        self.compute_dtype = compute_dtype
        self.layer_devices = layer_devices
        self.kernels, self.biases, self.statistics = {}, {}, {}
        for w in weights:
            with self._on_device(w.layer_index):
                self.kernels[w.layer_index] = tf.Variable(w.kernel, name=f"kernel_{w.layer_index}")
                # a frozen bias (--fault frozen:...) is no trainable variable: a tape does not watch it
                trainable = not getattr(network.layers[w.layer_index], "bias_frozen", False)
                self.biases[w.layer_index] = tf.Variable(w.bias, name=f"bias_{w.layer_index}", trainable=trainable)
                if w.running_mean is not None:  # a BatchNormalization's running mean and variance
                    self.statistics[w.layer_index] = (
                        tf.Variable(w.running_mean, name=f"running_mean_{w.layer_index}", trainable=False),
                        tf.Variable(w.running_var, name=f"running_var_{w.layer_index}", trainable=False),
                    )
        self.seed = seed
        self.dropout_position = {index: k for k, (index, _, _) in enumerate(dropout_layers(network))}
        # exact rewrites (spec.py): padding inside the convolution, ReLU after the max-pool
        self.folded_pads = network.pads_folded_as_same()
        self.late_relus = network.relus_after_pools()

    @property
    def statistics_in_order(self) -> list:
        """The running statistics' variables (state the training forward pass updates, not trained)."""
        return [v for i in sorted(self.statistics) for v in self.statistics[i]]

    @property
    def weights_in_order(self) -> list:
        return [v for i in sorted(self.kernels) for v in (self.kernels[i], self.biases[i])]

    def _on_device(self, index: int):
        return tf.device(self.layer_devices[index]) if self.layer_devices else contextlib.nullcontext()

    def __call__(self, x: tf.Tensor, training: bool, uniforms=(), values=None, taps=None) -> tf.Tensor:
        """`uniforms`: the dropout uniforms of these rows, one tensor per Dropout layer in
        layer order (network/dropout.py); needed only with training=True. `values`: tensors in
        weights_in_order's order, computed with in place of the variables (a
        parameter-server worker's copy, pulled before its forward pass). `taps`: a dict
        that gets each layer's output by index (the localisation's view)."""
        x = tf.cast(x, self.compute_dtype)
        pulled = None if values is None else dict(zip(sorted(self.kernels), zip(values[0::2], values[1::2])))
        for index, layer in enumerate(self.network.layers):
            with self._on_device(index):
                x = self._layer(index, layer, x, training, uniforms, pulled)
            if taps is not None:
                taps[index] = x
        return tf.cast(x, tf.float32)

    def _weights(self, index, pulled=None) -> tuple:
        """The layer's kernel and bias in the compute dtype: its variables', or the pulled copy's."""
        kernel, bias = pulled[index] if pulled else (self.kernels[index], self.biases[index])
        return tf.cast(kernel, self.compute_dtype), tf.cast(bias, self.compute_dtype)

    def _layer(self, index, layer, x, training, uniforms, pulled=None):
        if isinstance(layer, ZeroPad2D):
            if index + 1 in self.folded_pads:
                return x
            p = layer.padding
            return tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]])
        if isinstance(layer, Conv2D):
            return self._conv(index, layer, x, *self._weights(index, pulled))
        if isinstance(layer, BatchNormalization):
            return self._batch_norm(index, layer, x, training, *self._weights(index, pulled))
        if isinstance(layer, MaxPool2D):
            x = tf.nn.max_pool2d(x, layer.pool_size, layer.pool_size, "VALID")
            return tf.nn.relu(x) if index - 1 in self.late_relus else x
        if isinstance(layer, AveragePooling2D):
            return tf.nn.avg_pool2d(x, layer.pool_size, layer.pool_size, "VALID")
        if isinstance(layer, GlobalAveragePooling2D):
            return tf.reduce_mean(x, axis=[1, 2])
        if isinstance(layer, Flatten):
            return tf.reshape(x, [tf.shape(x)[0], -1])
        if isinstance(layer, Dense):
            return self._dense(index, x, *self._weights(index, pulled))
        if isinstance(layer, Dropout):
            return dropout(x, layer.rate, uniforms[self.dropout_position[index]]) if training else x
        raise TypeError(f"tensorflow_wrapper cannot translate {layer!r}")

    def _conv(self, index, layer, x, kernel, bias):
        """The convolution with these weights: the layer's, or (tensor parallel) a slice of its output channels."""
        padding = "SAME" if index in self.folded_pads else layer.padding.upper()
        if padding == "SAME" and layer.extra_padding_at != "end":  # not TensorFlow's side: padded explicitly
            (top, bottom), (left, right) = layer.paddings(tuple(x.shape[1:]))
            x, padding = tf.pad(x, [[0, 0], [top, bottom], [left, right], [0, 0]]), "VALID"
        x = tf.nn.bias_add(tf.nn.conv2d(x, kernel, strides=layer.stride, padding=padding), bias)
        return x if index in self.late_relus else ACTIVATIONS[self.network.activation(index)](x)

    def _batch_norm(self, index, layer, x, training, gamma, beta):
        """The spec's BatchNormalization (layers.py): in training the batch's mean and biased
        variance normalise, and the running statistics move by Keras's momentum with the
        unbiased variance; otherwise the running statistics normalise."""
        if not layer.mean_in_gradient or layer.evaluation != "running":
            raise TypeError(f"tensorflow_wrapper does not build a faulty BatchNormalization (layer {index})")
        running_mean, running_var = self.statistics[index]
        if training:
            axes = list(range(len(x.shape) - 1))
            mean, variance = tf.nn.moments(x, axes)
            count = tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)
            unbiased = tf.cast(variance, tf.float32) * count / tf.maximum(count - 1.0, 1.0)
            momentum = layer.momentum
            running_mean.assign(momentum * running_mean + (1.0 - momentum) * tf.cast(mean, tf.float32))
            running_var.assign(momentum * running_var + (1.0 - momentum) * unbiased)
        else:
            mean, variance = tf.cast(running_mean, x.dtype), tf.cast(running_var, x.dtype)
        x = tf.nn.batch_normalization(x, mean, variance, beta, gamma, layer.epsilon)
        return ACTIVATIONS[self.network.activation(index)](x)

    def _dense(self, index, x, kernel, bias):
        return ACTIVATIONS[self.network.activation(index)](tf.matmul(x, kernel) + bias)


def build_model(
    network: Network, weights: list, seed: int, layer_devices: list | None = None, compute_dtype=tf.float32
) -> SpecModel:
    """The spec's forward pass on the shared weights (see SpecModel)."""
    return SpecModel(network, weights, seed, layer_devices, compute_dtype)


def dropout(x, rate: float, uniform):
    """Inverted dropout by the shared mask rule (network/dropout.py): x times float32(1 / (1 -
    rate)) where the row's uniform exceeds the rate, 0 elsewhere."""
    mask = tf.where(uniform > rate, tf.constant(dropout_scale(rate), tf.float32), tf.constant(0.0, tf.float32))
    return x * tf.cast(mask, x.dtype)


def make_optimizer(spec, pre_reduced: bool = False, learning_rate=None):
    """TensorFlow's optimizer for the spec (tf.keras.optimizers, the TF2 standard).
    pre_reduced: the trainer sums gradients across replicas itself (a separate, timed
    all-reduce), so the optimizer must not all-reduce them a second time.
    learning_rate: in place of the spec's, e.g. a callable Keras calls at each apply."""
    if spec.name == "sgd":
        cls, kwargs = tf.keras.optimizers.SGD, dict(momentum=spec.momentum, nesterov=spec.nesterov)
    elif spec.name == "adam":
        cls, kwargs = tf.keras.optimizers.Adam, dict(beta_1=spec.beta_1, beta_2=spec.beta_2, epsilon=spec.epsilon)
    else:
        raise ValueError(f"unknown optimizer {spec.name!r}")
    rate = spec.learning_rate if learning_rate is None else learning_rate
    return (_pre_reduced(cls) if pre_reduced else cls)(rate, **kwargs)


def _pre_reduced(optimizer_class):
    class PreReduced(optimizer_class):
        # Keras's TensorFlow optimizer sums gradients over replicas in this hook
        def _all_reduce_sum_gradients(self, grads_and_vars):
            return list(grads_and_vars)

    if not hasattr(optimizer_class, "_all_reduce_sum_gradients"):
        raise RuntimeError(f"{optimizer_class.__name__} has no _all_reduce_sum_gradients hook in this Keras")
    PreReduced.__name__ = optimizer_class.__name__
    return PreReduced
