"""When a run cannot go on normally: a signal (Ctrl-C, SIGTERM from a scheduler or
`kill`), running out of memory; and the loss sanity checks that name likely
causes. Framework-free: out-of-memory is recognised by the exception's type name
and message, which is all the frameworks have in common."""
from __future__ import annotations

import math
import signal
import sys
import threading
from typing import Callable, Optional


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
        print(f"\n{_name(signum)}: stopping after the step in progress (send it again to stop at once)",
              file=sys.stderr, flush=True)

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
    return 128 + (signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)


OUT_OF_MEMORY_TYPES = {"MemoryError", "OutOfMemoryError", "ResourceExhaustedError", "XlaRuntimeError"}
OUT_OF_MEMORY_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory", "resource exhausted",
                      "oom when allocating", "std::bad_alloc", "failed to allocate", "resource_exhausted")


def is_out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    if isinstance(error, MemoryError) or any(pattern in text for pattern in OUT_OF_MEMORY_TEXT):
        return True
    return type(error).__name__ in OUT_OF_MEMORY_TYPES and "memory" in text


def out_of_memory_advice(batch_size: int, accumulate_supported: bool) -> str:
    smaller = max(1, batch_size // 4)
    advice = f"use a smaller --batch_size (e.g. {smaller})"
    if accumulate_supported:
        advice += (f", or keep the effective batch with --batch_size {smaller} --accumulate "
                   f"{max(1, batch_size // smaller)} (gradient accumulation)")
    return advice


# --------------------------------------------------------------------------- loss sanity

FIRST_LOSS_TOLERANCE = 0.5   # a Glorot-initialised net starts within a few hundredths of ln(classes)
STUCK_TOLERANCE = 0.02       # an epoch's mean loss this close to ln(classes): nothing learned


def first_loss_problem(loss: float, num_classes: int) -> Optional[str]:
    chance = math.log(num_classes)
    if not math.isfinite(loss):
        return (f"the first step's loss is {loss}: likely causes: input not normalised to [0, 1] "
                "(pixels 0-255 fed as they are), or labels outside 0..classes-1")
    if abs(loss - chance) > FIRST_LOSS_TOLERANCE:
        return (f"the first step's loss is {loss:.4f}, far from ln({num_classes}) = {chance:.4f}, the loss of an "
                "untrained net that guesses uniformly: likely causes: input not normalised to [0, 1], "
                "labels that do not match the loss (one-hot vs integer, wrong number of classes), "
                "or weights not initialised as the spec says")
    return None


def stuck_loss_problem(epoch_loss: float, num_classes: int, learning_rate: float) -> Optional[str]:
    chance = math.log(num_classes)
    if not math.isfinite(epoch_loss):
        return (f"the loss became {epoch_loss} during the first epoch: the learning rate ({learning_rate:g}) "
                "is likely too high; try a tenth of it")
    if abs(epoch_loss - chance) < STUCK_TOLERANCE:
        return (f"the loss is still {epoch_loss:.4f} ~ ln({num_classes}) after an epoch: the net learned nothing. "
                f"Likely causes: learning rate too high ({learning_rate:g}: the ReLUs died) or far too low, "
                "labels shuffled apart from their images, or input not normalised")
    return None
