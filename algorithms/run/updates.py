"""The loop of the asynchronous strategies (ps, async), in every framework that runs
them: workers apply their updates whenever they are done, and every applied update is
one CSV row, naming its worker and its staleness, with the worker's own time for it.
Framework-free: a wrapper supplies an `UpdatePool` (algorithms/contract/types.py).

The shared batch order is cut as for data parallel: each step's global batch into
`pool.parts` pieces (the workers' shares), handed out in order to whichever worker
is free. One epoch applies steps x parts updates (one worker: exactly the one-device
run's steps); a `--ps_sync` pool takes whole steps (parts = 1) and applies each once.
--max_steps counts applied updates.
"""

from __future__ import annotations

from collections import defaultdict, deque

from algorithms.contract.types import UpdatePool
from algorithms.run.loop import batched_logits, evaluate_initial, finish_with_test, validate
from algorithms.network.parallel import split_ranges

POLL_S = 1.0  # how often a wait for the next update checks that every process still lives


def train_by_updates(pool: UpdatePool, session) -> dict:
    config = session.config

    def logits_fn(images):
        return batched_logits(pool.logits, images, config.batch_size)

    limit = config.max_steps or float("inf")
    issued = 0
    evaluate_initial(session, logits_fn)
    for epoch in range(config.num_epochs):
        # --batch_schedule / --lr_schedule phases; no re-trace: every pool's step takes any
        # batch (eager torch; TensorFlow's closure has a None batch dimension)
        session.begin_epoch(epoch)
        jobs = deque(
            (indices[start:stop], len(indices))  # a share, and the rows of the global batch it is cut from
            for (indices,) in session.optimizer_batches(epoch)
            for start, stop in split_ranges(len(indices), pool.parts)
        )
        free, pending = list(range(pool.slots)), 0
        # share size -> the rows of the global batches the shares in flight were cut from, in the
        # order issued: an update says its rows, not its job (a pool's scheduler may pick its worker)
        global_rows = defaultdict(deque)
        while jobs or pending:
            while free and jobs and issued < limit:
                share, rows = jobs.popleft()
                pool.submit(free.pop(0), share, session.learning_rate, session.dropout_uniforms(epoch, share))
                global_rows[len(share)].append(rows)
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
                global_rows=global_rows[update.samples].popleft(),
            )
        validate(session, epoch, logits_fn)
        if session.should_stop():
            break
    for problem in pool.absorbed_faults():
        session.diagnose(problem)
    return finish_with_test(session, logits_fn)
