"""The benchmark's Caffe side (algorithms/run/probe.py): Caffe's native loop (copy the
batch into the input blobs, solver.step(1)) against the wrapper's step through
algorithms/run/loop.py, on the same prototxt, weights and batches; an InnerProduct
layer's forward (Caffe's own sgemm) for the GEMM peak."""

from __future__ import annotations

import os
import tempfile
import time

from caffe_wrapper.trainer import build_trainer, feed

import caffe
import numpy as np

from algorithms.run.timing import NativeLoop, hand_step_harness
from algorithms.network.dropout import uniforms
from algorithms.tables import shape_text

STEPS_PER_CALL = 1


def apply_threads(config) -> str:
    return (
        f"Caffe's threads from the environment: the convolution's batch loop on OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS')}, its other GEMMs on OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}"
    )


class Native(NativeLoop):
    def __init__(self, config, dataset, schedule):
        trainer = build_trainer(config)
        self.solver = trainer.solver
        self.batches = {  # as the trainer converts them: float32 images and labels, channels-first uniforms
            id(parts): trainer.to_batch(
                dataset.train_x[parts[0]],
                dataset.train_y[parts[0]],
                uniforms(config.network, config.seed, epoch, parts[0]),
            )
            for epoch, parts in schedule
        }
        self.losses: list = []  # None each: the loss stays in the net's blob

    def native_step(self, batch):
        feed(self.solver.net, *batch)
        self.solver.step(1)


Harness = hand_step_harness(build_trainer)


GEMM_NET = """
layer {{ name: "a" type: "Input" top: "a" input_param {{ shape {{ dim: {n} dim: {n} }} }} }}
layer {{ name: "product" type: "InnerProduct" bottom: "a" top: "product"
        inner_product_param {{ num_output: {n} bias_term: false }} }}
"""


def gemm(n: int, precision: str = "fp32"):
    """One n x n fp32 matmul through Caffe's BLAS (an InnerProduct net, built once), as a call;
    Caffe trains in fp32 only."""
    if precision != "fp32":
        raise ValueError(f"Caffe trains in fp32 only, not {precision}")
    caffe.set_mode_cpu()
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as handle:
        handle.write(GEMM_NET.format(n=n))
    net = caffe.Net(handle.name, caffe.TEST)
    os.remove(handle.name)
    net.blobs["a"].data[...] = np.random.rand(n, n)
    net.params["product"][0].data[...] = np.random.rand(n, n)
    return net.forward


def compiled_ms(config, dataset, schedule, block: int) -> dict:
    """Caffe has no compiler: one path."""
    return {}


def profile_ops(config, dataset, schedule, warmup: int) -> tuple:
    """Caffe's per-layer timing as `caffe time` does it (each layer's forward, then
    each backward in reverse, on the solver's net), then the step itself
    (solver.step(1), its forward and backward run again), of which only the update
    is recorded: from the solver's on_gradients_ready callback to the step's end."""
    native = Native(config, dataset, schedule)
    native.run(schedule[:warmup])
    net = native.solver.net
    totals: dict = {}

    def timed(name, call, *args):
        start = time.perf_counter()
        call(*args)
        totals[name] = totals.get(name, 0.0) + (time.perf_counter() - start) * 1000.0

    gradients_ready: list = []
    native.solver.add_callback(lambda: None, lambda: gradients_ready.append(time.perf_counter()))
    layers = list(zip(range(len(net.layers)), net._layer_names, net.layers))
    update_ms = 0.0
    for _, parts in schedule[warmup:]:
        timed("input feed (copy into the data, label and uniforms blobs)", feed, net, *native.batches[id(parts)])
        for index, name, layer in layers:
            tops = shape_text([net.blobs[top].data.shape for top in net.top_names[name]])
            timed(f"forward {name} ({layer.type}) top {tops}", net._forward, index, index)
        for index, name, layer in reversed(layers):
            timed(f"backward {name} ({layer.type})", net._backward, index, index)
        native.solver.step(1)
        update_ms += (time.perf_counter() - gradients_ready[-1]) * 1000.0
    update = (f"solver update ({type(native.solver).__name__}.ApplyUpdate)", update_ms)
    return "Caffe per-layer timing (as `caffe time`) + the solver's update", list(totals.items()) + [update]


def device_memory_mb():
    """Runs on the CPU here: the finder reads the trial's peak RSS."""
    return None
