"""The step check: at sampled steps of a run, the step the framework took is taken again
in float64 numpy from the framework's own state, and the two compared at float32 rounding.

Why: two same-seed runs part exponentially (each step amplifies the last one's rounding),
so the drift envelope, whose yardstick grows with them, can tell an error from drift only
up to its horizon (step 16 of the default run's 320). A step re-anchored at one
framework's own state does not part: from the weights and optimizer slots it held before
step t, the batch of step t (the spec's batch order, its rows and their dropout numbers)
and the learning rate the spec gives step t, the float64 reference (reference/reference_step.py)
computes what step t should have done, and that differs from what the framework did by
float32 rounding only, at step 5 as at step 5,000. Each run is held to the spec on its own;
a pair is beyond where either run is.

What is compared, each part against its own tolerance (measured: docs/comparing.md#the-step-check):
- forward: the step's mean loss against the reference's at the same weights and rows, and
  its accuracy (a sample whose two largest logits tie within rounding may go either way);
- update: each parameter's change against what the optimizer's rule makes of the
  framework's own slots after the step at the spec's learning rate: a learning rate, a
  Nesterov term or an update formula that is not the spec's shows here;
- gradient: each parameter's gradient as the framework's own slots show it (v' - momentum
  v; Adam's first moment) against the reference's; where the framework keeps no slots
  (plain SGD) the update stands for it. A layer whose gradient alone is off is named;
  every layer off is the loss's gradient or the momentum;
- state: a BatchNormalization's running statistics after the step;
- structure: a weight the spec has and the framework does not (a layer built without its bias).
The first part beyond names where the difference enters: a wrong layer shows in the
forward pass before its gradients, a wrong rule in the update before the gradients it
moves. A --fault is a known error, so the spec the run is held to is the network without it.

Which steps (deterministic, so two runs of a pair are checked at the same steps): whole,
the first and SPREAD more spread evenly over the planned steps; by their forward pass and
update rule (reference_forward: the loss, the accuracy, the update, a batch norm's running
statistics; no gradient, a tenth of the cost), the first step of every epoch after the
first (where reshuffling, a reset of the optimizer's state or an epoch-bound schedule act)
and every step whose learning rate differs from the last one's and the step after the last
of such a run (a schedule, a warm-up, a plateau: where a change a step late shows); the
update rule alone at every other step, from the state the framework
held after the step before (where reading it is cheap: every trainer but Caffe's, which
snapshots). The time it takes is left out of the run's clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from algorithms.records import STEP_CHECK_COLUMNS, step_check_csv
from algorithms.session.recorder import TableCsv
from algorithms.dataset.data import batch_order
from algorithms.machine.network_memory import MB
from algorithms.machine.resources import memory_room_mb
from algorithms.network.dropout import uniforms as dropout_uniforms
from algorithms.network.layers import BatchNormalization
from algorithms.reference.reference_step import implied_gradient, reference_forward, reference_step
from algorithms.reference.train_state import StateNotHeld, TrainState

# whole steps spread evenly over the run, besides the first, the epoch starts and lr changes: one,
# at the run's middle (two cost the default make compare 10-16 s more, over the 15% it may add;
# the late errors of the whole-runs study were each found by the update rule, checked every step)
SPREAD = 1
FIRST_STEPS = 1
# where the step is looked at by its forward pass and update rule, not whole: what goes wrong
# at an epoch's first step or a learning rate's change is the batch, the schedule or the
# optimizer's state, which the loss and the update rule show (a tenth of a whole step's cost)
FORWARD_REASONS = ("epoch start", "learning rate changes", "after a learning rate change")
# the tolerances: each about ten times the largest error a healthy framework showed
# (docs/comparing.md#the-step-check), a thousand times below the errors it is there to find
FORWARD_TOLERANCE = 2e-5  # |loss - reference| / |reference|
# |g - reference| beyond what float32 may do at a kink within its rounding, over |reference|,
# each an L2 norm over the layer's kernel and bias together
# 1e-3: a kink float32 put farther than the reference's ROUNDING_SIGMAS from its value (a
# convolution's own summation, oneDNN's or XLA's) moves a conv layer's gradient by one
# position's share: 2.7e-4 (torch, default run, step 96, layer 6, at 32 sigmas) and 6.6e-4
# (Keras on jax at batch 1000, step 3: 6.5e-4 at 128 sigmas, 1.2e-4 at 256) measured on honest
# runs; the errors it looks for move it by 1e-2 and more
GRADIENT_TOLERANCE = 1e-3
UPDATE_TOLERANCE = 1e-5  # max |change - the rule's| (beyond the weight's own rounding) / the largest change
STATE_TOLERANCE = 1e-5  # max |running statistic - reference| / its largest
# never less than this many times what float32 arithmetic of the spec itself makes of the same step
# (its float32 pass): a batch normalisation's backward subtracts the batch's means of the gradient,
# so its float32 gradients differ from float64 by 2e-3 on a 32x32 map at batch 64 (measured in torch)
ROUNDING_FACTOR = 10.0
# the memory a look in float64 takes, per sample per value the network's layers output
# (machine/network_memory.py), measured with tracemalloc at batches 100 and 300: a whole step
# (outputs, pre-activations, rounding spreads, gradients, the float32 pass) 37 bytes on the
# default net, 59 on the 2-layer one; a forward look 12.5; besides FIXED_MB (columns, weights).
# A look that would not fit in MEMORY_SHARE of what the process can still allocate is left
# to the update rule, and the summary says so: the check never ends a run that fits without it
WHOLE_BYTES_PER_OUTPUT = 64
FORWARD_BYTES_PER_OUTPUT = 16
FIXED_MB = 128
MEMORY_SHARE = 0.8
TIE = 1e-5  # two logits within this of the largest one's magnitude: the sample's label may go either way
TINY = 1e-30
PARTS = ("structure", "forward", "accuracy", "update", "gradient", "state")


@dataclass
class Capture:
    step: int
    epoch: int
    index: int
    why: str  # why the whole step is taken again ("": the update rule alone is checked)
    learning_rate: float
    state: TrainState
    seconds: float

    @property
    def full(self) -> bool:
        return bool(self.why)

    @property
    def forward_only(self) -> bool:
        return self.why in FORWARD_REASONS


@dataclass(frozen=True)
class Finding:
    """One checked step judged: `part` empty when every part is within its tolerance;
    `worst` the largest error over its tolerance (beyond when > 1)."""

    part: str
    worst: float
    where: str  # what `worst` was measured on


def off_reason(config) -> Optional[str]:
    """Why a run takes no step check (None: it does)."""
    if config.step_check == "off":
        return "--step_check off"
    if config.part != "run":
        return "the epoch check's steps are judged against its own envelope"
    if config.strategy in ("ps", "async"):
        return f"--strategy {config.strategy}: each update comes from a worker that read older parameters"
    if config.precision != "fp32":
        return f"--precision {config.precision}: its rounding (2e-3 to 4e-3) is the size of the errors the check finds"
    return None


class StepCheck:
    """One run's step check, driven by the loop (train_by_hand) or by a wrapper's own
    per-step hook (Keras's callback): `before(trainer, epoch, index)` ahead of each step,
    `after(trainer, capture, loss, accuracy)` once it is done."""

    def __init__(self, session):
        config = session.config
        self.session, self.config = session, config
        self.network = config.reference_network or config.network
        self.reason = off_reason(config)
        self.rows = None
        if self.reason is None and session.record:
            self.rows = TableCsv(step_check_csv(session.csv_path), STEP_CHECK_COLUMNS)
        if not session.record:
            self.reason = self.reason or "another process records this run"
        planned = session.planned_steps
        self.planned = min(planned, config.max_steps) if config.max_steps else planned
        self.stride = max(1, round(self.planned / SPREAD))
        self._last_rate: Optional[float] = None
        self._last_changed = False
        self.checked, self.seconds = 0, 0.0
        self.forward_steps, self.forward_seconds = 0, 0.0  # of those, the steps looked at by their forward pass
        self.rounding = 0.0  # the loss's own float32 rounding at the last whole step
        self.rule_steps, self.rule_seconds, self.rule_worst = (
            0,
            0.0,
            0.0,
        )  # the steps checked by their update rule alone
        self._carried: Optional[tuple] = None  # (step, the state after it): the next step's state before
        self.unjudged: list = []  # (step, the highest layer whose gradients were not judged there)
        self.first_beyond: Optional[tuple] = None  # (step, Finding)
        self.no_room: list = []  # (step, rows, MB the look needs, MB the process had): left to the update rule
        self.worst: Optional[tuple] = None  # (ratio, step, where) of the within steps

    # ------------------------------------------------------------------ which steps
    def why(self, step: int, epoch: int, index: int, learning_rate: float) -> Optional[str]:
        """Why step `step` (1-based; the `index`-th of its 0-based epoch) is checked, or None."""
        changed = self._last_rate is not None and learning_rate != self._last_rate
        reason = None
        if step <= FIRST_STEPS:
            reason = "first steps"
        elif index == 0 and epoch > 0:
            reason = "epoch start"
        elif changed and not self._last_changed:
            reason = "learning rate changes"
        elif self._last_changed and not changed:
            reason = "after a learning rate change"
        elif step % self.stride == self.stride // 2:
            reason = "spread"
        self._last_rate, self._last_changed = learning_rate, changed
        return reason

    # ------------------------------------------------------------------ one step
    def before(self, trainer, epoch: int, index: int) -> Optional[Capture]:
        """The state before the step about to run, where it is checked (every step, where the
        trainer's state is cheap to read: its update rule; the sampled ones: all of it); None
        otherwise. The state after the last step checked is the state before this one, so a
        step checked after a checked step reads the framework's state once."""
        step, learning_rate = self.session.step + 1, self.session.learning_rate
        why = self.why(step, epoch, index, learning_rate)
        if self.reason is not None or (why is None and not getattr(trainer, "STATE_EACH_STEP", True)):
            return None
        start = time.perf_counter()
        with self.session.clock.paused():
            if self._carried is not None and self._carried[0] == step - 1:
                state = self._carried[1]
            else:
                try:
                    state = trainer.train_state()
                except StateNotHeld as error:
                    self.reason = str(error)
                    return None
        state = at_rate(state, learning_rate)  # a velocity with the rate inside, in this step's units
        return Capture(step, epoch, index, why or "", learning_rate, state, time.perf_counter() - start)

    def after(self, trainer, capture: Optional[Capture], loss: float, accuracy: float) -> None:
        if capture is None:
            return
        start = time.perf_counter()
        with self.session.clock.paused():
            after = trainer.train_state()
            self._carried = (capture.step, after)
            if not capture.full:
                self._rule_only(capture, after, loss, time.perf_counter() - start)
                return
            rows = self._rows(capture.epoch, capture.index)
            if not self._fits(capture, len(rows)):
                self._rule_only(capture, after, loss, time.perf_counter() - start)
                return
            try:
                self._whole(capture, after, rows, loss, accuracy, start)
            except MemoryError:  # the estimate was short: this look is left to the update rule
                self.no_room.append((capture.step, len(rows), None, None))
                self._rule_only(capture, after, loss, time.perf_counter() - start)

    def _fits(self, capture: Capture, samples: int) -> bool:
        """Whether the float64 look at this step fits in the memory the process has left;
        where it does not, (step, need, room) is kept for the summary."""
        per_output = FORWARD_BYTES_PER_OUTPUT if capture.forward_only else WHOLE_BYTES_PER_OUTPUT
        need = FIXED_MB + samples * self.session.outputs_per_sample * per_output / MB
        room = memory_room_mb()
        if need <= MEMORY_SHARE * room:
            return True
        self.no_room.append((capture.step, samples, need, room))
        return False

    def _whole(self, capture: Capture, after: TrainState, rows, loss: float, accuracy: float, start: float) -> None:
        """The step looked at whole (or by its forward pass, at an epoch start or a rate change)."""
        dataset = self.session.dataset
        uniforms = dropout_uniforms(self.network, self.config.seed, capture.epoch, rows)
        if capture.forward_only:
            reference = reference_forward(
                self.network, capture.state, dataset.train_x[rows], dataset.train_y[rows], uniforms
            )
            errors = compare_forward(
                self.network,
                self.config.optimizer,
                capture,
                after,
                reference,
                loss,
                accuracy,
                dataset.train_y[rows],
                self.rounding,
            )
            seconds = capture.seconds + time.perf_counter() - start
            self.forward_steps, self.forward_seconds = self.forward_steps + 1, self.forward_seconds + seconds
            self._record(capture, loss, reference.loss, errors, judge(errors), seconds)
            return
        reference = reference_step(
            self.network,
            capture.state,
            dataset.train_x[rows],
            dataset.train_y[rows],
            uniforms,
            self.config.optimizer,
            capture.learning_rate,
        )
        errors = compare(
            self.network, self.config.optimizer, capture, after, reference, loss, accuracy, dataset.train_y[rows]
        )
        finding = judge(errors)
        self.rounding = errors["forward_rounding"]
        seconds = capture.seconds + time.perf_counter() - start
        self._record(capture, loss, reference.loss, errors, finding, seconds)

    def _rule_only(self, capture: Capture, after: TrainState, loss: float, seconds: float) -> None:
        """A step between the sampled ones: its update rule against the framework's own slots;
        a row only where it is beyond."""
        self.rule_steps += 1
        self.rule_seconds += capture.seconds + seconds
        errors = {
            "structure": None,
            **_part_errors(self.network, "update", update_errors(self.network, self.config.optimizer, capture, after)),
        }
        if errors["update_error"] is None:
            return
        ratio = errors["update_error"] / errors["update_allowed"]
        if ratio <= 1:
            self.rule_worst = max(self.rule_worst, ratio)
            return
        finding = Finding(_part_words("update", errors), ratio, f"{errors['update_layer']} update")
        self._record(
            replace(capture, why="update rule, every step"), loss, None, errors, finding, capture.seconds + seconds
        )

    def _rows(self, epoch: int, index: int) -> np.ndarray:
        """The rows of the spec's step: its own batch order (a --fault that reorders the
        run's batches is an error the check finds), the whole step's (every replica's share
        and accumulated part)."""
        config = self.config
        batch = config.batch_at(epoch) * config.accumulate
        return batch_order(len(self.session.dataset.train_x), batch, epoch, config.seed)[index]

    def _record(self, capture: Capture, loss: float, reference_loss: float, errors: dict, finding, seconds) -> None:
        if reference_loss is not None:  # a whole step (a step checked by its update rule alone has none)
            self.checked += 1
            self.seconds += seconds
            if errors.get("gradient_unjudged"):
                self.unjudged.append((capture.step, errors["gradient_unjudged"]))
        if finding.part and self.first_beyond is None:
            self.first_beyond = (capture.step, finding)
        if not finding.part and (self.worst is None or finding.worst > self.worst[0]):
            self.worst = (finding.worst, capture.step, finding.where)
        if self.rows is not None:
            self.rows.write(
                run_id=self.session.run_id,
                step=capture.step,
                epoch=capture.epoch + 1,
                why=capture.why,
                learning_rate=capture.learning_rate,
                loss=loss,
                reference_loss=reference_loss,
                **{key: value for key, value in errors.items() if key in STEP_CHECK_COLUMNS},
                worst=finding.worst,
                part=finding.part,
                seconds=seconds,
            )

    def summary(self) -> str:
        """The check's line for the console and results.log."""
        if self.reason is not None and not self.checked:
            return f"not run ({self.reason})"
        whole = self.checked - self.forward_steps
        sampling = (
            f"{whole} steps of {self.session.step} re-taken in float64 ({self.seconds - self.forward_seconds:.1f} s)"
        )
        if self.forward_steps:
            sampling += (
                f", the forward pass and update rule at {self.forward_steps} epoch starts and learning-rate changes "
                f"({self.forward_seconds:.1f} s)"
            )
        if self.rule_steps:
            sampling += f", the update rule at the {self.rule_steps} others ({self.rule_seconds:.1f} s)"
        if self.no_room:
            sampling += "; " + _no_room_words(self.no_room)
        if self.unjudged:
            sampling += (
                f"; at {len(self.unjudged)} of them the gradients from {self.unjudged[0][1]} down not judged "
                "(more values within rounding of a kink than the check carries back)"
            )
        if self.first_beyond is not None:
            step, finding = self.first_beyond
            return f"beyond rounding at step {step}: {finding.part} ({finding.where}); {sampling}"
        if self.worst is None and self.rule_steps:  # every look left to the update rule (no room)
            return (
                f"update rule within rounding at every step ({self.rule_worst:.2g}x its tolerance at worst); {sampling}"
            )
        if self.worst is None:
            return f"no step checked; {sampling}"
        ratio, step, where = self.worst
        worst = f"worst {ratio:.2g}x its tolerance, step {step}: {where}"
        return f"within rounding at every checked step ({worst}); {sampling}"

    def close(self) -> str:
        """Its CSV closed; what it saw (summary), the loop's to give the session."""
        if self.rows is not None:
            self.rows.close()
        return self.summary()


def _no_room_words(no_room: list) -> str:
    """The steps whose float64 look did not fit in memory, for the summary."""
    steps = ", ".join(str(item[0]) for item in no_room[:5]) + (", ..." if len(no_room) > 5 else "")
    step, rows, need, room = next((item for item in no_room if item[2] is not None), no_room[0])
    why = "numpy ran out of memory"
    if need is not None:
        why = (
            f"the float64 pass of step {step}'s {rows} rows needs about {need:,.0f} MB, the process had {room:,.0f} MB"
        )
    return f"at step {steps} the update rule alone ({why}; a smaller --batch_size checks whole steps)"


def at_rate(state: TrainState, learning_rate: float) -> TrainState:
    """`state` in the gradient units of a step at `learning_rate`. A framework that keeps the
    rate inside its velocity (TrainState.velocity_rate) carries the old rate in its momentum
    across a change of the rate (its m was summed at the old one), so its velocity read at one
    rate is, in the next step's units, scaled by old / new: the same m, each step judged in the
    framework's own formulation (torch's keeps the rate outside and needs none)."""
    if state.velocity_rate is None or state.velocity_rate == learning_rate:
        return state
    scale = state.velocity_rate / learning_rate
    slots = {
        key: {name: value * scale if name == "velocity" else value for name, value in values.items()}
        for key, values in state.slots.items()
    }
    return replace(state, slots=slots, velocity_rate=learning_rate)


# ---------------------------------------------------------------------- comparing


def _f64(value) -> Optional[np.ndarray]:
    return None if value is None else np.asarray(value, np.float64)


def _largest(*arrays) -> float:
    return max([float(np.max(np.abs(a))) for a in arrays if a is not None and a.size] + [TINY])


def _relative_norm(differences: list, values: list) -> float:
    """The differences' L2 norm over the larger of the two sides' norms (each side the
    layer's kernel and bias together, so a bias whose gradient is 0 by the maths, before a
    BatchNormalization, is measured against its layer's scale, not its own rounding)."""
    difference = np.sqrt(sum(float(np.sum(d * d)) for d in differences))
    half = len(values) // 2
    sides = [np.sqrt(sum(float(np.sum(v * v)) for v in side)) for side in (values[:half], values[half:])]
    return difference / max(max(sides), TINY)


def _layer_name(network, index: int) -> str:
    """The layer as the user's network numbers it (a parity run's network has no dropout)."""
    number = network.numbering[index] if network.numbering else index  # as Network.user_index says
    return f"layer {number} {type(network.layers[index]).__name__}"


def compare(network, optimizer, capture: Capture, after: TrainState, reference, loss, accuracy, labels) -> dict:
    """Every part's error (module docstring) and what it is allowed: the part's tolerance, or
    ROUNDING_FACTOR times what float32 arithmetic of the spec itself makes of the same step
    (the reference's float32 pass), whichever is larger; per part, the layer whose error is
    largest against its allowance, and the layers beyond it."""
    before, learning_rate = capture.state, capture.learning_rate
    errors = {"structure": None, **_forward_errors(reference, loss, accuracy, labels)}
    measured = {"gradient": {}, "update": {}, "state": {}}  # part -> layer -> (error, allowed)
    expected = {w.layer_index: w for w in reference.weights}
    single_expected = {w.layer_index: w for w in reference.float32_weights or ()}
    for index, layer, _ in network.parametric_layers():
        roles = _roles(network, index, layer, before, after, reference, errors)
        if not roles:
            continue
        change = {role: value_after - value_before for role, (_, value_before, value_after) in roles.items()}
        implied, rule = {}, {}
        for role, (key, _, value_after) in roles.items():
            slots_before, slots_after = before.slots.get(key, {}), after.slots.get(key, {})
            gradient = implied_gradient(optimizer, slots_before, slots_after)
            if gradient is None:  # no slots: the change is the gradient times the learning rate
                implied[role] = -change[role] / learning_rate
                continue
            implied[role] = gradient
            rule[role] = _rule_change(optimizer, learning_rate, gradient, slots_after, before)
        spec = {role: reference.gradients[key] for role, (key, _, _) in roles.items()}
        scale = [*spec.values(), *implied.values()]
        excess = [np.maximum(np.abs(implied[r] - spec[r]) - reference.allowances[roles[r][0]], 0.0) for r in roles]
        single_gradients = reference.float32_gradients or {}  # {}: no BatchNormalization, its rounding taken as 0
        single = [np.abs(single_gradients.get(roles[r][0], spec[r]) - spec[r]) for r in roles]
        allowed = max(GRADIENT_TOLERANCE, ROUNDING_FACTOR * _relative_norm(single, scale))
        measured["gradient"][index] = (_relative_norm(excess, scale), allowed)
        if rule:
            measured["update"][index] = _rule_error(change, rule, roles, _update_allowed(optimizer, before))
        if isinstance(layer, BatchNormalization):
            held = next(w for w in after.weights if w.layer_index == index)
            state = _running_error(held, expected[index], single_expected.get(index))
            if state is not None:
                measured["state"][index] = state
    for name, per_layer in measured.items():
        errors.update(_part_errors(network, name, per_layer))
    unjudged = reference.unjudged_from
    errors["gradient_unjudged"] = None if unjudged is None else _layer_name(network, unjudged)
    return errors


def compare_forward(
    network, optimizer, capture: Capture, after: TrainState, reference, loss, accuracy, labels, rounding: float = 0.0
) -> dict:
    """The parts a step's forward pass and update rule show (reference_forward's): the loss
    (`rounding`: the loss's own float32 rounding where the reference measured none), the
    accuracy, each layer's update against the optimizer's rule of the framework's own slots,
    a batch norm's running statistics; no gradient."""
    errors = {"structure": None, **_forward_errors(reference, loss, accuracy, labels, rounding)}
    errors.update(_part_errors(network, "update", update_errors(network, optimizer, capture, after)))
    expected = {w.layer_index: w for w in reference.weights}
    single_expected = {w.layer_index: w for w in reference.float32_weights or ()}
    state = {}
    for index in network.batch_normalizations():
        held = next((w for w in after.weights if w.layer_index == index), None)
        found = None if held is None else _running_error(held, expected[index], single_expected.get(index))
        if found is not None:
            state[index] = found
    errors.update(_part_errors(network, "state", state))
    errors["gradient_unjudged"] = None
    return errors


def _forward_errors(reference, loss: float, accuracy: float, labels, rounding: float = 0.0) -> dict:
    """The loss against the reference's, allowed the larger of FORWARD_TOLERANCE and
    ROUNDING_FACTOR times the float32 pass's own error (where the reference has no float32
    pass, `rounding`: the last whole step's); the accuracy beyond ties."""
    errors = {"forward_error": abs(loss - reference.loss) / max(abs(reference.loss), TINY)}
    if reference.float32_loss is not None:
        rounding = abs(reference.float32_loss - reference.loss) / max(abs(reference.loss), TINY)
    errors["forward_allowed"] = max(FORWARD_TOLERANCE, ROUNDING_FACTOR * rounding)
    errors["forward_rounding"] = rounding  # the drift envelope's floor at this step (analysis/verdict.py)
    ties = int(np.sum(reference.margins <= TIE * max(1.0, float(np.max(np.abs(reference.margins))))))
    errors["accuracy_error"] = float(max(0, round(abs(accuracy - reference.accuracy) * len(labels)) - ties))
    return errors


def _part_errors(network, name: str, per_layer: dict) -> dict:
    """A part's columns from its layers' (error, allowed): the layer named is the last one
    beyond (a backward pass reaches it first), else the one with the largest ratio."""
    ratios = {index: error / allowed for index, (error, allowed) in per_layer.items()}
    beyond = [index for index, ratio in ratios.items() if ratio > 1]
    named = max(beyond) if beyond else max(ratios, key=ratios.get) if ratios else None
    error, allowed = per_layer[named] if named is not None else (None, None)
    return {
        f"{name}_error": error,
        f"{name}_allowed": allowed,
        f"{name}_layer": None if named is None else _layer_name(network, named),
        f"{name}_beyond": beyond,
        f"{name}_layers": len(per_layer),
    }


def update_errors(network, optimizer, capture: Capture, after: TrainState) -> dict:
    """layer -> (error, allowed) of each layer's update against the optimizer's rule applied
    to the framework's own slots after the step: no reference pass needed."""
    before, found = capture.state, {}
    for index, layer, _ in network.parametric_layers():
        roles, change, rule = {}, {}, {}
        for role in ("kernel", "bias"):
            key = (index, role)
            value_before, value_after = _f64(before.weight(key)), _f64(after.weight(key))
            if value_before is None or value_after is None or value_before.shape != value_after.shape:
                continue
            gradient = implied_gradient(optimizer, before.slots.get(key, {}), after.slots.get(key, {}))
            if gradient is None:
                continue
            roles[role] = (key, value_before, value_after)
            change[role] = value_after - value_before
            rule[role] = _rule_change(optimizer, capture.learning_rate, gradient, after.slots.get(key, {}), before)
        if rule:
            found[index] = _rule_error(change, rule, roles, _update_allowed(optimizer, before))
    return found


def _rule_error(change: dict, rule: dict, roles: dict, allowed: float = UPDATE_TOLERANCE) -> tuple:
    """(error, allowed): the largest |change - the rule's| beyond the weight's own rounding,
    over the largest change the rule makes."""
    beyond_rounding = [np.maximum(np.abs(change[r] - rule[r]) - _weight_rounding(roles[r][2]), 0.0) for r in rule]
    return max(float(np.max(excess)) for excess in beyond_rounding) / _largest(*rule.values()), allowed


def _update_allowed(optimizer, before: TrainState) -> float:
    """What the update rule is allowed: UPDATE_TOLERANCE, or for Adam never less than
    ROUNDING_FACTOR times the float32 rounding of its bias corrections at this step: 1 -
    beta_2 ** t cancels (0.002 at t = 2), so a float32 beta_2 ** t moves every update of
    the step by eps / 2 * beta_2 ** t / (1 - beta_2 ** t) of itself (3e-5 at t = 2, 3e-7 by
    t = 100: a framework's honest Adam step at t = 2 measured 1.01x a flat 1e-5)."""
    if optimizer.name != "adam":
        return UPDATE_TOLERANCE
    t, unit = before.adam_updates + 1, float(np.finfo(np.float32).eps)
    second = 0.5 * unit * optimizer.beta_2**t / (1 - optimizer.beta_2**t)
    first = unit * optimizer.beta_1**t / (1 - optimizer.beta_1**t)
    return max(UPDATE_TOLERANCE, ROUNDING_FACTOR * (second + first))


def _roles(network, index: int, layer, before: TrainState, after: TrainState, reference, errors: dict) -> dict:
    """role -> ((layer, role), its value before, after) for the layer's weights the
    framework holds; a weight the spec has and it does not, or one of another shape, is
    the step's `structure` error."""
    roles = {}
    for role in ("kernel", "bias"):
        key = (index, role)
        spec_has = role == "kernel" or isinstance(layer, BatchNormalization) or layer.bias
        value_before, value_after = _f64(before.weight(key)), _f64(after.weight(key))
        if spec_has and (value_before is None or value_after is None):
            errors["structure"] = f"{_layer_name(network, index)}: the framework holds no {role}"
            continue
        if value_before is None:
            continue
        if value_before.shape != value_after.shape or value_before.shape != reference.gradients[key].shape:
            shapes = f"shape {value_after.shape}, spec {reference.gradients[key].shape}"
            errors["structure"] = f"{_layer_name(network, index)} {role}: {shapes}"
            continue
        roles[role] = (key, value_before, value_after)
    return roles


def _running_error(held, spec, single) -> Optional[tuple]:
    """(error, allowed) of a BatchNormalization's running statistics after the step: the
    worse of mean and variance against the reference's, allowed the larger of STATE_TOLERANCE
    and ROUNDING_FACTOR times the float32 pass's own error there."""
    if held.running_mean is None or spec.running_mean is None:
        return None
    pairs = ((held.running_mean, spec.running_mean), (held.running_var, spec.running_var))
    error = max(float(np.max(np.abs(np.float64(h) - s))) / _largest(np.asarray(s)) for h, s in pairs)
    rounding = 0.0
    if single is not None:
        mine = ((single.running_mean, spec.running_mean), (single.running_var, spec.running_var))
        rounding = max(float(np.max(np.abs(np.float64(h) - s))) / _largest(np.asarray(s)) for h, s in mine)
    return error, max(STATE_TOLERANCE, ROUNDING_FACTOR * rounding)


def _rule_change(optimizer, learning_rate: float, gradient, slots_after: dict, before: TrainState):
    """The change the optimizer's rule makes of the framework's own slots after the step."""
    if optimizer.name == "sgd":
        velocity = np.float64(slots_after["velocity"])
        direction = gradient + optimizer.momentum * velocity if optimizer.nesterov else velocity
        return -learning_rate * direction
    # Adam: the rule applied to the framework's moments after the step (its first moment is
    # where `gradient` came from, so the rule is what is checked, not the gradient)
    step = before.adam_updates + 1
    first, second = np.float64(slots_after["first"]), np.float64(slots_after["second"])
    correction_1, correction_2 = 1 - optimizer.beta_1**step, 1 - optimizer.beta_2**step
    if before.adam_epsilon == "raw":
        return -learning_rate * np.sqrt(correction_2) / correction_1 * first / (np.sqrt(second) + optimizer.epsilon)
    return -learning_rate * (first / correction_1) / (np.sqrt(second / correction_2) + optimizer.epsilon)


def _weight_rounding(value) -> np.ndarray:
    """What float32 rounding of the weights alone may move a change by: half a float32 step
    at each weight for the stored result, and one more for a velocity the framework keeps
    as a difference of weights (Lasagne's is (w - lr * g + momentum * v) - w)."""
    return 1.5 * np.spacing(np.abs(np.float32(value))).astype(np.float64)


def judge(errors: dict) -> Finding:
    """The checked step's word: the first part beyond what it is allowed (PARTS' order), or none."""
    ratios = {
        "forward": (errors["forward_error"] / errors["forward_allowed"], "the loss"),
        "accuracy": (2.0 * errors["accuracy_error"], "the accuracy, beyond ties"),
    }
    for name in ("update", "gradient", "state"):
        if errors.get(f"{name}_error") is not None:
            ratio = errors[f"{name}_error"] / errors[f"{name}_allowed"]
            ratios[name] = (ratio, f"{errors[f'{name}_layer']} {name}")
    if errors["structure"]:
        return Finding(f"structure: {errors['structure']}", np.inf, errors["structure"])
    for name in PARTS[1:]:
        if name in ratios and ratios[name][0] > 1:
            return Finding(_part_words(name, errors), ratios[name][0], ratios[name][1])
    worst_name = max(ratios, key=lambda name: ratios[name][0])
    return Finding("", *ratios[worst_name])


def _part_words(name: str, errors: dict) -> str:
    """The part named in the verdict, short (docs/comparing.md#the-step-check says what each means)."""
    if name == "forward":
        return "forward: the loss"
    if name == "accuracy":
        return "the step's accuracy"
    if name == "update":
        return "the update rule"
    if name == "gradient":
        beyond, layers = errors["gradient_beyond"], errors["gradient_layers"]
        if len(beyond) == layers and layers > 1:
            return "every layer's gradient"
        return f"{errors['gradient_layer']} gradient"
    return f"{errors['state_layer']} running statistics"
