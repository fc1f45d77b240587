"""The OpenBLAS that Theano (Lasagne, Keras 2) and Caffe compute their GEMMs in: Debian's
libopenblas, which Theano's `blas__ldflags=-lopenblas` and Caffe's build link. Before
either framework loads, `environment` names the best core that library has for this CPU
where its own pick is older (algorithms/machine/openblas.py); once loaded, `describe` says
which core ran, for the device's detail (the settings record: another core is a drift
source, like another CPU) and results.log. Loads no framework."""

from __future__ import annotations

import os
from typing import Optional

from algorithms.machine.openblas import CORETYPE, SYSTEM_OPENBLAS, Choice, Library, name_best_core

_choice: Optional[Choice] = None  # what environment() found in this process
_set: Optional[str] = None  # OPENBLAS_CORETYPE as environment() left it


def environment(threads: int) -> None:
    """Support.thread_environment of the wrappers on this OpenBLAS: its core, before it loads."""
    global _choice, _set
    _choice = name_best_core(SYSTEM_OPENBLAS)
    _set = os.environ.get(CORETYPE)


def kernels() -> str:
    """The library's version and the core it runs, for the device's detail."""
    library = Library.loaded(SYSTEM_OPENBLAS)
    return library.describe() if library else f"no {SYSTEM_OPENBLAS}"


def describe() -> str:
    """For results.log: the library, its core and why that core."""
    library = Library.loaded(SYSTEM_OPENBLAS)
    if library is None:
        return f"OpenBLAS: no {SYSTEM_OPENBLAS}"
    now = os.environ.get(CORETYPE)
    if _choice is None:
        why = f"{CORETYPE}={now}" if now else "OpenBLAS's own pick, not checked in this process"
    elif now != _set:  # --tuned's setting, applied after the check
        why = f"{CORETYPE}={now}, set by --tuned"
    else:
        why = _choice.why
    return f"{library.describe()} ({why}; {library.path})"
