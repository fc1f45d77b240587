"""A run's clocks. RunClock: the CSV's wall_time_s and the time to accuracy. It counts
from the session's start and, after --resume, goes on from the time the checkpoint
carries, so a resumed run's clock never goes back; what the interrupted process
spent after its last checkpoint is not counted (its steps are run again). CommClock: a
step's comm_time_ms, the time spent inside its communication calls."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Optional


class RunClock:
    def __init__(self):
        self.before_s = 0.0  # seconds the run had used in the processes before this one (--resume)
        self._start = time.perf_counter()
        self.paused_s = 0.0  # time the run spent checking itself (the step check), not training

    def elapsed_s(self) -> float:
        return self.before_s + time.perf_counter() - self._start - self.paused_s

    @contextmanager
    def paused(self):
        """What runs inside is not the run's training time (wall_time_s leaves it out)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - start

    def state(self) -> dict:
        return {"wall_time_s": self.elapsed_s()}

    def restore(self, state: dict) -> None:
        """A checkpoint written before the clock was carried has none: it starts from 0, as it did."""
        self.before_s = state.get("wall_time_s", 0.0)


class CommClock:
    """Milliseconds spent inside communication calls since the last `take()`."""

    def __init__(self, measures: bool = True):
        self.measures = measures  # False where calls return before the transfer is done (nccl)
        self._ms = 0.0

    @contextmanager
    def timing(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._ms += (time.perf_counter() - start) * 1000.0

    def take(self) -> Optional[float]:
        ms, self._ms = self._ms, 0.0
        return ms if self.measures else None
