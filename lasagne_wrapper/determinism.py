"""Parity mode for Theano (Lasagne, and Keras 2 on Theano): Theano's
`deterministic=more`, set before any function is compiled."""
from __future__ import annotations


def enable() -> tuple:
    from lasagne_wrapper import theano_compat  # noqa: F401  (THEANO_FLAGS first, then theano)
    import theano

    theano.config.deterministic = "more"
    applied = ["theano.config.deterministic='more' (picks deterministic GPU ops; CPU ops already are)"]
    caveats = ["BLAS (OpenBLAS) GEMM: bit-identical only at the same thread count and CPU"]
    return applied, caveats
