"""A trainer's state in the spec's terms: what one optimizer step starts from and ends
at, so the step check (algorithms/run/step_check.py) can take one framework step again
in float64 from the framework's own state (algorithms/reference/reference_step.py).

Layout: the canonical one of network/weights.py (HWIO conv kernels, (in, out) dense kernels whose
rows follow the NHWC flatten); a BatchNormalization's gamma in `kernel`, beta in `bias`,
its running statistics beside them.

The optimizer's slots, keyed (layer index, "kernel" | "bias") like the gradients, in ONE
convention whatever the framework keeps (each wrapper converts its own):
- SGD with momentum: `velocity`, in gradient units (torch's buffer): v' = momentum * v + g,
  then w' = w - lr * v' (Nesterov: w' = w - lr * (g + momentum * v')). Keras, TensorFlow,
  Lasagne and Caffe keep the velocity with the learning rate inside it (m = momentum * m
  - lr * g; w' = w + m; Caffe's history holds -m): divided by the learning rate of the step
  about to run (`from_update_units`), theirs is exactly this one, step for step;
- Adam: `first` and `second` moments, the uncorrected running means of g and g**2, and
  `adam_updates`, the updates applied so far (the bias correction's t - 1). Where the
  epsilon goes is the one place two published forms of Adam differ (Kingma and Ba's
  algorithm 1 adds it to the corrected second moment's root, as torch does; their
  "efficient" form folds the correction into the step size and adds it to the raw root, as
  Keras, TensorFlow, Lasagne and Caffe do): `adam_epsilon` names which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

ADAM_EPSILON_FORMS = ("corrected", "raw")  # added to sqrt(corrected v) (torch), or to sqrt(v) (efficient form)


@dataclass
class TrainState:
    weights: list  # LayerWeights per parametric layer, layer order, float32 as the framework holds them
    slots: dict = field(default_factory=dict)  # (layer, role) -> {"velocity": ...} or {"first": ..., "second": ...}
    adam_updates: int = 0  # Adam: updates applied before this state
    adam_epsilon: str = "corrected"
    # a velocity kept with the learning rate inside it (Keras, TensorFlow, Lasagne: m = momentum
    # * m - lr * g): the rate it was brought to gradient units with (from_update_units), else None
    velocity_rate: Optional[float] = None

    def weight(self, key: tuple) -> Optional[np.ndarray]:
        """The kernel or bias of (layer, role), or None where the framework holds none."""
        index, role = key
        for w in self.weights:
            if w.layer_index == index:
                return w.kernel if role == "kernel" else w.bias
        return None


class StateNotHeld(Exception):
    """This process does not hold the whole state of the model (a strategy that splits
    the model over processes); the message says why, for the step check's line."""


def from_update_units(velocity_with_lr: np.ndarray, learning_rate: float, sign: float = -1.0) -> np.ndarray:
    """A velocity kept with the learning rate inside it (Keras's m = momentum * m - lr * g:
    sign -1; Caffe's history, its negative: sign +1), in gradient units for a step at
    `learning_rate`: sign * m / lr, in float64."""
    return sign * np.asarray(velocity_with_lr, np.float64) / float(learning_rate)


def from_channels_first_state(network, weights: list, slots: dict, **adam) -> TrainState:
    """A channels-first framework's weights (LayerWeights in its layout: OIHW conv kernels,
    (out, in) dense kernels in (C, H, W) flatten order) and slots ((layer, role) -> {name:
    array in that layout}) as a TrainState in the canonical layout."""
    from algorithms.network.weights import from_channels_first, gradients_from_channels_first

    names = {name for values in slots.values() for name in values}
    converted = {key: {} for key in slots}
    for name in names:
        per_key = gradients_from_channels_first(
            network, {key: values[name] for key, values in slots.items() if name in values}
        )
        for key, value in per_key.items():
            converted[key][name] = value
    return TrainState(from_channels_first(network, weights), converted, **adam)
