"""The gradient noise scale of McCandlish et al. 2018 ("An Empirical Model of
Large-Batch Training", Appendix A.1), from the gradient norms a data-parallel step
already has: each replica's gradient before the all-reduce (batch B_small, the
per-replica batch) and the summed one after it (batch B_big, the global batch).

Since E|G_B|^2 = |G|^2 + tr(Sigma) / B, two batch sizes give unbiased estimates of both:

    |G|^2     = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Sigma) = (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

Each step's pair is noisy (either can be negative), so both are smoothed by an
exponential moving average over steps and B_simple = tr(Sigma) / |G|^2 is the ratio
of the averages; B_simple approximates the critical batch, beyond which a larger
batch buys little speed-up per sample. |G_small|^2 is the mean over the replicas
(their estimates are independent, so the mean is a better one). A framework wrapper
supplies the norms (GradientNorms, a type of the contract); everything else is here.
Imports no framework."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from algorithms.contract.types import GradientNorms

EMA_DECAY = 0.95  # per optimizer step: about the last 20 steps weigh in


def replica_gradient_norms(
    batch_sizes: Sequence[int], replicas: int, squared_norms: Callable[[], tuple]
) -> Optional[GradientNorms]:
    """One data-parallel step's GradientNorms over its batches (one, or K with
    --accumulate K), each split evenly over the replicas; None when one does not split
    evenly (the replicas' gradients would stand for unequal batches). `squared_norms()`
    gives (the replicas' squared gradient norms before the all-reduce, summed over
    them; the all-reduced gradient's squared norm), and is called only when the step
    counts. A replica's gradient is its share of the global mean (its samples' loss /
    the global batch): its own batch's mean gradient is `replicas` times it."""
    if any(size % replicas for size in batch_sizes):
        return None
    before_sum, after_sq = squared_norms()
    total = sum(batch_sizes)
    return GradientNorms(total / replicas, before_sum * replicas, total, after_sq)


def unbiased_estimates(norms: GradientNorms) -> tuple:
    """(|G|^2, tr(Sigma)) of one step, each unbiased (Appendix A.1)."""
    b_small, b_big = norms.small_batch, norms.big_batch
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < B_small < B_big, got {b_small} and {b_big}")
    gradient_sq = (b_big * norms.big_sq - b_small * norms.small_sq) / (b_big - b_small)
    trace = (norms.small_sq - norms.big_sq) / (1.0 / b_small - 1.0 / b_big)
    return gradient_sq, trace


class NoiseScale:
    """Exponential moving averages of both estimates, bias-corrected as Adam's
    moments are (so the first steps are not pulled toward zero)."""

    def __init__(self, decay: float = EMA_DECAY):
        self.decay = decay
        self.steps = 0
        self._gradient_sq = self._trace = 0.0
        self.epochs: list = []  # (epoch, B_simple or None, |G|^2, tr(Sigma)) at each epoch's end

    def update(self, norms: GradientNorms) -> None:
        gradient_sq, trace = unbiased_estimates(norms)
        self.steps += 1
        self._gradient_sq = self.decay * self._gradient_sq + (1.0 - self.decay) * gradient_sq
        self._trace = self.decay * self._trace + (1.0 - self.decay) * trace

    @property
    def gradient_sq(self) -> float:
        return self._gradient_sq / (1.0 - self.decay**self.steps) if self.steps else float("nan")

    @property
    def trace(self) -> float:
        return self._trace / (1.0 - self.decay**self.steps) if self.steps else float("nan")

    @property
    def b_simple(self) -> Optional[float]:
        """tr(Sigma) / |G|^2; None before any step or while either average is not positive
        (the noise still swamps the estimate)."""
        if not self.steps or self._gradient_sq <= 0 or self._trace <= 0:
            return None
        return self._trace / self._gradient_sq

    def end_epoch(self, epoch: int) -> None:
        self.epochs.append((epoch, self.b_simple, self.gradient_sq, self.trace))

    def describe(self) -> str:
        """results.log's line: every epoch's estimate, then the critical batch."""
        epochs = "; ".join(
            f"epoch {epoch + 1}: B_simple {_number(b_simple)} (|G|^2 {gradient_sq:.4g}, tr(Sigma) {trace:.4g})"
            for epoch, b_simple, gradient_sq, trace in self.epochs
        )
        return f"{epochs}; {self.critical_batch_text()} (EMA {self.decay:g} over {self.steps} steps)"

    def critical_batch_text(self) -> str:
        return f"critical batch ≈ {_number(self.b_simple)}"


def _number(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.0f}"
