"""Lasagne's trainer (contract.Trainer): compiled Theano functions, one train step
with the preset's updates (its inputs the images, the labels and each Dropout layer's
uniforms) and one deterministic forward pass (the images only)."""

from __future__ import annotations

import os

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T

from algorithms.contract.types import StepResult
from algorithms.dataset.data import as_channels_first
from algorithms.reference.train_state import TrainState, from_channels_first_state, from_update_units
from algorithms.network.weights import LayerWeights, initial_weights
from lasagne_wrapper.model import (
    SpecBatchNormLayer,
    build_model,
    layer_parameters,
    make_updates,
    optimizer_slots,
    spec_layers,
    uniform_variables,
    uniforms_channels_first,
)


def cross_entropy(logits, labels):
    # softmax then log, which Theano's optimizer fuses into one stable op
    return lasagne.objectives.categorical_crossentropy(T.nnet.softmax(logits), labels).mean()


class LasagneTrainer:
    def __init__(self, network, optimizer_spec, seed: int):
        self.network = network
        images, labels = T.tensor4("images"), T.ivector("labels")
        self.output = build_model(network, initial_weights(network, seed), input_var=images)
        uniforms = uniform_variables(self.output)  # the dropout masks' numbers, fed with the rows
        train_logits = lasagne.layers.get_output(self.output)
        loss = cross_entropy(train_logits, labels)
        accuracy = T.mean(T.eq(T.argmax(train_logits, axis=1), labels), dtype=theano.config.floatX)
        params = lasagne.layers.get_all_params(self.output, trainable=True)
        # Theano compiles here, once per graph (about a minute cold; the compile dir
        # in theano_backend.theano_cache_dir() makes later runs fast)
        # the lr a shared variable, so set_learning_rate changes it without a recompile
        self.learning_rate = theano.shared(np.float32(optimizer_spec.learning_rate), name="learning_rate")
        updates = make_updates(optimizer_spec, loss, params, self.learning_rate)
        self.optimizer_spec, self.slots = optimizer_spec, optimizer_slots(optimizer_spec, updates, params)
        held = {id(variable) for slots in self.slots.values() for variable in slots.values()} | set(map(id, params))
        self.step_counter = next((v for v in updates if id(v) not in held), None)  # adam's t
        # weights and optimizer slots, then the running statistics (updated by default updates), in a fixed order
        self.state_variables = list(updates.keys()) + [
            variable for variable in lasagne.layers.get_all_params(self.output) if variable not in updates
        ]
        self._train = theano.function([images, labels, *uniforms], [loss, accuracy], updates=updates)
        self._logits = theano.function([images], lasagne.layers.get_output(self.output, deterministic=True))

    def to_batch(self, images, labels, uniforms):
        """NCHW float32 images, int32 labels, the uniforms channels-first."""
        images = as_channels_first(images, self.network.input_shape)
        return images, labels.astype(np.int32), uniforms_channels_first(self.network, uniforms)

    def step(self, batches: list) -> StepResult:
        ((images, labels, uniforms),) = batches  # one batch: Lasagne does not declare --accumulate
        loss, accuracy = self._train(images, labels, *uniforms)
        return StepResult(float(loss), float(accuracy))

    def set_learning_rate(self, learning_rate: float) -> None:
        self.learning_rate.set_value(np.float32(learning_rate))

    def prepare_batch(self, batch_size: int) -> None:
        """Nothing: the compiled Theano function's shapes are symbolic, any batch runs
        without a recompile."""

    def logits(self, images):
        return self._logits(as_channels_first(images, self.network.input_shape))

    def save_checkpoint(self, folder):
        """Lasagne's way: the shared variables' values in an .npz (every weight and
        every optimizer slot the updates write)."""
        np.savez(os.path.join(folder, "lasagne_state.npz"), *[v.get_value() for v in self.state_variables])

    def load_checkpoint(self, folder):
        with np.load(os.path.join(folder, "lasagne_state.npz")) as saved:
            for index, variable in enumerate(self.state_variables):
                variable.set_value(saved[f"arr_{index}"])

    def train_state(self) -> TrainState:
        """The layers' shared variables and the updates' slots in the spec's layout and
        convention (reference/train_state.py): Lasagne's momentum velocity keeps the learning rate
        inside it (velocity = momentum * velocity - lr * g), so it is -velocity / lr; its
        dense kernels are (in, out), (out, in) in the channels-first layout."""
        learning_rate = float(self.learning_rate.get_value())
        weights, slots = [], {}
        for index, layer in spec_layers(self.output):
            parameters = layer_parameters(layer)
            if not parameters:
                continue
            values = {}
            for role, variable in parameters.items():
                value = np.array(variable.get_value(), np.float32)
                values[role] = value.T if value.ndim == 2 else value
                if variable in self.slots:
                    found = {}
                    for name, slot in self.slots[variable].items():
                        array = np.array(slot.get_value(), np.float64)
                        array = array.T if array.ndim == 2 else array
                        found[name] = from_update_units(array, learning_rate) if name == "velocity" else array
                    slots[(index, role)] = found
            running = {}
            if isinstance(layer, SpecBatchNormLayer):
                running = dict(
                    running_mean=np.array(layer.mean.get_value()), running_var=np.array(layer.var.get_value())
                )
            weights.append(LayerWeights(index, values.get("kernel"), values.get("bias"), **running))
        adam = {}
        if self.optimizer_spec.name == "adam":  # Lasagne's Adam: the correction in the step size (its t counts)
            adam = dict(adam_updates=int(self.step_counter.get_value()), adam_epsilon="raw")
        return from_channels_first_state(self.network, weights, slots, velocity_rate=learning_rate, **adam)


def build_trainer(config) -> LasagneTrainer:
    return LasagneTrainer(config.network, config.optimizer, config.seed)
