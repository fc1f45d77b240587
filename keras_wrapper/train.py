"""Keras training: model.fit, one call per epoch over that epoch's shared batch
order (shuffle off, so Keras takes exactly the shared batches), with each step's
row written by a callback."""
from __future__ import annotations

import time

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np

from algorithms.init import initial_weights
from algorithms.loop import finish_with_test, validate
from keras_wrapper.model import build_model, compile_model


def describe_runtime():
    backend = keras.backend.backend()
    backend_version, devices = compat.describe_backend()
    versions = {"keras": keras.__version__, backend: backend_version, "numpy": np.__version__}
    return "keras", backend, versions, devices


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
        self._parts: list = []  # (loss, accuracy, rows) of this optimizer step's batches so far
        self.learning_rate = session.config.optimizer.learning_rate  # what the optimizer was compiled with

    def on_train_batch_begin(self, batch, logs=None):
        if self.session.learning_rate != self.learning_rate:
            self.learning_rate = self.session.learning_rate
            set_learning_rate(self.model, self.learning_rate)
        self._begin = time.perf_counter()
        if not self._parts:
            self._step_begin = self._begin

    def on_train_batch_end(self, batch, logs=None):
        loss, accuracy = float(logs["batch_loss"]), float(logs["batch_accuracy"])  # waits for the step
        end = time.perf_counter()
        self._parts.append((loss, accuracy, self.batch_sizes[batch]))
        if len(self._parts) < self.accumulate:
            return
        gap_ms = 0.0 if self._previous_end is None else (self._step_begin - self._previous_end) * 1000.0
        losses, accuracies, rows = zip(*self._parts)  # equal batches (checked up front): the means are the step's
        self.session.train_step(self.epoch, float(np.mean(losses)), float(np.mean(accuracies)),
                                (end - self._step_begin) * 1000.0, gap_ms, sum(rows))
        self._parts = []
        self.step_index += 1
        if self.session.checkpoint_due():
            self.session.save_checkpoint(self.checkpointer, self.epoch, self.step_index)
        if self.session.should_stop():
            self.model.stop_training = True
        self._previous_end = time.perf_counter()


class KerasCheckpoint:
    """The model and its optimizer state, in Keras's own format (compat.py)."""

    def __init__(self, model):
        self.model = model

    def save_checkpoint(self, folder: str) -> None:
        compat.save_model_state(self.model, folder)

    def load_checkpoint(self, folder: str) -> None:
        compat.load_model_state(self.model, folder)


def set_learning_rate(model, learning_rate: float) -> None:
    """The schedule's lr for the next step (--lr_scaling, --warmup_steps, plateau)."""
    if hasattr(model, "jax_state_sync"):
        model.jax_state_sync()  # jax's fit holds the optimizer state outside the variables between steps
    model.optimizer.learning_rate = learning_rate


def make_model(network, optimizer_spec, seed: int, data_parallel_devices: int = 0, accumulate: int = 1):
    """Built and compiled inside the data-parallel setup when `data_parallel_devices` is given."""
    compat.set_random_seed(seed)  # dropout masks
    if not data_parallel_devices:
        return compile_model(build_model(network, initial_weights(network, seed)), optimizer_spec, accumulate)
    from keras_wrapper.distribute import data_parallel

    with data_parallel(data_parallel_devices):
        return compile_model(build_model(network, initial_weights(network, seed)), optimizer_spec, accumulate)


def train(session):
    config, data = session.config, session.dataset
    compat.set_threads(config.threads)
    model = make_model(config.network, config.optimizer, config.seed,
                       config.devices if config.plan.strategy == "data" else 0, config.accumulate)
    checkpointer = KerasCheckpoint(model)
    recorder = StepRecorder(session, checkpointer)

    def logits_fn(images):
        return np.asarray(model.predict(images[..., None], batch_size=config.batch_size, verbose=0))

    start_epoch, start_index = session.resume_position
    if session.resume_from:
        checkpointer.load_checkpoint(session.resume_from)
        recorder.learning_rate = None  # the restored optimizer holds the last step's lr: set the next one
    for epoch in range(start_epoch, config.num_epochs):
        first = start_index if epoch == start_epoch else 0
        steps = session.optimizer_batches(epoch)[first:]
        if not steps:  # resumed exactly at the end of an epoch: only its validation is left
            validate(session, epoch, logits_fn)
            continue
        batches = [part for parts in steps for part in parts]  # K per optimizer step
        order = np.concatenate(batches)
        recorder.epoch, recorder.batch_sizes, recorder.step_index = epoch, [len(b) for b in batches], first
        model.fit(data.train_x[order][..., None], data.train_y[order], batch_size=config.batch_size,
                  epochs=epoch + 1, initial_epoch=epoch, shuffle=False, verbose=0, callbacks=[recorder])
        validate(session, epoch, logits_fn)
        if session.should_stop():
            break
    return finish_with_test(session, logits_fn)


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Keras's own loss (model.evaluate, dropout off) and logits of the shared initial weights."""
    model = make_model(network, network.training.optimizer, seed)
    loss = compat.evaluate_loss(model, images[..., None], labels, batch_size=len(images))
    logits = np.asarray(model.predict(images[..., None], batch_size=len(images), verbose=0))
    return loss, logits
