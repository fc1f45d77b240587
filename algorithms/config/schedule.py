"""The learning-rate schedule every wrapper follows, step by step: linear scaling with
the global batch, warm-up, --lr_schedule's rate per epoch and reduce-on-plateau; and
what of it a checkpoint keeps (`state`, `restore`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LearningRateSchedule:
    """lr for each optimizer step: the preset's lr, scaled linearly with the global
    batch (Goyal et al. 2017) when asked, ramped up linearly over the warm-up steps,
    and multiplied by `plateau_factor` each time validation loss stops improving
    for `plateau_patience` epochs. Per epoch (`start_epoch`): `epoch_rates` (--lr_schedule)
    replace the base lr, and with `reference_batch` (--lr_scaling linear) the scale
    follows the epoch's global batch (--batch_schedule)."""

    base: float
    scale: float = 1.0
    warmup_steps: int = 0
    plateau_patience: int = 0
    plateau_factor: float = 0.5
    reference_batch: int = 0
    epoch_rates: tuple = ()
    _plateau_multiplier: float = 1.0
    _best_val: float = float("inf")
    _epochs_without_gain: int = 0

    @property
    def peak(self) -> float:
        return self.base * self.scale

    def at(self, step: int) -> float:
        """`step` counts optimizer steps from 0."""
        warm = min(1.0, (step + 1) / self.warmup_steps) if self.warmup_steps else 1.0
        return self.peak * warm * self._plateau_multiplier

    def start_epoch(self, epoch: int, global_batch: int) -> None:
        """`epoch` 0-based; `global_batch` that epoch's samples per optimizer step."""
        if self.epoch_rates:
            self.base = [rate for first, rate in self.epoch_rates if first <= epoch + 1][-1]
        if self.reference_batch:
            self.scale = linear_scale(global_batch, self.reference_batch)

    def end_epoch(self, val_loss: float) -> bool:
        """Feeds one validation loss; True when the lr was just reduced."""
        if val_loss < self._best_val:
            self._best_val, self._epochs_without_gain = val_loss, 0
            return False
        self._epochs_without_gain += 1
        if self.plateau_patience and self._epochs_without_gain >= self.plateau_patience:
            self._plateau_multiplier *= self.plateau_factor
            self._epochs_without_gain = 0
            return True
        return False

    def state(self) -> dict:
        """What the validation losses so far have done to the lr, for a checkpoint. The base
        and scale are not in it: `start_epoch` sets them again from the flags."""
        return {
            "multiplier": self._plateau_multiplier,
            "best_val": self._best_val,
            "epochs_without_gain": self._epochs_without_gain,
        }

    def restore(self, state: dict) -> None:
        """`state()` of the checkpointed run (state.json's "schedule", the same keys since it had one)."""
        self._plateau_multiplier = state["multiplier"]
        self._best_val = state["best_val"]
        self._epochs_without_gain = state["epochs_without_gain"]


def linear_scale(global_batch: int, reference_batch: int) -> float:
    return global_batch / reference_batch
