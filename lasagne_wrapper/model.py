"""The spec translated to Lasagne layers (NCHW). Weights come from algorithms/spec/weights.py,
converted to the channels-first layout (OIHW kernels, CHW flatten); Lasagne's dense
kernels are (in, out), so the converted (out, in) ones are transposed back."""

from __future__ import annotations

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne import layers
from lasagne.nonlinearities import identity, rectify

from algorithms.spec.weights import to_channels_first
from algorithms.spec.networks import Conv2D, Dense, Dropout, Flatten, MaxPool2D, Network, ZeroPad2D

ACTIVATIONS = {"relu": rectify, None: identity}


def cross_correlation(input, filters, image_shape=None, **kwargs):
    """Lasagne 0.1's Conv2DLayer convolves for real (T.nnet.conv2d flips the kernel);
    every other framework here cross-correlates. Lasagne 0.2 spells this
    flip_filters=False. (`image_shape` is Theano 0.8's name for `input_shape`.)"""
    return T.nnet.conv2d(input, filters, input_shape=image_shape, filter_flip=False, **kwargs)


def build_model(network: Network, weights: list, input_var=None):
    """The output layer of a Lasagne stack emitting logits (a final softmax is left to the loss)."""
    height, width, channels = network.input_shape
    net = layers.InputLayer((None, channels, height, width), input_var=input_var)
    loaded = {w.layer_index: w for w in to_channels_first(network, weights)}
    for index, layer in enumerate(network.layers):
        activation, name = ACTIVATIONS[network.activation(index)], layer_name(index)
        if isinstance(layer, ZeroPad2D):
            net = layers.PadLayer(net, width=layer.padding, name=name)
        elif isinstance(layer, Conv2D):
            w = loaded[index]
            net = layers.Conv2DLayer(
                net,
                layer.filters,
                layer.kernel_size,
                pad=layer.padding,
                W=_shared(w.kernel),
                b=_shared(w.bias),
                nonlinearity=activation,
                convolution=cross_correlation,
                name=name,
            )
        elif isinstance(layer, MaxPool2D):
            net = layers.MaxPool2DLayer(net, layer.pool_size, name=name)
        elif isinstance(layer, Flatten):
            net = layers.FlattenLayer(net, name=name)
        elif isinstance(layer, Dense):
            w = loaded[index]
            net = layers.DenseLayer(
                net, layer.units, W=_shared(w.kernel.T), b=_shared(w.bias), nonlinearity=activation, name=name
            )
        elif isinstance(layer, Dropout):
            net = layers.DropoutLayer(net, p=layer.rate, name=name)
        else:
            raise TypeError(f"lasagne_wrapper cannot translate {layer!r}")
        if getattr(layer, "bias_frozen", False):  # --fault frozen:...: the bias is no trainable parameter
            net.params[net.b].discard("trainable")
    return net


def layer_name(index: int) -> str:
    """Each Lasagne layer is named after its spec index, so the model says which spec layer it is."""
    return f"layer_{index}"


def _shared(array: np.ndarray):
    return theano.shared(np.ascontiguousarray(array, dtype=theano.config.floatX))


def make_updates(spec, loss, params, learning_rate):
    """The spec's optimizer as Lasagne updates; `learning_rate` a number or a shared variable."""
    if spec.name == "sgd" and spec.nesterov:
        return lasagne.updates.nesterov_momentum(loss, params, learning_rate, momentum=spec.momentum)
    if spec.name == "sgd":
        return lasagne.updates.momentum(loss, params, learning_rate, momentum=spec.momentum)
    if spec.name == "adam":
        return lasagne.updates.adam(
            loss, params, learning_rate, beta1=spec.beta_1, beta2=spec.beta_2, epsilon=spec.epsilon
        )
    raise ValueError(f"unknown optimizer {spec.name!r}")
