"""Two of the three shared training loops, and the evaluation every loop uses: the
framework gives logits, the loss and accuracy are computed here, once, in float64
numpy. The third, for the asynchronous strategies (ps, async) of every framework that
runs them, is updates.py's train_by_updates, driving a wrapper's contract.UpdatePool.

    train_by_hand(trainer, session)    a contract.Trainer, one optimizer step at a time
                                       (TensorFlow, PyTorch, Lasagne, Caffe); while a step
                                       computes, a background thread gathers the next
                                       step's rows (`Prefetcher`)
    train_by_epochs(trainer, session)  a contract.FitTrainer, an epoch at a time (Keras's
                                       model.fit, which records each step from a callback)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import log_softmax

from algorithms.contract.types import FitTrainer, Trainer
from algorithms.run.step_check import StepCheck
from algorithms.session.run_session import RunSession
from algorithms.network.dropout import uniforms


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy from logits, in float64."""
    log_probabilities = log_softmax(logits.astype(np.float64), axis=1)
    return float(-np.mean(log_probabilities[np.arange(len(labels)), labels]))


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(logits.argmax(axis=1) == labels))


def batched_logits(logits_fn, images: np.ndarray, batch_size: int) -> np.ndarray:
    return np.concatenate(
        [logits_fn(images[start : start + batch_size]) for start in range(0, len(images), batch_size)]
    )


def validate(session: RunSession, epoch: int, logits_fn) -> None:
    """Score the validation split and close the epoch in the session."""
    data = session.dataset
    start = time.perf_counter()
    logits = logits_fn(data.val_x)
    elapsed_ms = (time.perf_counter() - start) * 1000.0
    session.end_epoch(epoch, cross_entropy(logits, data.val_y), accuracy(logits, data.val_y), elapsed_ms)


def evaluate_initial(session: RunSession, logits_fn) -> None:
    """The validation split at the initial weights, before the first step (not again on
    --resume): the session's `init` row."""
    if session.resume_from:
        return
    data = session.dataset
    start = time.perf_counter()
    logits = logits_fn(data.val_x)
    elapsed_ms = (time.perf_counter() - start) * 1000.0
    session.initial_evaluation(cross_entropy(logits, data.val_y), accuracy(logits, data.val_y), elapsed_ms)


def finish_with_test(session: RunSession, logits_fn) -> dict:
    """Predict the test set (scored if its labels are known) and close the run."""
    data = session.dataset
    if data.test_x is None:
        return session.finish(None, None, None)
    logits = logits_fn(data.test_x)
    if data.test_y is None:
        return session.finish(None, None, logits.argmax(axis=1))
    return session.finish(cross_entropy(logits, data.test_y), accuracy(logits, data.test_y), logits.argmax(axis=1))


class Prefetcher:
    """Gathers the next step's rows (numpy fancy indexing: a copy of the batch) and their
    dropout uniforms (`uniforms(epoch, rows)`, network/dropout.py) in a background thread
    while the framework computes the current step; with `to_batch` (a trainer's, whose
    class sets CONVERT_AHEAD) it converts them there too, so the step waits for neither."""

    def __init__(self, dataset, uniforms, to_batch=None):
        self.dataset = dataset
        self.uniforms = uniforms
        self.to_batch = to_batch
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self.pending = None  # (parts, future) of the step gathered ahead

    def gather(self, parts: list, epoch: int) -> list:
        """(images, labels, uniforms) of each part."""
        data = self.dataset
        arrays = [(data.train_x[rows], data.train_y[rows], self.uniforms(epoch, rows)) for rows in parts]
        return arrays if self.to_batch is None else [self.to_batch(*part) for part in arrays]

    def take(self, parts: list, epoch: int, next_parts=None) -> list:
        """This step's arrays (waiting for them if gathered ahead), and starts gathering
        `next_parts` (a step of the same epoch)."""
        pending, self.pending = self.pending, None
        arrays = pending[1].result() if pending and pending[0] is parts else self.gather(parts, epoch)
        if next_parts is not None:
            self.pending = (next_parts, self.pool.submit(self.gather, next_parts, epoch))
        return arrays

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def prefetcher_for(trainer: Trainer, session: RunSession) -> Prefetcher:
    """The Prefetcher train_by_hand steps `trainer` with: converting ahead where its class allows."""
    to_batch = trainer.to_batch if getattr(trainer, "CONVERT_AHEAD", False) else None
    network, seed = session.config.network, session.config.seed

    def rows_uniforms(epoch: int, rows) -> tuple:  # session.dropout_uniforms, without asking the session
        return uniforms(network, seed, epoch, rows)

    return Prefetcher(session.dataset, rows_uniforms, to_batch)


def run_step(
    trainer: Trainer,
    session: RunSession,
    epoch: int,
    parts: list,
    learning_rate,
    prefetcher: Prefetcher,
    next_parts=None,
) -> tuple:
    """One optimizer step and its CSV row, exactly as the loop runs it (the
    benchmark times this against a native loop); returns the lr now set and the
    session's answer (StepAnswer: checkpoint, stop).
    `next_parts` (the next step's rows) are gathered during this step."""
    if session.learning_rate != learning_rate:
        learning_rate = session.learning_rate
        trainer.set_learning_rate(learning_rate)
    start = time.perf_counter()
    batches = prefetcher.take(parts, epoch, next_parts)
    if prefetcher.to_batch is None:
        batches = [trainer.to_batch(*part) for part in batches]
    ready = time.perf_counter()
    result = trainer.step(batches)
    done = time.perf_counter()
    if result.gradient_norms is not None:  # --noise_scale
        session.noise_scale.update(result.gradient_norms)
    answer = session.record_step(
        epoch,
        result.loss,
        result.accuracy,
        (done - ready) * 1000.0,
        (ready - start) * 1000.0,
        sum(len(indices) for indices in parts),
        result.comm_time_ms,
        loss_scale=result.loss_scale,
        skipped=result.skipped,
    )
    return learning_rate, answer


def begin_epoch(trainer, session: RunSession, epoch: int) -> list:
    """The epoch's optimizer steps (session.optimizer_batches). A new --batch_schedule
    phase: the wrapper prepares the new batch shape (re-trace, re-compile, blob reshape)
    here, timed on its own, so no step's time holds it."""
    steps, batch = session.start_epoch(epoch)
    if batch is not None:
        start = time.perf_counter()
        trainer.prepare_batch(batch)
        session.batch_prepared(batch, (time.perf_counter() - start) * 1000.0)
    return steps


def step_on_zeros_then_restore(trainer: Trainer, batch_size: int, network, snapshot, restore) -> None:
    """Trainer.prepare_batch for a framework that compiles or traces each batch shape:
    one step on zeros of `batch_size` rows (the spec's input shape, (H, W, C), as the
    dataset holds single-channel rows: (N, H, W)), so the new shape is built here,
    outside every timed step; then `restore(snapshot())` puts back what the step changed
    (weights, optimizer state, RNG, step counters), so the run goes on as if it had
    not been taken."""
    state = snapshot()
    height, width, _ = network.input_shape
    images = np.zeros((batch_size, height, width), np.float32)
    rows = np.arange(batch_size)
    trainer.step([trainer.to_batch(images, np.zeros(batch_size, np.int32), uniforms(network, 0, 0, rows))])
    restore(state)


def train_by_hand(trainer: Trainer, session: RunSession) -> dict:
    config = session.config

    def logits_fn(images):
        return batched_logits(trainer.logits, images, config.batch_size)

    start_epoch, start_index = session.resume_position
    learning_rate = config.optimizer.learning_rate  # what every trainer is built with
    if session.resume_from:
        trainer.load_checkpoint(session.resume_from)
        learning_rate = None  # the restored optimizer holds the last step's lr: set the next one
    evaluate_initial(session, logits_fn)
    prefetcher = prefetcher_for(trainer, session)
    check = StepCheck(session)
    try:
        for epoch in range(start_epoch, config.num_epochs):
            steps = begin_epoch(trainer, session, epoch)
            for index in range(start_index if epoch == start_epoch else 0, len(steps)):
                next_parts = steps[index + 1] if index + 1 < len(steps) else None
                if session.learning_rate != learning_rate:  # set before the check reads the state
                    learning_rate = session.learning_rate
                    trainer.set_learning_rate(learning_rate)
                capture = check.before(trainer, epoch, index)
                learning_rate, answer = run_step(
                    trainer, session, epoch, steps[index], learning_rate, prefetcher, next_parts
                )
                check.after(trainer, capture, *session.last_step)
                if answer.checkpoint:
                    session.save_checkpoint(trainer, epoch, index + 1)
                if answer.stop:
                    break
            validate(session, epoch, logits_fn)
            if session.should_stop():
                break
    finally:  # a run that stops on an error still says what its step check saw
        prefetcher.close()
        session.step_check_note = check.close()
    end_step_check(session, check)
    return finish_with_test(session, logits_fn)


def train_by_epochs(trainer: FitTrainer, session: RunSession) -> dict:
    """The same epochs, resume point, validation and stopping as train_by_hand, for a
    trainer that takes a whole epoch's optimizer steps per call."""
    config = session.config
    start_epoch, start_index = session.resume_position
    if session.resume_from:
        trainer.load_checkpoint(session.resume_from)
    evaluate_initial(session, trainer.logits)
    session.step_check = check = StepCheck(session)  # the trainer's per-step hook drives it
    try:
        for epoch in range(start_epoch, config.num_epochs):
            first = start_index if epoch == start_epoch else 0
            steps = begin_epoch(trainer, session, epoch)[first:]
            if steps:  # empty when resumed exactly at the end of an epoch: only its validation is left
                trainer.fit_epoch(session, epoch, steps, first)
            validate(session, epoch, trainer.logits)
            if session.should_stop():
                break
    finally:  # a run that stops on an error still says what its step check saw
        session.step_check_note = check.close()
    end_step_check(session, check)
    return finish_with_test(session, trainer.logits)


def end_step_check(session: RunSession, check: StepCheck) -> None:
    """The step check's line on the console (results.log takes session.step_check_note)."""
    if not session.config.quiet:
        session.progress.say(f"step check: {session.step_check_note}", flush=True)
