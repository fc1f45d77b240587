"""TensorFlow helpers shared by tensorflow_wrapper and Keras on tensorflow."""

from __future__ import annotations


def set_threads(threads: int) -> str:
    """--threads: TensorFlow's intra- and inter-op pools. They can be set only before
    TensorFlow's first op; a process that already ran one (the tests build several
    trainers in one process) keeps the pools it has."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # "cannot be modified after initialization"
        pass
    return (
        f"tf.config.threading intra {tf.config.threading.get_intra_op_parallelism_threads()}, "
        f"inter {tf.config.threading.get_inter_op_parallelism_threads()}"
    )


def enable_determinism() -> tuple:
    """Turns on what TensorFlow offers; returns (what was set, what still is not deterministic)."""
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    applied = ["tf.config.experimental.enable_op_determinism()"]
    caveats = [
        f"Eigen/oneDNN kernels split work over {tf.config.threading.get_intra_op_parallelism_threads() or 'all'} "
        "intra-op threads: bit-identical only at the same thread count and CPU"
    ]
    return applied, caveats
