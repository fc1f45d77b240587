"""Caffe's trainer (contract.Trainer): the spec's prototxt (model.py) trained by
Caffe's own solver (caffe.get_solver), one `solver.step(1)` per batch of the shared
batch order, its dropout uniforms copied into the train net's Input blobs with the
rows."""

from __future__ import annotations

import os
import tempfile


import caffe
import numpy as np
from caffe.proto import caffe_pb2

from algorithms.contract.types import StepResult
from algorithms.reference.train_state import StateNotHeld, TrainState, from_channels_first_state, from_update_units
from algorithms.network.weights import LayerWeights, initial_weights, to_channels_first
from algorithms.network.dropout import channels_first
from caffe_wrapper.model import (
    LOGITS,
    build_model,
    layer_names,
    solver_parameter,
    statistics_names,
    uniform_blob,
    write_prototxt,
)


def write_definitions(
    network, optimizer, batch_size: int, seed: int, directory: str, snapshot_prefix: str = ""
) -> dict:
    os.makedirs(directory, exist_ok=True)
    paths = {name: os.path.join(directory, f"{name}.prototxt") for name in ("train", "deploy", "solver")}
    write_prototxt(build_model(network, batch_size, deploy=False), paths["train"])
    write_prototxt(build_model(network, batch_size, deploy=True), paths["deploy"])
    write_prototxt(solver_parameter(optimizer, paths["train"], seed, snapshot_prefix), paths["solver"])
    return paths


def load_weights(net, network, weights: list) -> None:
    """Canonical weights (the shared numpy init), channels-first (OIHW kernels, (out, in)
    inner products; a BatchNormalization's gamma and beta in its Scale, its running
    statistics in its BatchNorm as Caffe keeps them: model.py)."""
    names, statistics = layer_names(network), statistics_names(network)
    for weights in to_channels_first(network, weights):
        params = net.params[names[weights.layer_index]]
        params[0].data[...] = weights.kernel
        params[1].data[...] = weights.bias
        if weights.layer_index in statistics:
            weight = np.float32(1.0 / (1.0 - network.layers[weights.layer_index].momentum))
            stored = net.params[statistics[weights.layer_index]]
            stored[0].data[...] = weights.running_mean * weight
            stored[1].data[...] = weights.running_var * weight
            stored[2].data[...] = weight


def reshape_inputs(net, batch_size: int) -> None:
    """Every Input blob of `net` (data, label, uniforms) to `batch_size` rows, then the
    net with them (every layer's top blobs reallocated)."""
    for name in net.inputs:
        blob = net.blobs[name]
        blob.reshape(batch_size, *blob.data.shape[1:])
    net.reshape()


def feed(net, images: np.ndarray, labels=None, uniforms=()) -> None:
    """Copy a batch into the net's input blobs (Caffe's data loading): the images, the
    labels and each Dropout layer's uniforms (channels-first, as to_batch makes them);
    the blobs reshaped for a batch of another size (the smaller last one)."""
    if net.blobs["data"].data.shape[0] != len(images):
        reshape_inputs(net, len(images))
    net.blobs["data"].data[...] = images[:, None] if images.ndim == 3 else images.transpose(0, 3, 1, 2)
    if labels is not None:
        net.blobs["label"].data[...] = labels
    for position, values in enumerate(uniforms):
        net.blobs[uniform_blob(position)].data[...] = values


class CaffeTrainer:
    """contract.Trainer on Caffe's own solver: one `solver.step(1)` per batch."""

    # its state is read from a snapshot on disk (train_state): the step check reads it at its
    # sampled steps only, not at every step for the update rule
    STATE_EACH_STEP = False

    def __init__(self, network, optimizer, seed: int, batch_size: int, directory: str, checkpoint_root: str = ""):
        caffe.set_mode_cpu()
        self.network = network
        # where solver.snapshot() writes: the checkpoints' folder, or else beside the prototxt (the
        # step check's train_state reads the optimizer's history from a snapshot)
        self.snapshot_prefix = (
            os.path.join(checkpoint_root or directory, "caffe") if checkpoint_root or directory else ""
        )
        paths = write_definitions(network, optimizer, batch_size, seed, directory, self.snapshot_prefix)
        self.solver = caffe.get_solver(paths["solver"])
        load_weights(self.solver.net, network, initial_weights(network, seed))
        self.deploy = caffe.Net(paths["deploy"], caffe.TEST)
        self.deploy.share_with(self.solver.net)  # same weight blobs, no copy
        self.base_lr, self.optimizer = optimizer.learning_rate, optimizer

    def to_batch(self, images, labels, uniforms):
        """The arrays Caffe's input blobs take: float32 images, float labels, the uniforms
        channels-first ((N, H, W, C) maps transposed to (N, C, H, W))."""
        uniforms = channels_first(self.network, uniforms)
        return np.ascontiguousarray(images, np.float32), labels.astype(np.float32), uniforms

    def step(self, batches: list) -> StepResult:
        ((images, labels, uniforms),) = batches  # one batch: Caffe does not declare --accumulate
        feed(self.solver.net, images, labels, uniforms)
        self.solver.step(1)
        blobs = self.solver.net.blobs
        return StepResult(float(blobs["loss"].data), float(blobs["accuracy"].data))

    def set_learning_rate(self, learning_rate: float) -> None:
        """Caffe's solver reads its base_lr from the solver prototxt and pycaffe cannot
        change it, which is why caffe_wrapper declares no lr-schedule flag: only the
        solver's own lr can be set (as after a --resume)."""
        if learning_rate != self.base_lr:
            raise ValueError(f"Caffe's solver runs at its fixed base_lr {self.base_lr:g}, not {learning_rate:g}")

    def prepare_batch(self, batch_size: int) -> None:
        """Caffe's blobs have a fixed batch: the train net's input blobs (data, label,
        uniforms) reshaped to the new one, and the net with them."""
        reshape_inputs(self.solver.net, batch_size)

    def logits(self, images):
        feed(self.deploy, images)
        return self.deploy.forward()[LOGITS].copy()

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

    def train_state(self) -> TrainState:
        """The net's weights and the solver's history in the spec's layout and convention
        (reference/train_state.py). pycaffe does not show the history, so it is read from a
        snapshot (written, read, removed): one blob per learnable blob of the net, in the
        net's order (twice that for Adam: the first moments, then the second). Caffe's
        history keeps the learning rate inside it (h = momentum * h + lr * g), so it is
        h / lr."""
        if not self.snapshot_prefix or not os.path.isdir(os.path.dirname(self.snapshot_prefix)):
            raise StateNotHeld("Caffe's solver has no snapshot folder in this process")
        self.solver.snapshot()
        written = f"{self.snapshot_prefix}_iter_{self.solver.iter}"
        state = caffe_pb2.SolverState()
        with open(written + ".solverstate", "rb") as handle:
            state.ParseFromString(handle.read())
        for suffix in (".solverstate", ".caffemodel"):
            os.remove(written + suffix)
        history = [np.array(blob.data, np.float64).reshape(tuple(blob.shape.dim)) for blob in state.history]
        net, network, spec = self.solver.net, self.network, self.optimizer
        blobs = [(name, position) for name, params in net.params.items() for position in range(len(params))]
        kinds = ("first", "second") if spec.name == "adam" else ("velocity",) if spec.momentum else ()
        if len(history) != len(kinds) * len(blobs):
            raise StateNotHeld(f"Caffe's snapshot holds {len(history)} history blobs for {len(blobs)} learnable blobs")
        slot_of = {blob: k for k, blob in enumerate(blobs)}
        names, statistics = layer_names(network), statistics_names(network)
        weights, slots = [], {}
        for index, _, _ in network.parametric_layers():
            params = net.params[names[index]]
            running = {}
            if index in statistics:
                stored = net.params[statistics[index]]
                weight = float(stored[2].data[0])
                running = dict(running_mean=stored[0].data / weight, running_var=stored[1].data / weight)
            weights.append(LayerWeights(index, params[0].data.copy(), params[1].data.copy(), **running))
            for role, position in (("kernel", 0), ("bias", 1)):
                k = slot_of[(names[index], position)]
                found = {name: history[part * len(blobs) + k] for part, name in enumerate(kinds)}
                if "velocity" in found:
                    found["velocity"] = from_update_units(found["velocity"], self.base_lr, sign=1.0)
                if found:
                    slots[(index, role)] = found
        adam = dict(adam_updates=int(self.solver.iter), adam_epsilon="raw") if spec.name == "adam" else {}
        return from_channels_first_state(network, weights, slots, **adam)


def build_trainer(config, directory: str = "", checkpoint_root: str = "") -> CaffeTrainer:
    """The solver for the config, its prototxt written to `directory`; without one (the
    benchmark's), to a scratch folder, gone once the solver has read it."""
    if directory:
        return CaffeTrainer(
            config.network, config.optimizer, config.seed, config.batch_size, directory, checkpoint_root
        )
    with tempfile.TemporaryDirectory(prefix="caffe-prototxt-") as scratch:
        return build_trainer(config, scratch, checkpoint_root)
