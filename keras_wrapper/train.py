"""Keras training: the KerasTrainer (trainer.py) driven an epoch at a time by
algorithms/run/loop.py's train_by_epochs."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.contract.types import Device, LayerProbe, ModelParameter, Runtime
from algorithms.run.loop import train_by_epochs
from algorithms.spec.networks import Conv2D
from algorithms.spec.weights import initial_weights
from keras_wrapper.gradients import loss_and_gradients
from keras_wrapper.model import SpecBatchNormalization, build_model
from keras_wrapper.trainer import build_trainer, make_model, nhwc


def describe_runtime() -> Runtime:
    backend = keras.backend.backend()
    backend_version, devices = compat.describe_backend()
    versions = {"keras": keras.__version__, backend: backend_version, "numpy": np.__version__}
    return Runtime("keras", backend, versions, devices, Device(*compat.describe_device()))


def records(config) -> bool:
    """One process: it records."""
    return True


def train(session):
    trainer = build_trainer(session.config)
    session.execution_note, session.precision_note = describe_modes(session.config, trainer)
    return train_by_epochs(trainer, session)


def describe_modes(config, trainer) -> tuple:
    """(execution, precision) as the trainer's model.compile resolved them, for results.log."""
    model, precision = trainer.model, config.precision
    backend = compat.BACKEND
    if backend == "theano":
        return "graph: one compiled Theano train function (Keras 2)", "fp32: float32 weights and compute"
    compiler = {"tensorflow": "XLA", "jax": "jax.jit", "torch": "torch.compile"}[backend]
    if model.run_eagerly:
        execution = "eager: run_eagerly=True, model.fit's train step op by op from Python"
    elif model.jit_compile:
        execution = f"compiled: jit_compile=True, model.fit's train step compiled by {compiler}"
    elif backend == "tensorflow":
        execution = "graph: jit_compile=False, model.fit's train step as a tf.function"
    else:
        execution = "eager: Keras on torch's default (jit_compile=False)"
    policy = model.dtype_policy.name
    text = {
        "fp32": "fp32: float32 weights and compute",
        "bf16": f"bf16: keras dtype policy {policy} (float32 variables, bfloat16 compute)",
        "fp16": f"fp16: keras dtype policy {policy} (float32 variables, float16 compute), "
        "keras.optimizers.LossScaleOptimizer dynamic loss scale (the CSV's loss_scale column)",
    }[precision]
    return execution, text


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


def layer_variables(layer) -> list:
    """(variable, role, layout) for each weight of a Keras layer (a conv or dense layer's
    kernel and bias; a batch normalisation's gamma and beta in their places), a frozen one
    (not trainable) too; a batch normalisation's running statistics have no role."""
    kernel_layout = "HWIO" if isinstance(layer, keras.layers.Conv2D) else "IO"
    roles = {
        id(getattr(layer, "kernel", None)): ("kernel", kernel_layout),
        id(getattr(layer, "bias", None)): ("bias", "O"),
        id(getattr(layer, "gamma", None)): ("kernel", "O"),
        id(getattr(layer, "beta", None)): ("bias", "O"),
    }
    if isinstance(layer, SpecBatchNormalization):
        return [(variable, *roles[id(variable)]) for variable in (layer.gamma, layer.beta)]
    return [(variable, *roles.get(id(variable), ("", "?"))) for variable in layer.weights]


def layer_index(layer) -> int:
    """The spec index in a layer's name (model.layer_name); -1 for a layer not named so."""
    prefix, _, number = layer.name.rpartition("_")
    return int(number) if prefix == "layer" and number.isdigit() else -1


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """Every layer's output from one model whose outputs are all the layers' (Keras builds
    no fused layers: each spec layer is held), in training (a BatchNormalization on the
    batch's statistics), each handed to `on_output` before the gradients are taken; the
    gradients from the backend's own call, None for a weight left out of the trainable
    ones (frozen) or given none by the backend (disconnected). With a BatchNormalization,
    the outputs in evaluation too (taken first, before training moves its statistics)."""
    model = build_model(network, weights)
    inputs = np.ascontiguousarray(nhwc(images), np.float32)
    spec_layers = [layer for layer in model.layers if layer_index(layer) >= 0]
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
