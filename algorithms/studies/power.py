"""`python -m algorithms.studies.power`: the parity regime's confusion table: are real
errors caught, and caught early, while every drift source is called drift?

    python -m algorithms.studies.power [--run_id envelope50] [--results_dir results/drift]
        [--errors lr0.9x,momentum0.85,...] [--no_localise]

It reads the parity runs `make envelope` made (--results_dir, --run_id) and adds the
error runs, each a real torch run through a real flag at those runs' settings. Its rows:
- drift sources, not errors: every honest pair of the envelope's runs (each framework
  twice, torch and TensorFlow at 1 against 2 threads, TensorFlow with oneDNN off and
  eager, Keras on jax eager against its XLA-fused step, every two frameworks), each
  judged against the envelope of all the other pairs (leave one out: no pair is judged
  against itself); right when `within drift`;
- real errors against torch's own run, judged against the whole envelope; right when
  `beyond drift at step k`: the learning rate x0.9 (--learning_rate), momentum 0.85
  (--momentum), Nesterov off (--nesterov off), conv 1 padded by 2 and conv 3's initial
  kernel x1.1 (--fault padding:1:2, --fault weights:3:1.1: the spec variants every
  framework's build path translates), conv 3 built without its bias (--fault bias:3: a
  spec variant torch's build path translates), a dropout of 0.5 after dense 9 where the
  parity spec has none (--fault dropout:10:0.5: a spec variant every framework's build
  path translates, kept in the parity run), the loss summed instead of averaged (--fault
  loss:sum: the spec's loss, torch's trainer), epoch 1's batches in another order
  (--fault order:1:1). For the three layer faults the per-layer localisation
  (studies/localise.py) runs too, and the row says which layer it named (by a value
  beyond float32 tolerance, or else by the structural check: a missing bias changes no
  value at the zero initial biases) and whether that is the fault's. A known limit,
  measured and printed apart: epoch 2's batches in another order (--fault order:2:1).
Not a row, and why (printed too): TensorFlow's own XLA (it refuses `--compile` with
`--parity`); XLA's fusion on against off is a drift row, Keras on jax eager (op by op)
against its jit-compiled step.
A finished error run of the same --run_id is reused.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.analysis.drift_envelope import (
    ENVELOPE_FACTOR,
    build_envelope,
    first_step_beyond,
    relative_difference,
)
from algorithms.analysis.settings import Settings
from algorithms.paths import DEFAULT_TRAIN, RESULTS_DIR
from algorithms.run.argv import flag_value
from algorithms.run.settings_record import read_settings
from algorithms.studies import children
from algorithms.studies.envelope import MAIN_ENV, honest_pairs, run_losses, variants
from algorithms.tables import text_table

DEFAULT_RUN_ID = "envelope50"
DEFAULT_NETWORK = "cnn2d_3layer_fullconnected_3layer"
NOT_RUN = (
    "TensorFlow's own XLA on vs off: it refuses --compile with --parity (no deterministic XLA max-pool "
    "gradient); XLA's fusion on vs off is the keras_jax eager row",
)


@dataclass(frozen=True)
class Error:
    label: str
    suffix: str  # of its run id
    flags: tuple  # what puts it into torch's run
    fault: Optional[str] = None  # a layer fault the localisation is asked to find
    limit: bool = False  # a known limit, measured: printed apart, not counted right or wrong


def error_cases(settings: dict) -> list:
    """The real errors, each against the reference run's `settings`."""
    return [
        Error("learning rate x0.9", "lr0.9x", ("--learning_rate", f"{settings['learning_rate'] * 0.9:g}")),
        Error(f"momentum 0.85, not {settings['momentum']:g}", "momentum0.85", ("--momentum", "0.85")),
        Error("Nesterov off", "nesterov-off", ("--nesterov", "off")),
        Error("conv 1 padded by 2, not 1", "padding1", ("--fault", "padding:1:2"), "padding:1:2"),
        Error("conv 3's initial kernel x1.1", "weights3", ("--fault", "weights:3:1.1"), "weights:3:1.1"),
        Error("conv 3 without its bias", "bias3", ("--fault", "bias:3"), "bias:3"),
        Error("dropout 0.5 after dense 9 (the parity spec: none)", "dropout10", ("--fault", "dropout:10:0.5")),
        Error("the loss summed, not averaged", "loss-sum", ("--fault", "loss:sum")),
        Error("epoch 1's batches in another order", "order1", ("--fault", "order:1:1")),
        Error("epoch 2's batches in another order", "order2", ("--fault", "order:2:1"), limit=True),
    ]


@dataclass(frozen=True)
class Row:
    source: str
    error: bool  # a real error (True) or a drift source (False)
    step: Optional[int]  # the first step beyond drift; None: within drift
    fault_layer: Optional[int] = None  # a layer fault's layer (spec index)
    named_layer: Optional[int] = None  # the layer the localisation named; None: none (or not run)
    localised: bool = False  # the localisation ran for this row
    limit: Optional[str] = None  # a known limit's measurement: where the error starts, against the envelope there

    @property
    def verdict(self) -> str:
        return "within drift" if self.step is None else f"beyond drift at step {self.step}"

    @property
    def localisation(self) -> str:
        if not self.localised:
            return ""
        return "no layer named" if self.named_layer is None else f"layer {self.named_layer}"

    @property
    def right(self) -> bool:
        caught = (self.step is not None) == self.error
        return caught and (not self.localised or self.named_layer == self.fault_layer)


def drift_rows(pairs: list) -> list:
    """Each honest pair (label, steps, differences) against the envelope of the others."""
    rows = []
    for i, (label, steps, differences) in enumerate(pairs):
        others = build_envelope({"others": [(s, d) for j, (_, s, d) in enumerate(pairs) if j != i]}, Settings({}))
        rows.append(Row(label, False, first_step_beyond(others, steps, differences)))
    return rows


def error_flags(settings: dict, changed: tuple, results_dir: str, run_id: str) -> list:
    """The reference run's settings as entry-script flags, and the flags that change one."""
    return [
        "--network",
        settings["network"],
        "--parity",
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


def error_rows(
    results_dir: str, network: str, run_id: str, forwarded: list, envelope, localise: bool, only: Optional[set]
) -> list:
    reference = run_losses(results_dir, network, "torch", f"{run_id}-a")
    if reference is None:
        return []
    settings = read_settings(children.results_csv(results_dir, network, "torch")).get(f"{run_id}-a")
    rows = []
    for error in error_cases(settings):
        if only is not None and error.suffix not in only:
            continue
        this_run = f"{run_id}-{error.suffix}"
        finished = run_losses(results_dir, network, "torch", this_run)
        if finished is None or finished[0].size < reference[0].size:
            flags = error_flags(settings, error.flags, results_dir, this_run)
            children.run_framework("torch", forwarded + flags, f"torch, {error.label}")
            finished = run_losses(results_dir, network, "torch", this_run)
        if finished is None:
            continue
        steps, ia, ib = np.intersect1d(reference[0], finished[0], return_indices=True)
        differences = relative_difference(reference[1][ia], finished[1][ib])
        step = first_step_beyond(envelope, steps, differences)
        found = {}
        if error.fault and localise:
            found = localised_layer(network, settings, error.fault, flag_value(forwarded, "--train", DEFAULT_TRAIN))
        if error.limit:
            found["limit"] = where_it_starts(envelope, steps, differences)
        rows.append(Row(f"torch, {error.label}", True, step, **found))
    return rows


def where_it_starts(envelope, steps: np.ndarray, differences: np.ndarray) -> str:
    """The first step the error moves the loss, by how much, and the envelope there."""
    moved = np.nonzero(differences > 0)[0]
    if not moved.size:
        return "it never moves the loss"
    first = moved[0]
    limit = float(envelope.limit_at(steps[first : first + 1])[0])
    return (
        f"from step {steps[first]} it moves the loss by {differences[first]:.1e}, where the float32 drift envelope "
        f"is already {limit:.1e}"
    )


def localised_layer(network: str, settings: dict, fault: str, train: str) -> dict:
    """The localisation of `fault` put into torch alone, at the run's seed and on the
    run's training file: Row's fields."""
    from algorithms.studies.localise import localise

    print(f"[power] localising torch with --fault {fault}", flush=True)
    result = localise(["torch"], network, seed=settings["seed"], train_path=train, faults={"torch": fault})
    finding = result.first_beyond("torch")
    # a value that differs names its layer; else the structural check's (a missing bias
    # changes no value at the shared zero initial biases: its parameters are what differ)
    named = finding.layer if finding is not None else result.structure_layers.get("torch")
    return {"fault_layer": int(fault.split(":")[1]), "named_layer": named, "localised": True}


def confusion(
    results_dir: str, network: str, run_id: str, forwarded: list, localise: bool = True, only: Optional[set] = None
) -> list:
    """The rows: drift sources first, then the errors."""
    names = [name for name in MAIN_ENV if run_losses(results_dir, network, name, f"{run_id}-a") is not None]
    losses = {
        (name, variant): run_losses(results_dir, network, name, f"{run_id}-{variant}")
        for name in names
        for variant, _, _ in variants(name)
    }
    pairs = [item for items in honest_pairs(losses, names).values() for item in items]
    envelope = build_envelope({"all": [(steps, differences) for _, steps, differences in pairs]}, Settings({}))
    return drift_rows(pairs) + error_rows(results_dir, network, run_id, forwarded, envelope, localise, only)


def format_confusion(rows: list) -> str:
    limits = [row for row in rows if row.limit]
    rows = [row for row in rows if not row.limit]
    body = [
        [row.source, "error" if row.error else "drift", row.verdict, row.localisation, "right" * row.right or "WRONG"]
        for row in rows
    ]
    errors = [row for row in rows if row.error]
    drifts = [row for row in rows if not row.error]
    caught = [row for row in errors if row.step is not None]
    lines = [f"confusion table of the parity regime (beyond drift: above {ENVELOPE_FACTOR:g}x the envelope):"]
    lines += text_table(["source", "is", "verdict", "localised at", ""], body, indent="  ")
    lines.append(
        f"\nreal errors caught: {len(caught)} of {len(errors)}"
        + (f" (at step {', '.join(str(row.step) for row in caught)})" if caught else "")
        + f"; drift sources called drift: {sum(row.right for row in drifts)} of {len(drifts)}"
    )
    localised = [row for row in errors if row.localised]
    if localised:
        at_their_layer = sum(row.named_layer == row.fault_layer for row in localised)
        lines.append(f"layer faults localised at their own layer: {at_their_layer} of {len(localised)}")
    if limits:
        lines.append("known limits, measured (not counted): an error that starts late, after drift has grown:")
        lines += [f"  {row.source}: {row.verdict}; {row.limit}" for row in limits]
    lines.append("not run:")
    lines += [f"  {line}" for line in NOT_RUN]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = children.study_parser("python -m algorithms.studies.power", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_id", default=DEFAULT_RUN_ID, help="the envelope runs' --run_id (make envelope)")
    parser.add_argument("--results_dir", default=f"{RESULTS_DIR}/drift", help="where the envelope runs are")
    parser.add_argument("--network", default=DEFAULT_NETWORK)
    parser.add_argument(
        "--no_localise", action="store_true", help="skip the localisation of the layer faults (a process each)"
    )
    names = [error.suffix for error in error_cases({"learning_rate": 0.05, "momentum": 0.9})]
    parser.add_argument(
        "--errors", default=",".join(names), help=f"the errors to run, comma-separated, of {', '.join(names)}"
    )
    args, forwarded = children.parse_study_flags(parser, list(sys.argv[1:] if argv is None else argv))
    only = set(args.errors.split(","))
    if only - set(names):
        parser.error(f"--errors {args.errors}: {', '.join(sorted(only - set(names)))} is not one of {', '.join(names)}")
    rows = confusion(args.results_dir, args.network, args.run_id, forwarded, not args.no_localise, only)
    if not any(not row.error for row in rows):
        print(
            f"error: no parity runs {args.run_id}-a/-b in {args.results_dir}: make them with make envelope "
            "(python -m algorithms.studies.drift --envelope)",
            file=sys.stderr,
        )
        return 2
    print(format_confusion(rows))
    return 0 if all(row.right for row in rows if not row.limit) else 1


if __name__ == "__main__":
    sys.exit(main())
