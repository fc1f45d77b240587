"""Parity mode for TensorFlow: deterministic ops (called before the model is built)."""
from __future__ import annotations


def enable() -> tuple:
    """Turns on what TensorFlow offers; returns (what was set, what still is not deterministic)."""
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    applied = ["tf.config.experimental.enable_op_determinism()"]
    caveats = [f"Eigen/oneDNN kernels split work over {tf.config.threading.get_intra_op_parallelism_threads() or 'all'} "
               "intra-op threads: bit-identical only at the same thread count and CPU"]
    return applied, caveats
