"""The probe's library: what a wrapper's native.py builds its side of the benchmark on
(a `NativeLoop` of the framework's own steps, the `HandStepHarness` of the entry
script's step for a wrapper that loop.py's train_by_hand drives, a compiled pair), and
how the probe process (probe.py) times them: the steps of the shared batch order,
native and harness blocks interleaved, their paired ratio, the data share of the
harness's own rows. Imports no framework."""

from __future__ import annotations

import random
import statistics
import time
from abc import ABC, abstractmethod

from algorithms.records import read_rows
from algorithms.run.loop import prefetcher_for, run_step
from algorithms.session.run_session import RunSession

WARMUP_BLOCKS = 1  # the first native and harness blocks (compilation, caches) are not counted


class HandStepHarness:
    """The wrapper's trainer stepped by algorithms/run/loop.py's own `run_step`, one
    externally timed step at a time (CSV row, lr schedule and all)."""

    def __init__(self, trainer, session: RunSession):
        self.trainer, self.session = trainer, session
        self.prefetcher = prefetcher_for(trainer, session)  # as train_by_hand: the next step made ahead
        self.following: dict = {}  # id(parts) -> the schedule's next parts
        self.learning_rate = session.config.optimizer.learning_rate
        self.outside_step_ms: list = []  # batch copy, lr check, CSV row, progress: the loop's own cost
        self.call_overhead_ms: list = []  # each step is timed whole, as its own call: none beside the steps

    def run(self, steps: list) -> list:
        times = []
        for epoch, parts in steps:
            next_parts = self.following.get(id(parts))
            start = time.perf_counter()
            self.learning_rate, _ = run_step(  # the session's answer (checkpoint, stop) is asked, as in the loop
                self.trainer, self.session, epoch, parts, self.learning_rate, self.prefetcher, next_parts
            )
            times.append((time.perf_counter() - start) * 1000.0)
            self.outside_step_ms.append(times[-1] - self.session.step_times_ms[-1])
        return times

    def plan(self, schedule: list) -> None:
        """The steps to come, so each step's successor is gathered ahead as in train_by_hand."""
        self.following = {id(parts): following for (_, parts), (_, following) in zip(schedule, schedule[1:])}


def hand_step_harness(build_trainer):
    """The `Harness(config, session)` of a wrapper that train_by_hand drives: its
    `build_trainer(config)`'s trainer in a HandStepHarness."""

    def harness(config, session: RunSession) -> HandStepHarness:
        return HandStepHarness(build_trainer(config), session)

    return harness


class NativeLoop(ABC):
    """A `Native` that steps the framework by hand: a subclass fills `batches` (id(parts)
    -> the framework's own batch, converted before any timing) and gives `native_step(batch)`,
    the framework's step and nothing else; each step is timed alone, and what it returns
    (its loss, still on the framework's side: None where the step returns nothing) is kept
    in `losses`, read after the timed steps."""

    batches: dict
    losses: list

    @abstractmethod
    def native_step(self, batch): ...

    def run(self, steps: list) -> list:
        times = []
        for _, parts in steps:
            batch = self.batches[id(parts)]
            start = time.perf_counter()
            self.losses.append(self.native_step(batch))
            times.append((time.perf_counter() - start) * 1000.0)
        return times


def step_schedule(session: RunSession, count: int, whole_only: bool = False) -> list:
    """The first `count` optimizer steps of the shared batch order, as (epoch, parts);
    `whole_only`: only steps of the whole batch (an epoch's short last step left out, so
    a step timed at batch B trains B rows)."""
    schedule, epoch, whole = [], 0, session.config.effective_batch
    while len(schedule) < count:
        steps = session.optimizer_batches(epoch)
        if whole_only:
            steps = [parts for parts in steps if sum(len(indices) for indices in parts) == whole]
            if not steps:
                raise ValueError(f"no step of {whole} rows in an epoch of {len(session.dataset.train_x)}")
        schedule += [(epoch, parts) for parts in steps]
        epoch += 1
    return schedule[:count]


def interleaved(native, harness, schedule: list, block: int, between=None) -> tuple:
    """Alternate blocks of native and harness steps over the same batches; the
    first block of each is warm-up; `between()` after every second timed pair.
    Returns (native ms list, harness ms list)."""
    native_ms, harness_ms = [], []
    for index, start in enumerate(range(0, len(schedule), block)):
        steps = schedule[start : start + block]
        native_times, harness_times = native.run(steps), harness.run(steps)
        if index >= WARMUP_BLOCKS:
            native_ms += native_times
            harness_ms += harness_times
            if between and index % 2:
                between()
    return native_ms, harness_ms


def paired_ratio(native_ms: list, harness_ms: list, block: int = 1) -> tuple:
    """harness/native as the median of the per-block ratios (each pair ran the same
    batches moments apart, so a slow spell of the shared machine hits both), and its
    95% bootstrap interval: how far the machine's noise alone moves that median."""

    def sums(times):
        return [sum(times[start : start + block]) for start in range(0, len(times), block)]

    ratios = [harness / native for native, harness in zip(sums(native_ms), sums(harness_ms))]
    draws = random.Random(0)
    medians = sorted(statistics.median(draws.choices(ratios, k=len(ratios))) for _ in range(2000))
    return statistics.median(ratios), (medians[49], medians[1949])


def seconds_per_call(call, reps: int) -> float:
    """One untimed warm-up call, then the mean time of `reps` calls."""
    call()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - start) / reps


def compiled_pair_ms(native, harness, schedule: list, block: int, label: str) -> dict:
    """A compiled native loop beside the entry script's compiled step: one block each
    to compile, then one timed block each; median ms/step of each."""
    native.run(schedule[:block])
    harness.run(schedule[:block])
    native_ms, harness_ms = [], []
    for start in range(block, min(len(schedule), 2 * block), block):
        native_ms += native.run(schedule[start : start + block])
        harness_ms += harness.run(schedule[start : start + block])
    return {f"{label} native": statistics.median(native_ms), f"{label} harness": statistics.median(harness_ms)}


def data_share(session: RunSession, skip: int) -> float:
    """median data_time_ms / median step_time_ms of the harness's own CSV rows."""
    rows = [row for row in read_rows(session.csv_path, session.run_id) if row["phase"] == "train"][skip:]
    data = [row["data_time_ms"] for row in rows if row["data_time_ms"] is not None]
    steps = [row["step_time_ms"] for row in rows]
    return statistics.median(data) / statistics.median(steps) if data and steps else float("nan")
