"""The spec translated to Lasagne layers (NCHW). Weights come from algorithms/network/weights.py,
converted to the channels-first layout (OIHW kernels, CHW flatten); Lasagne's dense
kernels are (in, out), so the converted (out, in) ones are transposed back.

Dropout is a `SharedUniformDropout`, never Lasagne's DropoutLayer (Theano's random
streams): its mask comes from the uniforms fed with the rows (algorithms/network/dropout.py),
each Dropout layer's an input variable of the graph (`uniform_variables`), so every
framework drops the same units; a deterministic pass (the logits) leaves it out and needs
no uniforms.

Lasagne 0.1 has no batch normalisation: `SpecBatchNormLayer` builds the spec's from Theano
primitives (its running statistics shared variables with default updates, Lasagne 0.2's
way), and a `same` convolution whose padding is not the same on every side is padded
first by an `AsymmetricPadLayer`, its convolution then unpadded."""

from __future__ import annotations

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne import layers
from lasagne.nonlinearities import identity

from algorithms.network.dropout import channels_first, scale as dropout_scale
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

ACTIVATIONS = {"relu": theano_backend.relu, None: identity}  # ReLU'(0) = 0, as everywhere (theano_backend)
UNIFORM_TYPES = {2: T.matrix, 4: T.tensor4}  # a Dropout's input: (N, units) or an (N, C, H, W) map


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
    for index, (layer, in_shape) in enumerate(zip(network.layers, network.input_shapes())):
        activation, name = ACTIVATIONS[network.activation(index)], layer_name(index)
        if isinstance(layer, ZeroPad2D):
            net = layers.PadLayer(net, width=layer.padding, name=name)
        elif isinstance(layer, Conv2D):
            w = loaded[index]
            pad = layer.symmetric_padding(in_shape)
            if pad is None:
                net, pad = AsymmetricPadLayer(net, layer.paddings(in_shape), name=f"{name}_pad"), 0
            net = layers.Conv2DLayer(
                net,
                layer.filters,
                layer.kernel_size,
                stride=layer.stride,
                pad=pad,
                W=_shared(w.kernel),
                b=_shared(w.bias),
                nonlinearity=activation,
                convolution=cross_correlation,
                name=name,
            )
        elif isinstance(layer, BatchNormalization):
            if not layer.mean_in_gradient or layer.evaluation != "running":
                raise TypeError(f"lasagne_wrapper does not build a faulty BatchNormalization (layer {index})")
            net = SpecBatchNormLayer(net, layer.momentum, layer.epsilon, loaded[index], activation, name=name)
        elif isinstance(layer, MaxPool2D):
            net = FirstMaxPool2DLayer(net, layer.pool_size, name=name)
        elif isinstance(layer, AveragePooling2D):
            size = layer.pool_size
            net = layers.Pool2DLayer(net, size, stride=size, ignore_border=True, mode="average_exc_pad", name=name)
        elif isinstance(layer, GlobalAveragePooling2D):
            net = layers.GlobalPoolLayer(net, pool_function=T.mean, name=name)
        elif isinstance(layer, Flatten):
            net = layers.FlattenLayer(net, name=name)
        elif isinstance(layer, Dense):
            w = loaded[index]
            net = layers.DenseLayer(
                net, layer.units, W=_shared(w.kernel.T), b=_shared(w.bias), nonlinearity=activation, name=name
            )
        elif isinstance(layer, Dropout):
            variable = UNIFORM_TYPES[len(net.output_shape)](f"uniforms_{index}")
            uniforms = layers.InputLayer(net.output_shape, input_var=variable, name=f"uniforms_{index}")
            net = SharedUniformDropout(net, uniforms, layer.rate, name=name)
        else:
            raise TypeError(f"lasagne_wrapper cannot translate {layer!r}")
        if getattr(layer, "bias_frozen", False):  # --fault frozen:...: the bias is no trainable parameter
            net.params[net.b].discard("trainable")
    return net


class AsymmetricPadLayer(layers.Layer):
    """Zeros around an (N, C, H, W) map, ((top, bottom), (left, right)) of them."""

    def __init__(self, incoming, paddings: tuple, **kwargs):
        super().__init__(incoming, **kwargs)
        self.paddings = paddings

    def get_output_shape_for(self, input_shape):
        (top, bottom), (left, right) = self.paddings
        height, width = input_shape[2:]
        grown = (None if height is None else height + top + bottom, None if width is None else width + left + right)
        return (*input_shape[:2], *grown)

    def get_output_for(self, input, **kwargs):
        (top, bottom), (left, right) = self.paddings
        shape = (input.shape[0], input.shape[1], input.shape[2] + top + bottom, input.shape[3] + left + right)
        inside = (slice(None), slice(None), slice(top, top + input.shape[2]), slice(left, left + input.shape[3]))
        return T.set_subtensor(T.zeros(shape, dtype=input.dtype)[inside], input)


class SpecBatchNormLayer(layers.Layer):
    """The spec's BatchNormalization (layers.py) on a channels-first input: per channel (axis
    1), the batch's mean and biased variance in training, whose default updates move the
    running ones (the unbiased variance) by the momentum; the running ones when
    deterministic. gamma and beta are trained; the running statistics are parameters
    without the `trainable` tag, so an update never touches them but their own."""

    def __init__(self, incoming, momentum: float, epsilon: float, weights, nonlinearity, **kwargs):
        super().__init__(incoming, **kwargs)
        channels = (self.input_shape[1],)
        self.momentum, self.epsilon, self.nonlinearity = momentum, epsilon, nonlinearity
        state = {"trainable": False, "regularizable": False}
        self.gamma = self.add_param(_shared(weights.kernel), channels, "gamma", regularizable=False)
        self.beta = self.add_param(_shared(weights.bias), channels, "beta", regularizable=False)
        self.mean = self.add_param(_shared(weights.running_mean), channels, "mean", **state)
        self.var = self.add_param(_shared(weights.running_var), channels, "var", **state)

    def get_output_for(self, input, deterministic=False, **kwargs):
        axes = (0,) + tuple(range(2, input.ndim))
        pattern = ["x", 0] + ["x"] * (input.ndim - 2)
        if deterministic:
            mean, variance = self.mean, self.var
        else:
            mean, variance = input.mean(axes), input.var(axes)  # Theano's var divides by the count: biased
            count = T.cast(T.prod([input.shape[axis] for axis in axes]), theano.config.floatX)
            unbiased = variance * count / T.maximum(count - 1, 1)
            # Lasagne 0.2's way to update state in a forward pass: aliased clones of the
            # statistics, each with its default update, in the graph at no cost (times 0)
            running_mean = theano.clone(self.mean, share_inputs=False)
            running_var = theano.clone(self.var, share_inputs=False)
            momentum = np.float32(self.momentum)
            running_mean.default_update = momentum * running_mean + (np.float32(1) - momentum) * mean
            running_var.default_update = momentum * running_var + (np.float32(1) - momentum) * unbiased
            mean += 0 * running_mean
            variance += 0 * running_var
        spread = T.sqrt(variance.dimshuffle(pattern) + np.float32(self.epsilon))
        normalised = (input - mean.dimshuffle(pattern)) / spread
        return self.nonlinearity(normalised * self.gamma.dimshuffle(pattern) + self.beta.dimshuffle(pattern))


class FirstMaxPool2DLayer(layers.Layer):
    """Max-pooling whose gradient goes to each window's first maximum, as every other
    framework's (backends/theano_backend.max_pool; Lasagne's MaxPool2DLayer, Theano's pool,
    sends it to every tied maximum)."""

    def __init__(self, incoming, pool_size: int, **kwargs):
        super().__init__(incoming, **kwargs)
        self.pool_size = pool_size

    def get_output_shape_for(self, input_shape):
        size = self.pool_size
        return (*input_shape[:2], *(None if side is None else side // size for side in input_shape[2:]))

    def get_output_for(self, input, **kwargs):
        return theano_backend.max_pool(input, self.pool_size)


class SharedUniformDropout(layers.MergeLayer):
    """Inverted dropout by the shared mask rule (network/dropout.py): x times float32(1 / (1 -
    rate)) where the row's uniform (the second incoming layer, channels-first) exceeds the
    rate, 0 elsewhere; the identity when deterministic."""

    def __init__(self, incoming, uniforms, rate: float, **kwargs):
        super().__init__([incoming, uniforms], **kwargs)
        self.rate = rate

    def get_output_shape_for(self, input_shapes):
        return input_shapes[0]

    def get_output_for(self, inputs, deterministic=False, **kwargs):
        x, uniforms = inputs
        if deterministic:
            return x
        mask = T.switch(T.gt(uniforms, np.float32(self.rate)), dropout_scale(self.rate), np.float32(0.0))
        return x * mask


def uniform_variables(output) -> list:
    """The uniforms' input variables of every SharedUniformDropout under `output`, in
    layer order: what a training function takes after the images and labels."""
    return [
        layer.input_layers[1].input_var
        for layer in lasagne.layers.get_all_layers(output)
        if isinstance(layer, SharedUniformDropout)
    ]


def uniforms_channels_first(network: Network, uniforms: tuple) -> list:
    """The spec-layout uniforms (N, units) or (N, H, W, C) as the graph takes them: float32,
    maps transposed to (N, C, H, W), a flattened map's units in (C, H, W) order."""
    return list(channels_first(network, uniforms))


def layer_name(index: int) -> str:
    """Each Lasagne layer is named after its spec index, so the model says which spec layer it is."""
    return f"layer_{index}"


def _shared(array: np.ndarray):
    return theano.shared(np.ascontiguousarray(array, dtype=theano.config.floatX))


def optimizer_slots(spec, updates, params) -> dict:
    """{param: {slot name: its shared variable}} of Lasagne's updates: momentum and
    nesterov_momentum make one velocity per parameter, in the parameters' order; adam a first
    and a second moment per parameter, then one step counter."""
    extra = [variable for variable in updates if variable not in set(params)]
    if spec.name == "sgd":
        return {param: {"velocity": velocity} for param, velocity in zip(params, extra)} if spec.momentum else {}
    return {param: {"first": extra[2 * i], "second": extra[2 * i + 1]} for i, param in enumerate(params)}


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


def spec_layers(output) -> list:
    """(spec index, Lasagne layer) for every layer of the stack build_model named after its spec index."""
    stack = lasagne.layers.get_all_layers(output)
    named = [(layer.name or "").partition("_") for layer in stack]
    return [(int(n), layer) for layer, (prefix, _, n) in zip(stack, named) if prefix == "layer" and n.isdigit()]


def layer_parameters(layer) -> dict:
    """{role: shared variable} of a Lasagne layer's trained parameters: a conv or dense
    layer's W and b, a batch normalisation's gamma and beta (its running statistics are
    state, not trained)."""
    if isinstance(layer, SpecBatchNormLayer):
        return {"kernel": layer.gamma, "bias": layer.beta}
    return {role: getattr(layer, name) for role, name in (("kernel", "W"), ("bias", "b")) if hasattr(layer, name)}
