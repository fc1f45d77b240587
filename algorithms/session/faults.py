"""When a run cannot go on normally: a signal (Ctrl-C, SIGTERM from a scheduler or
`kill`), running out of memory; and the loss sanity checks that name likely
causes. Framework-free: out-of-memory is recognised by the exception's type name
and message, which is all the frameworks have in common."""

from __future__ import annotations

import errno
import math
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from algorithms.errors import EXIT_SIGINT, EXIT_SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so the same handler keeps the
    finished rows and writes the interrupted block."""


_requested_signal: Optional[int] = None


def install_signal_handlers() -> None:
    """Ctrl-C and SIGTERM stop the run after the step in progress: the handler only
    notes the signal, and `raise_if_stop_requested` (called by the session after
    each step) raises. Raising from the handler itself is not enough: a signal
    that arrives while the main thread waits inside a framework's C++ (jax's
    block_until_ready) is swallowed there. A second signal raises at once."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, frame):
        global _requested_signal
        if _requested_signal is not None:
            raise _interruption(signum)
        _requested_signal = signum
        print(
            f"\n{_name(signum)}: stopping after the step in progress (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def raise_if_stop_requested(signal_of_any_process: Optional[Callable[[int], int]] = None) -> None:
    """Raises if a stop was requested. In a multi-process run every process must stop
    after the same step (one that stops early leaves the others to fail, or to wait
    in a collective until their launcher kills them, unrecorded), so the wrapper
    passes `signal_of_any_process`: it takes this process's signal number (0: none)
    and returns the one any process received (0: none), one collective per step."""
    requested = _requested_signal
    if signal_of_any_process is not None:
        requested = signal_of_any_process(requested or 0) or None
    if requested is not None:
        raise _interruption(requested)


def _interruption(signum: int) -> KeyboardInterrupt:
    return Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()


def _name(signum: int) -> str:
    return "SIGTERM" if signum == signal.SIGTERM else "SIGINT (Ctrl-C)"


def interruption_name(error: KeyboardInterrupt) -> str:
    return _name(signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)


def exit_status(error: KeyboardInterrupt) -> int:
    """The shell's convention: 128 + the signal number."""
    return EXIT_SIGTERM if isinstance(error, Terminated) else EXIT_SIGINT


OUT_OF_MEMORY_TYPES = {"MemoryError", "OutOfMemoryError", "ResourceExhaustedError", "XlaRuntimeError"}
OUT_OF_MEMORY_TEXT = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "resource exhausted",
    "oom when allocating",
    "std::bad_alloc",
    "failed to allocate",
    "resource_exhausted",
)


def is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    if isinstance(error, MemoryError) or any(pattern in text for pattern in OUT_OF_MEMORY_TEXT):
        return True
    return type(error).__name__ in OUT_OF_MEMORY_TYPES and "memory" in text


OUT_OF_SPACE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}
OUT_OF_SPACE_TEXT = ("no space left on device", "file too large", "disk quota exceeded", "read-only file system")


def is_out_of_space(error: BaseException) -> bool:
    """A write the disk refused: full, over a quota or the file-size limit, or read-only.
    By errno for Python's own writes; by message for a framework's writer (torch.save
    raises RuntimeError with the system's text)."""
    if isinstance(error, OSError) and error.errno in OUT_OF_SPACE_ERRNOS:
        return True
    return any(pattern in str(error).lower() for pattern in OUT_OF_SPACE_TEXT)


# a thread or process the kernel refused (EAGAIN: a limit on processes such as RLIMIT_NPROC,
# which counts threads), as Python's threading, subprocess and the frameworks' own threads say it
OUT_OF_PROCESSES_TEXT = ("can't start new thread", "resource temporarily unavailable")


def is_out_of_processes(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno == errno.EAGAIN:
        return True
    return isinstance(error, (OSError, RuntimeError)) and any(p in str(error).lower() for p in OUT_OF_PROCESSES_TEXT)


def out_of_memory_advice(batch_size: int, accumulate_supported: bool) -> str:
    smaller = max(1, batch_size // 4)
    advice = f"use a smaller --batch_size (e.g. {smaller})"
    if accumulate_supported:
        advice += (
            f", or keep the effective batch with --batch_size {smaller} --accumulate "
            f"{max(1, batch_size // smaller)} (gradient accumulation)"
        )
    return advice


# --------------------------------------------------------------------------- loss sanity

FIRST_LOSS_TOLERANCE = 0.5  # a Glorot-initialised net starts within a few hundredths of ln(classes)
# "learned nothing" is judged once, at the first epoch end with this many updates and samples behind it:
# every preset, healthy, is then well above chance on the validation rows (the 3-layer net at batch 1000,
# 20 updates: 0.25-0.56 over seeds 0-2; after its first 4 it can still be at 0.14)
STUCK_MIN_UPDATES = 20
STUCK_MIN_SAMPLES = 2_000
CHANCE_MARGIN_SE = 3.0  # validation accuracy within 3 standard errors of the commonest class's share
STUCK_LOSS_MARGIN = 0.1  # and a validation loss no further than this below ln(classes)
DIVERGED_FACTOR = 2.0  # an epoch's mean loss above 2 x ln(classes), or not finite: diverged


def first_loss_problem(loss: float, num_classes: int) -> Optional[str]:
    chance = math.log(num_classes)
    if not math.isfinite(loss):
        return (
            f"the first step's loss is {loss}: likely causes: input not normalised to [0, 1] "
            "(pixels 0-255 fed as they are), or labels outside 0..classes-1"
        )
    if abs(loss - chance) > FIRST_LOSS_TOLERANCE:
        return (
            f"the first step's loss is {loss:.4f}, far from ln({num_classes}) = {chance:.4f}, the loss of an "
            "untrained net that guesses uniformly: likely causes: input not normalised to [0, 1], "
            "labels that do not match the loss (one-hot vs integer, wrong number of classes), "
            "or weights not initialised as the spec says"
        )
    return None


@dataclass(frozen=True)
class EpochEvidence:
    """What the loss checks see at the end of an epoch: the run's progress so far
    and at the end of the epoch before, and this epoch's losses."""

    epoch: int  # 0-based
    updates: int  # optimizer steps so far in the run
    samples: int  # training samples seen so far
    updates_before: int  # the same at the end of the previous epoch
    samples_before: int
    train_loss: float  # mean of this epoch's step losses
    val_loss: float
    val_accuracy: float
    val_labels: np.ndarray
    previous_losses: Optional[tuple] = None  # (train, val) of the previous epoch; None in the first


def stuck_loss_problem(evidence: EpochEvidence, num_classes: int, learning_rate: float) -> Optional[str]:
    """Called at every epoch end; names a problem at most once of each kind.

    Diverged: the first epoch end whose mean training loss or validation loss is not
    finite or above DIVERGED_FACTOR x ln(classes) (a net that guesses uniformly scores
    ln(classes); a healthy one never averages twice that over an epoch).

    Learned nothing: judged once, at the first epoch end by which the run has made
    STUCK_MIN_UPDATES optimizer updates and seen STUCK_MIN_SAMPLES samples (the
    progress every healthy preset shows by then; an epoch of 4 updates at batch 1000 is
    too early to tell, and a shorter run is not judged). The net learned nothing if the
    validation accuracy is within CHANCE_MARGIN_SE standard errors of always guessing
    the commonest class, and the validation loss is still about ln(classes) or above.
    Validation is scored without dropout on every row held out, so one noisy step or a
    spike of the unstable SGD preset does not decide it; shuffled labels, dead ReLUs
    and a learning rate far too low all leave both at chance."""
    chance = math.log(num_classes)

    def diverged(losses) -> bool:
        return any(not math.isfinite(loss) or loss > DIVERGED_FACTOR * chance for loss in losses)

    if diverged((evidence.train_loss, evidence.val_loss)):
        if evidence.previous_losses is not None and diverged(evidence.previous_losses):
            return None  # named at the epoch it happened
        loss = evidence.train_loss if diverged((evidence.train_loss,)) else evidence.val_loss
        when = "the first epoch" if evidence.epoch == 0 else f"epoch {evidence.epoch + 1}"
        return (
            f"the loss became {loss:.4g} during {when}: the learning rate ({learning_rate:g}) "
            "is likely too high; try a tenth of it (or the input is not normalised to [0, 1])"
        )
    enough = evidence.updates >= STUCK_MIN_UPDATES and evidence.samples >= STUCK_MIN_SAMPLES
    enough_before = evidence.updates_before >= STUCK_MIN_UPDATES and evidence.samples_before >= STUCK_MIN_SAMPLES
    count = len(evidence.val_labels)
    if not enough or enough_before or count == 0:
        return None
    guess = np.bincount(evidence.val_labels).max() / count
    if within_chance(evidence.val_accuracy, guess, count) and evidence.val_loss >= chance - STUCK_LOSS_MARGIN:
        return (
            f"after {evidence.updates} updates ({evidence.samples:,} samples) the validation accuracy is "
            f"{evidence.val_accuracy:.3f}, no better than always guessing the commonest class ({guess:.3f}), "
            f"and the validation loss is {evidence.val_loss:.4f} (ln({num_classes}) = {chance:.4f} for a "
            f"uniform guess): the net learned nothing. Likely causes: learning rate too high "
            f"({learning_rate:g}: the ReLUs died) or far too low, labels shuffled apart from their images, "
            "or input not normalised"
        )
    return None


NEAR_CHANCE = "ended near chance"  # how the diagnostic begins: the scaling report reads it from results.log


def within_chance(accuracy: float, guess: float, rows: int, margin_se: float = CHANCE_MARGIN_SE) -> bool:
    """Whether an accuracy scored on `rows` rows is within `margin_se` binomial standard
    errors of `guess`, what a net that ignores its input scores: the one test of "at
    chance" here and in the seed regime's (analysis/spread.py)."""
    return accuracy <= guess + margin_se * math.sqrt(guess * (1 - guess) / rows)


def guess_accuracy(labels: np.ndarray, num_classes: int) -> float:
    """What a net that ignores its input scores on these labels: the better of a uniform
    guess (1 / classes) and always naming the commonest class."""
    return max(1.0 / num_classes, float(np.bincount(labels).max()) / len(labels))


def near_chance_problem(scores: list, num_classes: int, updates: int) -> Optional[str]:
    """Called once, when a run ends. `scores`: (what, final accuracy, its labels) of each
    set the run was last scored on (validation, the labelled test set). A final accuracy
    within CHANCE_MARGIN_SE standard errors of guessing (guess_accuracy, its binomial
    standard error over those rows) says the run learned nothing usable, whatever the
    cause (a learning rate far off, too few steps, a broken strategy), so its speed and
    its curves describe no training: said on the console and on results.log's
    diagnostics line, and the scaling report marks its row."""
    near = []
    for what, accuracy, labels in scores:
        if accuracy is None or labels is None or len(labels) == 0:
            continue
        guess = guess_accuracy(labels, num_classes)
        if within_chance(accuracy, guess, len(labels)):
            near.append(f"{what} accuracy {accuracy:.4f} ({len(labels)} rows; guessing scores {guess:.3f})")
    if not near:
        return None
    verb = "is" if len(near) == 1 else "are"
    return (
        f"{NEAR_CHANCE}: the final {' and '.join(near)} {verb} within {CHANCE_MARGIN_SE:g} standard errors "
        f"of guessing without looking: after {updates} updates the net has learned nothing usable "
        "(too few steps, a learning rate far off, or a strategy that does not train)"
    )
