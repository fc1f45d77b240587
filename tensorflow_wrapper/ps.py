"""--strategy ps: tf.distribute.ParameterServerStrategy driven by a ClusterCoordinator.

The variables (weights, optimizer slots, a version counter) live on the parameter
servers; the chief (this process) does not train: it schedules one closure per
batch, in the shared batch order, and the coordinator hands each to whichever
worker is free. A closure reads the parameters, computes the gradients of its
batch and applies them at once (asynchronous: no waiting for the other workers),
then bumps the version counter, so

    staleness = versions applied by other workers between this closure's read and its apply

Traps this file handles:
- the chief runs one coordinator thread per worker: its inter-op pool must hold
  workers + 1 threads, else a small machine deadlocks;
- the learning rate travels with each closure as an argument (the optimizer's
  learning_rate is a callable), not as a variable on a ps that every worker would
  read every step;
- the coordinator re-runs a closure whose worker failed, possibly after its update
  landed: a per-step counter on the ps says how often each step was applied, and
  results.log names the steps applied twice.
A dead worker: its closures run on the others (the run completes, results.log says
which worker stopped). A dead parameter server: the run stops with one line.
"""

from __future__ import annotations

import collections
import time

import numpy as np
import tensorflow as tf

from algorithms.spec.weights import initial_weights
from algorithms.run.loop import batched_logits, finish_with_test, validate
from algorithms.errors import InputError
from algorithms.spec.parallel import split_ranges
from backends.tensorflow_backend import set_threads
from tensorflow_wrapper.devices import tf_config
from tensorflow_wrapper.model import build_model, make_optimizer
from tensorflow_wrapper.trainer import IMAGE_SPEC, LABEL_SPEC, SEED_SPEC

STEP_SPEC = tf.TensorSpec([], tf.int32)
RATE_SPEC = tf.TensorSpec([], tf.float32)
ROWS_IN_FLIGHT_PER_WORKER = 2  # closures queued per worker: none idles while the chief records a row


class ParameterServerLost(RuntimeError):
    """A parameter server died or stopped answering: its variables are gone, the run stops."""


class ParameterServerTrainer:
    """Not a contract.Trainer: steps are scheduled and finish out of lock-step
    (`schedule`, `result`); `train_ps` below is its loop."""

    def __init__(self, network, optimizer_spec, seed: int, total_steps: int):
        tf.random.set_seed(seed)
        self.seed = seed
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.workers = resolver.cluster_spec().num_tasks("worker")
        self._closure_rate = None  # the learning-rate argument of the closure being traced
        self.learning_rate = optimizer_spec.learning_rate
        with self.strategy.scope():
            self.model = build_model(network, initial_weights(network, seed), seed)
            self.variables = self.model.weights_in_order
            self.optimizer = make_optimizer(optimizer_spec, learning_rate=lambda: self._closure_rate)
            self.optimizer.build(self.variables)
            self.version = tf.Variable(0, dtype=tf.int64, name="version")
            self.applied = tf.Variable(tf.zeros([max(1, total_steps)], tf.int32), name="applied_per_step")
            # each step's (loss, correct, staleness, worker), kept on the ps too: a closure's own
            # outputs live on its worker, lost if that worker dies before the chief fetches them
            self.outcomes = tf.Variable(tf.zeros([max(1, total_steps), 4], tf.float32), name="outcome_per_step")
        self._closure = tf.function(  # strategy.run: the optimizer's update needs a replica context
            lambda *args: self.strategy.run(self._on_worker, args=args),
            input_signature=[IMAGE_SPEC, LABEL_SPEC, SEED_SPEC, STEP_SPEC, RATE_SPEC],
        )
        self._forward = tf.function(lambda x: self.model(x, training=False), input_signature=[IMAGE_SPEC])

    def _on_worker(self, images, labels, step_seed, step_index, learning_rate):
        read_version = self.version.read_value()
        with tf.control_dependencies([read_version]):  # the parameters are read after the version
            with tf.GradientTape() as tape:
                logits = self.model(images, True, step_seed, 0, tf.shape(images)[0])
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
                loss = tf.reduce_mean(per_example)
        gradients = tape.gradient(loss, self.variables)
        self._closure_rate = learning_rate
        self.optimizer.apply_gradients(zip(gradients, self.variables))
        # counted once every variable's update has landed: TensorFlow orders ops on one variable
        # in program order, ops on different ones not, so a read after each update is the barrier
        # (the reads stay on the ps: only their control edges are used)
        landed = [tf.convert_to_tensor(v) for v in [*self.variables, *self.optimizer.variables]]
        with tf.control_dependencies(landed):
            applied_version = self.version.assign_add(1)
            self.applied.scatter_nd_add([[step_index]], [1])
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.int32))
        staleness = applied_version - 1 - read_version
        worker = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.int64)
        outcome = tf.stack(
            [loss, tf.cast(correct, tf.float32), tf.cast(staleness, tf.float32), tf.cast(worker, tf.float32)]
        )
        self.outcomes.scatter_nd_update([[step_index]], [outcome])
        return loss, correct, staleness, worker

    def schedule(self, images: np.ndarray, labels: np.ndarray, step_index: int):
        """Queues one step (0-based index in the run); returns its RemoteValue."""
        step_seed = tf.constant([self.seed, step_index + 1], tf.int64)  # the single-device trainer's dropout seed
        args = (
            tf.constant(images[..., None]),
            tf.constant(labels),
            step_seed,
            tf.constant(step_index, tf.int32),
            tf.constant(self.learning_rate, tf.float32),
        )
        with parameter_servers_checked():
            return self.coordinator.schedule(self._closure, args=args)

    def result(self, remote, rows: int, step_index: int) -> tuple:
        """(loss, accuracy, worker, staleness) of a scheduled step, once it is applied;
        from the ps's copy when the worker that ran it died before the fetch."""
        with parameter_servers_checked():
            try:
                loss, correct, staleness, worker = remote.fetch()  # numpy values
            except tf.errors.UnavailableError as error:
                if "/job:ps" in str(error) or not int(self.applied[step_index].numpy()):
                    raise
                loss, correct, staleness, worker = self.outcomes[step_index].numpy()
        return float(loss), float(correct) / rows, int(worker), int(staleness)

    def set_learning_rate(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate  # sent with the closures scheduled from now on

    def logits(self, images):
        with parameter_servers_checked():
            return self._forward(tf.convert_to_tensor(images[..., None])).numpy()

    def unresponsive_workers(self) -> list:
        """Workers that no longer answer (the coordinator moved their closures to the others)."""
        return [index for index in range(self.workers) if not _alive(f"/job:worker/replica:0/task:{index}")]

    def steps_applied_twice(self, steps: int) -> list:
        with parameter_servers_checked():
            counts = self.applied.numpy()[:steps]
        return [int(step) + 1 for step in np.flatnonzero(counts > 1)]


def _alive(task: str) -> bool:
    from tensorflow.python.eager import context

    try:
        return bool(context.context().check_alive(task))
    except (tf.errors.OpError, ValueError):
        return False


class parameter_servers_checked:
    """A parameter server that is gone fails every closure: one line, the run stops.
    (A worker's failure never reaches here: the coordinator retries elsewhere.)"""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is None or not issubclass(kind, (tf.errors.UnavailableError, tf.errors.CancelledError)):
            return False
        text = " ".join(str(getattr(error, "message", error)).split())
        where = next((part for part in text.split() if "/job:ps" in part), "a task of the cluster (no worker left?)")
        raise ParameterServerLost(
            f"{where.strip(':,')} stopped or is unreachable ({type(error).__name__}); its variables are gone, "
            "so the run stops: restart it (every finished row is kept)"
        ) from None


def build_ps_trainer(session) -> ParameterServerTrainer:
    """The chief's trainer; its inter-op pool holds a thread per worker and one more."""
    config = session.config
    workers = len(tf_config()["cluster"].get("worker", []))
    if workers != config.devices:
        raise InputError(
            f"--devices {config.devices}: TF_CONFIG's cluster has {workers} workers; pass --devices {workers}"
        )
    set_threads(config.threads)
    try:
        tf.config.threading.set_inter_op_parallelism_threads(max(config.threads, workers + 1))
    except RuntimeError:  # a process that already ran an op keeps its pools
        pass
    total_steps = session.steps_per_epoch * config.num_epochs
    return ParameterServerTrainer(config.network, config.optimizer, config.seed, total_steps)


def train_ps(trainer: ParameterServerTrainer, session) -> dict:
    """The shared schedule, batches and epochs (as loop.train_by_hand), with up to
    ROWS_IN_FLIGHT_PER_WORKER x workers steps queued; rows are written in the order
    the steps were scheduled. step_time_ms is the time between two applied updates
    as the chief sees them, so samples_per_sec counts applied updates."""
    config = session.config
    in_flight: collections.deque = collections.deque()
    scheduled = 0
    last_done = time.perf_counter()
    updates_by_worker: collections.Counter = collections.Counter()

    def record_oldest():
        nonlocal last_done
        epoch, rows, step_index, remote = in_flight.popleft()
        loss, accuracy, worker, staleness = trainer.result(remote, rows, step_index)
        done = time.perf_counter()
        updates_by_worker[worker] += 1
        session.train_step(
            epoch, loss, accuracy, (done - last_done) * 1000.0, 0.0, rows, worker=worker, staleness=staleness
        )
        last_done = done

    def logits_fn(images):
        return batched_logits(trainer.logits, images, config.batch_size)

    for epoch in range(config.num_epochs):
        session.begin_epoch(epoch)  # --batch_schedule: workers re-trace at a new shape inside their first step
        # each global batch is cut into one share per worker (the plan's per_replica_batch), as
        # torch's ps does: one applied update is one worker's share, so equal epochs are equal samples
        shares = [
            indices[start:stop]
            for (indices,) in session.optimizer_batches(epoch)
            for start, stop in split_ranges(len(indices), config.plan.replicas)
        ]
        for indices in shares:
            if config.max_steps is not None and scheduled >= config.max_steps:
                break
            trainer.set_learning_rate(session.schedule.at(scheduled))
            images, labels = session.dataset.train_x[indices], session.dataset.train_y[indices]
            in_flight.append((epoch, len(indices), scheduled, trainer.schedule(images, labels, scheduled)))
            scheduled += 1
            if len(in_flight) >= ROWS_IN_FLIGHT_PER_WORKER * trainer.workers:
                record_oldest()
        while in_flight:
            record_oldest()
        validate(session, epoch, logits_fn)
        if session.should_stop():
            break
    note_faults(trainer, session, scheduled, updates_by_worker)
    return finish_with_test(session, logits_fn)


def note_faults(trainer: ParameterServerTrainer, session, steps: int, by_worker: collections.Counter) -> None:
    """What the coordinator absorbed, for results.log's diagnostics: workers lost, steps applied twice."""
    lost = trainer.unresponsive_workers()
    if lost:
        session.diagnose(
            f"parameter-server run: worker(s) {', '.join(map(str, lost))} of {trainer.workers} stopped during the "
            f"run; the coordinator ran their unfinished steps on the others (updates per worker: "
            f"{', '.join(f'{w}: {by_worker.get(w, 0)}' for w in range(trainer.workers))})"
        )
    twice = trainer.steps_applied_twice(steps)
    if twice:
        session.diagnose(
            f"parameter-server run: step(s) {', '.join(map(str, twice[:10]))} were applied twice (a closure "
            "re-run after its worker failed, its first update already on the parameter servers)"
        )
