"""The benchmark's Keras side (algorithms/run/probe.py), on whichever backend Keras
loaded: Keras's own loop (model.fit, no callback) against keras_script.py's fit
with its per-step StepRecorder, on the same compiled model, weights and batches;
the backend's matmul for the GEMM peak."""

from __future__ import annotations

import time

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import numpy as np

from algorithms.network.dropout import uniforms
from algorithms.tables import shape_text
from keras_wrapper.trainer import StepRecorder, fit_inputs, make_model


def apply_threads(config) -> str:
    return compat.set_threads(config.threads)


STEPS_PER_CALL = 4  # keras_script.py calls fit once an epoch: a timed block's fit setup is spread over 4 steps


class _FitBlocks:
    """A block of steps is one model.fit call over their batches (as keras_script.py
    calls it once per epoch), with their rows' dropout uniforms (each step's from its own
    epoch, as the run draws them); per-step time is the call's time / steps."""

    def __init__(self, config, dataset, callbacks_for):
        self.config, self.dataset = config, dataset
        self.model = make_model(config.network, config.optimizer, config.seed, precision=config.precision).training
        self.callbacks_for = callbacks_for

    def run(self, steps: list) -> list:
        config = self.config
        batches = [(epoch, part) for epoch, parts in steps for part in parts]
        order = np.concatenate([part for _, part in batches])
        drawn = [uniforms(config.network, config.seed, epoch, part) for epoch, part in batches]
        x = fit_inputs(self.dataset.train_x[order], tuple(np.concatenate(layer) for layer in zip(*drawn)))
        callbacks = self.callbacks_for(steps[0][0], [len(part) for _, part in batches])
        start = time.perf_counter()
        self.model.fit(
            x,
            self.dataset.train_y[order],
            batch_size=config.batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=callbacks,
        )
        return [(time.perf_counter() - start) * 1000.0 / len(steps)] * len(steps)


class Native(_FitBlocks):
    def __init__(self, config, dataset, schedule):
        super().__init__(config, dataset, lambda epoch, sizes: [])


class Harness(_FitBlocks):
    def __init__(self, config, session):
        self.outside_step_ms: list = []  # fit's callback runs inside the timed call: nothing outside it
        self.call_overhead_ms: list = []  # each fit call's time before its first step and after its last
        self.recorder = StepRecorder(session)
        super().__init__(config, session.dataset, self._recorder)

    def plan(self, schedule: list) -> None:
        """model.fit takes each block's batches at once: nothing to gather ahead."""

    def run(self, steps: list) -> list:
        times = super().run(steps)
        span_ms = (self.recorder.last_end - self.recorder.first_begin) * 1000.0
        self.call_overhead_ms.append(max(0.0, sum(times) - span_ms))
        return times

    def _recorder(self, epoch, sizes):
        self.recorder.epoch, self.recorder.batch_sizes = epoch, sizes
        self.recorder._previous_end = None  # the native block ran in between: not this loop's data time
        self.recorder.first_begin = None
        return [self.recorder]


GEMM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def gemm(n: int, precision: str = "fp32"):
    """One n x n matmul through keras.ops.matmul (the backend's own), its operands in
    `precision`, as a call that returns once it is done; Keras 2 on Theano: fp32 only."""
    import keras

    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    if compat.KERAS_2:
        if precision != "fp32":
            raise ValueError(f"Keras 2 on Theano trains in fp32 only, not {precision}")
        backend = keras.backend
        x, y = backend.placeholder((None, None)), backend.placeholder((None, None))
        function = backend.function([x, y], [backend.dot(x, y)])
        return lambda: function([a, b])
    # device-resident: time the product, not the copy
    a, b = (keras.ops.convert_to_tensor(operand, dtype=GEMM_DTYPES[precision]) for operand in (a, b))

    def matmul():
        product = keras.ops.matmul(a, b)
        return product.block_until_ready() if hasattr(product, "block_until_ready") else keras.ops.sum(product[0, :1])

    return matmul


def compiled_ms(config, dataset, schedule, block: int) -> dict:
    """Keras has no compiler switch here: jax always jits, tensorflow runs graph mode."""
    return {}


def profile_ops(config, dataset, schedule, warmup: int) -> tuple:
    """The backend's own profiler over Keras's loop (model.fit): each op's self time."""
    if compat.BACKEND == "theano":
        return _theano_profile(config, dataset, schedule, warmup)
    native = Native(config, dataset, schedule)
    native.run(schedule[:warmup])
    if compat.BACKEND == "torch":
        from backends.torch_backend import profiled_ops

        return "torch.profiler (self CPU time)", profiled_ops(lambda: native.run(schedule[warmup:]))
    import tempfile

    with tempfile.TemporaryDirectory() as logdir:
        if compat.BACKEND == "jax":
            import jax

            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0
            jax.profiler.start_trace(logdir, profiler_options=options)
            native.run(schedule[warmup:])
            jax.profiler.stop_trace()
            return "jax.profiler (XSpace, XLA thunk self time)", list(_jax_op_times(logdir).items())
        import tensorflow as tf

        from backends.xplane import op_label, tf_op_times

        tf.profiler.experimental.start(logdir)
        native.run(schedule[warmup:])
        tf.profiler.experimental.stop()
        return "tf.profiler (XSpace, host op self time)", [
            (op_label(name, {}), ms) for name, ms in tf_op_times(logdir).items()
        ]


def _jax_op_times(logdir: str) -> dict:
    """{"hlo_module hlo_op": self ms}: the XLA CPU thunks (a fusion, convolution, copy)
    on the host plane's threads, read by jax's own XSpace reader."""
    from jax.profiler import ProfileData

    from backends.xplane import newest_xspace, self_times  # plain Python: imports no TensorFlow

    lines = []
    for plane in ProfileData.from_file(newest_xspace(logdir)).planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                events = []
                for event in line.events:
                    stats = dict(event.stats)
                    if "hlo_op" in stats:
                        events.append(
                            (
                                f"{stats.get('hlo_module', '')} {stats['hlo_op']}",
                                int(event.start_ns * 1000),
                                int(event.duration_ns * 1000),
                            )
                        )
                lines.append(events)
    hlo = _optimized_hlo()
    return {
        f"{name} {hlo.get(tuple(name.split(' ', 1)), '')}".rstrip(): ms
        for name, ms in self_times(lines, lambda name: True).items()
    }


def _optimized_hlo() -> dict:
    """{(module, instruction): "f32[shape] jax op"} from the optimized HLO XLA wrote where
    the probe's --xla_dump_to points: what a fusion computes (its result and the jax
    operation it came from, e.g. transpose(jvp(conv2d_1))/conv_general_dilated: a
    kernel gradient)."""
    import glob
    import os
    import re

    found = re.search(r"--xla_dump_to=(\S+)", os.environ.get("XLA_FLAGS", ""))
    labels = {}
    for path in glob.glob(os.path.join(found.group(1), "*.cpu_after_optimizations.txt")) if found else []:
        module = os.path.basename(path).split(".")[1]
        with open(path) as handle:
            for line in handle:
                match = re.match(r'\s*(?:ROOT )?%(\S+) = (\w+\[[\d,]*\]).*op_name="([^"]+)"', line)
                if match:
                    labels[(module, match.group(1))] = f"{match.group(2)} {match.group(3)}"
    return labels


def _theano_profile(config, dataset, schedule, warmup: int) -> tuple:
    """Theano's ProfileStats of the compiled train function: each Apply node's time,
    summed per Op and input shapes (the profile starts after the warm-up steps)."""
    import collections

    import theano
    from theano.compile import profiling

    # before the train function compiles (at the first fit); profile_memory records the
    # shapes, on the Python stack VM (each node's own time is still its thunk's alone)
    theano.config.profile = theano.config.profile_memory = True
    registered = len(profiling._atexit_print_list)
    native = Native(config, dataset, schedule)
    native.run(schedule[:warmup])
    stats = native.model.train_function.function.profile
    stats.reset()
    native.run(schedule[warmup:])
    del profiling._atexit_print_list[registered:]  # no report at exit (its merge fails here)
    totals = collections.Counter()
    for (_, node), seconds in stats.apply_time.items():
        shapes = shape_text(map(stats.variable_shape.get, node.inputs))
        totals[f"{node.op} {shapes}".rstrip()] += seconds * 1000.0
    return "theano ProfileStats (per-Apply time)", list(totals.items())


def device_memory_mb():
    """--batch_size auto on a GPU: the backend's own peak-allocated counter (and, where
    it says, the memory it may still take); None on the CPU and on Theano."""
    if compat.BACKEND == "torch":
        from backends.torch_backend import device_memory_mb as torch_memory_mb

        return torch_memory_mb()
    if compat.BACKEND == "jax":
        import jax

        device = jax.devices()[0]
        stats = device.memory_stats() if device.platform != "cpu" else None
        if not stats:
            return None
        limit = stats.get("bytes_limit")  # what jax's allocator may hold on this GPU
        return {"peak_mb": stats["peak_bytes_in_use"] / 2**20, "free_mb": None if limit is None else limit / 2**20}
    if compat.BACKEND == "tensorflow":
        from backends.tensorflow_backend import device_memory_mb as tensorflow_memory_mb

        return tensorflow_memory_mb()
    return None
