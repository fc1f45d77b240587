"""Lasagne's probes: the model build_model makes, seen from outside a run. Its own loss
and logits of the shared initial weights (the cross-framework tests), its shared variables
(the structural check) and each layer's output and gradient in the spec's layout (the
localisation, algorithms/localisation/)."""

from __future__ import annotations

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T

from algorithms.contract.types import LayerProbe, ModelParameter
from algorithms.dataset.data import as_channels_first
from algorithms.network.weights import gradients_from_channels_first, initial_weights, output_from_channels_first
from lasagne_wrapper.model import SpecBatchNormLayer, build_model, layer_parameters, spec_layers
from lasagne_wrapper.trainer import cross_entropy


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Lasagne's own cross-entropy and the logits of the shared initial weights, dropout off."""
    images_var, labels_var = T.tensor4("images"), T.ivector("labels")
    output = build_model(network, initial_weights(network, seed), input_var=images_var)
    logits = lasagne.layers.get_output(output, deterministic=True)
    evaluate = theano.function([images_var, labels_var], [cross_entropy(logits, labels_var), logits])
    loss, logits_value = evaluate(as_channels_first(images, network.input_shape), labels.astype(np.int32))
    return float(loss), np.asarray(logits_value)


def model_parameters(network) -> list:
    """The shared variables of the model build_model makes: each layer's W (OIHW, or (in,
    out)) and b, or gamma and beta, a frozen one (no `trainable` tag) too."""
    found = []
    for index, layer in spec_layers(build_model(network, initial_weights(network, 0))):
        roles = {id(variable): role for role, variable in layer_parameters(layer).items()}
        for variable in layer.get_params():
            role = roles.get(id(variable), "")
            if isinstance(layer, SpecBatchNormLayer) and not role:
                continue  # the running statistics
            shape = variable.get_value().shape
            layout = "O" if role == "bias" or len(shape) == 1 else "OIHW" if len(shape) == 4 else "IO"
            attribute = str(variable.name) if isinstance(layer, SpecBatchNormLayer) else {"kernel": "W"}.get(role, "b")
            found.append(ModelParameter(f"{layer.name}.{attribute}", index, role, shape, layout))
    return found


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """One compiled Theano function: every layer's output in training (each then handed to
    `on_output`), the loss and its gradients with respect to the trainable parameters, as
    Lasagne's trainer takes them, and to each layer's input; with a BatchNormalization, the
    outputs in evaluation (deterministic) too. None for a parameter without the `trainable`
    tag (frozen) or disconnected from the loss (Theano's own verdict, not zeros)."""
    images_var, labels_var = T.tensor4("images"), T.ivector("labels")
    layers = spec_layers(build_model(network, weights, input_var=images_var))
    values = lasagne.layers.get_output([layer for _, layer in layers], deterministic=False)
    normalised = bool(network.batch_normalizations())
    evaluation = lasagne.layers.get_output([layer for _, layer in layers], deterministic=True) if normalised else []
    loss = cross_entropy(values[-1], labels_var)
    owners = [(index, layer) for index, layer in layers if layer_parameters(layer)]
    trainable = {id(variable) for _, layer in owners for variable in layer.get_params(trainable=True)}
    parameters = {
        (index, role): variable
        for index, layer in owners
        for role, variable in layer_parameters(layer).items()
        if id(variable) in trainable
    }
    by_index = dict(zip([index for index, _ in layers], values))
    inputs = {index: images_var if index == 0 else by_index[index - 1] for index, _ in layers}
    inputs = {index: value for index, value in inputs.items() if index == 0 or index - 1 in by_index}
    wanted = list(parameters.values()) + list(inputs.values())
    symbolic = theano.grad(loss, wanted, disconnected_inputs="ignore", return_disconnected="None")
    keys = list(parameters) + [("input", index) for index in inputs]
    connected = {key: gradient for key, gradient in zip(keys, symbolic) if gradient is not None}
    run = theano.function(
        [images_var, labels_var], [loss] + values + evaluation + list(connected.values()), no_default_updates=True
    )
    results = run(as_channels_first(images, network.input_shape), labels.astype(np.int32))
    count = len(layers)
    loss_value, outputs = results[0], results[1 : 1 + count]
    evaluated = results[1 + count : 1 + count + len(evaluation)]
    held = {
        index: output_from_channels_first(network, index, np.asarray(output))
        for (index, _), output in zip(layers, outputs)
    }
    for index, output in held.items():
        if on_output is not None:
            on_output(index, output)
    computed = dict(zip(connected, results[1 + count + len(evaluation) :]))
    gradients = {}
    for index, layer in owners:
        for role in layer_parameters(layer):
            gradient = computed.get((index, role))
            if gradient is not None and gradient.ndim == 2:  # Lasagne's dense kernels are (in, out): to (out, in)
                gradient = gradient.T
            gradients[(index, role)] = gradient
    input_gradients = {
        index: (
            output_from_channels_first(network, index - 1, np.asarray(computed[("input", index)]))
            if index
            else np.ascontiguousarray(np.asarray(computed[("input", index)]).transpose(0, 2, 3, 1))
        )
        for index in inputs
        if ("input", index) in computed
    }
    evaluation_outputs = {
        index: output_from_channels_first(network, index, np.asarray(output))
        for (index, _), output in zip(layers, evaluated)
    }
    return LayerProbe(
        float(loss_value),
        held,
        gradients_from_channels_first(network, gradients),
        input_gradients,
        evaluation_outputs,
    )
