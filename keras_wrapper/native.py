"""The benchmark's Keras side (algorithms/probe.py), on whichever backend Keras
loaded: Keras's own loop (model.fit, no callback) against keras_script.py's fit
with its per-step StepRecorder, on the same compiled model, weights and batches;
the backend's matmul for the GEMM peak."""
from __future__ import annotations

import time

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import numpy as np

from algorithms.probe import scratch_session
from keras_wrapper.train import StepRecorder, describe_runtime, make_model


def apply_threads(config) -> str:
    compat.set_threads(config.threads)
    return f"keras backend {compat.BACKEND}: threads {config.threads} (compat.set_threads)"


def make_session(config, dataset):
    return scratch_session(config, dataset, *describe_runtime())


class _FitBlocks:
    """A block of steps is one model.fit call over their batches (as keras_script.py
    calls it once per epoch); per-step time is the call's time / steps."""

    def __init__(self, config, dataset, callbacks_for):
        self.config, self.dataset = config, dataset
        self.model = make_model(config.network, config.optimizer, config.seed)
        self.callbacks_for = callbacks_for

    def run(self, steps: list) -> list:
        batches = [part for _, parts in steps for part in parts]
        order = np.concatenate(batches)
        images, labels = self.dataset.train_x[order][..., None], self.dataset.train_y[order]
        callbacks = self.callbacks_for(steps[0][0], [len(b) for b in batches])
        start = time.perf_counter()
        self.model.fit(images, labels, batch_size=self.config.batch_size, epochs=1, shuffle=False, verbose=0,
                       callbacks=callbacks)
        return [(time.perf_counter() - start) * 1000.0 / len(steps)] * len(steps)


class Native(_FitBlocks):
    def __init__(self, config, dataset, schedule):
        super().__init__(config, dataset, lambda epoch, sizes: [])


class Harness(_FitBlocks):
    def __init__(self, config, session):
        self.recorder = StepRecorder(session)
        super().__init__(config, session.dataset, self._recorder)

    def _recorder(self, epoch, sizes):
        self.recorder.epoch, self.recorder.batch_sizes = epoch, sizes
        self.recorder._previous_end = None  # the native block ran in between: not this loop's data time
        return [self.recorder]


def gemm_seconds(n: int, reps: int) -> float:
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    matmul = _backend_matmul()
    matmul(a, b)
    start = time.perf_counter()
    for _ in range(reps):
        matmul(a, b)
    return (time.perf_counter() - start) / reps


def _backend_matmul():
    """A matmul through the backend's own BLAS that returns once it is done."""
    import keras
    if compat.KERAS_2:
        backend = keras.backend
        a, b = backend.placeholder((None, None)), backend.placeholder((None, None))
        function = backend.function([a, b], [backend.dot(a, b)])
        return lambda x, y: function([x, y])
    tensors = {}

    def matmul(x, y):
        if "a" not in tensors:  # device-resident inputs: time the product, not the copy
            tensors["a"], tensors["b"] = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
        product = keras.ops.matmul(tensors["a"], tensors["b"])
        return product.block_until_ready() if hasattr(product, "block_until_ready") else keras.ops.sum(product[0, :1])
    return matmul
