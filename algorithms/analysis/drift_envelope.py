"""The same-seed regime's yardstick: the float32 drift envelope, per step.

Two runs with the same seed start from the same weights, see the same batches and drop
the same units (dropout's uniforms are shared: network/dropout.py; a --parity run drops
none); their losses differ only by how the float32 arithmetic was ordered, amplified
step by step by training. The envelope is, per step, the largest relative loss
difference |loss_a - loss_b| / |loss_a| of honest pairs (`make envelope`,
`python -m algorithms.studies.drift --envelope`): each framework run twice
(run-to-run), at 1 and at 2 threads, TensorFlow with oneDNN off and on (another
summation order), and every two frameworks (cross-framework), kept as a running
maximum (drift never shrinks back); beside it, the largest difference of the step's
accuracy. Step 0 is the init row (the validation split at the initial weights). One
envelope per mode, shipped in results/baseline/drift/envelope_<network>_<mode>.csv
(`default`: dropout on; `parity`); its header says how it was measured and, as JSON,
the settings it holds for.

A pair is beyond drift at step k when its loss difference there exceeds ENVELOPE_FACTOR x
the envelope (never less than DRIFT_FLOOR), or its accuracies differ by more than
ENVELOPE_FACTOR x the accuracy envelope and one sample: the first such k is named.
ENVELOPE_FACTOR is measured, not chosen: the envelope of every honest pair but one, and
how far above it that one reaches, for each pair (docs/comparing.md).

The envelope grows about tenfold every two or three steps: past some step it spans any
difference two healthy runs can have, and a test against it says nothing. The verdict
judges up to the HORIZON, the last step where ENVELOPE_FACTOR x the envelope is at most
HORIZON_LIMIT (a 10% loss difference still shows), and says so; what lies past it is the
seed regime's to judge (verdict.py).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from algorithms.analysis.runs import Run
from algorithms.analysis.settings import NOT_COMPARED_IN_PARITY, SPLITS, Settings, synchronous
from algorithms.records import (  # noqa: F401 (envelope_path and mode_of: read here by the verdicts)
    DEVICE_BEFORE_COLUMN,
    ENVELOPE_ACCURACY,
    ENVELOPE_SETTINGS_PREFIX,
    envelope_path,
    mode_of,
)
from algorithms.session.recorder import write_envelope_file

# measured: the worst honest pair reaches 1.95x the envelope of the others (TensorFlow at 1
# against 2 threads, step 43; docs/comparing.md); 10 leaves a factor 5 for drift sources not
# measured here, while a 0.9x learning rate leaves it at step 2 by a factor of thousands
ENVELOPE_FACTOR = 10.0
DRIFT_FLOOR = 2.0**-23  # float32's relative resolution: a difference of one unit in the last place is drift
HORIZON_LIMIT = 0.1  # the envelope judges while ENVELOPE_FACTOR x it stays at or below a 10% loss difference
MODES = ("default", "parity")  # dropout on (shared uniforms), and --parity (no dropout, deterministic kernels)
PARTS = ("", "_check")  # a run's own rows, and its epoch check's (run/epoch_check.py)
SMALLEST_LOSS = 1e-12  # a zero loss cannot be a denominator
SETTINGS_PREFIX = ENVELOPE_SETTINGS_PREFIX
ACCURACY_COLUMN = ENVELOPE_ACCURACY


def relative_difference(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    return np.abs(other - reference) / np.maximum(np.abs(reference), SMALLEST_LOSS)


@dataclass(frozen=True)
class Envelope:
    settings: Settings  # what its runs shared (their seed too)
    steps: np.ndarray
    limit: np.ndarray  # per step: the running maximum over every honest pair
    sources: dict  # kind of pair -> its per-step maximum (run_to_run, threads, ...)
    notes: tuple = ()  # the header's prose lines
    path: str = ""
    accuracy: Optional[np.ndarray] = None  # per step: the running maximum |accuracy difference| (None: older file)
    label: str = ""  # what it is, where it is not a shipped file (a pair's own twins)

    def covers(self, settings: Settings) -> bool:
        """All but the seed, the drift sources, where a run stops and (a synchronous run) how
        its step is split are the envelope's."""
        ignored = NOT_COMPARED_IN_PARITY + (SPLITS if synchronous(settings) else ())
        return not self.settings.differences(settings, ignored)

    def limit_at(self, steps: np.ndarray) -> np.ndarray:
        """The envelope at these steps (each one it covers), never below DRIFT_FLOOR."""
        return np.maximum(self.limit[np.searchsorted(self.steps, steps)], DRIFT_FLOOR)

    def accuracy_at(self, steps: np.ndarray) -> np.ndarray:
        """The accuracy envelope at these steps (each one it covers); 0 for an older file."""
        if self.accuracy is None:
            return np.zeros(len(steps))
        return self.accuracy[np.searchsorted(self.steps, steps)]

    def horizon(self) -> int:
        """The last step the envelope judges: where ENVELOPE_FACTOR x it is still at most
        HORIZON_LIMIT (the envelope never falls, so every step before judges too), or the
        last step it was measured at."""
        judged = np.nonzero(ENVELOPE_FACTOR * np.maximum(self.limit, DRIFT_FLOOR) <= HORIZON_LIMIT)[0]
        return int(self.steps[judged[-1]]) if judged.size else int(self.steps[0])

    def describe_name(self) -> str:
        return self.label or f"the drift envelope {os.path.basename(self.path) or 'of these runs'}"

    def describe(self) -> str:
        name = self.label or f"the drift envelope {os.path.basename(self.path) or 'of these runs'}"
        return f"{name} (measured to step {int(self.steps[-1])}, judging to step {self.horizon()})"


def build_envelope(pairs: dict, settings: Settings, notes: tuple = (), accuracy_pairs: list = ()) -> Envelope:
    """`pairs`: kind -> [(steps, relative differences)]; the envelope over all of them.
    `accuracy_pairs`: [(steps, |accuracy differences|)] of the same pairs."""
    every = sorted({int(step) for series in pairs.values() for steps, _ in series for step in steps})
    index = {step: i for i, step in enumerate(every)}

    def worst_of(series) -> np.ndarray:
        worst = np.zeros(len(every))
        for steps, differences in series:
            for step, difference in zip(steps, differences):
                if int(step) in index:
                    worst[index[int(step)]] = max(worst[index[int(step)]], difference)
        return worst

    sources = {kind: worst_of(series) for kind, series in pairs.items()}
    limit = np.maximum.accumulate(np.max(np.array(list(sources.values())), axis=0))
    accuracy = np.maximum.accumulate(worst_of(accuracy_pairs)) if accuracy_pairs else None
    return Envelope(settings, np.array(every), limit, sources, notes, accuracy=accuracy)


def own_envelope(envelopes: list) -> Optional[Envelope]:
    """The yardstick the pair's runs measured at their settings (run/yardstick.py: a twin
    against its run, written as an envelope), the larger where each run's settings have one."""
    envelopes = [envelope for envelope in envelopes if envelope is not None]
    if not envelopes:
        return None
    own = envelopes[0]
    for other in envelopes[1:]:
        if other.path != own.path:
            own = combined(own, other)
    measured = next((note for note in own.notes if note.startswith("measured")), "measured by a run at these settings")
    return replace(own, label=f"the yardstick {measured.removeprefix('measured ')}")


def combined(first: Envelope, second: Envelope) -> Envelope:
    """The larger of two envelopes at every step either measured (a shipped one and a pair's
    twins: a run the shipped one covers, paired with one it does not)."""
    pairs = {"first": [(first.steps, first.limit)], "second": [(second.steps, second.limit)]}
    accuracy = [
        (envelope.steps, envelope.accuracy if envelope.accuracy is not None else np.zeros(len(envelope.steps)))
        for envelope in (first, second)
    ]
    both = build_envelope(pairs, first.settings, accuracy_pairs=accuracy)
    return replace(both, label=f"{first.describe_name()} with {second.describe_name()}", path=first.path)


def with_rounding_floor(envelope: Envelope, runs: list) -> Envelope:
    """The envelope never below the float32 rounding of the loss itself, as the step check
    measured it at each run's checked steps (the spec's float32 pass against its float64 one,
    `forward_rounding`), held from each checked step on: two float32 frameworks differ by that
    much at the same weights, whatever drift adds (a batch-normalised network's 3e-6 at step 1,
    where DRIFT_FLOOR is 1.2e-7). Unchanged without step checks."""
    checked = sorted(
        (row["step"], row["forward_rounding"])
        for run in runs
        for row in (run.step_checks or ())
        if row.get("forward_rounding") is not None
    )
    if not checked:
        return envelope
    floor = np.zeros(len(envelope.steps))
    for step, rounding in checked:
        floor = np.where(envelope.steps >= step, np.maximum(floor, rounding), floor)
    first = checked[0][1]  # before the first checked step (the init row), its rounding
    floor = np.where(envelope.steps < checked[0][0], np.maximum(floor, first), floor)
    if np.all(floor <= envelope.limit):
        return envelope
    label = f"{envelope.describe_name()}, never below the loss's own float32 rounding (the step check's)"
    return replace(envelope, limit=np.maximum(envelope.limit, floor), label=label)


def leave_one_out_ratios(pairs: list) -> list:
    """(label, worst ratio, its step) for each honest pair (label, steps, differences):
    how far above the envelope of all the other pairs it reaches."""
    ratios = []
    for i, (label, steps, differences) in enumerate(pairs):
        others = build_envelope({"others": [(s, d) for j, (_, s, d) in enumerate(pairs) if j != i]}, Settings({}))
        covered = np.isin(steps, others.steps)
        if not covered.any():
            continue
        against = differences[covered] / others.limit_at(steps[covered])
        worst = int(np.argmax(against))
        ratios.append((label, float(against[worst]), int(steps[covered][worst])))
    return ratios


def write_envelope(envelope: Envelope, path: str) -> None:
    e = envelope
    write_envelope_file(path, e.notes, e.settings.values, e.steps, e.limit, e.accuracy, e.sources)


def read_envelope(path: str) -> Optional[Envelope]:
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        lines = handle.read().splitlines()
    notes = tuple(line[2:] for line in lines if line.startswith("# ") and not line.startswith(SETTINGS_PREFIX))
    settings = next(json.loads(line[len(SETTINGS_PREFIX) :]) for line in lines if line.startswith(SETTINGS_PREFIX))
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    kinds = [name for name in rows[0] if name not in ("step", "envelope", ACCURACY_COLUMN)]
    return Envelope(
        Settings({"device": DEVICE_BEFORE_COLUMN, **settings}),  # one measured before the device was recorded: CPU
        np.array([int(row["step"]) for row in rows]),
        np.array([float(row["envelope"]) for row in rows]),
        {kind: np.array([float(row[kind]) for row in rows]) for kind in kinds},
        notes,
        path,
        np.array([float(row[ACCURACY_COLUMN]) for row in rows]) if ACCURACY_COLUMN in rows[0] else None,
    )


def first_step_beyond(envelope: Envelope, steps: np.ndarray, differences: np.ndarray) -> Optional[int]:
    """The first step the envelope covers whose relative difference exceeds ENVELOPE_FACTOR x
    the envelope there; None: within drift at every covered step."""
    covered = np.isin(steps, envelope.steps)
    steps, differences = steps[covered], differences[covered]
    beyond = np.nonzero(differences > ENVELOPE_FACTOR * envelope.limit_at(steps))[0]
    return int(steps[beyond[0]]) if beyond.size else None


@dataclass(frozen=True)
class DriftTest:
    first_beyond: Optional[int]  # the first judged step whose difference leaves the envelope
    judged_steps: tuple  # (first, last) step judged
    evidence: tuple
    horizon: int  # the envelope's horizon: steps after it are not judged here
    last_step: int  # the last step both runs have


def pair_series(a: Run, b: Run) -> tuple:
    """(steps, relative loss differences, |accuracy differences|, one sample's accuracy) of a
    same-seed pair, step by step; the init rows, where both runs have one, as step 0."""
    steps, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    differences = relative_difference(a.losses[ia], b.losses[ib])
    if a.accuracies is not None and b.accuracies is not None:
        accuracy = np.abs(a.accuracies[ia] - b.accuracies[ib])
        samples = a.samples[ia] if a.samples is not None else np.zeros(len(steps))
    else:  # a run built by hand: losses only
        accuracy, samples = np.zeros(len(steps)), np.zeros(len(steps))
    if a.init is not None and b.init is not None:
        steps = np.concatenate([[0], steps])
        differences = np.concatenate([relative_difference(np.array([a.init[0]]), np.array([b.init[0]])), differences])
        accuracy = np.concatenate([[abs(a.init[1] - b.init[1])], accuracy])
        samples = np.concatenate([[a.init[2]], samples])
    one_sample = np.where(samples > 0, 1.0 / np.maximum(samples, 1), 0.0)
    return steps, differences, accuracy, one_sample


def drift_test(a: Run, b: Run, envelope: Envelope) -> Optional[DriftTest]:
    """The pair's relative loss difference and accuracy difference, step by step, against
    the envelope up to its horizon; None when they share no step the envelope covers."""
    steps, differences, accuracy, one_sample = pair_series(a, b)
    horizon = envelope.horizon()
    judged = np.isin(steps, envelope.steps) & (steps <= horizon)
    if not judged.any():
        return None
    last_step = int(steps[-1])
    steps, differences, accuracy, one_sample = (x[judged] for x in (steps, differences, accuracy, one_sample))
    limits = ENVELOPE_FACTOR * envelope.limit_at(steps)
    accuracy_limits = ENVELOPE_FACTOR * envelope.accuracy_at(steps) + one_sample + 1e-9
    loss_beyond, accuracy_beyond = differences > limits, accuracy > accuracy_limits
    ratios = differences / limits
    worst = int(np.argmax(ratios))
    evidence = [
        f"|dloss|/loss at step {int(steps[0])}: {differences[0]:.2e}; the largest against the envelope at step "
        f"{int(steps[worst])}: {differences[worst]:.2e} = {ratios[worst]:.2g} x the limit "
        f"({ENVELOPE_FACTOR:g} x the envelope {limits[worst] / ENVELOPE_FACTOR:.2e})"
    ]
    first = None
    beyond = np.nonzero(loss_beyond | accuracy_beyond)[0]
    if beyond.size:
        at = beyond[0]
        first = int(steps[at])
        where = "the init row (the initial weights on the validation split)" if first == 0 else f"step {first}"
        if loss_beyond[at]:
            evidence.insert(
                0,
                f"{where}: |dloss|/loss {differences[at]:.2e} > {limits[at]:.2e} ({ENVELOPE_FACTOR:g} x the envelope)",
            )
        if accuracy_beyond[at]:
            evidence.insert(
                0,
                f"{where}: the accuracies differ by {accuracy[at]:.4g} > {accuracy_limits[at]:.4g} "
                f"({ENVELOPE_FACTOR:g} x the accuracy envelope, and one sample)",
            )
    evidence.append(f"judged over steps {int(steps[0])}-{int(steps[-1])} against {envelope.describe()}")
    if last_step > horizon:
        evidence.append(
            f"not judged here: steps {horizon + 1}-{last_step}, past the horizon (the step where {ENVELOPE_FACTOR:g} x "
            f"the envelope first exceeds a {HORIZON_LIMIT:.0%} loss difference: honest runs drift that far)"
        )
    return DriftTest(first, (int(steps[0]), int(steps[-1])), tuple(evidence), horizon, last_step)
