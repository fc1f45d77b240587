"""`python -m algorithms.studies.power` (`make power`): the same-seed regime's confusion
table, in each mode: are real errors caught, and caught early, while every drift source
is called drift?

    python -m algorithms.studies.power [--run_id envelope50] [--results_dir results/drift]
        [--modes default,parity] [--errors lr0.5x,eval-dropout,...] [--no_localise]

It reads the runs `make envelope` made in each mode (`default`: dropout on, its uniforms
shared, run_all.py's default; `parity`: --parity), each with its epoch check
(run/epoch_check.py), and adds error runs, each a real torch run through a real flag at
those runs' settings. Its rows, per mode:
- drift sources, not errors: every honest pair of the envelope's runs (each framework
  twice, torch and TensorFlow at 1 against 2 threads, TensorFlow with oneDNN off and
  eager, Keras on jax eager against its XLA-fused step, every two frameworks), its rows
  and its epoch checks each judged against the envelope of all the other pairs (leave one
  out: no pair is judged against itself); right when both are `within drift`: the
  measured false alarms of the verdict and of the epoch check;
- real errors against torch's own run of that mode, its rows to the envelope's horizon
  and its epoch check each judged against the whole envelope; right when either is
  `beyond drift` (the row says which, and at which step). Both modes: the learning rate
  x0.9 (--learning_rate), momentum 0.85 (--momentum), Nesterov off (--nesterov off),
  epoch 2's batches in another order (--fault order:2:1: an epoch boundary, caught in the
  epoch check). The default mode, the classes that only show with dropout on or after the
  first steps: the learning rate halved, dropout at half its rate (--fault
  dropout:10:0.125), dropout left on at evaluation (--fault eval_dropout: the init row),
  the batches not reshuffled (--fault same_order), the optimizer's momentum reset each
  epoch (--fault momentum_reset), a learning-rate schedule that steps an epoch late
  (--fault lr_late; its reference run has the same --lr_schedule), the training accuracy
  counted on the wrong labels (--fault accuracy_labels). The parity mode, the spec's
  layers and loss: conv 1 padded by 2 (--fault padding:1:2), conv 3's initial kernel x1.1
  (--fault weights:3:1.1), conv 3 without its bias (--fault bias:3), a dropout of 0.5
  where the parity spec has none (--fault dropout:10:0.5), the loss summed, not averaged
  (--fault loss:sum), epoch 1's batches in another order (--fault order:1:1); for the
  three layer faults the per-layer localisation (localisation/localise.py) runs too, and the
  row is right only if it names the fault's layer (by a value beyond float32 tolerance,
  or else the structural check: a missing bias changes no value at the zero initial biases).
Not a row, and why (printed too): TensorFlow's own XLA (it refuses `--compile` with
`--parity`); XLA's fusion on against off is a drift row, Keras on jax eager (op by op)
against its jit-compiled step.
A finished error run of the same --run_id is reused.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from typing import Optional

from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR
from algorithms.analysis.drift_envelope import ENVELOPE_FACTOR, MODES, build_envelope, drift_test, pair_series
from algorithms.analysis.runs import load_run
from algorithms.analysis.settings import Settings
from algorithms.paths import DEFAULT_TRAIN, RESULTS_DIR
from algorithms.config.argv import flag_value
from algorithms.records import run_ids, read_settings
from algorithms.studies import children
from algorithms.studies.envelope import EVERY, SUMMATION_ORDERS, variants
from algorithms.tables import text_table, wrapped

DEFAULT_RUN_ID = "envelope50"
DEFAULT_NETWORK = "cnn2d_3layer_fullconnected_3layer"
SCHEDULE = ("--lr_schedule", "1:0.05,2:0.025")  # the lr_late row's schedule: halved from epoch 2
NOT_RUN = (
    "TensorFlow's own XLA on vs off: it refuses --compile with --parity (no deterministic XLA max-pool "
    "gradient); XLA's fusion on vs off is the keras_jax eager row",
)
MODE_TEXT = {"default": "dropout on, its uniforms shared: run_all.py's default", "parity": "--parity"}


@dataclass(frozen=True)
class Error:
    label: str
    suffix: str  # of its run id
    flags: tuple  # what puts it into torch's run
    modes: tuple  # the modes it is a row of
    fault: Optional[str] = None  # a layer fault the localisation is asked to find
    reference: tuple = ()  # flags its reference run needs too (its own torch run, not the envelope's)


def error_cases(settings: dict) -> list:
    """The real errors, each against the reference run's `settings`."""
    rate, both, default, parity = settings["learning_rate"], MODES, ("default",), ("parity",)
    return [
        Error("learning rate x0.9", "lr0.9x", ("--learning_rate", f"{rate * 0.9:g}"), both),
        Error("learning rate x0.5", "lr0.5x", ("--learning_rate", f"{rate * 0.5:g}"), default),
        Error(f"momentum 0.85, not {settings['momentum']:g}", "momentum0.85", ("--momentum", "0.85"), both),
        Error("Nesterov off", "nesterov-off", ("--nesterov", "off"), both),
        Error("dropout 0.125 after dense 9, not 0.25", "dropout-half", ("--fault", "dropout:10:0.125"), default),
        Error("dropout left on at evaluation", "eval-dropout", ("--fault", "eval_dropout"), default),
        Error("batches not reshuffled (epoch 1's order each epoch)", "same-order", ("--fault", "same_order"), default),
        Error("momentum reset at every epoch", "momentum-reset", ("--fault", "momentum_reset"), default),
        Error("lr schedule an epoch late", "lr-late", ("--fault", "lr_late", *SCHEDULE), default, None, SCHEDULE),
        Error("training accuracy on the wrong labels", "accuracy-labels", ("--fault", "accuracy_labels"), default),
        Error("epoch 2's batches in another order", "order2", ("--fault", "order:2:1"), both),
        Error("conv 1 padded by 2, not 1", "padding1", ("--fault", "padding:1:2"), parity, "padding:1:2"),
        Error("conv 3's initial kernel x1.1", "weights3", ("--fault", "weights:3:1.1"), parity, "weights:3:1.1"),
        Error("conv 3 without its bias", "bias3", ("--fault", "bias:3"), parity, "bias:3"),
        Error("dropout 0.5 after dense 9 (the parity spec: none)", "dropout10", ("--fault", "dropout:10:0.5"), parity),
        Error("the loss summed, not averaged", "loss-sum", ("--fault", "loss:sum"), parity),
        Error("epoch 1's batches in another order", "order1", ("--fault", "order:1:1"), parity),
    ]


ERROR_NAMES = tuple(error.suffix for error in error_cases({"learning_rate": 0.05, "momentum": 0.9}))


@dataclass(frozen=True)
class Row:
    source: str
    error: bool  # a real error (True) or a drift source (False)
    step: Optional[int]  # the first step beyond drift in the run's own rows; None: within
    check_step: Optional[int] = None  # the same in the epoch checks
    checked: bool = False  # both runs had an epoch check, judged
    fault_layer: Optional[int] = None  # a layer fault's layer (spec index)
    named_layer: Optional[int] = None  # the layer the localisation named; None: none (or not run)
    localised: bool = False  # the localisation ran for this row

    @property
    def caught(self) -> bool:
        return self.step is not None or self.check_step is not None

    @property
    def verdict(self) -> str:
        if self.step is not None:
            return f"beyond drift at step {self.step}"
        if self.check_step is not None:
            return f"beyond drift in the epoch check at step {self.check_step}"
        return "within drift" + (", epoch check within drift" if self.checked else "")

    @property
    def localisation(self) -> str:
        if not self.localised:
            return ""
        return "no layer named" if self.named_layer is None else f"layer {self.named_layer}"

    @property
    def right(self) -> bool:
        return self.caught == self.error and (not self.localised or self.named_layer == self.fault_layer)


def load(results_dir: str, network: str, name: str, run_id: str):
    """The run (its epoch check with it), or None when it has not finished a step."""
    path = children.results_csv(results_dir, network, name)
    if not os.path.isfile(path) or run_id not in run_ids(path):
        return None
    run = load_run(f"{path}@{run_id}")
    return run if run.steps.size else None


def honest_pairs(runs: dict, names: list) -> list:
    """(label, run a, run b) of every honest pair whose runs finished (as studies/envelope.py's)."""
    pairs = []

    def pair(first, second, label):
        if runs.get(first) is not None and runs.get(second) is not None:
            pairs.append((label, runs[first], runs[second]))

    for name in names:
        pair((name, "a"), (name, "b"), f"{name} a vs b")
        pair((name, "a"), (name, "threads1"), f"{name} 2 vs 1 threads")
        for variant, _, _ in SUMMATION_ORDERS.get(name, ()):
            pair((name, "a"), (name, variant), f"{name} {variant}")
    for first, second in itertools.combinations(names, 2):
        pair((first, "a"), (second, "a"), f"{first} vs {second}")
    return pairs


def envelope_of(pairs: list, check: bool):
    """The envelope of these pairs' rows (or of their epoch checks), losses and accuracies."""
    series = []
    for _, a, b in pairs:
        a, b = (a.check, b.check) if check else (a, b)
        if a is not None and b is not None:
            steps, loss, accuracy, _ = pair_series(a, b)
            series.append((steps, loss, accuracy))
    if not series:
        return None
    return build_envelope({"all": [(s, d) for s, d, _ in series]}, Settings({}), (), [(s, a) for s, _, a in series])


def judged(a, b, main_envelope, check_envelope) -> dict:
    """Row's step fields: the first step beyond in the runs' rows and in their checks."""
    main = drift_test(a, b, main_envelope) if main_envelope is not None else None
    checks = a.check is not None and b.check is not None and check_envelope is not None
    check = drift_test(a.check, b.check, check_envelope) if checks else None
    return {
        "step": main.first_beyond if main else None,
        "check_step": check.first_beyond if check else None,
        "checked": check is not None,
    }


def drift_rows(pairs: list) -> list:
    """Each honest pair against the envelope of the others (its rows, and its checks)."""
    rows = []
    for i, (label, a, b) in enumerate(pairs):
        others = [pair for j, pair in enumerate(pairs) if j != i]
        rows.append(Row(label, False, **judged(a, b, envelope_of(others, False), envelope_of(others, True))))
    return rows


def error_flags(settings: dict, changed: tuple, results_dir: str, run_id: str) -> list:
    """The reference run's settings as entry-script flags, and the flags that change one."""
    return [
        "--network",
        settings["network"],
        *(["--parity"] if settings.get("parity") else []),
        "--epoch_check",
        "--max_steps",
        str(settings["max_steps"]),
        "--num_epochs",
        str(settings["epochs"]),
        "--batch_size",
        str(settings["batch"]),
        "--seed",
        str(settings["seed"]),
        "--threads",
        str(settings["threads"]),
        *changed,
        "--results_dir",
        results_dir,
        "--run_id",
        run_id,
        "--quiet",
    ]


def torch_run(results_dir: str, network: str, run_id: str, flags: list, label: str, forwarded: list, steps: int):
    """torch's run `run_id`, made now unless it finished before."""
    finished = load(results_dir, network, "torch", run_id)
    if finished is None or finished.steps.size < steps:
        children.run_framework("torch", forwarded + flags, label)
        finished = load(results_dir, network, "torch", run_id)
    return finished


def error_rows(results_dir: str, network: str, run_id: str, mode: str, forwarded: list, pairs: list, options) -> list:
    localise, only = options
    reference = load(results_dir, network, "torch", f"{run_id}-a")
    if reference is None:
        return []
    settings = read_settings(children.results_csv(results_dir, network, "torch")).get(f"{run_id}-a")
    main_envelope, check_envelope = envelope_of(pairs, False), envelope_of(pairs, True)
    rows = []
    for error in error_cases(settings):
        if mode not in error.modes or (only is not None and error.suffix not in only):
            continue
        steps, base = reference.steps.size, reference
        if error.reference:  # its own reference run, with the flags the error needs to act
            this_run = f"{run_id}-{error.suffix}-reference"
            flags = error_flags(settings, error.reference, results_dir, this_run)
            base = torch_run(results_dir, network, this_run, flags, "torch, its reference", forwarded, steps)
        this_run = f"{run_id}-{error.suffix}"
        flags = error_flags(settings, error.flags, results_dir, this_run)
        run = torch_run(results_dir, network, this_run, flags, f"torch, {error.label}", forwarded, steps)
        if run is None or base is None:
            continue
        found = {}
        if error.fault and localise:
            found = localised_layer(network, settings, error.fault, flag_value(forwarded, "--train", DEFAULT_TRAIN))
        rows.append(Row(f"torch, {error.label}", True, **judged(base, run, main_envelope, check_envelope), **found))
    return rows


def localised_layer(network: str, settings: dict, fault: str, train: str) -> dict:
    """The localisation of `fault` put into torch alone, at the run's seed and on the
    run's training file: Row's fields."""
    from algorithms.localisation.localise import localise

    print(f"[power] localising torch with --fault {fault}", flush=True)
    result = localise(["torch"], network, seed=settings["seed"], train_path=train, faults={"torch": fault})
    finding = result.first_beyond("torch")
    # a value that differs names its layer; else the structural check's (a missing bias
    # changes no value at the shared zero initial biases: its parameters are what differ)
    named = finding.layer if finding is not None else result.structure_layers.get("torch")
    return {"fault_layer": int(fault.split(":")[1]), "named_layer": named, "localised": True}


def confusion(
    results_dir: str,
    network: str,
    run_id: str,
    forwarded: list,
    mode: str,
    localise: bool = True,
    only: Optional[set] = None,
) -> list:
    """One mode's rows: drift sources first, then the errors."""
    mode_run = f"{run_id}-{mode}"
    names = [name for name in EVERY if load(results_dir, network, name, f"{mode_run}-a") is not None]
    runs = {
        (name, variant): load(results_dir, network, name, f"{mode_run}-{variant}")
        for name in names
        for variant, _, _ in variants(name)
    }
    pairs = honest_pairs(runs, names)
    return drift_rows(pairs) + error_rows(results_dir, network, mode_run, mode, forwarded, pairs, (localise, only))


def format_confusion(rows: list, mode: str) -> str:
    body = [
        [row.source, "error" if row.error else "drift", row.verdict, row.localisation, "right" * row.right or "WRONG"]
        for row in rows
    ]
    errors = [row for row in rows if row.error]
    drifts = [row for row in rows if not row.error]
    caught = [row for row in errors if row.caught]
    lines = [
        f"confusion table, mode {mode} ({MODE_TEXT[mode]}; beyond drift: above {ENVELOPE_FACTOR:g}x the envelope):"
    ]
    lines += text_table(["source", "is", "verdict", "localised at", ""], body, left=5, indent="  ")
    checked = [row for row in drifts if row.checked]
    lines.append(
        f"real errors caught: {len(caught)} of {len(errors)}; drift sources called drift: "
        f"{sum(row.right for row in drifts)} of {len(drifts)} (their epoch checks: "
        f"{sum(row.check_step is None for row in checked)} of {len(checked)})"
    )
    localised = [row for row in errors if row.localised]
    if localised:
        at_their_layer = sum(row.named_layer == row.fault_layer for row in localised)
        lines.append(f"layer faults localised at their own layer: {at_their_layer} of {len(localised)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = children.study_parser("python -m algorithms.studies.power", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_id", default=DEFAULT_RUN_ID, help="the envelope runs' --run_id (make envelope)")
    parser.add_argument("--results_dir", default=f"{RESULTS_DIR}/drift", help="where the envelope runs are")
    parser.add_argument("--network", default=DEFAULT_NETWORK)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument(
        "--no_localise", action="store_true", help="skip the localisation of the layer faults (a process each)"
    )
    parser.add_argument(
        "--errors",
        default=",".join(ERROR_NAMES),
        help=f"the errors to run, comma-separated, of {', '.join(ERROR_NAMES)}",
    )
    args, forwarded = children.parse_study_flags(parser, list(sys.argv[1:] if argv is None else argv))
    only = set(args.errors.split(","))
    if only - set(ERROR_NAMES):
        unknown = ", ".join(sorted(only - set(ERROR_NAMES)))
        parser.error(f"--errors {args.errors}: {unknown} is not one of {', '.join(ERROR_NAMES)}")
    modes = args.modes.split(",")
    if set(modes) - set(MODES):
        parser.error(f"--modes {args.modes}: give some of {', '.join(MODES)}")
    tables, right = [], True
    for mode in modes:
        rows = confusion(args.results_dir, args.network, args.run_id, forwarded, mode, not args.no_localise, only)
        if not any(not row.error for row in rows):
            print(
                f"error: no runs {args.run_id}-{mode}-a/-b in {args.results_dir}: make them with make envelope "
                f"ARGS='--run_id {args.run_id}' (python -m algorithms.studies.drift --envelope)",
                file=sys.stderr,
            )
            return EXIT_INPUT_ERROR
        tables.append(format_confusion(rows, mode))
        right = right and all(row.right for row in rows)
    print("\n\n".join(tables))
    print("not run:\n" + "\n".join(wrapped_line for line in NOT_RUN for wrapped_line in wrapped(line, "  ", "  ")))
    return 0 if right else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
