"""Devices and tf.distribute strategies for the plan's strategy.

    single    the default device
    model     the plan's stages on GPUs 0..N-1, else on N logical CPU devices
    pipeline  the same, fed micro-batches (trainer.py)
    tensor    one channel shard per device, the same devices (tensor_parallel.py)
    data      MirroredStrategy over N GPUs, else over N logical CPU devices;
              with TF_CONFIG set, MultiWorkerMirroredStrategy across its workers

Logical CPU devices can only be made before TensorFlow initialises its devices,
so nothing here (nor describe_runtime) may run an op before `local_devices`
(backends/tensorflow_backend.py, which Keras's MirroredStrategy uses too).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal

import tensorflow as tf

from algorithms.errors import PeerLost
from backends.tensorflow_backend import local_devices

# a collective that waits longer than this on a dead peer fails the run instead of hanging
COLLECTIVE_TIMEOUT_S = 30


def tf_config() -> dict | None:
    """The cluster description of a multi-worker run (TF_CONFIG), or None."""
    text = os.environ.get("TF_CONFIG", "").strip()
    return json.loads(text) if text else None


def is_chief(cluster: dict | None) -> bool:
    """TensorFlow's rule: the 'chief' task if the cluster names one, else worker 0."""
    if not cluster:
        return True
    task = cluster.get("task", {})
    if "chief" in cluster.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and int(task.get("index", 0)) == 0


_MULTI_WORKER: list = []  # the process's one MultiWorkerMirroredStrategy, once made


def multi_worker_strategy():
    """The process's MultiWorkerMirroredStrategy, made at its first use and kept: a run trains
    up to four times in one process (its epoch check, its yardstick's twins, itself), and a
    second strategy enables the collective ops again ("Enabling collective ops after program
    startup"), after which a broadcast may fail on a loaded machine (CollectiveBcastRecv)."""
    if not _MULTI_WORKER:
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=COLLECTIVE_TIMEOUT_S)
        _MULTI_WORKER.append(tf.distribute.MultiWorkerMirroredStrategy(communication_options=options))
    return _MULTI_WORKER[0]


def data_parallel_strategy(devices: int):
    """MirroredStrategy on this machine, or MultiWorkerMirroredStrategy when TF_CONFIG
    names a cluster; either way `devices` must be the number of replicas in sync."""
    if tf_config():
        strategy = multi_worker_strategy()
        if strategy.num_replicas_in_sync != devices:
            raise RuntimeError(
                f"--devices {devices}: TF_CONFIG's cluster has {strategy.num_replicas_in_sync} "
                "replicas in sync (workers x local GPUs, or one CPU per worker); pass that"
            )
        return strategy
    return tf.distribute.MirroredStrategy(local_devices(devices))


def signal_of_any_worker(strategy):
    """For `session.signal_of_any_process` in a multi-worker run: every worker passes
    the signal it received (0: none) and gets the one any worker received, so all
    stop after the same step (one that stops alone leaves the others to fail in the
    next all-reduce). The collectives only sum, so each worker adds a one-hot of
    its signal; SIGTERM wins over SIGINT. One small all-reduce a step, untimed."""
    choices = (signal.SIGINT, signal.SIGTERM)
    add_up = tf.function(lambda votes: strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None))

    def agree(signum: int) -> int:
        vote = tf.constant([float(signum == choice) for choice in choices])
        with peers_checked():
            totals = add_up(strategy.experimental_distribute_values_from_function(lambda _: vote)).numpy()
        return max((int(choice) for choice, total in zip(choices, totals) if total > 0), default=0)

    return agree


class WorkerLost(PeerLost):
    """A peer of a multi-worker run died or stopped answering; this worker stops too
    (one line and status 4, as every lost peer)."""


_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def lost_tasks(message: str) -> str:
    """The tasks a gRPC error names, each with its address from TF_CONFIG: "worker 1 at
    10.77.0.2:2222"; the other workers' addresses when it names none of them."""
    cluster = (tf_config() or {}).get("cluster", {})
    me = (tf_config() or {}).get("task", {})
    named = {(job, int(task)) for job, task in _TASK.findall(message)} - {(me.get("type"), me.get("index"))}
    if not named:  # the error does not say which: every other task may be the one
        named = {(job, task) for job, hosts in cluster.items() for task in range(len(hosts))}
        named -= {(me.get("type"), me.get("index"))}
    return ", ".join(
        f"{job} {task}" + (f" at {cluster[job][task]}" if task < len(cluster.get(job, [])) else "")
        for job, task in sorted(named)
    )


@contextlib.contextmanager
def peers_checked():
    """Turns the multi-line gRPC error of a collective whose peer is gone into one line."""
    try:
        yield
    except (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.CancelledError,
        tf.errors.AbortedError,
        tf.errors.InternalError,
    ) as error:
        lines = [line.strip() for line in str(error.message).splitlines() if line.strip()]
        at = next(
            (i for i, line in enumerate(lines) if any(w in line for w in ("aborted by", "reset", "timed out"))), 0
        )
        cause = " ".join(lines[at : at + 2]) if lines and lines[at].endswith(":") else (lines[at] if lines else "")
        lost = lost_tasks(str(error.message))
        raise WorkerLost(
            f"lost {lost or 'a worker'}: a worker of this multi-worker run stopped or is unreachable "
            f"({type(error).__name__}: {cause}); every worker stops, restart them all to retry"
        ) from None


def describe_devices() -> str:
    """Physical devices (listing logical ones would initialise them too early)."""
    text = ", ".join(device.name for device in tf.config.list_physical_devices())
    cluster = tf_config()
    if cluster:
        task = cluster.get("task", {})
        workers = sum(len(hosts) for hosts in cluster.get("cluster", {}).values())
        text += f"; multi-worker: {task.get('type')} {task.get('index')} of {workers} tasks"
        jobs = cluster.get("cluster", {})
        if "ps" in jobs:
            text += f" ({len(jobs.get('worker', []))} workers, {len(jobs['ps'])} parameter servers)"
        if os.environ.get("CNN_PARALLEL_PS_NETWORK"):  # set by cluster.py's local launcher
            text += f"; {os.environ['CNN_PARALLEL_PS_NETWORK']}"
    return text
