"""The loop of the asynchronous strategies (ps, async): workers apply their updates
whenever they are done, and every applied update is one CSV row, naming its worker
and its staleness. Framework-free: a wrapper supplies an `UpdatePool`.

The shared batch order is cut as for data parallel: each step's global batch into
`pool.parts` pieces (the workers' shares), handed out in order to whichever worker
is free. One epoch applies steps x parts updates (one worker: exactly the one-device
run's steps); a `--ps_sync` pool takes whole steps (parts = 1) and applies each once.
--max_steps counts applied updates.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional, Protocol

import numpy as np

from algorithms.run.loop import batched_logits, finish_with_test, validate
from algorithms.spec.parallel import split_ranges

POLL_S = 1.0  # how often a wait for the next update checks that every process still lives


@dataclass(frozen=True)
class Update:
    """One applied update, as its worker reports it."""

    worker: int
    loss: float  # mean over its samples
    accuracy: float
    step_time_ms: float  # the worker's time for it: read, forward, backward, apply
    data_time_ms: float
    samples: int
    staleness: int  # updates other workers applied between this one's read and its apply
    comm_time_ms: Optional[float] = None


class UpdatePool(Protocol):
    slots: int  # jobs in flight at once (the workers)
    parts: int  # pieces each step's batch is cut into

    def submit(self, slot: int, indices: np.ndarray, learning_rate: float) -> None: ...

    def result(self, timeout_s: float) -> Optional[Update]:
        """The next applied update, or None if none came within the timeout."""

    def check(self, after: str) -> None:
        """Raises errors.PeerLost if a process of the run has died."""

    def logits(self, images: np.ndarray) -> np.ndarray: ...


def train_by_updates(pool: UpdatePool, session) -> dict:
    config = session.config

    def logits_fn(images):
        return batched_logits(pool.logits, images, config.batch_size)

    limit = config.max_steps or float("inf")
    issued = 0
    for epoch in range(config.num_epochs):
        session.begin_epoch(epoch)  # --batch_schedule / --lr_schedule phases; eager torch needs no re-trace
        jobs = deque(
            indices[start:stop]
            for (indices,) in session.optimizer_batches(epoch)
            for start, stop in split_ranges(len(indices), pool.parts)
        )
        free, pending = list(range(pool.slots)), 0
        while jobs or pending:
            while free and jobs and issued < limit:
                pool.submit(free.pop(0), jobs.popleft(), session.learning_rate)
                issued, pending = issued + 1, pending + 1
            if not pending:
                break
            update = pool.result(POLL_S)
            pool.check(after=f"after {session.step} applied updates")  # the others may go on without it
            if update is None:
                continue
            pending -= 1
            free.append(update.worker if pool.slots > 1 else 0)
            session.train_step(
                epoch,
                update.loss,
                update.accuracy,
                update.step_time_ms,
                update.data_time_ms,
                update.samples,
                update.comm_time_ms,
                worker=update.worker,
                staleness=update.staleness,
            )
        validate(session, epoch, logits_fn)
        if session.should_stop():
            break
    return finish_with_test(session, logits_fn)
