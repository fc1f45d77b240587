"""Caffe training: the spec's prototxt trained by Caffe's own solver
(caffe.get_solver), one `solver.step(1)` per batch of the shared batch order.

The run's train/deploy/solver prototxt and the trained .caffemodel are written to
`<results_dir>/caffe/<run_id>/`, so they can be read and run with Caffe's tools.
"""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("GLOG_minloglevel", "2")  # Caffe logs every layer setup otherwise

import caffe
import numpy as np
from caffe.proto import caffe_pb2

from algorithms.init import initial_weights, to_channels_first
from algorithms.loop import train_by_hand
from caffe_wrapper.prototxt import LOGITS, layer_names, net_parameter, solver_parameter, write_prototxt


def describe_runtime():
    versions = {"caffe": f"{caffe.__version__} (built from the brocolli-caffe 9.0.2 sdist)", "numpy": np.__version__}
    return "caffe", "caffe", versions, "cpu (caffe.set_mode_cpu, OpenBLAS)"


def write_definitions(network, optimizer, batch_size: int, seed: int, directory: str,
                      snapshot_prefix: str = "") -> dict:
    os.makedirs(directory, exist_ok=True)
    paths = {name: os.path.join(directory, f"{name}.prototxt") for name in ("train", "deploy", "solver")}
    write_prototxt(net_parameter(network, batch_size, deploy=False), paths["train"])
    write_prototxt(net_parameter(network, batch_size, deploy=True), paths["deploy"])
    write_prototxt(solver_parameter(optimizer, paths["train"], seed, snapshot_prefix), paths["solver"])
    return paths


def load_weights(net, network, seed: int) -> None:
    """The shared numpy init, channels-first (OIHW kernels, (out, in) inner products)."""
    names = layer_names(network)
    for weights in to_channels_first(network, initial_weights(network, seed)):
        params = net.params[names[weights.layer_index]]
        params[0].data[...] = weights.kernel
        params[1].data[...] = weights.bias


def _feed(net, images: np.ndarray, labels=None) -> None:
    if net.blobs["data"].data.shape[0] != len(images):  # the last, smaller batch
        net.blobs["data"].reshape(len(images), *net.blobs["data"].data.shape[1:])
        if labels is not None:
            net.blobs["label"].reshape(len(images))
        net.reshape()
    net.blobs["data"].data[...] = images[:, None]
    if labels is not None:
        net.blobs["label"].data[...] = labels


class CaffeTrainer:
    def __init__(self, network, optimizer, seed: int, batch_size: int, directory: str, checkpoint_root: str = ""):
        caffe.set_mode_cpu()
        caffe.set_random_seed(seed)  # dropout masks
        self.snapshot_prefix = os.path.join(checkpoint_root, "caffe") if checkpoint_root else ""
        self.paths = write_definitions(network, optimizer, batch_size, seed, directory, self.snapshot_prefix)
        self.solver = caffe.get_solver(self.paths["solver"])
        load_weights(self.solver.net, network, seed)
        self.deploy = caffe.Net(self.paths["deploy"], caffe.TEST)
        self.deploy.share_with(self.solver.net)  # same weight blobs, no copy

    def to_batch(self, images, labels):
        _feed(self.solver.net, images, labels)  # copying into the input blobs is Caffe's data loading
        return len(images)

    def train_step(self, batch):
        self.solver.step(1)
        blobs = self.solver.net.blobs
        return float(blobs["loss"].data), float(blobs["accuracy"].data)

    def save_checkpoint(self, folder: str) -> None:
        """Caffe's own snapshot (.caffemodel weights + .solverstate optimizer history),
        moved into `folder`; the solverstate is pointed at the moved weights."""
        self.solver.snapshot()
        written = f"{self.snapshot_prefix}_iter_{self.solver.iter}"
        weights = os.path.join(folder, "snapshot.caffemodel")
        os.replace(written + ".caffemodel", weights)
        state = caffe_pb2.SolverState()
        with open(written + ".solverstate", "rb") as handle:
            state.ParseFromString(handle.read())
        os.remove(written + ".solverstate")
        state.learned_net = weights
        with open(os.path.join(folder, "snapshot.solverstate"), "wb") as handle:
            handle.write(state.SerializeToString())

    def load_checkpoint(self, folder: str) -> None:
        self.solver.restore(os.path.join(folder, "snapshot.solverstate"))  # weights, history, iteration

    def logits(self, images):
        _feed(self.deploy, images)
        return self.deploy.forward()[LOGITS].copy()


def train(session):
    config = session.config
    directory = os.path.join(config.results_dir, "caffe", session.run_id)
    trainer = CaffeTrainer(config.network, config.optimizer, config.seed, config.batch_size, directory,
                           session.checkpoint_root if config.checkpoint_every or config.resume else "")
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
    _feed(net, images, labels)
    outputs = net.forward()
    return float(outputs["loss"]), net.blobs[LOGITS].data.copy()
