"""The Keras-like lines a person reads while a run trains: a progress line per step
(rewritten in place on a terminal, one every NON_TTY_PROGRESS_EVERY_S otherwise) and
a line per epoch. --quiet keeps only the epoch lines; a worker process that leaves
the records to its chief prints nothing."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Optional

NON_TTY_PROGRESS_EVERY_S = 15.0


def _silent(*args, **kwargs) -> None:
    pass


class Progress:
    def __init__(self, num_epochs: int, quiet: bool, record: bool):
        self.num_epochs, self.quiet = num_epochs, quiet
        self.say = print if record else _silent  # every line of the run goes through this
        self._tty = sys.stdout.isatty()
        # this epoch's steps, for its progress and epoch lines and its mean train loss
        self._losses: list = []
        self._accuracies: list = []
        self._step_times_ms: list = []
        self._epoch_start = self._last_line = time.perf_counter()

    def step(self, epoch: int, loss: float, accuracy: float, step_time_ms: float, steps_per_epoch: int) -> None:
        self._losses.append(loss)
        self._accuracies.append(accuracy)
        self._step_times_ms.append(step_time_ms)
        if self.quiet:
            return
        text = (
            f"  {len(self._losses)}/{steps_per_epoch} - loss: {statistics.fmean(self._losses):.4f} - "
            f"acc: {statistics.fmean(self._accuracies):.4f} - {step_time_ms:.0f} ms/step"
        )
        now = time.perf_counter()
        if self._tty:
            self.say("\r" + text, end="", flush=True)
        elif len(self._losses) < steps_per_epoch and now - self._last_line >= NON_TTY_PROGRESS_EVERY_S:
            # (not at the epoch's last step: its epoch line follows at once, and says the same)
            self.say(f"Epoch {epoch + 1}/{self.num_epochs} -" + text, flush=True)
            self._last_line = now

    @property
    def epoch_steps(self) -> int:
        """Steps of the current epoch so far, a resumed run's before its checkpoint included."""
        return len(self._losses)

    def state(self) -> dict:
        """This epoch's steps so far, for a checkpoint: a run resumed from it reports the
        whole epoch, the steps before the checkpoint included."""
        return {
            "epoch_losses": self._losses,
            "epoch_accuracies": self._accuracies,
            "epoch_step_ms": self._step_times_ms,
        }

    def restore(self, state: dict) -> None:
        """`state()` of the checkpointed run (a checkpoint older than it has none: the epoch
        line then covers the steps after the resume only)."""
        self._losses = list(state.get("epoch_losses", []))
        self._accuracies = list(state.get("epoch_accuracies", []))
        self._step_times_ms = list(state.get("epoch_step_ms", []))

    def epoch_means(self) -> Optional[tuple]:
        """(mean train loss, mean accuracy) over this epoch's steps, None if it ran none."""
        if not self._losses:
            return None
        return statistics.fmean(self._losses), statistics.fmean(self._accuracies)

    def end_epoch(
        self, epoch: int, steps_per_epoch: int, last_train: Optional[tuple], val: tuple, extra: str = ""
    ) -> tuple:
        """The epoch's line (its mean train loss and accuracy, `last_train` where it ran no
        step; `extra` appended), then a fresh epoch. Returns (the epoch's steps, its train
        means): the session's answer in one call."""
        epoch_steps, train = self.epoch_steps, self.epoch_means() or last_train
        now = time.perf_counter()
        ms_step = f"{statistics.median(self._step_times_ms):.1f}" if self._step_times_ms else "n/a"
        train_text = "n/a" if train is None else f"{train[0]:.4f} - acc: {train[1]:.4f}"
        line = (
            f"Epoch {epoch + 1}/{self.num_epochs} - {self.epoch_steps}/{steps_per_epoch} steps - "
            f"{now - self._epoch_start:.1f}s - loss: {train_text} - "
            f"val_loss: {val[0]:.4f} - val_acc: {val[1]:.4f} - {ms_step} ms/step{extra}"
        )
        self.say(("\r" if self._tty and not self.quiet else "") + line, flush=True)
        self._losses, self._accuracies, self._step_times_ms = [], [], []
        self._epoch_start = self._last_line = now
        return epoch_steps, train
