"""Lasagne training: the LasagneTrainer (trainer.py) driven by the shared loop in
algorithms/run/loop.py."""

from __future__ import annotations

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T

from algorithms.contract.types import Device, LayerProbe, ModelParameter, Runtime
from algorithms.machine.devices import cpu_name
from algorithms.spec.weights import gradients_from_channels_first, initial_weights, output_from_channels_first
from algorithms.run.loop import train_by_hand
from lasagne_wrapper.model import build_model
from lasagne_wrapper.trainer import build_trainer, cross_entropy


def describe_runtime() -> Runtime:
    versions = {"lasagne": lasagne.__version__, "theano-pymc": theano.__version__, "numpy": np.__version__}
    device = Device("cpu", "cpu", f"{cpu_name()} (Theano's CPU backend)")
    return Runtime("lasagne", "theano", versions, theano_backend.describe_theano(), device)


def records(config) -> bool:
    """One process: it records."""
    return True


def train(session):
    trainer = build_trainer(session.config)
    session.execution_note, session.precision_note = describe_modes(session.config, trainer)
    return train_by_hand(trainer, session)


def describe_modes(config, trainer) -> tuple:
    """(execution, precision) as the trainer runs them, for results.log: graph-only, float32."""
    return "graph: one compiled theano.function per train step", "fp32: float32 weights and compute"


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Lasagne's own cross-entropy and the logits of the shared initial weights, dropout off."""
    images_var, labels_var = T.tensor4("images"), T.ivector("labels")
    output = build_model(network, initial_weights(network, seed), input_var=images_var)
    logits = lasagne.layers.get_output(output, deterministic=True)
    evaluate = theano.function([images_var, labels_var], [cross_entropy(logits, labels_var), logits])
    loss, logits_value = evaluate(np.ascontiguousarray(images[:, None], dtype=np.float32), labels.astype(np.int32))
    return float(loss), np.asarray(logits_value)


def spec_layers(output) -> list:
    """(spec index, Lasagne layer) for every layer of the stack build_model named after its spec index."""
    stack = lasagne.layers.get_all_layers(output)
    return [(int(layer.name.rpartition("_")[2]), layer) for layer in stack if (layer.name or "").startswith("layer_")]


def model_parameters(network) -> list:
    """The shared variables of the model build_model makes: each layer's W (OIHW, or (in,
    out)) and b, a frozen one (no `trainable` tag) too."""
    found = []
    for index, layer in spec_layers(build_model(network, initial_weights(network, 0))):
        roles = {id(getattr(layer, "W", None)): "kernel", id(getattr(layer, "b", None)): "bias"}
        for variable in layer.get_params():
            role = roles.get(id(variable), "")
            shape = variable.get_value().shape
            layout = "O" if role == "bias" else "OIHW" if len(shape) == 4 else "IO"
            attribute = {"kernel": "W", "bias": "b"}.get(role, str(variable.name))
            found.append(ModelParameter(f"{layer.name}.{attribute}", index, role, shape, layout))
    return found


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """One compiled Theano function: every layer's output (each then handed to
    `on_output`), the loss and its gradients with respect to the trainable parameters, as
    Lasagne's trainer takes them. None for a parameter without the `trainable` tag
    (frozen) or disconnected from the loss (Theano's own verdict, not zeros)."""
    images_var, labels_var = T.tensor4("images"), T.ivector("labels")
    layers = spec_layers(build_model(network, weights, input_var=images_var))
    values = lasagne.layers.get_output([layer for _, layer in layers], deterministic=True)
    loss = cross_entropy(values[-1], labels_var)
    owners = [(index, layer) for index, layer in layers if hasattr(layer, "W")]
    trainable = {id(variable) for _, layer in owners for variable in layer.get_params(trainable=True)}
    parameters = {
        (index, role): variable
        for index, layer in owners
        for role, variable in (("kernel", layer.W), ("bias", layer.b))
        if id(variable) in trainable
    }
    symbolic = theano.grad(loss, list(parameters.values()), disconnected_inputs="ignore", return_disconnected="None")
    connected = {key: gradient for key, gradient in zip(parameters, symbolic) if gradient is not None}
    run = theano.function([images_var, labels_var], [loss] + values + list(connected.values()))
    results = run(np.ascontiguousarray(images[:, None], dtype=np.float32), labels.astype(np.int32))
    loss_value, outputs = results[0], results[1 : 1 + len(layers)]
    held = {
        index: output_from_channels_first(network, index, np.asarray(output))
        for (index, _), output in zip(layers, outputs)
    }
    for index, output in held.items():
        if on_output is not None:
            on_output(index, output)
    computed = dict(zip(connected, results[1 + len(layers) :]))
    gradients = {}
    for index, layer in owners:
        for role in ("kernel", "bias"):
            gradient = computed.get((index, role))
            if gradient is not None and gradient.ndim == 2:  # Lasagne's dense kernels are (in, out): to (out, in)
                gradient = gradient.T
            gradients[(index, role)] = gradient
    return LayerProbe(float(loss_value), held, gradients_from_channels_first(network, gradients))
