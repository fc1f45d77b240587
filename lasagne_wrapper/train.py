"""Lasagne training: the LasagneTrainer (trainer.py) driven by the shared loop in
algorithms/run/loop.py."""

from __future__ import annotations

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano
import theano.tensor as T

from algorithms.run.contract import Runtime
from algorithms.spec.weights import initial_weights
from algorithms.run.loop import train_by_hand
from lasagne_wrapper.model import build_model
from lasagne_wrapper.trainer import build_trainer, cross_entropy


def describe_runtime() -> Runtime:
    versions = {"lasagne": lasagne.__version__, "theano-pymc": theano.__version__, "numpy": np.__version__}
    return Runtime("lasagne", "theano", versions, theano_backend.describe_theano())


def records(config) -> bool:
    """One process: it records."""
    return True


def train(session):
    session.execution_note = "graph: one compiled theano.function per train step"
    return train_by_hand(build_trainer(session.config), session)


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Lasagne's own cross-entropy and the logits of the shared initial weights, dropout off."""
    images_var, labels_var = T.tensor4("images"), T.ivector("labels")
    output = build_model(network, initial_weights(network, seed), input_var=images_var)
    logits = lasagne.layers.get_output(output, deterministic=True)
    evaluate = theano.function([images_var, labels_var], [cross_entropy(logits, labels_var), logits])
    loss, logits_value = evaluate(np.ascontiguousarray(images[:, None], dtype=np.float32), labels.astype(np.int32))
    return float(loss), np.asarray(logits_value)
