"""The parity regime's yardstick: the float32 drift envelope, per step.

Two parity runs with the same seed start from the same weights, see the same batches
and drop nothing; their losses differ only by how the float32 arithmetic was ordered,
amplified step by step by training. The envelope is, per step, the largest relative
loss difference |loss_a - loss_b| / |loss_a| of honest pairs (`make drift`,
`python -m algorithms.studies.drift --envelope`): each framework run twice
(run-to-run), at 1 and at 2 threads, TensorFlow with oneDNN off and on (another
summation order), and every two frameworks (cross-framework), kept as a running
maximum (drift never shrinks back). Shipped in results/baseline/drift/envelope_<network>.csv;
its header says how it was measured and, as JSON, the settings it holds for.

A pair is beyond drift at step k when its difference there exceeds ENVELOPE_FACTOR x the
envelope (never less than DRIFT_FLOOR): the first such k is named. ENVELOPE_FACTOR is
measured, not chosen: the envelope of every honest pair but one, and how far above
it that one reaches, for each pair (docs/comparing.md).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.analysis.runs import Run
from algorithms.analysis.settings import NOT_COMPARED_IN_PARITY, Settings

# measured: the worst honest pair reaches 1.95x the envelope of the others (TensorFlow at 1
# against 2 threads, step 43; docs/comparing.md); 10 leaves a factor 5 for drift sources not
# measured here, while a 0.9x learning rate leaves it at step 2 by a factor of thousands
ENVELOPE_FACTOR = 10.0
DRIFT_FLOOR = 2.0**-23  # float32's relative resolution: a difference of one unit in the last place is drift
SMALLEST_LOSS = 1e-12  # a zero loss cannot be a denominator
SETTINGS_PREFIX = "# settings: "


def relative_difference(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    return np.abs(other - reference) / np.maximum(np.abs(reference), SMALLEST_LOSS)


def envelope_path(baseline_dir: str, network: str) -> str:
    return os.path.join(baseline_dir, "drift", f"envelope_{network}.csv")


@dataclass(frozen=True)
class Envelope:
    settings: Settings  # what its runs shared (their seed too)
    steps: np.ndarray
    limit: np.ndarray  # per step: the running maximum over every honest pair
    sources: dict  # kind of pair -> its per-step maximum (run_to_run, threads, ...)
    notes: tuple = ()  # the header's prose lines
    path: str = ""

    def covers(self, settings: Settings) -> bool:
        return not self.settings.differences(settings, NOT_COMPARED_IN_PARITY)

    def limit_at(self, steps: np.ndarray) -> np.ndarray:
        """The envelope at these steps (each one it covers), never below DRIFT_FLOOR."""
        return np.maximum(self.limit[np.searchsorted(self.steps, steps)], DRIFT_FLOOR)

    def describe(self) -> str:
        return f"the drift envelope of {os.path.basename(self.path) or 'these runs'} (steps 1-{int(self.steps[-1])})"


def build_envelope(pairs: dict, settings: Settings, notes: tuple = ()) -> Envelope:
    """`pairs`: kind -> [(steps, relative differences)]; the envelope over all of them."""
    every = sorted({int(step) for series in pairs.values() for steps, _ in series for step in steps})
    index = {step: i for i, step in enumerate(every)}
    sources = {}
    for kind, series in pairs.items():
        worst = np.zeros(len(every))
        for steps, differences in series:
            for step, difference in zip(steps, differences):
                worst[index[int(step)]] = max(worst[index[int(step)]], difference)
        sources[kind] = worst
    limit = np.maximum.accumulate(np.max(np.array(list(sources.values())), axis=0))
    return Envelope(settings, np.array(every), limit, sources, notes)


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
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    kinds = list(envelope.sources)
    with open(path, "w", newline="") as handle:
        handle.writelines(f"# {line}\n" for line in envelope.notes)
        handle.write(SETTINGS_PREFIX + json.dumps(envelope.settings.values, sort_keys=True) + "\n")
        writer = csv.writer(handle)
        writer.writerow(["step", "envelope", *kinds])
        for i, step in enumerate(envelope.steps):
            writer.writerow(
                [int(step), repr(float(envelope.limit[i]))] + [repr(float(envelope.sources[k][i])) for k in kinds]
            )


def read_envelope(path: str) -> Optional[Envelope]:
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        lines = handle.read().splitlines()
    notes = tuple(line[2:] for line in lines if line.startswith("# ") and not line.startswith(SETTINGS_PREFIX))
    settings = next(json.loads(line[len(SETTINGS_PREFIX) :]) for line in lines if line.startswith(SETTINGS_PREFIX))
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    kinds = [name for name in rows[0] if name not in ("step", "envelope")]
    return Envelope(
        Settings(settings),
        np.array([int(row["step"]) for row in rows]),
        np.array([float(row["envelope"]) for row in rows]),
        {kind: np.array([float(row[kind]) for row in rows]) for kind in kinds},
        notes,
        path,
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
    first_beyond: Optional[int]  # the first step whose difference leaves the envelope
    judged_steps: tuple  # (first, last) step judged
    evidence: tuple


def drift_test(a: Run, b: Run, envelope: Envelope) -> Optional[DriftTest]:
    """The pair's relative loss difference, step by step, against the envelope; None when
    they share no step the envelope covers."""
    steps, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    covered = np.isin(steps, envelope.steps)
    if not covered.any():
        return None
    steps, ia, ib = steps[covered], ia[covered], ib[covered]
    differences = relative_difference(a.losses[ia], b.losses[ib])
    limits = ENVELOPE_FACTOR * envelope.limit_at(steps)
    beyond = np.nonzero(differences > limits)[0]
    ratios = differences / limits
    worst = int(np.argmax(ratios))
    evidence = [
        f"|dloss|/loss at step {int(steps[0])}: {differences[0]:.2e}; the largest against the envelope at step "
        f"{int(steps[worst])}: {differences[worst]:.2e} = {ratios[worst]:.2g} x the limit "
        f"({ENVELOPE_FACTOR:g} x the envelope {limits[worst] / ENVELOPE_FACTOR:.2e})"
    ]
    first = None
    if beyond.size:
        first = int(steps[beyond[0]])
        evidence.insert(
            0,
            f"step {first}: |dloss|/loss {differences[beyond[0]]:.2e} > {limits[beyond[0]]:.2e} "
            f"({ENVELOPE_FACTOR:g} x the envelope)",
        )
    evidence.append(f"judged over steps {int(steps[0])}-{int(steps[-1])} against {envelope.describe()}")
    return DriftTest(first, (int(steps[0]), int(steps[-1])), tuple(evidence))
