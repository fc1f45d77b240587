"""`python -m algorithms.studies.whole_runs` (`make power-whole`): the verdict's known
answers over whole runs, at the settings a user runs, with no command before them.

    python -m algorithms.studies.whole_runs [--run_id whole] [--results_dir results/whole]
        [--cases default,bn_32x32x3,digits_8x8] [--only tensorflow,torch,...]
        [--errors late_lr:4:0.5,skip:60:40,...] [--no_variants] [--no_run] [entry-script flags]

Each case is run_all.py's run of one network (its flags, its batch, --epoch_check; the
entry-script flags given are passed on, so `--max_steps 40` makes a short study):
- `default`: the README's main command (the 3-layer net, batch 100, 10 epochs, dropout on,
  seed 0); its errors act only after the drift envelope's horizon (step 16): a learning rate
  or a momentum that changes at a later epoch (--fault late_lr:EPOCH:FACTOR,
  late_momentum:EPOCH:VALUE), updates skipped now and then (skip:START:EVERY), a max-norm
  on a dense layer at a norm its units first reach late (maxnorm:LAYER:VALUE), and a
  schedule's change at epoch 5 applied an epoch late (lr_late; both runs --lr_schedule
  1:0.05,5:0.025);
- `bn_32x32x3` and `digits_8x8`: the example networks on their data, whose yardstick the
  first framework's run measures (run/yardstick.py) and the others reuse; their errors are a
  batch norm's mean cut from the gradient (bn_mean), a batch norm evaluating on the batch's
  statistics (bn_eval) and a `same` convolution's odd padding pixel on the other side
  (same_side), where the network has one.

Its rows, per case: every two frameworks that ran (honest pairs), and in the default case
torch and TensorFlow at 1 against 2 threads and TensorFlow, Keras on TensorFlow and Keras on
jax eager against their graph or compiled step: right when the verdict
(`algorithms.analysis.verdict.judge`, against the shipped yardsticks and the runs' own) is
beyond nowhere: not in the drift test, the epoch check, the step check nor the seed
regime past the horizon. And each error, a real torch run through its real --fault, judged
against TensorFlow's honest run at the same settings, the fault hidden from the verdict (its
settings record says nothing of it, as a bug's would not): right when the verdict is
beyond at a step at or after the one the error starts at. The error runs measure no
yardstick of their own (--yardstick off: a hidden bug's run would find the honest runs'
one). Then the false alarms of the honest pairs (all are held out: none measured a
yardstick the verdicts use) and the worst each part of the verdict reached against its
limit. A finished run of the same --run_id is reused; each framework's stderr is kept whole
in <results_dir>/logs/<run id>/<framework>.log.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from algorithms.analysis.drift_envelope import ENVELOPE_FACTOR, pair_series
from algorithms.analysis.runs import Run, load_run
from algorithms.analysis.settings import Settings
from algorithms.analysis.spread import ALPHA
from algorithms.analysis.verdict import Verdict, Yardsticks, judge
from algorithms.config.argv import flag_value
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR
from algorithms.paths import BASELINE_DIR, RESULTS_DIR
from algorithms.records import run_ids
from algorithms.registry.environments import not_run
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.network.networks import get_network
from algorithms.network.variants import TRAINING_KINDS, parse_fault
from algorithms.studies import children
from algorithms.studies.suite import framework_log, main_command_flags
from algorithms.tables import text_table, wrapped

DEFAULT_RUN_ID = "whole"
DEFAULT_NETWORK = "cnn2d_3layer_fullconnected_3layer"
SCHEDULE = ("--lr_schedule", "1:0.05,5:0.025")  # lr_late's: halved at epoch 5, past the horizon
REFERENCE = "tensorflow"  # the honest run each error is judged against
ERROR_FRAMEWORK = "torch"  # the framework the errors are put into (its trainer builds every kind)
# the honest variants of the default case: (variant, flags, the frameworks that run it)
VARIANTS = (
    ("threads1", ("--threads", "1"), ("torch", "tensorflow")),
    ("eager", ("--execution", "eager"), ("tensorflow", "keras_tensorflow", "keras_jax")),
)
VARIANT_TEXT = {"threads1": "1 vs 2 threads", "eager": "eager vs its graph or compiled step"}


@dataclass(frozen=True)
class Error:
    fault: str  # torch's --fault
    what: str  # the error in words
    both: tuple = ()  # flags its run and its reference run both take (lr_late's schedule)

    @property
    def suffix(self) -> str:
        return self.fault.replace(":", "-")


@dataclass(frozen=True)
class Case:
    name: str
    flags: tuple  # what puts an entry script at the case's network and data
    errors: tuple
    variants: bool = False  # the threads and eager pairs

    def run_id(self, run_id: str, part: str) -> str:
        # the default case's ids are run_all.py's own (`run_all.py --run_id whole-a` makes its honest runs)
        return f"{run_id}-{part}" if self.name == "default" else f"{run_id}-{self.name}-{part}"


def example(network: str, data: str) -> tuple:
    """An example network's flags: examples/NETWORK.toml on data/DATA_{train,test}.npz."""
    return (
        "--network",
        f"examples/{network}.toml",
        "--train",
        f"data/{data}_train.npz",
        "--test",
        f"data/{data}_test.npz",
    )


BN_ERRORS = (
    Error("bn_mean:1", "batch norm 1's mean cut from the gradient"),
    Error("bn_eval:1", "batch norm 1 evaluating on the batch's statistics"),
)
CASES = {
    "default": Case(
        "default",
        (),
        (
            Error("late_lr:4:0.5", "the learning rate halved from epoch 4"),
            Error("late_lr:4:0.9", "the learning rate x0.9 from epoch 4"),
            Error("late_momentum:5:0.8", "momentum 0.8, not 0.9, from epoch 5"),
            Error("skip:60:40", "no update at steps 60, 100, 140, ..."),
            Error("skip:100:7", "no update at steps 100, 107, 114, ..."),
            # an honest torch run's dense 9 has a unit past a norm of 2.0 first after step 30's update,
            # past 2.4 after step 46's, and its largest levels off near 2.5 (measured at 1 thread:
            # docs/comparing.md#whole-runs-errors-past-the-horizon); each row's start is its own run's
            Error("maxnorm:9:2", "dense 9's units held to a norm of 2.0"),
            Error("maxnorm:9:2.4", "dense 9's units held to a norm of 2.4"),
            Error("lr_late", "the schedule's change at epoch 5 applied at epoch 6", SCHEDULE),
        ),
        variants=True,
    ),
    "bn_32x32x3": Case(
        "bn_32x32x3",
        example("bn_32x32x3", "colour_digits"),
        BN_ERRORS + (Error("same_side:2", "conv 2's odd padding pixel on the top and left"),),
    ),
    "digits_8x8": Case(
        "digits_8x8",
        example("digits_8x8", "digits_8x8"),
        BN_ERRORS + (Error("same_side:0", "conv 0's odd padding pixel on the top and left"),),
    ),
}


@dataclass
class Row:
    case: str
    source: str
    error: bool  # a real error (True) or an honest pair (False)
    verdict: Optional[Verdict]  # None: the error could not be run (`why` says why)
    start: Optional[int] = None  # an error: the first step it acts at (0: the init row's evaluation)
    worst: dict = field(default_factory=dict)  # part -> (ratio to its limit, where): the honest pairs'
    why: str = ""

    @property
    def parts(self) -> list:
        """The parts of the verdict that said beyond, each with its step."""
        return beyond_parts(self.verdict) if self.verdict is not None else []

    @property
    def step(self) -> Optional[int]:
        return None if self.verdict is None else self.verdict.step

    @property
    def right(self) -> bool:
        if self.verdict is None:
            return False
        if not self.error:
            return not self.verdict.beyond
        found = self.verdict.beyond and self.step is not None
        return found and self.start is not None and self.step >= self.start


def beyond_parts(verdict: Verdict) -> list:
    """`drift test at step k`, `epoch check at step k`, `step check at step k`, `seed regime
    (p=...)`: each part of the verdict that said beyond."""
    found = []
    if verdict.word.startswith("beyond"):
        found.append(f"drift test at step {verdict.word.split()[-1]}")
    if verdict.check is not None and verdict.check.beyond:
        found.append(f"epoch check at step {verdict.check.step}")
    if verdict.steps is not None and verdict.steps.beyond:
        found.append(f"step check at step {verdict.steps.step}")
    if verdict.after is not None and verdict.after.beyond:
        found.append(f"seed regime ({verdict.after.word.split('(')[-1].rstrip(')')})")
    return found


# ---------------------------------------------------------------------- the runs


@dataclass(frozen=True)
class Planned:
    name: str  # the framework
    run_id: str
    flags: tuple  # besides the case's and run_all.py's
    label: str


def planned_runs(case: Case, run_id: str, names: list, errors: list, variants: bool) -> list:
    """Every run the case needs, the reference framework's first (it measures the yardstick
    the others reuse, where no shipped one covers the case)."""
    runs = [Planned(name, case.run_id(run_id, "a"), (), f"{name}, honest") for name in names]
    if variants and case.variants:
        for variant, flags, frameworks in VARIANTS:
            runs += [
                Planned(name, case.run_id(run_id, variant), flags, f"{name}, {variant}")
                for name in frameworks
                if name in names
            ]
    for error in errors:
        if error.both:
            runs.append(Planned(REFERENCE, case.run_id(run_id, f"{error.suffix}-reference"), error.both, "reference"))
        flags = ("--fault", error.fault, *error.both, "--yardstick", "off")
        runs.append(Planned(ERROR_FRAMEWORK, case.run_id(run_id, error.suffix), flags, f"torch, {error.what}"))
    return runs


def case_flags(case: Case, forwarded: list) -> list:
    """run_all.py's flags for the case: its network and data, the main command's batch,
    --epoch_check, and the flags given."""
    flags = list(case.flags) + forwarded
    flags, _ = main_command_flags(case_network(case, forwarded), flags, "main")
    return flags if "--epoch_check" in flags else flags + ["--epoch_check"]


def case_network(case: Case, forwarded: list):
    """The case's spec network (a network file's as the file gives it)."""
    return get_network(flag_value(list(case.flags) + forwarded, "--network", DEFAULT_NETWORK))


def load(results_dir: str, network: str, name: str, run_id: str) -> Optional[Run]:
    """The run, or None where it did not finish (no test row: the run is written last)."""
    path = children.results_csv(results_dir, network, name)
    if not os.path.isfile(path) or run_id not in run_ids(path):
        return None
    run = load_run(f"{path}@{run_id}")
    return run if run.steps.size and run.test_accuracy is not None else None


def make_runs(case: Case, planned: list, flags: list, results_dir: str, network: str) -> dict:
    """(name, run id) -> exit status of every planned run (0 for one reused), each run now
    unless it finished before; a framework whose environment is missing: its NotRun."""
    outcomes = {}
    for index, run in enumerate(planned, start=1):
        if load(results_dir, network, run.name, run.run_id) is not None:
            outcomes[run.name, run.run_id] = 0
            continue
        missing = not_run(get(run.name), os.path.join(results_dir, "build"), f"[{case.name} {index}/{len(planned)}] ")
        if missing:
            outcomes[run.name, run.run_id] = missing
            continue
        these = flags + list(run.flags) + ["--run_id", run.run_id]
        label = f"[{case.name} {index}/{len(planned)}] {run.label}"
        code, _ = children.run_framework(run.name, these, label, log=framework_log(these, run.name))
        outcomes[run.name, run.run_id] = code
    return outcomes


# ---------------------------------------------------------------------- judging


def hidden(run: Run) -> Run:
    """The run with its --fault left out of its settings (and its epoch check's): judged as a
    bug would be, with no record to give it away."""

    def without(settings: Settings) -> Settings:
        return replace(settings, values={**settings.values, "fault": None})

    check = None if run.check is None else replace(run.check, settings=without(run.check.settings))
    return replace(run, settings=without(run.settings), check=check)


def start_step(error: Error, network, reference: Run, run: Run, torch_run: Optional[Run]) -> Optional[int]:
    """The first step the error acts at (0: the init row's evaluation): from its definition,
    or for a max-norm, the first update it changes (the step before the first loss that
    differs from torch's own honest run, bit for bit alike until then)."""
    fault = parse_fault(error.fault, network, TRAINING_KINDS)
    per_epoch = reference.val[0][0]  # the steps of an epoch: epoch 1's validation row's step
    if fault.kind in ("late_lr", "late_momentum"):
        return (fault.layer - 1) * per_epoch + 1
    if fault.kind == "skip":
        return fault.layer
    if fault.kind == "lr_late":  # the first change of the schedule both runs take
        epochs = [int(part.split(":")[0]) for part in flag_value(list(error.both), "--lr_schedule", "").split(",")]
        epoch = min(epoch for epoch in epochs if epoch > 1)
        return (epoch - 1) * per_epoch + 1
    if fault.kind in ("bn_eval", "same_side"):
        return 0  # the init row evaluates the network at its initial weights
    if fault.kind == "bn_mean":
        return 1  # the first step's gradient
    if fault.kind == "maxnorm" and torch_run is not None:
        steps, first, second = np.intersect1d(torch_run.steps, run.steps, return_indices=True)
        differ = np.nonzero(torch_run.losses[first] != run.losses[second])[0]
        return int(steps[differ[0]]) - 1 if differ.size else None
    return None


def drift_ratio(a: Run, b: Run, yardsticks: Yardsticks) -> Optional[tuple]:
    """(the largest ratio of the pair's difference to the drift test's limit up to the
    horizon, loss or accuracy, its step), as verdict.py's drift test draws the line; None
    without an envelope."""
    envelope = yardsticks.envelope(a, b)
    if envelope is None:
        return None
    steps, differences, accuracy, one_sample = pair_series(a, b)
    judged = np.isin(steps, envelope.steps) & (steps <= envelope.horizon())
    if not judged.any():
        return None
    steps, differences, accuracy, one_sample = (x[judged] for x in (steps, differences, accuracy, one_sample))
    loss = differences / (ENVELOPE_FACTOR * envelope.limit_at(steps))
    accuracy = accuracy / (ENVELOPE_FACTOR * envelope.accuracy_at(steps) + one_sample + 1e-9)
    ratios = np.maximum(loss, accuracy)
    worst = int(np.argmax(ratios))
    return float(ratios[worst]), f"step {int(steps[worst])}"


def worst_ratios(a: Run, b: Run, yardsticks: Yardsticks, verdict: Verdict) -> dict:
    """part -> (its worst ratio to its limit, where): the drift test, the epoch check, the step
    check (the larger of the two runs' worst checked step), the seed regime (ALPHA / its p)."""
    worst = {}
    drift = drift_ratio(a, b, yardsticks)
    if drift is not None:
        worst["drift test"] = drift
    if a.check is not None and b.check is not None:
        check = drift_ratio(a.check, b.check, yardsticks)
        if check is not None:
            worst["epoch check"] = check
    rows = [(row["worst"], row["step"], run) for run in (a, b) for row in (run.step_checks or []) if row["worst"]]
    if rows:
        ratio, step, run = max(rows, key=lambda item: item[0])
        worst["step check"] = (float(ratio), f"step {step}, {run.label.split(' ')[0]}")
    if verdict.after is not None and verdict.after.p is not None:
        worst["seed regime"] = (ALPHA / verdict.after.p, f"p={verdict.after.p:.2g}")
    return worst


def honest_rows(case: Case, runs: dict, names: list, yardsticks: Yardsticks) -> list:
    """Every two frameworks' honest runs, then each variant against its framework's run."""
    pairs = []
    ran = [name for name in names if runs.get((name, "a")) is not None]
    for first, second in itertools.combinations(ran, 2):
        pairs.append((f"{first} vs {second}", runs[first, "a"], runs[second, "a"]))
    if case.variants:
        for variant, _, frameworks in VARIANTS:
            for name in frameworks:
                if runs.get((name, "a")) is not None and runs.get((name, variant)) is not None:
                    pairs.append((f"{name} {VARIANT_TEXT[variant]}", runs[name, "a"], runs[name, variant]))
    rows = []
    for label, a, b in pairs:
        verdict = judge(a, b, yardsticks)
        rows.append(Row(case.name, label, False, verdict, worst=worst_ratios(a, b, yardsticks, verdict)))
    return rows


def error_rows(case: Case, network, errors: list, runs: dict, yardsticks: Yardsticks) -> list:
    rows = []
    for error in errors:
        reference = runs.get((REFERENCE, f"{error.suffix}-reference" if error.both else "a"))
        run = runs.get((ERROR_FRAMEWORK, error.suffix))
        source = f"torch, {error.what} (--fault {error.fault}{' ' + ' '.join(error.both) if error.both else ''})"
        if reference is None or run is None:
            why = "its runs did not finish" if reference is not None or run is not None else "not run"
            rows.append(Row(case.name, source, True, None, why=why))
            continue
        start = start_step(error, network, reference, run, runs.get((ERROR_FRAMEWORK, "a")))
        why = "" if start is not None else "no step it acts at: its losses equal torch's honest run's bit for bit"
        rows.append(Row(case.name, source, True, judge(reference, hidden(run), yardsticks), start=start, why=why))
    return rows


def case_errors(case: Case, given: Optional[list]) -> list:
    """The case's errors, or those --errors gives: the case's own where it has that --fault,
    else the fault as it is (any --fault torch takes)."""
    if given is None:
        return list(case.errors)
    own = {error.fault: error for error in case.errors}
    return [own.get(fault, Error(fault, f"--fault {fault}")) for fault in given]


def refused(error: Error, network) -> Optional[str]:
    """Why the error cannot be put into this network (the fault's own one-line refusal), or None."""
    try:
        parse_fault(error.fault, network, TRAINING_KINDS)
    except ValueError as refusal:
        return str(refusal)
    return None


# ---------------------------------------------------------------------- the tables


def format_rows(case: Case, rows: list) -> list:
    body = []
    for row in rows:
        verdict = row.why if row.verdict is None else row.verdict.text + (f"; {row.why}" if row.why else "")
        start = "" if row.start is None else str(row.start)
        caught = "; ".join(row.parts) if row.error else ""
        body.append(
            [row.source, "error" if row.error else "drift", start, verdict, caught, "right" * row.right or "WRONG"]
        )
    lines = [f"case {case.name}: the verdict on whole runs (judge(), beyond: above {ENVELOPE_FACTOR:g}x the yardstick)"]
    lines += text_table(["source", "is", "starts", "verdict", "beyond in", ""], body, left=5, indent="  ")
    return lines


def false_alarm_lines(rows: list) -> list:
    honest = [row for row in rows if not row.error and row.verdict is not None]
    alarms = [row for row in honest if row.verdict.beyond]
    lines = [f"honest pairs called beyond anywhere: {len(alarms)} of {len(honest)}"]
    lines += [f"  {row.case}: {row.source}: {row.verdict.text}" for row in alarms]
    parts = ("drift test", "epoch check", "step check", "seed regime")
    for part in parts:
        reached = [(row.worst[part], row) for row in honest if part in row.worst]
        if not reached:
            continue
        (ratio, where), row = max(reached, key=lambda item: item[0][0])
        limit = f"{ALPHA:g} / p" if part == "seed regime" else "its limit"
        lines.append(
            f"  the worst {part}: {ratio:.3g}x {limit} ({row.case}: {row.source}, {where}; {len(reached)} pairs judged)"
        )
    return lines


def error_lines(rows: list) -> list:
    errors = [row for row in rows if row.error]
    caught = [row for row in errors if row.right]
    return [f"errors called beyond at or after the step they start at: {len(caught)} of {len(errors)}"]


def main(argv=None) -> int:
    parser = children.study_parser("python -m algorithms.studies.whole_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_id", default=DEFAULT_RUN_ID, help="the runs' --run_id prefix (a finished run is reused)")
    parser.add_argument("--results_dir", default=f"{RESULTS_DIR}/whole", help="where the runs are written")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--only", default=",".join(NAMES), help="the frameworks of the honest pairs (default: all)")
    parser.add_argument("--errors", default=None, help="the errors to run, by their --fault (default: each case's)")
    parser.add_argument("--no_variants", action="store_true", help="skip the threads and eager pairs")
    parser.add_argument("--no_run", action="store_true", help="start no run: judge those that finished")
    parser.add_argument("--baseline", default=BASELINE_DIR, help="the shipped yardsticks (run_all.py's --baseline)")
    args, forwarded = children.parse_study_flags(parser, list(sys.argv[1:] if argv is None else argv))
    cases = args.cases.split(",")
    if set(cases) - set(CASES):
        parser.error(f"--cases {args.cases}: give some of {', '.join(CASES)}")
    names = framework_names(parser, args.only, "--only")
    if REFERENCE not in names or ERROR_FRAMEWORK not in names:
        parser.error(f"--only {args.only}: the errors need {REFERENCE} (the reference) and {ERROR_FRAMEWORK}")
    given = args.errors.split(",") if args.errors else None
    unknown = [fault for fault in given or () if fault.split(":")[0] not in TRAINING_KINDS]
    if unknown:
        parser.error(f"--errors {args.errors}: {', '.join(unknown)}: a --fault is one of {', '.join(TRAINING_KINDS)}")
    forwarded = [*forwarded, "--results_dir", args.results_dir]
    tables, rows, not_rows = [], [], []
    for name in cases:
        case = CASES[name]
        network = case_network(case, forwarded)
        errors = []
        for error in case_errors(case, given):
            why = refused(error, network)
            if why:
                not_rows.append(f"{case.name}: torch --fault {error.fault}: {why}")
            else:
                errors.append(error)
        planned = planned_runs(case, args.run_id, names, errors, not args.no_variants)
        flags = case_flags(case, forwarded)
        if not args.no_run:
            make_runs(case, planned, flags, args.results_dir, network.name)
        runs = {}
        for run in planned:
            part = run.run_id[len(case.run_id(args.run_id, "")) :]
            runs[run.name, part] = load(args.results_dir, network.name, run.name, run.run_id)
        yardsticks = Yardsticks([run for run in runs.values() if run is not None], args.baseline)
        case_rows = honest_rows(case, runs, names, yardsticks) + error_rows(case, network, errors, runs, yardsticks)
        if not any(not row.error for row in case_rows):
            print(f"error: case {name}: no two honest runs finished in {args.results_dir}", file=sys.stderr)
            return EXIT_INPUT_ERROR
        tables.append("\n".join(format_rows(case, case_rows)))
        rows += case_rows
    print("\n\n".join(tables))
    print("\n" + "\n".join(error_lines(rows) + false_alarm_lines(rows)))
    if not_rows:
        print("not a row, and why:\n" + "\n".join(line for text in not_rows for line in wrapped(text, "  ", "    ")))
    return 0 if all(row.right for row in rows) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
