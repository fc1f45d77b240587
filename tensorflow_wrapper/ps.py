"""--strategy ps: tf.distribute.ParameterServerStrategy driven by a ClusterCoordinator,
as an algorithms.contract.types.UpdatePool of the shared asynchronous loop
(algorithms/run/updates.py), like torch's parameter server.

The variables (weights, optimizer slots, a version counter) live on the parameter
servers; the chief (this process) does not train: it schedules one closure per
worker's share of a global batch, in the shared batch order, and the coordinator
hands each to whichever worker is free. A closure reads the parameters, computes the
gradients of its share and applies them at once (asynchronous: no waiting for the
other workers), then bumps the version counter, so

    staleness = versions applied by other workers between this closure's read and its apply

How the pool maps onto the coordinator: `parts` is the number of workers (one share
each per global batch); `slots` is ROWS_IN_FLIGHT_PER_WORKER x workers closures queued
at the coordinator, and `submit` ignores its slot, since the coordinator, not the
chief, picks the worker (the row's `worker` is the one that ran it). A closure makes
its update as torch's worker does: it pulls the parameters (a copy onto the worker),
computes its gradients on that copy and pushes them. Its times are taken on the worker
with tf.timestamp(), as torch's worker takes them: step_time_ms from before its read of
the version to after its update has landed, comm_time_ms the pull and the push; its
rows arrive with the closure (data_time_ms 0).

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
import queue
import threading

import numpy as np
import tensorflow as tf

from algorithms.dataset.data import as_images
from algorithms.errors import InputError
from algorithms.contract.types import Update
from algorithms.dataset.data import steps_per_epoch
from algorithms.network.weights import initial_weights
from backends.tensorflow_backend import set_threads
from tensorflow_wrapper.devices import tf_config
from tensorflow_wrapper.model import build_model, make_optimizer
from tensorflow_wrapper.trainer import LABEL_SPEC, image_spec, traced, uniforms_spec

STEP_SPEC = tf.TensorSpec([], tf.int32)
RATE_SPEC = tf.TensorSpec([], tf.float32)
ROWS_IN_FLIGHT_PER_WORKER = 2  # closures queued per worker: none idles while the chief records a row


class ParameterServerLost(RuntimeError):
    """A parameter server died or stopped answering: its variables are gone, the run stops."""


class ParameterServerPool:
    """The UpdatePool of a TensorFlow parameter-server run (see the module docstring)."""

    def __init__(self, config, dataset):
        workers = len(tf_config()["cluster"].get("worker", []))
        if workers != config.devices:
            raise InputError(
                f"--devices {config.devices}: TF_CONFIG's cluster has {workers} workers; pass --devices {workers}"
            )
        set_threads(config.threads)
        try:  # before the strategy: one coordinator thread per worker, and one more
            tf.config.threading.set_inter_op_parallelism_threads(max(config.threads, workers + 1))
        except RuntimeError:  # a process that already ran an op keeps its pools
            pass
        tf.random.set_seed(config.seed)
        self.dataset = dataset
        self.network_input_shape = config.network.input_shape
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.workers = self.parts = workers
        self.slots = ROWS_IN_FLIGHT_PER_WORKER * workers
        self.scheduled = 0  # closures scheduled: the next one's index in the run
        self.done: queue.Queue = queue.Queue()  # (Update or the error its fetch raised), as they finish
        self.updates_by_worker: collections.Counter = collections.Counter()
        self._closure_rate = None  # the learning-rate argument of the closure being traced
        updates = planned_updates(config, len(dataset.train_x), workers)
        with self.strategy.scope():
            self.model = build_model(config.network, initial_weights(config.network, config.seed), config.seed)
            self.variables = self.model.weights_in_order
            self.optimizer = make_optimizer(config.optimizer, learning_rate=lambda: self._closure_rate)
            self.optimizer.build(self.variables)
            self.version = tf.Variable(0, dtype=tf.int64, name="version")
            self.applied = tf.Variable(tf.zeros([updates], tf.int32), name="applied_per_step")
            # each step's (loss, correct, staleness, worker, step ms, comm ms), kept on the ps too: a
            # closure's own outputs live on its worker, lost if that worker dies before the chief fetches them
            self.outcomes = tf.Variable(tf.zeros([updates, 6], tf.float32), name="outcome_per_step")
        self._closure = traced(  # strategy.run: the optimizer's update needs a replica context
            lambda *args: self.strategy.run(self._on_worker, args=args),
            input_signature=[
                image_spec(config.network),
                LABEL_SPEC,
                uniforms_spec(config.network),
                STEP_SPEC,
                RATE_SPEC,
            ],
        )
        self._forward = traced(lambda x: self.model(x, training=False), input_signature=[image_spec(config.network)])

    def _on_worker(self, images, labels, uniforms, step_index, learning_rate):
        """One update, as torch's worker makes it: pull the parameters, compute the
        gradients of the share on that copy, push them (the ps applies them at once).
        Timed on this worker's clock: pull and push are its comm_time_ms."""
        started = tf.timestamp()
        with tf.control_dependencies([started]):
            read_version = self.version.read_value()
        with tf.control_dependencies([read_version]):  # the parameters are read after the version
            pulled = [tf.identity(v.read_value()) for v in self.variables]  # copied onto this worker
        with tf.control_dependencies(pulled):
            pulled_at = tf.timestamp()
        with tf.GradientTape() as tape:
            tape.watch(pulled)
            logits = self.model(images, True, uniforms, values=pulled)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_mean(per_example)
        gradients = tape.gradient(loss, pulled)
        with tf.control_dependencies(gradients):
            computed_at = tf.timestamp()
        self._closure_rate = learning_rate
        self.optimizer.apply_gradients(zip(gradients, self.variables))
        # counted once every variable's update has landed: TensorFlow orders ops on one variable
        # in program order, ops on different ones not, so a read after each update is the barrier
        # (the reads stay on the ps: only their control edges are used)
        landed = [tf.convert_to_tensor(v) for v in [*self.variables, *self.optimizer.variables]]
        with tf.control_dependencies(landed):
            applied_version = self.version.assign_add(1)
            counted = self.applied.scatter_nd_add([[step_index]], [1])
        with tf.control_dependencies([applied_version, counted.op]):
            finished = tf.timestamp()
        step_ms = (finished - started) * 1000.0
        comm_ms = ((pulled_at - started) + (finished - computed_at)) * 1000.0
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.int32))
        staleness = applied_version - 1 - read_version
        worker = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.int64)
        outcome = [loss, correct, staleness, worker, step_ms, comm_ms]
        self.outcomes.scatter_nd_update([[step_index]], [tf.stack([tf.cast(v, tf.float32) for v in outcome])])
        return tuple(outcome)

    def submit(self, slot: int, indices: np.ndarray, learning_rate: float, uniforms: tuple) -> None:
        """Queues the update of these rows at the coordinator, which picks its worker
        (`slot` unused); a thread waits for it and hands it to `result`."""
        step_index = self.scheduled
        args = (
            tf.constant(self.dataset.train_x[indices]),
            tf.constant(self.dataset.train_y[indices]),
            tuple(tf.constant(u) for u in uniforms),
            tf.constant(step_index, tf.int32),
            tf.constant(learning_rate, tf.float32),
        )
        with parameter_servers_checked():
            remote = self.coordinator.schedule(self._closure, args=args)
        self.scheduled += 1
        threading.Thread(target=self._await, args=(remote, step_index, len(indices)), daemon=True).start()

    def _await(self, remote, step_index: int, rows: int) -> None:
        try:
            self.done.put(self._fetch(remote, step_index, rows))
        except BaseException as error:  # raised by result(), in the loop's thread
            self.done.put(error)

    def _fetch(self, remote, step_index: int, rows: int) -> Update:
        """A scheduled update, once applied; from the ps's copy when the worker that ran
        it died before the fetch."""
        with parameter_servers_checked():
            try:
                loss, correct, staleness, worker, step_ms, comm_ms = remote.fetch()  # numpy values
            except tf.errors.UnavailableError as error:
                if "/job:ps" in str(error) or not int(self.applied[step_index].numpy()):
                    raise
                loss, correct, staleness, worker, step_ms, comm_ms = self.outcomes[step_index].numpy()
        return Update(
            worker=int(worker),
            loss=float(loss),
            accuracy=float(correct) / rows,
            step_time_ms=float(step_ms),
            data_time_ms=0.0,  # the share arrives with the closure: the chief cuts the next one meanwhile
            samples=rows,
            staleness=int(staleness),
            comm_time_ms=float(comm_ms),
        )

    def result(self, timeout_s: float):
        try:
            update = self.done.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(update, BaseException):
            raise update
        self.updates_by_worker[update.worker] += 1
        return update

    def check(self, after: str) -> None:
        """Nothing to watch here: the coordinator runs a lost worker's closures on the
        others, and a lost parameter server fails the closures (raised by `result`)."""

    def logits(self, images):
        with parameter_servers_checked():
            return self._forward(tf.convert_to_tensor(as_images(images, self.network_input_shape))).numpy()

    def absorbed_faults(self) -> list:
        """Workers lost (the coordinator moved their closures to the others) and steps
        applied twice (a closure re-run after its worker failed, its first update landed)."""
        faults = []
        lost = [index for index in range(self.workers) if not _alive(f"/job:worker/replica:0/task:{index}")]
        if lost:
            faults.append(
                f"parameter-server run: worker(s) {', '.join(map(str, lost))} of {self.workers} stopped during the "
                f"run; the coordinator ran their unfinished steps on the others (updates per worker: "
                f"{', '.join(f'{w}: {self.updates_by_worker.get(w, 0)}' for w in range(self.workers))})"
            )
        with parameter_servers_checked():
            counts = self.applied.numpy()[: self.scheduled]
        twice = [int(step) + 1 for step in np.flatnonzero(counts > 1)]
        if twice:
            faults.append(
                f"parameter-server run: step(s) {', '.join(map(str, twice[:10]))} were applied twice (a closure "
                "re-run after its worker failed, its first update already on the parameter servers)"
            )
        return faults


def planned_updates(config, train_rows: int, workers: int) -> int:
    """The run's updates: one per worker's share of each global batch, every epoch's
    own batch (--batch_schedule), up to --max_steps; one slot per update in the ps's counters."""
    updates = workers * sum(steps_per_epoch(train_rows, config.effective_batch_at(e)) for e in range(config.num_epochs))
    return max(1, min(updates, config.max_steps or updates))


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
