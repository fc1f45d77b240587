"""Caffe training: the CaffeTrainer (trainer.py) driven by the shared loop in
algorithms/run/loop.py.

The run's train/deploy/solver prototxt and the trained .caffemodel are written to
`<results_dir>/caffe/<run_id>/`, so they can be read and run with Caffe's tools.
"""

from __future__ import annotations

import os
import tempfile


import caffe
import numpy as np

from algorithms.run.contract import Runtime
from algorithms.run.loop import train_by_hand
from caffe_wrapper.model import LOGITS
from caffe_wrapper.trainer import build_trainer, feed, load_weights, write_definitions


def describe_runtime() -> Runtime:
    versions = {"caffe": f"{caffe.__version__} (built from the brocolli-caffe 9.0.2 sdist)", "numpy": np.__version__}
    return Runtime("caffe", "caffe", versions, "cpu (caffe.set_mode_cpu, OpenBLAS)")


def records(config) -> bool:
    """One process: it records."""
    return True


def train(session):
    config = session.config
    session.execution_note = "graph: the prototxt Net, stepped by Caffe's own solver"
    directory = os.path.join(config.results_dir, "caffe", session.run_id)
    trainer = build_trainer(
        config, directory, session.checkpoint_root if config.checkpoint_every or config.resume else ""
    )
    summary = train_by_hand(trainer, session)
    trainer.solver.net.save(os.path.join(directory, "trained.caffemodel"))
    return summary


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Caffe's own SoftmaxWithLoss and logits of the shared initial weights (TEST phase: dropout off)."""
    caffe.set_mode_cpu()
    with tempfile.TemporaryDirectory() as directory:
        paths = write_definitions(network, network.training.optimizer, len(images), seed, directory)
        net = caffe.Net(paths["train"], caffe.TEST)
    load_weights(net, network, seed)
    feed(net, images, labels)
    outputs = net.forward()
    return float(outputs["loss"]), net.blobs[LOGITS].data.copy()
