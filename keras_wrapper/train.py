"""Keras training: the KerasTrainer (trainer.py) driven an epoch at a time by
algorithms/loop.py's train_by_epochs."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.contract import Runtime
from algorithms.loop import train_by_epochs
from keras_wrapper.trainer import build_trainer, make_model


def describe_runtime() -> Runtime:
    backend = keras.backend.backend()
    backend_version, devices = compat.describe_backend()
    return Runtime(
        "keras", backend, {"keras": keras.__version__, backend: backend_version, "numpy": np.__version__}, devices
    )


def records(config) -> bool:
    """One process: it records."""
    return True


def train(session):
    return train_by_epochs(build_trainer(session.config), session)


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Keras's own loss (model.evaluate, dropout off) and logits of the shared initial weights."""
    model = make_model(network, network.training.optimizer, seed)
    loss = compat.evaluate_loss(model, images[..., None], labels, batch_size=len(images))
    logits = np.asarray(model.predict(images[..., None], batch_size=len(images), verbose=0))
    return loss, logits
