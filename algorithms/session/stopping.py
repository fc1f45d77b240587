"""When a run stops before its last epoch: --max_steps (after that many optimizer
steps), --early_stopping (after PATIENCE epochs without a lower validation loss) and
--target_accuracy (at the first validation at or above it: DAWNBench's time to
accuracy, the wall time since the run started, validation included)."""

from __future__ import annotations

from typing import Callable, Optional

from algorithms.config.run_config import RunConfig


class StoppingRules:
    def __init__(self, config: RunConfig, say: Callable):
        self.max_steps, self.patience, self.target = config.max_steps, config.early_stopping, config.target_accuracy
        self.num_epochs = config.num_epochs
        self.say = say
        self.best_val_loss = float("inf")
        self.epochs_without_gain = 0
        self.stopped_early = False  # by early stopping or the target
        self.target_reached: Optional[dict] = None  # where validation first reached --target_accuracy

    def should_stop(self, step: int) -> bool:
        return self.stopped_early or (self.max_steps is not None and step >= self.max_steps)

    def end_epoch(self, epoch: int, val_loss: float, val_accuracy: float, where: dict) -> None:
        """After the epoch's validation; `where`: its step, wall_s and samples (seen so far)."""
        self._early_stopping(epoch, val_loss)
        self._target(epoch, val_accuracy, where)

    def _early_stopping(self, epoch: int, val_loss: float) -> None:
        if val_loss < self.best_val_loss:
            self.best_val_loss, self.epochs_without_gain = val_loss, 0
            return
        self.epochs_without_gain += 1
        if self.patience and self.epochs_without_gain >= self.patience and epoch + 1 < self.num_epochs:
            self.stopped_early = True
            self.say(
                f"  early stopping: validation loss has not improved for {self.patience} epoch(s) "
                f"(best {self.best_val_loss:.4f})",
                flush=True,
            )

    def _target(self, epoch: int, val_accuracy: float, where: dict) -> None:
        if self.target is None or self.target_reached or val_accuracy < self.target:
            return
        self.target_reached = {"epoch": epoch + 1, **where, "accuracy": val_accuracy}
        self.stopped_early = True
        self.say(
            f"  target accuracy {self.target:g} reached: val_acc {val_accuracy:.4f} at epoch {epoch + 1}, "
            f"step {where['step']}, {where['wall_s']:.1f} s, {where['samples']:,} samples",
            flush=True,
        )

    def state(self) -> dict:
        """For a checkpoint (the keys state.json has always had for them)."""
        return {"best_val_loss": self.best_val_loss, "epochs_without_gain": self.epochs_without_gain}

    def restore(self, state: dict) -> None:
        self.best_val_loss, self.epochs_without_gain = state["best_val_loss"], state["epochs_without_gain"]
