"""Parity mode for Lasagne: Theano's `deterministic=more` (backends/theano_backend.py),
set before any function is compiled."""

from __future__ import annotations


def enable() -> tuple:
    from backends import theano_backend  # THEANO_FLAGS first, then theano

    return theano_backend.enable_determinism()
