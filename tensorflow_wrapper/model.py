"""The spec translated to TensorFlow ops. Weights come from algorithms/init.py in
their canonical layout, which is TensorFlow's own (HWIO kernels, NHWC flatten)."""
from __future__ import annotations

import tensorflow as tf

from algorithms.spec import Conv2D, Dense, Dropout, Flatten, MaxPool2D, Network, ZeroPad2D

ACTIVATIONS = {None: tf.identity, "relu": tf.nn.relu, "softmax": tf.nn.softmax}


class SpecModel(tf.Module):
    """Forward pass of a Network; returns logits (a final softmax is left to the loss)."""

    def __init__(self, network: Network, weights: list, seed: int):
        super().__init__(name="spec_model")
        self.network = network
        self.kernels = {w.layer_index: tf.Variable(w.kernel, name=f"kernel_{w.layer_index}") for w in weights}
        self.biases = {w.layer_index: tf.Variable(w.bias, name=f"bias_{w.layer_index}") for w in weights}
        self.dropout_rng = tf.random.Generator.from_seed(seed)
        self.last_index = len(network.layers) - 1

    @property
    def weights_in_order(self) -> list:
        return [v for i in sorted(self.kernels) for v in (self.kernels[i], self.biases[i])]

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        for index, layer in enumerate(self.network.layers):
            if isinstance(layer, ZeroPad2D):
                p = layer.padding
                x = tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]])
            elif isinstance(layer, Conv2D):
                x = tf.nn.conv2d(x, self.kernels[index], strides=1, padding=layer.padding.upper())
                x = self._activate(tf.nn.bias_add(x, self.biases[index]), layer.activation, index)
            elif isinstance(layer, MaxPool2D):
                x = tf.nn.max_pool2d(x, layer.pool_size, layer.pool_size, "VALID")
            elif isinstance(layer, Flatten):
                x = tf.reshape(x, [tf.shape(x)[0], -1])
            elif isinstance(layer, Dense):
                x = self._activate(tf.matmul(x, self.kernels[index]) + self.biases[index], layer.activation, index)
            elif isinstance(layer, Dropout):
                if training:
                    seed = self.dropout_rng.make_seeds(1)[:, 0]
                    x = tf.nn.experimental.stateless_dropout(x, layer.rate, seed=seed)
            else:
                raise TypeError(f"tensorflow_wrapper cannot translate {layer!r}")
        return x

    def _activate(self, x, activation, index):
        if activation == "softmax" and index == self.last_index:
            return x  # fused into the cross-entropy
        return ACTIVATIONS[activation](x)


def make_optimizer(spec):
    """TensorFlow's optimizer for the spec (tf.keras.optimizers, the TF2 standard)."""
    if spec.name == "sgd":
        return tf.keras.optimizers.SGD(spec.learning_rate, momentum=spec.momentum, nesterov=spec.nesterov)
    if spec.name == "adam":
        return tf.keras.optimizers.Adam(spec.learning_rate, beta_1=spec.beta_1, beta_2=spec.beta_2,
                                        epsilon=spec.epsilon)
    raise ValueError(f"unknown optimizer {spec.name!r}")
