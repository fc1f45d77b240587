"""Lasagne training: the LasagneTrainer (trainer.py) driven by the shared loop in
algorithms/run/loop.py."""

from __future__ import annotations

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne
import numpy as np
import theano

from algorithms.contract.types import Device, Runtime
from algorithms.run.loop import train_by_hand
from lasagne_wrapper.trainer import build_trainer


def describe_runtime() -> Runtime:
    versions = {"lasagne": lasagne.__version__, "theano-pymc": theano.__version__, "numpy": np.__version__}
    device = Device("cpu", "cpu", theano_backend.device_detail())
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
