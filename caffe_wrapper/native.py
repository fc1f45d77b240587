"""The benchmark's Caffe side (algorithms/probe.py): Caffe's native loop (copy the
batch into the input blobs, solver.step(1)) against the wrapper's step through
algorithms/loop.py, on the same prototxt, weights and batches; an InnerProduct
layer's forward (Caffe's own sgemm) for the GEMM peak."""
from __future__ import annotations

import os
import tempfile
import time

from caffe_wrapper.train import CaffeTrainer, _feed, describe_runtime  # sets GLOG_minloglevel first

import caffe
import numpy as np

from algorithms.probe import HandStepHarness, scratch_session


def apply_threads(config) -> str:
    return f"Caffe's OpenBLAS from the environment (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')})"


def make_session(config, dataset):
    return scratch_session(config, dataset, *describe_runtime())


def _trainer(config) -> CaffeTrainer:
    directory = tempfile.mkdtemp(prefix="caffe-probe-")
    return CaffeTrainer(config.network, config.optimizer, config.seed, config.batch_size, directory)


class Native:
    def __init__(self, config, dataset, schedule):
        self.solver = _trainer(config).solver
        self.batches = {id(parts): (np.ascontiguousarray(dataset.train_x[parts[0]], np.float32),
                                    dataset.train_y[parts[0]].astype(np.float32))
                        for _, parts in schedule}
        self.losses: list = []

    def run(self, steps: list) -> list:
        times = []
        for _, parts in steps:
            images, labels = self.batches[id(parts)]
            start = time.perf_counter()
            _feed(self.solver.net, images, labels)
            self.solver.step(1)
            times.append((time.perf_counter() - start) * 1000.0)
        return times


class Harness(HandStepHarness):
    def __init__(self, config, session):
        super().__init__(_trainer(config), session)


GEMM_NET = """
layer {{ name: "a" type: "Input" top: "a" input_param {{ shape {{ dim: {n} dim: {n} }} }} }}
layer {{ name: "product" type: "InnerProduct" bottom: "a" top: "product"
        inner_product_param {{ num_output: {n} bias_term: false }} }}
"""


def gemm_seconds(n: int, reps: int) -> float:
    caffe.set_mode_cpu()
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as handle:
        handle.write(GEMM_NET.format(n=n))
    net = caffe.Net(handle.name, caffe.TEST)
    os.remove(handle.name)
    net.blobs["a"].data[...] = np.random.rand(n, n)
    net.params["product"][0].data[...] = np.random.rand(n, n)
    net.forward()
    start = time.perf_counter()
    for _ in range(reps):
        net.forward()
    return (time.perf_counter() - start) / reps
