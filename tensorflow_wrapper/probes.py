"""TensorFlow's probes: the model build_model makes, seen from outside a run. Its own
loss and logits of the shared initial weights (the cross-framework tests), its variables
(the structural check) and each layer's output and gradient in the spec's layout (the
localisation, algorithms/localisation/)."""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras optimizers must run on TensorFlow here

import tensorflow as tf

from algorithms.contract.types import LayerProbe, ModelParameter
from algorithms.dataset.data import as_images
from algorithms.network.weights import initial_weights
from tensorflow_wrapper.model import build_model


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """TensorFlow's own cross-entropy and the logits of the shared initial weights, dropout off."""
    model = build_model(network, initial_weights(network, seed), seed)
    logits = model(tf.convert_to_tensor(as_images(images, network.input_shape)), training=False)
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.convert_to_tensor(labels), logits=logits)
    )
    return float(loss), logits.numpy()


def model_parameters(network) -> list:
    """The variables of the model build_model makes (a frozen one too), each with the layer
    whose kernel or bias it is (a batch norm's gamma and beta; its running statistics are no
    parameters)."""
    model = build_model(network, initial_weights(network, 0), 0)
    owners = {variable.ref(): (index, "kernel") for index, variable in model.kernels.items()}
    owners.update({variable.ref(): (index, "bias") for index, variable in model.biases.items()})
    layouts = {4: "HWIO", 2: "IO", 1: "O"}
    statistics = {variable.ref() for variable in model.statistics_in_order}  # a batch norm's state, not trained
    return [
        ModelParameter(
            variable.name,
            *owners.get(variable.ref(), (-1, "")),
            tuple(variable.shape),
            layouts.get(variable.shape.rank, "?"),
        )
        for variable in model.variables
        if variable.ref() not in statistics
    ]


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """The model training builds (pads in the convolutions, ReLUs after the pools), in
    training (a BatchNormalization on the batch's statistics), so its outputs are those at
    the boundaries where it holds the spec's values, each handed to `on_output` before the
    gradients are taken, with each layer's input gradient where it holds that input. A
    variable the tape gives no gradient (not trainable, so not watched, or cut from the
    graph) has None. With a BatchNormalization, the model in evaluation too."""
    model = build_model(network, weights, 0)
    taps = {}
    inputs = tf.convert_to_tensor(as_images(images, network.input_shape))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(inputs)
        logits = model(inputs, training=True, taps=taps)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.convert_to_tensor(labels), logits=logits)
        )
    held = set(range(len(network.layers))) - network.outputs_fused_away()
    outputs = {index: taps[index].numpy() for index in sorted(held)}
    for index, output in outputs.items():
        if on_output is not None:
            on_output(index, output)
    variables = {(index, "kernel"): model.kernels[index] for index in model.kernels}
    variables.update({(index, "bias"): model.biases[index] for index in model.biases})
    gradients = tape.gradient(loss, variables)
    below = {index: inputs if index == 0 else taps[index - 1] for index in range(len(network.layers))}
    below = {index: tensor for index, tensor in below.items() if index == 0 or index - 1 in held}
    input_gradients = tape.gradient(loss, below)
    evaluation = {}
    if network.batch_normalizations():
        fresh, eval_taps = build_model(network, weights, 0), {}
        fresh(inputs, training=False, taps=eval_taps)
        evaluation = {index: eval_taps[index].numpy() for index in sorted(held)}
    return LayerProbe(
        float(loss),
        outputs,
        {key: None if gradient is None else gradient.numpy() for key, gradient in gradients.items()},
        {index: gradient.numpy() for index, gradient in input_gradients.items() if gradient is not None},
        evaluation,
    )
