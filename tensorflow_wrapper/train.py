"""Raw TensorFlow 2 training: the trainer for the run's strategy (trainer.py), driven
by the shared loop in algorithms/run/loop.py; --strategy ps's pool (ps.py), by the
shared asynchronous loop in algorithms/run/updates.py. With TF_CONFIG, one process per
worker (MultiWorkerMirroredStrategy); the chief records the run."""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras optimizers must run on TensorFlow here

import numpy as np
import tensorflow as tf

from algorithms.contract.types import Device, Runtime
from algorithms.session.faults import install_signal_handlers
from algorithms.run.loop import train_by_hand
from algorithms.run.updates import train_by_updates
from backends.tensorflow_backend import describe_device, library_versions
from tensorflow_wrapper.devices import describe_devices, is_chief, signal_of_any_worker, tf_config
from tensorflow_wrapper.ps import ParameterServerPool
from tensorflow_wrapper.trainer import build_trainer


def describe_runtime() -> Runtime:
    versions = {"tensorflow": tf.__version__, "numpy": np.__version__, **library_versions()}
    return Runtime("tensorflow", "tensorflow", versions, describe_devices(), Device(*describe_device()))


def records(config) -> bool:
    """In a multi-worker data-parallel run (TF_CONFIG) only the chief records; every
    worker trains. In a ps run only the chief (the coordinator) gets here."""
    return config.strategy != "data" or is_chief(tf_config())


def train(session):
    if session.config.strategy == "ps":  # the chief schedules; the workers update (ps.py)
        return train_by_updates(ParameterServerPool(session.config, session.dataset), session)
    trainer = build_trainer(session.config)
    session.execution_note, session.precision_note = describe_modes(session.config, trainer)
    if tf_config():  # workers in separate processes: a signal to any stops all after the same step
        install_signal_handlers()  # again: the strategy's coordination service took SIGTERM (preemption notices)
        session.signal_of_any_process = signal_of_any_worker(trainer.strategy)
    return train_by_hand(trainer, session)


def describe_modes(config, trainer) -> tuple:
    """(execution, precision) as the trainer runs them (as `config` asks), for results.log."""
    execution = {
        "eager": "eager: the step's ops run one by one from Python (no tf.function)",
        "compiled": "compiled: tf.function(jit_compile=True), the step compiled by XLA",
    }.get(config.execution, "graph: tf.function, the step traced once into a TensorFlow graph (the default)")
    precision = {
        "fp32": "fp32: float32 weights and compute",
        "bf16": "bf16: float32 variables cast to bfloat16 where used (a mixed_bfloat16 policy), float32 "
        "logits and loss",
        "fp16": "fp16: float32 variables cast to float16 where used (a mixed_float16 policy), float32 logits "
        "and loss, tf.keras.mixed_precision.LossScaleOptimizer dynamic loss scale (the CSV's loss_scale column)",
    }[config.precision]
    return execution, precision
