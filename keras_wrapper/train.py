"""Keras training: the KerasTrainer (trainer.py) driven an epoch at a time by
algorithms/run/loop.py's train_by_epochs."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.contract.types import Device, Runtime
from algorithms.run.loop import train_by_epochs
from keras_wrapper.trainer import build_trainer


def describe_runtime() -> Runtime:
    backend = keras.backend.backend()
    backend_version, devices = compat.describe_backend()
    versions = {"keras": keras.__version__, backend: backend_version, "numpy": np.__version__}
    versions.update(compat.library_versions())
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
