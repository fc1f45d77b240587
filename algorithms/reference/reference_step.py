"""One optimizer step of the spec, in float64, from a framework's own state: the
yardstick of the step check (algorithms/run/step_check.py).

Given the state a framework held before a step (its float32 weights and optimizer slots,
reference/train_state.py), the step's rows, their dropout uniforms and the learning rate the
spec gives that step, `reference_step` computes what the step should have done: the mean
loss and the accuracy of the batch at those weights, every parameter's gradient, and the
weights, slots and running statistics after the update. Two float32 frameworks part
exponentially over a run; a step re-anchored at one framework's own state does not, so
this yardstick stays at rounding level at step 5 and at step 5,000 alike.

The update is the spec's optimizer in the one convention of train_state.py (torch's
formulation of momentum and Nesterov, Adam with the epsilon where the state says).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from algorithms.network.layers import Network, Optimizer
from algorithms.reference.reference import (
    Pass,
    cross_entropy,
    forward,
    forward_backward,
    training_forward,
    update_running,
)
from algorithms.reference.train_state import TrainState


@dataclass
class ReferenceStep:
    loss: float  # the batch's mean cross-entropy at the state's weights
    accuracy: float  # the fraction of the batch the logits label right
    gradients: dict  # (layer, role) -> float64 gradient of the mean loss
    allowances: dict  # (layer, role) -> how far float32 may move each gradient at kinks within its rounding
    weights: list  # LayerWeights after the update (float64), running statistics moved
    slots: dict  # (layer, role) -> the optimizer's slots after the update (train_state.py's convention)
    margins: np.ndarray  # per sample: the largest logit less the runner-up (a tie flips the accuracy)
    # the same pass in float32 numpy: what float32 arithmetic of the spec itself makes of this
    # step (its loss, its gradients, its batch statistics), the step check's measure of rounding
    float32_loss: float = 0.0
    float32_gradients: dict = None
    float32_weights: list = None
    # the highest layer whose gradient (and every one below) is not judged at this step: more
    # values within rounding of a kink than the reference carries back (reference.ROUNDING_KINKS)
    unjudged_from: Optional[int] = None


def reference_step(
    network: Network,
    state: TrainState,
    images: np.ndarray,
    labels: np.ndarray,
    uniforms: tuple,
    optimizer: Optimizer,
    learning_rate: float,
) -> ReferenceStep:
    """The step the spec takes from `state` on these rows (the whole optimizer step's:
    every replica's share and accumulated part, in the shared batch order), whose
    gradient is that of the mean loss over all of them."""
    result = forward_backward(network, state.weights, images, labels, kinks="rounding", uniforms=uniforms)
    single = _float32_pass(network, state.weights, images, labels, uniforms)
    logits = result.outputs[-1]
    margins = _margins(logits)
    accuracy = float(np.mean(logits.argmax(axis=1) == labels))
    weights, slots = apply_update(optimizer, learning_rate, state, result.gradients)
    single_weights = None
    if network.batch_normalizations():
        weights = update_running(network, weights, result.statistics)
        single_weights = update_running(network, state.weights, single.statistics)
    return ReferenceStep(
        result.loss,
        accuracy,
        result.gradients,
        result.allowances,
        weights,
        slots,
        margins,
        single.loss,
        single.gradients,
        single_weights,
        result.unjudged_from,
    )


def reference_forward(network: Network, state: TrainState, images: np.ndarray, labels: np.ndarray, uniforms: tuple):
    """The step's forward pass alone, from `state`: its loss and accuracy at the state's
    weights and the running statistics its batch moves, with no gradient (`gradients`
    empty): the step check's cheaper look at an epoch's first step and a learning rate's
    change, where what goes wrong is the batch, the schedule or the optimizer's state, which
    the loss and the update rule show. In float64, and where the network has a batch
    normalisation in float32 numpy too (its statistics' own rounding, which the running
    statistics are allowed); elsewhere `float32_loss` is None and the check takes the loss's
    rounding its last whole step measured."""
    labels = np.asarray(labels)
    logits, statistics = training_forward(network, state.weights, images, uniforms)
    margins = _margins(logits)
    weights, single_weights, single_loss = state.weights, None, None
    if network.batch_normalizations():
        single_logits, single_statistics = training_forward(network, state.weights, images, uniforms, np.float32)
        single_loss = cross_entropy(np.float32(single_logits), labels)[0]
        weights = update_running(network, state.weights, statistics)
        single_weights = update_running(network, state.weights, single_statistics)
    return ReferenceStep(
        cross_entropy(logits, labels)[0],
        float(np.mean(logits.argmax(axis=1) == labels)),
        {},
        {},
        weights,
        {},
        margins,
        single_loss,
        None,
        single_weights,
    )


def _margins(logits: np.ndarray) -> np.ndarray:
    """Per sample, the largest logit less the runner-up (a tie within rounding flips the accuracy)."""
    if logits.shape[1] < 2:
        return np.full(len(logits), np.inf)
    ranked = np.sort(logits, axis=1)
    return ranked[:, -1] - ranked[:, -2]


def _float32_pass(network: Network, weights: list, images, labels, uniforms) -> Pass:
    """The same step in float32 numpy: its forward pass always (the loss's own rounding, which
    every part's allowance and the drift envelope's floor take), its gradients where the
    network has a BatchNormalization (whose backward subtracts the batch's means of the
    gradient, so float32 moves it by 2e-3 of its size: measured in torch; without one, float32
    moves a gradient by 1e-6 of it, a hundred times below GRADIENT_TOLERANCE, and the pass is
    not paid for: the gradients' rounding is taken as 0)."""
    if network.batch_normalizations():
        return forward_backward(network, weights, images, labels, kinks=False, uniforms=uniforms, dtype=np.float32)
    logits = forward(network, weights, images, uniforms=uniforms, dtype=np.float32)[-1]
    return Pass(cross_entropy(np.float32(logits), np.asarray(labels))[0], [], {}, {})


def apply_update(optimizer: Optimizer, learning_rate: float, state: TrainState, gradients: dict) -> tuple:
    """(weights after, slots after): the spec's update of every trained parameter, in
    float64; a parameter the gradients do not name (none: a layer built without one) is
    left as it is."""
    slots, updated = {}, []
    for w in state.weights:
        values = {}
        for role, value in (("kernel", w.kernel), ("bias", w.bias)):
            key = (w.layer_index, role)
            if value is None or key not in gradients:
                values[role] = None if value is None else np.float64(value)
                continue
            values[role], slots[key] = update_rule(
                optimizer, learning_rate, np.float64(value), gradients[key], state.slots.get(key, {}), state
            )
        updated.append(replace(w, kernel=values["kernel"], bias=values["bias"]))
    return updated, slots


def update_rule(optimizer: Optimizer, learning_rate: float, value, grad, slots: dict, state: TrainState) -> tuple:
    """(the parameter after, its slots after) for one parameter."""
    if optimizer.name == "sgd":
        velocity = optimizer.momentum * np.float64(slots.get("velocity", 0.0)) + grad
        direction = grad + optimizer.momentum * velocity if optimizer.nesterov else velocity
        return value - learning_rate * direction, {"velocity": velocity}
    if optimizer.name == "adam":
        step = state.adam_updates + 1
        first = optimizer.beta_1 * np.float64(slots.get("first", 0.0)) + (1 - optimizer.beta_1) * grad
        second = optimizer.beta_2 * np.float64(slots.get("second", 0.0)) + (1 - optimizer.beta_2) * grad**2
        correction_1, correction_2 = 1 - optimizer.beta_1**step, 1 - optimizer.beta_2**step
        if state.adam_epsilon == "raw":  # the efficient form: the correction in the step size
            step_size = learning_rate * np.sqrt(correction_2) / correction_1
            change = step_size * first / (np.sqrt(second) + optimizer.epsilon)
        else:
            change = learning_rate * (first / correction_1) / (np.sqrt(second / correction_2) + optimizer.epsilon)
        return value - change, {"first": first, "second": second}
    raise ValueError(f"the reference has no optimizer {optimizer.name!r}")


def implied_gradient(optimizer: Optimizer, before: dict, after: dict):
    """The gradient a framework's own slots say it used: v' - momentum * v (SGD with
    momentum), (m' - beta_1 m) / (1 - beta_1) (Adam); None where the slots cannot say
    (plain SGD keeps none: the update itself is the gradient times the learning rate)."""
    if optimizer.name == "sgd" and "velocity" in after:
        return np.float64(after["velocity"]) - optimizer.momentum * np.float64(before.get("velocity", 0.0))
    if optimizer.name == "adam" and "first" in after:
        first_before = np.float64(before.get("first", 0.0))
        return (np.float64(after["first"]) - optimizer.beta_1 * first_before) / (1 - optimizer.beta_1)
    return None
