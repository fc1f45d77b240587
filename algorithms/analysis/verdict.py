"""The verdict on a pair of runs: real error, or only floating-point and seed noise?

Two regimes, each with its own yardstick:
- same-seed: the same seed, and both runs' dropout drawn from the shared uniforms
  (network/dropout.py; every run records it) or both --parity: the same weights, batches
  and dropped units. The yardstick is the float32 drift envelope per step
  (drift_envelope.py), up to its horizon (the step past which honest runs drift apart by
  more than it can tell from an error): `within drift to step H`, or `beyond drift at step
  k`, the first step the loss or the accuracy leaves it. What lies past the horizon is
  judged in the seed regime, on the whole runs, when the pair's settings have a seed band
  (`; then within spread (p=...)`), and is said to be unjudged otherwise;
- seed: other seeds, or a run whose frameworks drew their own dropout masks (an older
  record). The yardstick is the seed band of each framework at the pair's settings
  (spread.py): `within spread (p=...)` or `beyond spread (p=...)`, p from a t-based
  prediction interval, beyond when p < ALPHA.
Around them: `same` (every aligned loss bit-identical), `run-to-run` (two runs of one
framework at one setting in the seed regime: a pair of the band itself), `settings
differ: ...` (no yardstick spans both runs; which settings, in one line) and `no band`
(no yardstick exists for these settings: how to make one is said).

The functions others build on: `judge(a, b, yardsticks) -> Verdict`, `Yardsticks` (the
bands and envelopes of a set of runs), and RULE, the words explained once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from algorithms.analysis.baseline import matching_baselines
from algorithms.analysis.drift_envelope import (
    ENVELOPE_FACTOR,
    HORIZON_LIMIT,
    combined,
    drift_test,
    envelope_path,
    mode_of,
    read_envelope,
    own_envelope,
    with_rounding_floor,
)
from algorithms.analysis.runs import Run, curve_distance, setting_differences
from algorithms.analysis.settings import (
    NOT_COMPARED_ACROSS_SEEDS,
    Settings,
    SPLITS,
    synchronous,
    differences_line,
    same_seed_ignored,
    split_line,
    unknown_line,
)
from algorithms.analysis.spread import ALPHA, SeedBand, pair_test
from algorithms.tables import number

RULE = (
    "verdicts: same = every aligned loss bit-identical. Same-seed regime (one seed, the shared dropout uniforms or "
    "--parity: same weights, batches and dropped units): within drift to step H = the relative loss difference "
    f"stays within {ENVELOPE_FACTOR:g}x the float32 drift envelope, and the accuracies within {ENVELOPE_FACTOR:g}x "
    "its accuracy envelope and one sample, at every step from the init row (step 0) to the horizon H, the last step "
    f"where {ENVELOPE_FACTOR:g}x the envelope is at most a {HORIZON_LIMIT:.0%} loss difference; beyond drift at step "
    "k = the first step either leaves it: more than rounding. Past the horizon the seed regime judges the whole "
    "runs ('then within spread (p)'), or nothing does ('then not judged'). Seed regime (other seeds, or masks "
    "each framework drew): within spread (p) / beyond spread (p) = a t-based prediction interval from the seeds of "
    "each framework at these settings, on the final validation accuracy and the loss-curve distance "
    f"(Bonferroni-combined p; beyond when p < {ALPHA:g}, the false-alarm rate, or 'at chance' when one run ended "
    "at chance and the other and the seeds learned); not judged (N seeds cannot tell ...) = too few seeds to call "
    "a gap this size, where more would. run-to-run = two runs of one "
    "framework at one setting: a pair of the band. settings differ: the runs differ in a setting no yardstick "
    "spans (named): no verdict. no band = no yardstick for these settings. Distance = mean over the common steps "
    "of |5-step mean loss difference|."
)


# Every word a verdict can say, as docs/comparing.md's table writes it (H, k, …: what varies):
# tests/test_doc_lists.py holds the table to it, and it to the words built below. A new word
# needs its line here and in the table.
WORDS = (
    "same",
    "within drift",
    "within drift to step H",
    "beyond drift at step k",
    "beyond drift in the epoch check at step k",
    "within spread (p=…)",
    "beyond spread (p=…)",
    "beyond spread (at chance, p=…)",
    "run-to-run",
    "settings differ: …",
    "no band",
    "not judged (…)",
    "steps within rounding to … (… checked)",
    "beyond rounding at step k (…: …)",
)


@dataclass(frozen=True)
class Verdict:
    word: str
    regime: str  # "same-seed" or "seed"
    step: Optional[int] = None  # beyond drift: the first step beyond
    p: Optional[float] = None  # the seed regime's combined p-value
    settings_line: Optional[str] = None  # `settings differ: ...` whenever they do, whatever the word
    evidence: tuple = ()
    horizon: Optional[int] = None  # same-seed: the last step the envelope judged
    after: Optional["Verdict"] = None  # same-seed, within drift: the seed regime's word on the whole runs
    check: Optional["Verdict"] = None  # same-seed: the verdict on the two runs' epoch checks, when both ran one
    steps: Optional["Verdict"] = None  # same-seed: the step check's word on the two runs, when one ran it

    @property
    def beyond(self) -> bool:
        parts = (self, self.check, self.after, self.steps)
        return any(part.word.startswith("beyond") for part in parts if part is not None)

    @property
    def text(self) -> str:
        """The verdict in one line: a difference the runs' own rows show first, else one the
        step check shows, else one their epoch checks show; else the same-seed word, the epoch
        check's and the step check's, then what was said past the horizon."""
        steps_beyond = self.steps is not None and self.steps.beyond
        if self.word.startswith("beyond"):
            return self.word + (f"; {self.steps.word}" if steps_beyond else "")
        if steps_beyond:
            return self.steps.word
        if self.check is not None and self.check.beyond:
            return f"beyond drift in the epoch check at step {self.check.step}"
        text = self.word
        if self.check is not None:
            text += f", epoch check {self.check.word}"
        if self.steps is not None:
            text += f", {self.steps.word}"
        return text if self.after is None else f"{text}; then {self.after.word}"


@dataclass
class Yardsticks:
    """The seed bands and drift envelopes the verdicts of one report rest on: bands from
    the runs given (two or more seeds of a framework at one setting) or the shipped
    baselines in `baseline_dir`, whichever has more seeds; envelopes from
    `baseline_dir`/drift/."""

    runs: list
    baseline_dir: Optional[str] = None
    _bands: dict = field(default_factory=dict)
    _envelopes: dict = field(default_factory=dict)

    def band(self, run: Run) -> Optional[SeedBand]:
        if id(run) not in self._bands:
            self._bands[id(run)] = self._band(run)
        return self._bands[id(run)]

    def _band(self, run: Run) -> Optional[SeedBand]:
        given = one_per_seed(
            [
                other
                for other in self.runs
                if other.backend_key == run.backend_key
                and not setting_differences(other, run, NOT_COMPARED_ACROSS_SEEDS)
            ]
        )
        shipped = matching_baselines(run, self.baseline_dir) if self.baseline_dir else []
        if len(given) >= max(2, len(shipped)):
            return SeedBand(tuple(given), f"the {len(given)} runs given ({', '.join(r.run_id for r in given)})")
        if len(shipped) >= 2:
            return SeedBand(tuple(shipped), f"the shipped baselines ({shipped[0].path})")
        return None

    def envelope(self, a: Run, b: Run):
        """The pair's drift yardstick: the shipped envelope of its network and mode (dropout
        on, or --parity) where it covers both runs' settings (a --fault aside); else the one
        that covers one run's, the runs' own twins (run/yardstick.py), or the larger of both
        where both are there; None without either."""
        shipped = self._shipped(a, b)
        own = own_envelope([self._read(run.yardstick) for run in (a, b) if run.yardstick])
        if shipped is not None and all(_covered(shipped, run) for run in (a, b)):
            own = None  # measured between frameworks at both runs' settings: the twins stand in for it elsewhere
        envelope = (shipped or own) if shipped is None or own is None else combined(shipped, own)
        return None if envelope is None else with_rounding_floor(envelope, [a, b])

    def _read(self, path: str):
        if path not in self._envelopes:
            self._envelopes[path] = read_envelope(path)
        return self._envelopes[path]

    def _shipped(self, a: Run, b: Run):
        if not self.baseline_dir:
            return None
        key = (a.backend_key[2], mode_of(a.settings))
        if key not in self._envelopes:
            self._envelopes[key] = read_envelope(envelope_path(self.baseline_dir, *key))
        envelope = self._envelopes[key]
        if envelope is None or not (envelope.covers(a.settings) or envelope.covers(b.settings)):
            return None
        return envelope


def _covered(envelope, run: Run) -> bool:
    """Whether the envelope holds for the run's settings, a --fault aside: a known error put in
    on purpose stands for a bug, which changes no setting (its pair is still `settings differ`
    unless beyond)."""
    return envelope.covers(Settings({**run.settings.values, "fault": envelope.settings.get("fault")}))


def one_per_seed(runs: list) -> list:
    """A band's runs: one per seed (a rerun at one seed is not another draw)."""
    seen, kept = set(), []
    for run in runs:
        if run.seed is None or run.seed not in seen:
            kept.append(run)
            seen.add(run.seed)
    return kept


def regime(a: Run, b: Run) -> str:
    """`same-seed`: one seed, and the same units dropped (the shared uniforms, or no dropout
    in --parity); `seed` otherwise."""
    same_seed = a.seed is not None and a.seed == b.seed
    shared = all(run.parity or run.settings.get("dropout") == "shared" for run in (a, b))
    return "same-seed" if same_seed and shared else "seed"


def judge(a: Run, b: Run, yardsticks: Yardsticks) -> Verdict:
    kind = regime(a, b)
    ignore = same_seed_ignored(a.settings, b.settings) if kind == "same-seed" else NOT_COMPARED_ACROSS_SEEDS
    settings_line = differences_line(setting_differences(a, b, ignore))
    evidence = [_distance_line(a, b)]
    unknown = unknown_line(a.label, a.settings, b.label, b.settings, ignore)
    split = split_line(a.settings, b.settings) if kind == "same-seed" else None
    evidence += [line for line in (settings_line, unknown, split) if line]
    if any(name == "device" for name, _, _ in setting_differences(a, b)):  # not even `same`: no yardstick spans both
        return Verdict(settings_line, kind, settings_line=settings_line, evidence=tuple(evidence + [_OTHER_DEVICE]))
    common, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    if common.size and np.array_equal(a.losses[ia], b.losses[ib]) and _evaluations_equal(a, b):
        return Verdict("same", kind, settings_line=settings_line, evidence=("every aligned loss is bit-identical",))
    if kind == "same-seed":
        return _same_seed(a, b, yardsticks, settings_line, evidence)
    if settings_line:
        return Verdict(settings_line, kind, settings_line=settings_line, evidence=tuple(evidence + [_NO_SPAN]))
    if a.backend_key == b.backend_key:
        return Verdict("run-to-run", kind, evidence=tuple(evidence + [_RUN_TO_RUN]))
    return _spread(a, b, yardsticks, evidence)


def _evaluations_equal(a: Run, b: Run) -> bool:
    """Whether the evaluations both runs made (the init row, the validation rows of the same
    steps) are bit-identical too: training rows alike can hide an evaluation that differs
    (a batch norm evaluated on the batch's statistics)."""
    if a.init is not None and b.init is not None and a.init[:2] != b.init[:2]:
        return False
    theirs = {step: (loss, accuracy) for step, loss, accuracy in b.val}
    return all(theirs[step] == (loss, accuracy) for step, loss, accuracy in a.val if step in theirs)


def _spread(a: Run, b: Run, yardsticks: Yardsticks, evidence: list) -> Verdict:
    """The seed regime's test on the whole runs, against the bands of their frameworks."""
    bands = [band for band in {id(band): band for band in (yardsticks.band(a), yardsticks.band(b)) if band}.values()]
    test = pair_test(a, b, bands)
    if test is None:
        return Verdict("no band", "seed", evidence=tuple(evidence + [_NO_SEEDS]))
    if test.undecided:  # too few seeds to call this gap at ALPHA: no `within`
        return Verdict(f"not judged ({test.cannot})", "seed", p=test.p, evidence=tuple(evidence) + test.evidence)
    if test.at_chance:  # one run at chance, the other and every seed learned: beyond, whatever p says
        word = f"beyond spread (at chance, p={test.p:.2g})"
    elif test.beyond:
        word = f"beyond spread (p={test.p:.2g})"
    else:
        word = f"within spread (p={test.p:.2g})"
    return Verdict(word, "seed", p=test.p, evidence=tuple(evidence) + test.evidence)


def _same_seed(a: Run, b: Run, yardsticks: Yardsticks, settings_line: Optional[str], evidence: list) -> Verdict:
    verdict = _with_steps(_same_seed_checked(a, b, yardsticks, settings_line, evidence), a, b)
    if verdict.steps is not None and verdict.steps.beyond and not verdict.word.startswith("beyond"):
        return replace(verdict, step=verdict.steps.step)
    return verdict


def _with_steps(verdict: Verdict, a: Run, b: Run) -> Verdict:
    steps = step_check_verdict(a, b)
    if steps is None:
        return verdict
    return replace(
        verdict, steps=steps, evidence=verdict.evidence + tuple(f"step check: {line}" for line in steps.evidence)
    )


def step_check_verdict(a: Run, b: Run) -> Optional[Verdict]:
    """The step check's word on a pair (run/step_check.py): each run's sampled steps taken
    again in float64 from its own state, each held to the spec on its own; beyond rounding at
    the first step either run leaves it, naming the run and the part. None where neither ran one."""
    checked = [(run, run.step_checks) for run in (a, b) if run.step_checks]
    if not checked:
        return None
    first, evidence, steps = None, [], set()
    for run, rows in checked:
        name = run.label.split(" ")[0]
        steps |= {row["step"] for row in rows}
        beyond = [row for row in rows if row["part"]]
        if beyond:
            row = beyond[0]
            evidence.append(f"{name}: step {row['step']}: {row['part']}, {row['worst']:.3g}x its tolerance")
            if first is None or row["step"] < first[0]:
                first = (row["step"], name, row["part"])
        else:
            worst = max(rows, key=lambda row: row["worst"] or 0.0)
            evidence.append(
                f"{name}: every one of its {len(rows)} checked steps within rounding "
                f"(the worst {worst['worst']:.2g}x its tolerance, step {worst['step']})"
            )
    for run in (a, b):
        if not run.step_checks:
            evidence.append(f"{run.label.split(' ')[0]}: no step check (--step_check off, or a run from before it)")
    if first is not None:
        step, name, part = first
        return Verdict(
            f"beyond rounding at step {step} ({name}: {part})", "same-seed", step=step, evidence=tuple(evidence)
        )
    last = max(int(run.steps[-1]) for run, _ in checked if len(run.steps))  # the update rule reaches every step
    word = f"steps within rounding to {max(last, max(steps))} ({len(steps)} checked)"
    return Verdict(word, "same-seed", evidence=tuple(evidence))


def _same_seed_checked(a: Run, b: Run, yardsticks: Yardsticks, settings_line: Optional[str], evidence: list) -> Verdict:
    verdict = _same_seed_rows(a, b, yardsticks, settings_line, evidence)
    if a.check is None or b.check is None or _NO_ENVELOPE in verdict.evidence:
        return verdict
    check = _same_seed_rows(a.check, b.check, yardsticks, settings_line, [])
    if check.word == "no band":
        check = replace(check, word="not judged (no envelope for the epoch check)")
    evidence = verdict.evidence + tuple(f"epoch check: {line}" for line in (check.word, *check.evidence))
    return replace(verdict, check=check, evidence=evidence)


def _same_seed_rows(a: Run, b: Run, yardsticks: Yardsticks, settings_line: Optional[str], evidence: list) -> Verdict:
    envelope = yardsticks.envelope(a, b)
    test = drift_test(a, b, envelope) if envelope is not None else None
    if test is None:  # no drift yardstick at these settings: the seed regime's, where there is one
        if settings_line:
            evidence += [_NO_SPAN]
            return Verdict(settings_line, "same-seed", settings_line=settings_line, evidence=tuple(evidence))
        if a.backend_key == b.backend_key:
            return Verdict("run-to-run", "seed", evidence=tuple(evidence + [_RUN_TO_RUN, _NO_ENVELOPE]))
        verdict = _spread(a, b, yardsticks, evidence + [_NO_ENVELOPE])
        return replace(verdict, evidence=verdict.evidence + (_NO_ENVELOPE,)) if verdict.word == "no band" else verdict
    evidence += list(test.evidence)
    if test.first_beyond is not None:
        word = f"beyond drift at step {test.first_beyond}"
        return Verdict(
            word,
            "same-seed",
            step=test.first_beyond,
            settings_line=settings_line,
            evidence=tuple(evidence),
            horizon=test.horizon,
        )
    if settings_line:  # within the envelope of one run's settings says nothing of the other's
        evidence.append("within drift over these steps, but the envelope holds for one run's settings only")
        return Verdict(settings_line, "same-seed", settings_line=settings_line, evidence=tuple(evidence))
    if test.last_step <= test.horizon:
        return Verdict("within drift", "same-seed", evidence=tuple(evidence), horizon=test.horizon)
    after = _past_horizon(a, b, yardsticks)
    evidence += [f"past step {test.horizon}: {after.word}", *after.evidence]
    return Verdict(
        f"within drift to step {test.horizon}", "same-seed", evidence=tuple(evidence), horizon=test.horizon, after=after
    )


def _past_horizon(a: Run, b: Run, yardsticks: Yardsticks) -> Verdict:
    """What the seed regime says of the whole runs, where it can: both at the settings of
    one seed band (where they stop included), a band there."""
    split = SPLITS if synchronous(a.settings) and synchronous(b.settings) else ()  # drift, as in the same-seed regime
    stops = differences_line(setting_differences(a, b, NOT_COMPARED_ACROSS_SEEDS + split))
    if stops:
        return Verdict(f"not judged ({stops})", "seed", evidence=(_NO_SPAN,))
    after = _spread(a, b, yardsticks, [])
    if after.word == "no band":
        return Verdict("not judged (no seed band at these settings)", "seed", evidence=after.evidence)
    return after


def _distance_line(a: Run, b: Run) -> str:
    accuracies = (a.final_val_accuracy, b.final_val_accuracy)
    gap = None if None in accuracies else abs(accuracies[0] - accuracies[1])
    return (
        f"distance {number(curve_distance(a, b), '.4f')} (mean |5-step mean loss difference|), "
        f"val acc gap {number(gap, '.4f')}"
    )


_NO_SPAN = "no band or envelope spans runs at different settings: no verdict"
_OTHER_DEVICE = (
    "a GPU run is never judged against a CPU run: their kernels (TF32, cuDNN's algorithms, another summation "
    "order) differ beyond every yardstick measured on one kind of device; compare each with a run on its own kind"
)
_RUN_TO_RUN = "two runs of one framework at one setting: this pair measures the band"
_NO_SEEDS = (
    "no seed band for these settings: give 3 or more seeds of a framework (run_all.py --seeds 0,1,2,3,4), "
    "or run at the shipped baselines' settings"
)
_NO_ENVELOPE = (
    "no drift envelope for these settings (so the seed regime judges the pair, where a band exists): make one with "
    "python -m algorithms.studies.drift --envelope and the same flags (the shipped ones: results/baseline/drift/)"
)
