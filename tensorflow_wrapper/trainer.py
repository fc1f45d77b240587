"""Raw TensorFlow 2 steps: tf.function + GradientTape, one contract.Trainer for every
strategy (`build_trainer`), so TensorFlow sees the same batches in the same order as
every other framework, whatever the strategy.

    single, model   one fused step (gradients + apply); model parallel only pins
                    layers to devices (model.py)
    tensor          the same fused step on a TensorParallelModel: each layer's
                    channels on their device, joined by concat (tensor_parallel.py)
    pipeline        model parallel's placement, each batch cut into micro-batches
                    inside the fused step: their gradients summed, then one apply
                    (GPipe); no micro-batch waits for another's backward, so
                    TensorFlow's executor can run the stages side by side
    data            per replica: gradients of its slice, loss scaled by the global
                    batch; then one timed all-reduce (the comm_time_ms column);
                    then the optimizer applies the summed gradients on every replica
    --accumulate K  gradients of K batches summed, then one apply (one all-reduce)
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras optimizers must run on TensorFlow here

import numpy as np
import tensorflow as tf

from algorithms.dataset.data import as_images
from algorithms.contract.types import StepResult
from algorithms.run.loop import step_on_zeros_then_restore
from algorithms.session.noise_scale import replica_gradient_norms
from algorithms.network.dropout import dropout_layers
from algorithms.reference.train_state import StateNotHeld, TrainState
from algorithms.network.weights import LayerWeights, initial_weights
from algorithms.network.parallel import split_ranges
from algorithms.session.clock import CommClock
from backends import keras_optimizer
from backends.tensorflow_backend import set_threads
from tensorflow_wrapper.devices import data_parallel_strategy, is_chief, local_devices, peers_checked, tf_config
from tensorflow_wrapper.model import build_model, make_optimizer
from tensorflow_wrapper.tensor_parallel import TensorParallelModel

COMPUTE_DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}
LABEL_SPEC = tf.TensorSpec([None], tf.int32)
ROWS_SPEC = tf.TensorSpec([], tf.int32)


def image_spec(network) -> tf.TensorSpec:
    """Any number of the spec's (H, W, C) images, float32."""
    return tf.TensorSpec([None, *network.input_shape], tf.float32)


def uniforms_spec(network) -> tuple:
    """Any number of rows' dropout uniforms: one float32 tensor per Dropout layer (network/dropout.py)."""
    return tuple(tf.TensorSpec([None, *shape], tf.float32) for _, _, shape in dropout_layers(network))


def traced(fn, **options):
    """tf.function without AutoGraph: the steps branch and loop on Python values only (the
    strategy, the micro-batch count), never on a tensor, so AutoGraph's rewrite of their
    source would change nothing, and it cost 1.3-1.7 s of every run's first step (a tensor in
    a Python `if` now fails at trace time instead of being converted)."""
    return tf.function(fn, autograph=False, **options)


class TensorFlowTrainer:
    """`strategy`: a tf.distribute strategy for data parallel, None otherwise;
    `layer_devices`: one device per layer for model and pipeline parallel, None otherwise;
    `micro_batches`: pipeline's micro-batches per batch; `shards` and `shard_devices`:
    tensor parallel's plan.shards and one device per shard."""

    CONVERT_AHEAD = True  # to_batch (a host tensor of the rows) is made in the prefetch thread, during the step before

    def __init__(
        self,
        network,
        optimizer_spec,
        seed: int,
        strategy=None,
        layer_devices=None,
        jit_compile=False,
        micro_batches=1,
        shards=None,
        shard_devices=None,
        precision="fp32",
        eager=False,
        noise_scale=False,
    ):
        tf.random.set_seed(seed)
        self.network, self.optimizer_spec = network, optimizer_spec
        # why this process cannot give the whole model's state (train_state), or ""
        self.holds_part = "--strategy tensor: each layer's variables are split over shards" if shards else ""
        self.noise_scale = noise_scale  # data parallel: the gradient norms of every step (GradientNorms)
        self.data_parallel = strategy is not None
        self.jit_compile = jit_compile
        self.strategy = strategy or tf.distribute.get_strategy()
        self.micro_batches = micro_batches
        self.loss_scaled = precision == "fp16"
        with self.strategy.scope():
            if shards:  # tensor parallel runs in float32 only (refused in prepare_process otherwise)
                self.model = TensorParallelModel(network, initial_weights(network, seed), seed, shards, shard_devices)
            else:
                self.model = build_model(
                    network, initial_weights(network, seed), seed, layer_devices, COMPUTE_DTYPES[precision]
                )
            self.variables = self.model.weights_in_order
            self.optimizer = make_optimizer(optimizer_spec, pre_reduced=self.data_parallel)
            if self.loss_scaled:  # dynamic loss scale: skips a step whose gradients overflow, halving the scale
                self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(self.optimizer)
            self.optimizer.build(self.variables)
        # --execution eager: the same Python functions, run op by op instead of traced once
        function = (lambda fn, **options: fn) if eager else traced
        images, uniforms = image_spec(network), uniforms_spec(network)
        self._fused_step = function(
            self._fused, input_signature=[images, LABEL_SPEC, uniforms], jit_compile=jit_compile
        )  # --compile: XLA
        self._part_gradients = function(self._gradients, input_signature=[images, LABEL_SPEC, uniforms, ROWS_SPEC])
        self._apply = function(self._apply_gradients)
        self._replica_apply = traced(self._apply_on_replicas, reduce_retracing=True)
        self._replica_gradients = traced(self._run_on_replicas, reduce_retracing=True)
        self._add = traced(self._add_on_replicas, reduce_retracing=True)
        self._all_reduce = traced(self._sum_across_replicas, reduce_retracing=True)
        self._squared_norms = traced(self._norms_before_and_after, reduce_retracing=True)
        self._forward = function(lambda x: self.model(x, training=False), input_signature=[images])

    # ------------------------------------------------------------------ step pieces
    def _gradients(self, images, labels, uniforms, step_rows):
        """Gradients of this slice's share of the step's mean loss (sum / step_rows),
        so summing them over slices gives the gradient of the whole step's mean.
        Pipeline: the slice cut into micro-batches (split_sizes' rule, in the graph),
        each one's gradients taken on its own, all summed."""
        if self.micro_batches == 1:
            return self._slice_gradients(images, labels, uniforms, step_rows)
        rows = tf.shape(labels)[0]
        sizes = rows // self.micro_batches + tf.cast(tf.range(self.micro_batches) < rows % self.micro_batches, tf.int32)
        starts = tf.cumsum(sizes, exclusive=True)
        parts = []
        for m in range(self.micro_batches):
            part = slice(starts[m], starts[m] + sizes[m])
            parts.append(self._slice_gradients(images[part], labels[part], tuple(u[part] for u in uniforms), step_rows))
        return tf.nest.map_structure(lambda *values: tf.add_n(list(values)), *parts)

    def _slice_gradients(self, images, labels, uniforms, step_rows):
        with tf.GradientTape() as tape:
            logits = self.model(images, True, uniforms)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=step_rows)
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.float32))
        return tape.gradient(scaled, self.variables), loss, correct

    def _fused(self, images, labels, uniforms):
        gradients, loss, correct = self._gradients(images, labels, uniforms, tf.shape(images)[0])
        self.optimizer.apply_gradients(zip(gradients, self.variables))
        return loss, correct

    def _apply_gradients(self, gradients):
        self.optimizer.apply_gradients(zip(gradients, self.variables))

    def _apply_on_replicas(self, summed):
        """Every replica applies the same summed gradients to its copy."""
        self.strategy.run(self._apply_gradients, args=(summed,))

    def _run_on_replicas(self, images, labels, uniforms, step_rows):
        return self.strategy.run(self._gradients, args=(images, labels, uniforms, step_rows))

    def _add_on_replicas(self, total, part):
        return self.strategy.run(lambda a, b: tf.nest.map_structure(tf.add, a, b), args=(total, part))

    def _sum_across_replicas(self, per_replica):
        gradients, loss, correct = per_replica
        # The gradients enter this function as inputs, which carry no device; TensorFlow
        # then finds them on other devices than the variables and reduces one tensor at a
        # time ("Efficient batch_reduce is not supported"). Pinned to their replicas, they
        # are all-reduced in one batch.
        gradients = self.strategy.run(lambda *parts: [tf.identity(part) for part in parts], args=tuple(gradients))
        with self.strategy.scope():
            summed = self.strategy.extended.batch_reduce_to(
                tf.distribute.ReduceOp.SUM, list(zip(gradients, self.variables))
            )
            return (
                summed,
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None),
            )

    def _norms_before_and_after(self, per_replica_gradients, summed):
        """--noise_scale: the replicas' squared gradient norms before the all-reduce,
        summed over them (one scalar all-reduce), and the summed gradient's after it."""

        def squared_norm(gradients):
            return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in gradients])

        with self.strategy.scope():
            before = self.strategy.reduce(
                tf.distribute.ReduceOp.SUM, self.strategy.run(squared_norm, args=(per_replica_gradients,)), axis=None
            )
        return before, squared_norm([self.strategy.experimental_local_results(g)[0] for g in summed])

    def _distribute(self, images, labels, uniforms, step_rows: int):
        """Each replica's contiguous slice of the batch and its uniforms (global replica ids,
        so the workers of a multi-worker run take disjoint slices of the same batch)."""
        ranges = split_ranges(len(labels), self.strategy.num_replicas_in_sync)

        def slice_for(context):
            start, stop = ranges[context.replica_id_in_sync_group]
            return images[start:stop], labels[start:stop], tuple(u[start:stop] for u in uniforms)

        values = self.strategy.experimental_distribute_values_from_function(slice_for)
        return values, tf.constant(step_rows, tf.int32)

    def to_batch(self, images, labels, uniforms):
        return (
            tf.convert_to_tensor(as_images(images, self.network.input_shape)),
            tf.convert_to_tensor(labels),
            tuple(tf.convert_to_tensor(u) for u in uniforms),
        )

    def step(self, batches: list) -> StepResult:
        """One optimizer step over these batches (more than one: --accumulate); with fp16,
        the loss scale it used and whether it skipped (LossScaleOptimizer halves the scale then)."""
        if not self.loss_scaled:
            return self._step(batches)
        scale = float(self.optimizer.dynamic_scale.numpy())
        result = self._step(batches)
        skipped = float(self.optimizer.dynamic_scale.numpy()) < scale
        return StepResult(result.loss, result.accuracy, result.comm_time_ms, scale, skipped)

    def _step(self, batches: list) -> StepResult:
        step_rows = sum(int(labels.shape[0]) for _, labels, _ in batches)
        if self.data_parallel:
            with peers_checked():
                return self._data_parallel_step(batches, step_rows)
        if len(batches) == 1:
            loss, correct = self._fused_step(*batches[0])
            return StepResult(float(loss), float(correct) / step_rows)
        total = None
        for images, labels, uniforms in batches:
            part = self._part_gradients(images, labels, uniforms, step_rows)
            total = part if total is None else tf.nest.map_structure(tf.add, total, part)
        gradients, loss, correct = total
        self._apply(gradients)
        return StepResult(float(loss), float(correct) / step_rows)

    def _data_parallel_step(self, batches, step_rows):
        total = None
        for images, labels, uniforms in batches:
            (replica_images, replica_labels, replica_uniforms), rows = self._distribute(
                images, labels, uniforms, step_rows
            )
            part = self._replica_gradients(replica_images, replica_labels, replica_uniforms, rows)
            total = part if total is None else self._add(total, part)
        clock = CommClock()
        with clock.timing():
            gradients, loss, correct = self._all_reduce(total)
            loss = float(loss)  # waits for the reduction (asynchronous on GPUs) ...
            self.strategy.experimental_local_results(gradients[-1])[0].numpy()  # ... and the gradients' one
        comm_ms = clock.take()
        norms = (
            replica_gradient_norms(
                [int(labels.shape[0]) for _, labels, _ in batches],
                self.strategy.num_replicas_in_sync,
                lambda: tuple(float(value) for value in self._squared_norms(total[0], gradients)),
            )
            if self.noise_scale
            else None
        )
        self._replica_apply(gradients)
        return StepResult(loss, float(correct) / step_rows, comm_ms, gradient_norms=norms)

    # ------------------------------------------------------------------ contract.Trainer
    def set_learning_rate(self, learning_rate: float) -> None:
        with self.strategy.scope():
            self.optimizer.learning_rate = learning_rate

    def prepare_batch(self, batch_size: int) -> None:
        """The single-device step functions take any batch (their input signatures leave
        it None): nothing to do. XLA (--compile) compiles each shape, and the data-parallel
        functions (reduce_retracing) re-trace for a new replica slice: one step on zeros
        of the new shape here, then every variable put back."""
        if self.jit_compile or self.data_parallel:
            step_on_zeros_then_restore(self, batch_size, self.network, self._snapshot, self._restore)

    def _snapshot(self) -> tuple:
        """Every variable's value (weights, optimizer slots and counters)."""
        variables = list(self.variables) + self.model.statistics_in_order + list(self.optimizer.variables)
        return variables, [variable.numpy() for variable in variables]

    def _restore(self, state: tuple) -> None:
        variables, values = state
        with self.strategy.scope():
            for variable, value in zip(variables, values):
                variable.assign(value)

    def logits(self, images):
        return self._forward(tf.convert_to_tensor(as_images(images, self.network.input_shape))).numpy()

    def save_checkpoint(self, folder: str) -> None:
        """TensorFlow's own checkpoint: weights, optimizer slots and counters. Every worker
        of a multi-worker run must write (saving runs collectives); the others write to a
        scratch folder, as TensorFlow's multi-worker guide does, so only the chief's lands
        in the run's folder."""
        if not is_chief(tf_config()):
            folder = tempfile.mkdtemp(prefix="cnn-parallel-worker-checkpoint-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
        self._checkpoint().write(os.path.join(folder, "tensorflow"))

    def load_checkpoint(self, folder: str) -> None:
        """Every worker of a multi-worker run reads the chief's checkpoint (the same
        --results_dir: one machine, or a shared file system), then they check that
        they all restored the same step."""
        checkpoint = self._checkpoint()
        checkpoint.read(os.path.join(folder, "tensorflow")).assert_existing_objects_matched()
        if self.data_parallel and tf_config():
            with peers_checked():
                self._check_same_step(folder)

    def train_state(self) -> TrainState:
        """The model's variables (the spec's layout already) and the optimizer's slots in the
        spec's convention (backends/keras_optimizer.py: tf.keras's optimizers are Keras 3's)."""
        if self.holds_part:
            raise StateNotHeld(self.holds_part)
        model, learning_rate = self.model, float(self.optimizer.learning_rate.numpy())
        weights, slots = [], {}
        for index in sorted(model.kernels):
            running = {}
            if index in model.statistics:
                mean, variance = model.statistics[index]
                running = dict(running_mean=mean.numpy().copy(), running_var=variance.numpy().copy())
            kernel, bias = model.kernels[index], model.biases[index]
            weights.append(LayerWeights(index, kernel.numpy().copy(), bias.numpy().copy(), **running))
            for role, variable in (("kernel", kernel), ("bias", bias)):
                found = keras_optimizer.slots(self.optimizer, variable, self.optimizer_spec, learning_rate, _numpy)
                if found:
                    slots[(index, role)] = found
        adam = keras_optimizer.adam_state(self.optimizer, self.optimizer_spec, _numpy)
        return TrainState(weights, slots, velocity_rate=learning_rate, **adam)

    def _check_same_step(self, folder: str) -> None:
        """The collectives only sum: every worker sees the sum of all replicas' steps, and
        it equals replicas x its own on every worker only if all restored the same one."""
        steps = int(self.optimizer.iterations.numpy())
        mine = tf.constant(steps, tf.int64)
        total = tf.function(lambda v: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None))(
            self.strategy.experimental_distribute_values_from_function(lambda _: mine)
        ).numpy()
        if total != self.strategy.num_replicas_in_sync * steps:
            raise RuntimeError(
                f"--resume: the workers restored different steps (this one {steps} from {folder}): "
                "every worker must read the chief's checkpoint, so give them the same --results_dir "
                "on a shared file system"
            )

    def _checkpoint(self) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(
            weights=list(self.variables), statistics=self.model.statistics_in_order, optimizer=self.optimizer
        )


def _numpy(variable) -> np.ndarray:
    return np.array(variable.numpy(), np.float32)


def build_trainer(config) -> TensorFlowTrainer:
    """The trainer for the config's plan (devices are set up here, before any op)."""
    set_threads(config.threads)
    plan = config.plan
    modes = dict(precision=config.precision, eager=config.execution == "eager")
    if config.strategy == "data":
        strategy = data_parallel_strategy(config.devices)
        return TensorFlowTrainer(
            config.network, config.optimizer, config.seed, strategy=strategy, noise_scale=config.noise_scale, **modes
        )
    if config.strategy in ("model", "pipeline"):
        devices = local_devices(config.devices)
        layer_devices = [devices[stage] for stage, (first, stop) in enumerate(plan.stages) for _ in range(first, stop)]
        return TensorFlowTrainer(
            config.network,
            config.optimizer,
            config.seed,
            layer_devices=layer_devices,
            micro_batches=plan.micro_batches,
            **modes,
        )
    if config.strategy == "tensor":
        return TensorFlowTrainer(
            config.network,
            config.optimizer,
            config.seed,
            shards=plan.shards,
            shard_devices=local_devices(config.devices),
            eager=config.execution == "eager",
        )
    return TensorFlowTrainer(config.network, config.optimizer, config.seed, jit_compile=config.compile, **modes)
