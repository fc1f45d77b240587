"""Caffe training: the CaffeTrainer (trainer.py) driven by the shared loop in
algorithms/run/loop.py.

The run's train/deploy/solver prototxt and the trained .caffemodel are written to
`<results_dir>/caffe/<run_id>/`, so they can be read and run with Caffe's tools.
"""

from __future__ import annotations

import os


import caffe
import numpy as np

from algorithms.contract.types import Device, Runtime
from algorithms.machine.devices import cpu_name
from algorithms.run.loop import train_by_hand
from backends import openblas
from caffe_wrapper.trainer import build_trainer


def describe_runtime() -> Runtime:
    versions = {"caffe": f"{caffe.__version__} (built from the brocolli-caffe 9.0.2 sdist)", "numpy": np.__version__}
    device = Device("cpu", "cpu", f"{cpu_name()} (caffe.set_mode_cpu, {openblas.kernels()})")
    return Runtime("caffe", "caffe", versions, f"cpu (caffe.set_mode_cpu); {openblas.describe()}", device)


def records(config) -> bool:
    """One process: it records."""
    return True


def train(session):
    config = session.config
    directory = os.path.join(config.results_dir, "caffe", session.run_id)
    trainer = build_trainer(
        config, directory, session.checkpoint_root if config.checkpoint_every or config.resume else ""
    )
    session.execution_note, session.precision_note = describe_modes(config, trainer)
    summary = train_by_hand(trainer, session)
    trainer.solver.net.save(os.path.join(directory, "trained.caffemodel"))
    return summary


def describe_modes(config, trainer) -> tuple:
    """(execution, precision) as the solver runs them, for results.log: graph-only, float32."""
    return "graph: the prototxt Net, stepped by Caffe's own solver", "fp32: float32 weights and compute"
