"""The benchmark's TensorFlow side (algorithms/run/probe.py): a minimal native
tf.function + GradientTape loop on the same model, weights and batches as
tensorflow_script.py, the wrapper's own step as the harness, tf.linalg.matmul for
the GEMM peak and XLA (jit_compile) beside graph mode."""

from __future__ import annotations

from dataclasses import replace

import tensorflow as tf

from algorithms.network.dropout import uniforms
from algorithms.network.weights import initial_weights
from algorithms.run.timing import NativeLoop, compiled_pair_ms, hand_step_harness
from algorithms.session.run_session import RunSession
from backends.tensorflow_backend import device_memory_mb  # noqa: F401  (contract.NativeModule, shared with Keras)
from backends.tensorflow_backend import set_threads
from tensorflow_wrapper.model import build_model, make_optimizer
from tensorflow_wrapper.train import describe_runtime
from tensorflow_wrapper.trainer import COMPUTE_DTYPES, build_trainer

STEPS_PER_CALL = 1


def apply_threads(config) -> str:
    return set_threads(config.threads)


class Native(NativeLoop):
    """One tf.function step (tape, mean cross-entropy, apply); the loss stays a tensor. With
    --precision bf16 / fp16 the model computes in that dtype from float32 variables, and fp16
    scales the loss (LossScaleOptimizer), as the trainer does."""

    def __init__(self, config, dataset, schedule, jit_compile: bool = False):
        tf.random.set_seed(config.seed)
        weights = initial_weights(config.network, config.seed)
        self.model = build_model(config.network, weights, config.seed, compute_dtype=COMPUTE_DTYPES[config.precision])
        self.variables = self.model.weights_in_order
        self.optimizer = make_optimizer(config.optimizer)
        self.loss_scaled = config.precision == "fp16"
        if self.loss_scaled:
            self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(self.optimizer)
        self.optimizer.build(self.variables)
        self.step = tf.function(self._step, jit_compile=jit_compile)
        self.batches = {
            id(parts): (
                tf.constant(dataset.train_x[parts[0]]),
                tf.constant(dataset.train_y[parts[0]]),
                tuple(tf.constant(u) for u in uniforms(config.network, config.seed, epoch, parts[0])),
            )
            for epoch, parts in schedule
        }
        self.losses: list = []

    def _step(self, images, labels, uniforms):
        with tf.GradientTape() as tape:
            logits = self.model(images, True, uniforms)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, self.variables), self.variables))
        return loss

    def native_step(self, batch):
        return self.step(*batch)


Harness = hand_step_harness(build_trainer)


def gemm(n: int, precision: str = "fp32"):
    """One n x n matmul through tf.linalg.matmul, its operands in `precision`, as a call that
    returns once it is done."""
    a, b = (tf.cast(tf.random.uniform([n, n]), COMPUTE_DTYPES[precision]) for _ in range(2))
    return lambda: tf.linalg.matmul(a, b).numpy()


def compiled_ms(config, dataset, schedule, block: int) -> dict:
    """XLA beside graph mode: the native loop and tensorflow_script.py --compile."""
    native = Native(config, dataset, schedule, jit_compile=True)
    harness = Harness(replace(config, compile=True), RunSession(config, dataset, describe_runtime()))
    return compiled_pair_ms(native, harness, schedule, block, "XLA")


def profile_ops(config, dataset, schedule, warmup: int) -> tuple:
    """tf.profiler over the native loop: each TF op's (kernel's) self time on the
    host's threads, named with its input shapes and layout from the step's graph."""
    import tempfile

    from backends.xplane import graph_input_shapes, op_label, tf_op_times

    native = Native(config, dataset, schedule)
    native.run(schedule[:warmup])
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        native.run(schedule[warmup:])
        tf.profiler.experimental.stop()
        times = tf_op_times(logdir)
    batch = native.batches[id(schedule[warmup][1])]  # images, labels, uniforms
    graph = native.step.get_concrete_function(*batch).graph
    shapes = graph_input_shapes(graph)
    return "tf.profiler (XSpace, host op self time)", [(op_label(name, shapes), ms) for name, ms in times.items()]
