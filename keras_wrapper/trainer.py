"""Keras's side of the contract: `KerasTrainer` (a contract.FitTrainer) trains with
model.fit, one call per epoch over the shared batch order, the rows' dropout uniforms
given beside the images, and `StepRecorder`, a Keras callback, writes each optimizer
step's row."""

from __future__ import annotations

import time
from dataclasses import dataclass

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.network.dropout import uniforms as dropout_uniforms
from algorithms.network.layers import Conv2D
from algorithms.reference.train_state import TrainState
from algorithms.network.weights import LayerWeights, initial_weights
from keras_wrapper.model import (
    SpecBatchNormalization,
    build_model,
    compile_model,
    layer_index,
    layer_variables,
    training_model,
)


class StepRecorder(keras.callbacks.Callback):
    """Writes one CSV row per optimizer step (every `accumulate` batches: with
    --accumulate K, Keras applies the K batches' gradients at once) and stops at
    --max_steps."""

    def __init__(self, session, checkpointer=None):
        super().__init__()
        self.session, self.checkpointer = session, checkpointer
        self.accumulate = session.config.accumulate
        self.epoch, self.batch_sizes = 0, []
        self.step_index = 0  # optimizer steps of this epoch done, counting those before a --resume
        self._begin = self._previous_end = self._step_begin = None
        self.first_begin = self.last_end = None  # the span of a fit call's steps (the batch finder's trial)
        self._parts: list = []  # (loss, accuracy, rows) of this optimizer step's batches so far
        self.learning_rate = session.config.optimizer.learning_rate  # what the optimizer was compiled with
        self.scale_before = None  # fp16: the loss scale after the last step
        self._capture = None  # the step check's state before this step, where it checks it

    def on_train_batch_begin(self, batch, logs=None):
        if self.session.learning_rate != self.learning_rate:
            self.learning_rate = self.session.learning_rate
            set_learning_rate(self.model, self.learning_rate)
        if not self._parts and self.session.step_check is not None:  # an optimizer step begins
            self._capture = self.session.step_check.before(self.checkpointer, self.epoch, self.step_index)
        self._begin = time.perf_counter()
        self.first_begin = self.first_begin or self._begin
        if not self._parts:
            self._step_begin = self._begin

    def on_train_batch_end(self, batch, logs=None):
        loss, accuracy = float(logs["batch_loss"]), float(logs["batch_accuracy"])  # waits for the step
        end = self.last_end = time.perf_counter()
        self._parts.append((loss, accuracy, self.batch_sizes[batch]))
        if len(self._parts) < self.accumulate:
            return
        gap_ms = 0.0 if self._previous_end is None else (self._step_begin - self._previous_end) * 1000.0
        losses, accuracies, rows = zip(*self._parts)  # equal batches (checked up front): the means are the step's
        scale, skipped = self._loss_scale()
        self.session.train_step(
            self.epoch,
            float(np.mean(losses)),
            float(np.mean(accuracies)),
            (end - self._step_begin) * 1000.0,
            gap_ms,
            sum(rows),
            loss_scale=scale,
            skipped=skipped,
        )
        self._parts = []
        if self.session.step_check is not None:
            self.session.step_check.after(self.checkpointer, self._capture, *self.session.last_step)
        self.step_index += 1
        if self.session.checkpoint_due():
            self.session.save_checkpoint(self.checkpointer, self.epoch, self.step_index)
        if self.session.should_stop():
            self.model.stop_training = True
        self._previous_end = time.perf_counter()

    def _loss_scale(self) -> tuple:
        """fp16 (a LossScaleOptimizer): the scale the step just used and whether it skipped
        the step, which halves the scale; (None, False) otherwise."""
        optimizer = self.model.optimizer
        if compat.KERAS_2 or not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):  # Keras 2: fp32 only
            return None, False
        if hasattr(self.model, "jax_state_sync"):
            self.model.jax_state_sync()  # jax's fit holds the scale outside the variable between steps
        used = self.scale_before if self.scale_before is not None else float(optimizer.initial_scale)
        self.scale_before = float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
        return used, self.scale_before < used


def set_learning_rate(model, learning_rate: float) -> None:
    """The schedule's lr for the next step (--lr_scaling, --warmup_steps, plateau)."""
    if hasattr(model, "jax_state_sync"):
        model.jax_state_sync()  # jax's fit holds the optimizer state outside the variables between steps
    compat.set_learning_rate(model.optimizer, learning_rate)


MIXED_POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


@dataclass
class KerasModels:
    """One set of layers (so one set of variables) in two compiled models: `training`
    takes fit_inputs (the images and the rows' dropout uniforms) and is what fit trains,
    with the optimizer; `inference` takes the images alone (predict, evaluate), dropout
    off (model.py)."""

    training: keras.Model
    inference: keras.Model


def fit_inputs(images: np.ndarray, uniforms: tuple) -> list:
    """The training model's x: the (N, H, W, C) images, then the same rows' dropout
    uniforms (network/dropout.py), which fit cuts with them."""
    return [nhwc(images), *uniforms]


def nhwc(images: np.ndarray) -> np.ndarray:
    """(N, H, W, C) images, given so or (N, H, W) of one channel."""
    return images[..., None] if images.ndim == 3 else images


def make_model(
    network,
    optimizer_spec,
    seed: int,
    data_parallel_devices: int = 0,
    accumulate: int = 1,
    tensor_plan=None,
    precision: str = "fp32",
    execution=None,
) -> KerasModels:
    """Built and compiled inside the data-parallel setup when `data_parallel_devices` is
    given, or inside ModelParallel for `tensor_plan` (a tensor or hybrid plan, jax).
    bf16 / fp16: the layers are made under Keras's mixed dtype policy (float32 variables,
    bfloat16 / float16 compute), which is global, so it is set only while they are made."""
    compat.set_random_seed(seed)  # nothing in the model draws from it: dropout's uniforms come with the rows
    if precision != "fp32":
        keras.config.set_dtype_policy(MIXED_POLICIES[precision])
    try:
        if not data_parallel_devices and tensor_plan is None:
            return compiled_models(network, optimizer_spec, seed, accumulate, execution)
        from keras_wrapper.distribute import data_parallel, tensor_parallel

        setup = tensor_parallel(network, tensor_plan) if tensor_plan else data_parallel(data_parallel_devices)
        with setup:
            return compiled_models(network, optimizer_spec, seed, accumulate, execution)
    finally:
        if precision != "fp32":
            keras.config.set_dtype_policy("float32")


def compiled_models(network, optimizer_spec, seed: int, accumulate: int, execution) -> KerasModels:
    inference = build_model(network, initial_weights(network, seed))
    training = compile_model(training_model(inference, network), optimizer_spec, accumulate, execution)
    compile_model(inference, optimizer_spec, accumulate, execution, optimizer=training.optimizer)
    return KerasModels(training, inference)


class KerasTrainer:
    """contract.FitTrainer: one model.fit call per epoch over that epoch's shared batch
    order (shuffle off, so Keras takes exactly the shared batches) with the rows' dropout
    uniforms, each step's row written by the StepRecorder callback. `model` is the
    training model (fit, the optimizer, checkpoints), `inference` the one that predicts."""

    def __init__(self, config):
        self.config = config
        models = make_model(
            config.network,
            config.optimizer,
            config.seed,
            config.devices if config.strategy == "data" else 0,
            config.accumulate,
            config.plan if config.strategy in ("tensor", "hybrid") else None,
            config.precision,
            config.execution,
        )
        self.model, self.inference = models.training, models.inference
        self.recorder = None  # made for the session at the first fit_epoch
        self.parametric = {index for index, _, _ in config.network.parametric_layers()}

    def fit_epoch(self, session, epoch: int, steps: list, first_index: int) -> None:
        if self.recorder is None:
            self.recorder = StepRecorder(session, self)
            if session.resume_from:  # the restored optimizer holds the last step's lr: set the next one
                self.recorder.learning_rate = None
        batches = [part for parts in steps for part in parts]  # K per optimizer step
        order = np.concatenate(batches)
        recorder = self.recorder
        recorder.epoch, recorder.batch_sizes, recorder.step_index = epoch, [len(b) for b in batches], first_index
        data = session.dataset
        self.model.fit(
            fit_inputs(data.train_x[order], session.dropout_uniforms(epoch, order)),
            data.train_y[order],
            batch_size=len(batches[0]),  # the epoch's (--batch_schedule): fit takes one batch size per call
            epochs=epoch + 1,
            initial_epoch=epoch,
            shuffle=False,
            verbose=0,
            callbacks=[recorder],
        )

    def set_learning_rate(self, learning_rate: float) -> None:
        set_learning_rate(self.model, learning_rate)

    def prepare_batch(self, batch_size: int) -> None:
        """Keras 3 traces (tensorflow) or jit-compiles (jax) fit's train step for each
        batch shape: one fit on one batch of zeros (with some rows' dropout uniforms) here,
        then every variable (weights, optimizer slots and counters) put back. Keras 2 on
        Theano and Keras on torch run any shape as it comes."""
        if compat.KERAS_2 or keras.backend.backend() == "torch":
            return
        network = self.config.network
        variables = list(self.model.variables) + list(self.model.optimizer.variables)
        saved = [keras.ops.convert_to_numpy(variable.value) for variable in variables]
        zeros = np.zeros((batch_size, *network.input_shape[:2]), np.float32)
        uniforms = dropout_uniforms(network, 0, 0, np.arange(batch_size))
        self.model.fit(
            fit_inputs(zeros, uniforms),
            np.zeros(batch_size, np.int32),
            batch_size=batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        for variable, value in zip(variables, saved):
            variable.assign(value)

    def logits(self, images):
        logits = self.inference.predict(nhwc(images), batch_size=self.config.batch_size, verbose=0)
        return np.asarray(logits, dtype=np.float32)  # a mixed policy's logits are bfloat16 / float16

    def save_checkpoint(self, folder: str) -> None:
        """The model and its optimizer state, in Keras's own format (compat.py)."""
        compat.save_model_state(self.model, folder)

    def load_checkpoint(self, folder: str) -> None:
        compat.load_model_state(self.model, folder)

    def train_state(self) -> TrainState:
        """The layers' weights and the optimizer's slots in the spec's layout and convention
        (reference/train_state.py; compat.optimizer_slots): the inference model's layers are the
        training model's, named after their spec layers."""
        compat.sync_state(self.model)
        network, spec = self.config.network, self.config.optimizer
        learning_rate = float(compat.to_numpy(self.model.optimizer.learning_rate))
        weights, slots = [], {}
        for layer in self.inference.layers:
            index = layer_index(layer)
            if index < 0 or index not in self.parametric:
                continue
            values = {}
            for variable, role, _ in layer_variables(layer):
                value = compat.to_numpy(variable)
                flip = role == "kernel" and isinstance(network.layers[index], Conv2D)
                values[role] = compat.conv_kernel(value) if flip else value  # Theano's flipped kernel back
                found = compat.optimizer_slots(self.model, variable, spec, learning_rate)
                if found:
                    slots[(index, role)] = {
                        name: compat.conv_kernel(array) if flip else array for name, array in found.items()
                    }
            running = {}
            if isinstance(layer, SpecBatchNormalization):
                running = dict(
                    running_mean=compat.to_numpy(layer.moving_mean), running_var=compat.to_numpy(layer.moving_variance)
                )
            weights.append(LayerWeights(index, values.get("kernel"), values.get("bias"), **running))
        adam = compat.adam_state(self.model, spec)
        return TrainState(sorted(weights, key=lambda w: w.layer_index), slots, velocity_rate=learning_rate, **adam)


def build_trainer(config) -> KerasTrainer:
    compat.set_threads(config.threads)
    return KerasTrainer(config)
