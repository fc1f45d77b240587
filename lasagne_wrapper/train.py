"""Lasagne training: compiled Theano functions (one train step with the preset's
updates, one deterministic forward pass) driven by the shared loop."""
from __future__ import annotations

import os

from lasagne_wrapper import theano_compat  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T

from algorithms.init import initial_weights
from algorithms.loop import train_by_hand
from lasagne_wrapper.model import build_model, make_updates


def describe_runtime():
    versions = {"lasagne": lasagne.__version__, "theano-pymc": theano.__version__, "numpy": np.__version__}
    return "lasagne", "theano", versions, theano_compat.describe_theano()


def cross_entropy(logits, labels):
    # softmax then log, which Theano's optimizer fuses into one stable op
    return lasagne.objectives.categorical_crossentropy(T.nnet.softmax(logits), labels).mean()


class LasagneTrainer:
    def __init__(self, network, optimizer_spec, seed: int):
        lasagne.random.set_rng(np.random.RandomState(seed))  # seeds the dropout streams
        images, labels = T.tensor4("images"), T.ivector("labels")
        self.output = build_model(network, initial_weights(network, seed), input_var=images)
        train_logits = lasagne.layers.get_output(self.output)
        loss = cross_entropy(train_logits, labels)
        accuracy = T.mean(T.eq(T.argmax(train_logits, axis=1), labels), dtype=theano.config.floatX)
        params = lasagne.layers.get_all_params(self.output, trainable=True)
        # Theano compiles here, once per graph (about a minute cold; the compile dir
        # in theano_compat.theano_cache_dir() makes later runs fast)
        updates = make_updates(optimizer_spec, loss, params)
        self.state_variables = list(updates.keys())  # weights and optimizer slots, in a fixed order
        self._train = theano.function([images, labels], [loss, accuracy], updates=updates)
        self._logits = theano.function([images], lasagne.layers.get_output(self.output, deterministic=True))

    def to_batch(self, images, labels):
        return np.ascontiguousarray(images[:, None], dtype=np.float32), labels.astype(np.int32)

    def train_step(self, batch):
        loss, accuracy = self._train(*batch)
        return float(loss), float(accuracy)

    def save_checkpoint(self, folder):
        """Lasagne's way: the shared variables' values in an .npz (every weight and
        every optimizer slot the updates write)."""
        np.savez(os.path.join(folder, "lasagne_state.npz"), *[v.get_value() for v in self.state_variables])

    def load_checkpoint(self, folder):
        with np.load(os.path.join(folder, "lasagne_state.npz")) as saved:
            for index, variable in enumerate(self.state_variables):
                variable.set_value(saved[f"arr_{index}"])

    def logits(self, images):
        return self._logits(np.ascontiguousarray(images[:, None], dtype=np.float32))


def train(session):
    config = session.config
    return train_by_hand(LasagneTrainer(config.network, config.optimizer, config.seed), session)


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Lasagne's own cross-entropy and the logits of the shared initial weights, dropout off."""
    images_var, labels_var = T.tensor4("images"), T.ivector("labels")
    output = build_model(network, initial_weights(network, seed), input_var=images_var)
    logits = lasagne.layers.get_output(output, deterministic=True)
    evaluate = theano.function([images_var, labels_var], [cross_entropy(logits, labels_var), logits])
    loss, logits_value = evaluate(np.ascontiguousarray(images[:, None], dtype=np.float32), labels.astype(np.int32))
    return float(loss), np.asarray(logits_value)
