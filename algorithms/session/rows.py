"""A run's rows in its results CSV (recorder.ResultsCsv): a train row per optimizer
step, a val row per epoch, a test row at the end, each with the run's identity
columns. A worker process that leaves the records to its chief writes none."""

from __future__ import annotations

from typing import Optional

from algorithms.session.recorder import ResultsCsv


class RunRows:
    def __init__(self, path: str, identity: dict, record: bool):
        self.path = path
        self._csv = ResultsCsv(path, identity) if record else None

    def set_global_batch(self, global_batch: int) -> None:
        """--batch_schedule: the rows from here on are at this epoch's batch (a train row
        says its own step's rows, write(global_batch=...))."""
        if self._csv is not None:
            self._csv.identity["global_batch"] = global_batch

    def write(
        self,
        phase: str,
        epoch: Optional[int],
        step: int,
        loss: float,
        accuracy: Optional[float],
        wall_time_s: float,
        **measured,
    ) -> None:
        """`epoch` 0-based (1-based in the CSV), None on the test row; `measured`: the
        other CSV columns the row has (learning_rate, step_time_ms, ...)."""
        if self._csv is not None:
            self._csv.write(
                epoch=None if epoch is None else epoch + 1,
                step=step,
                phase=phase,
                loss=loss,
                accuracy=accuracy,
                wall_time_s=wall_time_s,
                **measured,
            )

    def close(self) -> None:
        if self._csv is not None:
            self._csv.close()
