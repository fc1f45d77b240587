"""The answer first: what a report says before its evidence.

- `headline(report)`: the one line a report opens with (the HTML page and the console
  summary alike): how many pairs differ for real and which run is off, e.g. `1 of 7 pairs
  differs for real: keras/torch (beyond rounding at step 212 (keras/torch: layer 3
  BatchNormalization gradient); val acc 0.19 against torch/torch's 0.64)`, or `all 7 pairs
  within drift`.
- `far_apart(...)`: a same-seed pair at equal settings that ENDS far apart, whatever its
  judged steps said. Honest same-seed pairs end close: the shipped runs of
  results/baseline/default/ (every two frameworks of one seed, seeds 0-9, 154 pairs) end at
  most HONEST_GAP apart in final validation accuracy; a pair past FAR_APART_MARGIN times
  that is not drift. Where the report has the frameworks' test predictions (run_all.py), a
  pair that labels more than FAR_APART_MARGIN times HONEST_DISAGREEMENT of the test images
  differently (the most of honest same-seed pairs: the shipped predictions of
  results/baseline/agreement/) is far apart too (docs/comparing.md#a-pair-that-ends-far-apart).
- `findings(report)`: every pair's class as the report colours it (agree, beyond, apart, none)
  with its far-apart reason, and `against_first(report)`: the pairs the console's summary
  shows (each run against the first, on its own kind of device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from algorithms.analysis.releases import verdict_line
from algorithms.analysis.runs import Run
from algorithms.analysis.verdict import regime
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.tables import number

# measured on the shipped runs (results/baseline/default/, 2026-12-04 files): the largest final
# validation-accuracy gap of any two frameworks' runs of one seed (tensorflow against torch, seed 8:
# 0.9587 against 0.9762, 14 of the 800 validation images); tests/test_answer.py measures it again
HONEST_GAP = 0.0175
FAR_APART_MARGIN = 3.0  # the largest gap between two SEEDS of the shipped runs is 0.0287: still under 3x
FAR_APART_GAP = FAR_APART_MARGIN * HONEST_GAP
# measured on results/baseline/agreement/ (2026-12-07, the same machine): the largest share of the
# test images two frameworks' runs of one seed label differently (TensorFlow against Keras on jax,
# seed 0: 33 of 1,000; 12 pairs of seeds 0-3); tests/test_answer.py measures it again. The same
# margin: 3x it (9.9%) clears every two seeds of those runs too (at most 4.3% apart)
HONEST_DISAGREEMENT = 0.033
FAR_APART_AGREEMENT = 1 - FAR_APART_MARGIN * HONEST_DISAGREEMENT

NAMED_AT_MOST = 3  # runs (or pairs) the opening line names; the others it counts


@dataclass(frozen=True)
class Finding:
    """One pair as the report shows it: its class (agree, beyond, apart: ends far apart
    whatever its judged steps said, none: no verdict), why it is far apart, its agreement."""

    pair: object  # compare.PairDiff
    verdict: object  # verdict.Verdict
    css_class: str
    apart: Optional[str] = None
    agreement: Optional[float] = None

    @property
    def differs(self) -> bool:
        return self.css_class in ("beyond", "apart")

    @property
    def text(self) -> str:
        """The verdict (its releases' changes first, where the runs' differ), and where the
        pair ends far apart, why."""
        text = verdict_line(self.pair.a, self.pair.b, self.verdict.text)
        return text + (f"; {self.apart}" if self.apart else "")


def word_class(word: str) -> str:
    """A verdict's word -> agree, beyond or none: beyond wherever any part says so."""
    if word.startswith("beyond") or "; then beyond" in word or ", beyond" in word:
        return "beyond"
    if word == "same" or word.startswith("within") or word.startswith("steps within"):
        return "agree"
    return "none"


def findings(report: dict) -> list:
    """A Finding per pair of the report, in its order."""
    found = []
    for pair, verdict in zip(report["pairs"], report["verdicts"]):
        share = agreement_of(report, pair.a, pair.b)
        css_class = "beyond" if verdict.beyond else word_class(verdict.text)
        apart = None if css_class == "beyond" else far_apart(pair.a, pair.b, verdict, share)
        found.append(Finding(pair, verdict, "apart" if apart else css_class, apart, share))
    return found


def far_apart(a: Run, b: Run, verdict, agreement: Optional[float] = None) -> Optional[str]:
    """Why a same-seed pair at equal settings ends farther apart than honest pairs do (its
    final validation accuracies, validated at the same step, or its test predictions), or
    None. A pair of other seeds is the seed band's to judge, and one at other settings may
    end apart for that reason."""
    if regime(a, b) != "same-seed" or verdict.settings_line:
        return None
    reasons = []
    # where they stop may differ in a same-seed pair (--max_steps): ends compare only at one step
    gap = _gap(a, b) if a.val and b.val and a.val[-1][0] == b.val[-1][0] else None
    if gap is not None and gap > FAR_APART_GAP:
        reasons.append(
            f"val acc gap {gap:.2f} > {FAR_APART_GAP:.4g} ({FAR_APART_MARGIN:g} x the largest of honest same-seed "
            f"pairs, {HONEST_GAP:g})"
        )
    if agreement is not None and agreement < FAR_APART_AGREEMENT:
        reasons.append(
            f"{100 * agreement:.1f}% of the test predictions alike < {100 * FAR_APART_AGREEMENT:.1f}% ("
            f"{FAR_APART_MARGIN:g} x the most honest same-seed pairs label differently, {100 * HONEST_DISAGREEMENT:g}%)"
        )
    return "ends far apart: " + "; ".join(reasons) if reasons else None


def _gap(a: Run, b: Run) -> Optional[float]:
    if a.final_val_accuracy is None or b.final_val_accuracy is None:
        return None
    return abs(a.final_val_accuracy - b.final_val_accuracy)


def framework_name(run: Run) -> Optional[str]:
    """The registry's name of a run's framework (keras_torch), or None for one it does not list."""
    return next(
        (fw.name for fw in FRAMEWORKS if (fw.framework, fw.backend) == tuple(run.backend_key[:2])),
        None,
    )


def agreement_of(report: dict, a: Run, b: Run) -> Optional[float]:
    """The share of test images two runs labelled alike, where the report has it: run_all.py's
    agreement matrix, of its first run id's runs."""
    agreement = report.get("agreement")
    first = report["runs"][0]
    if not agreement or a.run_id != first.run_id or b.run_id != first.run_id:
        return None
    names = {framework_name(a), framework_name(b)}
    return next((share for x, y, share in agreement[1] if {x, y} == names and len(names) == 2), None)


def device_of(run: Run) -> str:
    """The kind of device a run trained on (its settings record; an older run: the CPU)."""
    return run.settings.get("device") or "cpu"


def short_label(run: Run, first: Run, devices: bool = False) -> str:
    """framework/backend, with the run id where it is not the first run's, and with
    `devices` the kind of device it ran on."""
    name = f"{run.backend_key[0]}/{run.backend_key[1]}"
    name = name if run.run_id == first.run_id else f"{name} {run.run_id}"
    return f"{name} ({device_of(run)})" if devices else name


def same_device_reference(report: dict, first: Run, run: Run) -> Run:
    """The run `run` is judged against in the lines against the first: the first itself, or
    where `run` trained on another kind of device (a CPU-only framework beside a reference on
    the GPU) the first's framework's run of the same seed on that kind (run_all.py makes it),
    since a GPU run is never judged against a CPU run; the first when there is none."""
    if device_of(run) == device_of(first):
        return first
    twins = [
        other
        for other in report["runs"]
        if other.backend_key == first.backend_key and device_of(other) == device_of(run) and other.seed == first.seed
    ]
    return twins[0] if twins and twins[0] is not run else first


def pair_index(report: dict, a: Run, b: Run) -> int:
    """The index of two runs' pair in the report, in either order."""
    return next(i for i, pair in enumerate(report["pairs"]) if {id(pair.a), id(pair.b)} == {id(a), id(b)})


def against_first(report: dict) -> list:
    """[(run, reference, pair index)]: each run against the first as the console's summary
    shows it (its framework's other seeds, and the first run id's other frameworks; against
    the first's run on the run's own kind of device where there is one)."""
    first = report["runs"][0]
    shown = []
    every = report.get("against_first") == "every run"  # run_all.py --strategies: each strategy's runs too
    for pair in report["pairs"]:
        shown_pair = every or pair.b.run_id == first.run_id or pair.same_backend
        if not (pair.a is first and pair.abs_diff.size and shown_pair):
            continue  # other seeds' runs of other frameworks: in the full report
        reference = same_device_reference(report, first, pair.b)
        shown.append((pair.b, reference, pair_index(report, reference, pair.b)))
    return shown


def headline(report: dict) -> str:
    """The line a report opens with: how many pairs differ for real (a verdict beyond, or a
    pair that ends far apart) and which run is off; counted over the pairs against the first
    where those take in every run (run_all.py's report), else over every pair."""
    return answer(report)[0]


def answer(report: dict) -> tuple:
    """(headline, its class): beyond where a pair it counts is beyond, apart where the pairs
    it counts only end far apart, agree where every one agrees, none otherwise (some
    without a verdict, none differing)."""
    found = findings(report)
    runs = report["runs"]
    shown = against_first(report)
    if {id(run) for run, _, _ in shown} >= {id(run) for run in runs[1:]} and shown:
        considered = sorted({index for _, _, index in shown})
    else:
        considered = list(range(len(found)))
    differing = [found[i] for i in considered if found[i].differs]
    total = len(considered)
    plural = "pair" if total == 1 else "pairs"
    if not differing:
        judged = [found[i] for i in considered]
        return _none_differ(total, judged), "agree" if all(f.css_class == "agree" for f in judged) else "none"
    verb = "differs" if len(differing) == 1 else "differ"
    culprits = _culprits(differing, found, runs)
    if len(culprits) > NAMED_AT_MOST:  # one line: the rest are the table's
        culprits = culprits[:NAMED_AT_MOST] + [f"and {len(culprits) - NAMED_AT_MOST} more (the table)"]
    css_class = "beyond" if any(f.css_class == "beyond" for f in differing) else "apart"
    return f"{len(differing)} of {total} {plural} {verb} for real: " + "; ".join(culprits), css_class


def _none_differ(total: int, considered: list) -> str:
    agree = [finding for finding in considered if finding.css_class == "agree"]
    within = "within drift or seed spread" if any(f.verdict.regime == "seed" for f in agree) else "within drift"
    if len(agree) == total:
        return f"all {total} pairs {within}" if total > 1 else f"the pair is {within}"
    unjudged = sorted({_unjudged_reason(finding.verdict.word) for finding in considered if finding.css_class == "none"})
    return (
        f"no pair of {total} differs for real: {len(agree)} {within}, {total - len(agree)} without a verdict "
        f"({', '.join(unjudged)})"
    )


def _unjudged_reason(word: str) -> str:
    return word.split(":")[0] if word.startswith("settings differ") else word.split(" (")[0]


def _culprits(differing: list, found: list, runs: list) -> list:
    """Per run found off, `label (why; val acc X against the other's Y)`; a pair whose odd one
    out cannot be told (two runs alone, no step check naming one) as `a vs b (why)`."""
    first = runs[0]
    off = {}
    for finding in differing:
        culprit = _odd_one_out(finding, found)
        key = id(culprit) if culprit is not None else (id(finding.pair.a), id(finding.pair.b))
        off.setdefault(key, (culprit, finding))
    parts = []
    for culprit, finding in off.values():
        a, b = finding.pair.a, finding.pair.b
        if culprit is None:
            parts.append(f"{short_label(a, first)} vs {short_label(b, first)} ({_why(finding, a, b, first)})")
            continue
        other = b if culprit is a else a
        parts.append(f"{short_label(culprit, first)} ({_why(finding, culprit, other, first)})")
    return parts


def _odd_one_out(finding: Finding, found: list) -> Optional[Run]:
    """Which run of a differing pair is off: the one the step check names, else the one that
    differs from more of the runs it was judged against (all of them, where the other agrees
    with most); None where the pairs cannot tell."""
    steps = finding.verdict.steps
    a, b = finding.pair.a, finding.pair.b
    if steps is not None and steps.beyond:
        named = steps.word.split("(", 1)[-1].split(":")[0]
        for run in (a, b):
            if run.label.split(" ")[0] == named:
                return run
    share = {id(run): _differing_share(run, found) for run in (a, b)}
    if share[id(a)] == share[id(b)]:
        return None
    return a if share[id(a)] > share[id(b)] else b


def _differing_share(run: Run, found: list) -> float:
    judged = [f for f in found if run in (f.pair.a, f.pair.b) and f.css_class != "none"]
    return sum(f.differs for f in judged) / len(judged) if judged else 0.0


def _why(finding: Finding, run: Run, other: Run, first: Run) -> str:
    """The verdict (or, for a pair that ends far apart, what its judged steps said) and how
    far apart the two runs end."""
    ends = (
        f"val acc {number(run.final_val_accuracy, '.2f')} against {short_label(other, first)}'s "
        f"{number(other.final_val_accuracy, '.2f')}"
    )
    if finding.agreement is not None:
        ends += f", {100 * finding.agreement:.1f}% of the test predictions alike"
    if finding.css_class == "beyond":
        return f"{finding.verdict.text}; {ends}"
    return f"ends far apart, though {finding.verdict.text}: {ends}"
