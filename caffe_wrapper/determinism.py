"""Parity mode for Caffe (CPU build): Caffe has no determinism switch; its CPU
layers accumulate in a fixed order, so there is nothing to turn on."""

from __future__ import annotations


def enable() -> tuple:
    applied = ["none needed: CPU-only build, no atomic adds"]
    caveats = ["OpenBLAS GEMM: bit-identical only at the same thread count and CPU"]
    return applied, caveats
