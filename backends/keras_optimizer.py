"""Keras 3's optimizers as the step check reads them (algorithms/run/step_check.py): the
TensorFlow wrapper (tf.keras's optimizers are Keras 3's) and the Keras wrapper both train
with them. Imports no framework: it reads the optimizer object it is given."""

from __future__ import annotations

import numpy as np

from algorithms.reference.train_state import from_update_units


def slots(optimizer, variable, spec, learning_rate: float, to_numpy) -> dict:
    """`variable`'s slots in reference/train_state.py's convention: Keras keeps SGD's velocity
    with the learning rate inside it (m = momentum * m - lr * g), so it is -m / lr in
    gradient units; Adam's two moments as they are. {} for a variable the optimizer does
    not train (frozen) or an SGD without momentum."""
    try:
        position = optimizer._get_variable_index(variable)
    except KeyError:  # not among the trainable variables the optimizer was built with
        return {}
    if spec.name == "sgd":
        if not spec.momentum:
            return {}
        return {"velocity": from_update_units(to_numpy(optimizer.momentums[position]), learning_rate)}
    return {"first": to_numpy(optimizer._momentums[position]), "second": to_numpy(optimizer._velocities[position])}


def adam_state(optimizer, spec, to_numpy) -> dict:
    """TrainState's Adam fields: the updates applied so far, and Keras's form of Adam (the
    bias correction in the step size, epsilon added to sqrt(v)); {} for SGD."""
    if spec.name != "adam":
        return {}
    return {"adam_updates": int(np.asarray(to_numpy(optimizer.iterations))), "adam_epsilon": "raw"}
