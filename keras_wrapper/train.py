"""Keras training: the KerasTrainer (trainer.py) driven an epoch at a time by
algorithms/run/loop.py's train_by_epochs."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.run.contract import Runtime
from algorithms.run.loop import train_by_epochs
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
    trainer = build_trainer(session.config)
    session.execution_note, session.precision_note = describe_modes(trainer.model, session.config.precision)
    return train_by_epochs(trainer, session)


def describe_modes(model, precision: str) -> tuple:
    """(execution, precision) as model.compile resolved them, for results.log."""
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
    """Keras's own loss (model.evaluate, dropout off) and logits of the shared initial weights."""
    model = make_model(network, network.training.optimizer, seed)
    loss = compat.evaluate_loss(model, images[..., None], labels, batch_size=len(images))
    logits = np.asarray(model.predict(images[..., None], batch_size=len(images), verbose=0))
    return loss, logits
