"""The benchmark's Lasagne side (algorithms/run/probe.py, legacy env): the compiled
Theano train function called directly on pre-converted arrays (Lasagne's native
loop) against the wrapper's step through algorithms/run/loop.py, on the same weights
and batches; a compiled T.dot for the GEMM peak."""

from __future__ import annotations

import os
import warnings

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import numpy as np
import theano
import theano.tensor as T

from algorithms.run.timing import NativeLoop, hand_step_harness
from algorithms.network.dropout import uniforms
from algorithms.tables import shape_text
from lasagne_wrapper.trainer import build_trainer

STEPS_PER_CALL = 1


def apply_threads(config) -> str:
    return (
        f"Theano OpenMP/OpenBLAS from the environment (openmp={theano.config.openmp}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})"
    )


class Native(NativeLoop):
    def __init__(self, config, dataset, schedule):
        self.trainer = build_trainer(config)
        self.batches = {
            id(parts): self.trainer.to_batch(
                dataset.train_x[parts[0]],
                dataset.train_y[parts[0]],
                uniforms(config.network, config.seed, epoch, parts[0]),
            )
            for epoch, parts in schedule
        }
        self.losses: list = []

    def native_step(self, batch):
        images, labels, uniforms = batch
        return self.trainer._train(images, labels, *uniforms)[0]


Harness = hand_step_harness(build_trainer)


def gemm(n: int, precision: str = "fp32"):
    """One n x n fp32 matmul through Theano's BLAS (compiled once), as a call; Lasagne trains in fp32 only."""
    if precision != "fp32":
        raise ValueError(f"Lasagne trains in fp32 only, not {precision}")
    a, b = T.matrix("a"), T.matrix("b")
    matmul = theano.function([a, b], T.dot(a, b))
    x, y = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    return lambda: matmul(x, y)


def compiled_ms(config, dataset, schedule, block: int) -> dict:
    """Theano always compiles its functions: there is no second path to compare."""
    return {}


def profile_ops(config, dataset, schedule, warmup: int) -> tuple:
    """Theano's profiler (config.profile) over the native loop: each Apply node's
    thunk time, named by its op and its input -> output shapes. profile_memory records
    the shapes; it runs the graph on the Python Stack VM instead of the C loop (the
    thunks are the same C code; the VM's own time is its own entry)."""
    theano.config.profile, theano.config.profile_memory = True, True  # read when theano.function compiles
    warnings.filterwarnings("ignore", "CVM does not support memory profile")  # the Stack VM is meant
    try:
        native = Native(config, dataset, schedule)
        native.run(schedule[:warmup])
        stats = native.trainer._train.profile
        stats.reset()
        native.run(schedule[warmup:])
        shapes = stats.variable_shape  # as profile_memory recorded them
        ops = [
            (
                f"{node.op} {shape_text(map(shapes.get, node.inputs))} -> {shape_text(map(shapes.get, node.outputs))}",
                seconds * 1000.0,
            )
            for (_, node), seconds in stats.apply_time.items()
            if seconds > 0
        ]
        outside = stats.fct_call_time - sum(stats.apply_time.values())  # the VM's loop, argument checks
        return "Theano ProfileStats (thunk time per Apply node)", ops + [
            ("(Theano VM, outside the thunks)", outside * 1000.0)
        ]
    finally:
        theano.config.profile, theano.config.profile_memory = False, False  # no summary printed at exit


def device_memory_mb():
    """Runs on the CPU here: the finder reads the trial's peak RSS."""
    return None
