"""Keras's probes: the model build_model makes, seen from outside a run. Its own loss and
logits of the shared initial weights (the cross-framework tests), its weights (the
structural check) and each layer's output and gradient in the spec's layout (the
localisation, algorithms/localisation/), on every Keras backend, Theano's too."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.contract.types import LayerProbe, ModelParameter
from algorithms.network.networks import Conv2D
from algorithms.network.weights import initial_weights
from keras_wrapper.gradients import loss_and_gradients
from keras_wrapper.model import build_model, layer_index, layer_variables
from keras_wrapper.trainer import make_model, nhwc


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Keras's own loss (model.evaluate, dropout off) and logits of the shared initial weights,
    from the inference model (images alone)."""
    model = make_model(network, network.training.optimizer, seed).inference
    loss = compat.evaluate_loss(model, nhwc(images), labels, batch_size=len(images))
    logits = np.asarray(model.predict(nhwc(images), batch_size=len(images), verbose=0))
    return loss, logits


def model_parameters(network) -> list:
    """The weights of the model build_model makes, each with the spec layer its Keras layer is named after."""
    model = build_model(network, initial_weights(network, 0))
    return [
        ModelParameter(
            getattr(variable, "path", variable.name), layer_index(layer), role, compat.shape_of(variable), layout
        )
        for layer in model.layers
        for variable, role, layout in layer_variables(layer)
    ]


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """The outputs of the fused model training builds (model.py: pads folded into 'same'
    convolutions, ReLUs after the pools) at the layers where it holds the spec's values (all
    but Network.outputs_fused_away, as torch's), from one model whose outputs they all are,
    in training (a BatchNormalization on the batch's statistics), each handed to `on_output`
    before the gradients are taken; the gradients from the backend's own call, None for a
    weight left out of the trainable ones (frozen) or given none by the backend
    (disconnected). With a BatchNormalization, the outputs in evaluation too (taken first,
    before training moves its statistics)."""
    model = build_model(network, weights)
    inputs = np.ascontiguousarray(nhwc(images), np.float32)
    fused_away = network.outputs_fused_away()
    spec_layers = [layer for layer in model.layers if layer_index(layer) >= 0 and layer_index(layer) not in fused_away]
    taps = keras.Model(model.inputs, [layer.output for layer in spec_layers])
    evaluation = {}
    if network.batch_normalizations():
        values = taps.predict(inputs, batch_size=len(inputs), verbose=0)
        evaluation = {layer_index(layer): np.asarray(value) for layer, value in zip(spec_layers, values)}
        values = compat.training_outputs(taps, inputs)
        model = build_model(network, weights)  # its statistics as given, for the gradients' pass
    else:
        values = taps.predict(inputs, batch_size=len(inputs), verbose=0)
    outputs = {layer_index(layer): np.asarray(value) for layer, value in zip(spec_layers, values)}
    for index, output in outputs.items():
        if on_output is not None:
            on_output(index, output)
    loss, gradients = loss_and_gradients(model, inputs, labels, training=bool(network.batch_normalizations()))
    by_variable = {id(variable): gradient for variable, gradient in zip(model.trainable_weights, gradients)}
    found = {}
    for layer in model.layers:
        for variable, role, _ in layer_variables(layer):
            gradient = by_variable.get(id(variable))
            if gradient is not None and role == "kernel" and isinstance(network.layers[layer_index(layer)], Conv2D):
                gradient = compat.conv_kernel(gradient)  # Theano's flipped kernel back to everyone else's
            found[(layer_index(layer), role)] = gradient
    return LayerProbe(loss, outputs, found, evaluation_outputs=evaluation)
