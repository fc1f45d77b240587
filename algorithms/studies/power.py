"""`python -m algorithms.studies.power`: the parity regime's confusion table: are real
errors caught, and caught early, while every drift source is called drift?

    python -m algorithms.studies.power [--run_id envelope50] [--results_dir results/drift]

It reads the parity runs `make envelope` made (--results_dir, --run_id) and adds the
error runs, each a real run through a real flag at those runs' settings. Its rows:
- drift sources, not errors: every honest pair of the envelope's runs (each framework
  twice, torch and TensorFlow at 1 against 2 threads, TensorFlow with oneDNN off and
  eager, every two frameworks), each judged against the envelope of all the other pairs
  (leave one out: no pair is judged against itself); right when `within drift`;
- real errors: torch at 0.9x the learning rate (`--learning_rate`) against torch's own
  run, judged against the whole envelope; right when `beyond drift at step k`.
Not rows, and why (printed too): momentum 0.85 and Nesterov off (no entry script has a
flag for them), XLA (TensorFlow refuses `--compile` with `--parity`), and the layer
faults, which need the per-layer localisation (issue 24, item 3).
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
from algorithms.paths import RESULTS_DIR
from algorithms.run.settings_record import read_settings
from algorithms.studies import children
from algorithms.studies.envelope import MAIN_ENV, honest_pairs, run_losses, variants
from algorithms.tables import text_table

DEFAULT_RUN_ID = "envelope50"
DEFAULT_NETWORK = "cnn2d_3layer_fullconnected_3layer"
# (the error, its run id's suffix, the flag and the factor it applies to the reference's setting)
ERRORS = (("learning rate x0.9", "lr0.9x", "--learning_rate", "learning_rate", 0.9),)
NOT_RUN = (
    "momentum 0.85 and Nesterov off: no entry script has a --momentum or --nesterov flag",
    "XLA on vs off: TensorFlow refuses --compile with --parity",
    "layer faults (padding, initial weights, a missing bias, dropout rate, summed loss) and another batch "
    "order: they need the per-layer localisation of issue 24, item 3",
)


@dataclass(frozen=True)
class Row:
    source: str
    error: bool  # a real error (True) or a drift source (False)
    step: Optional[int]  # the first step beyond drift; None: within drift

    @property
    def verdict(self) -> str:
        return "within drift" if self.step is None else f"beyond drift at step {self.step}"

    @property
    def right(self) -> bool:
        return (self.step is not None) == self.error


def drift_rows(pairs: list) -> list:
    """Each honest pair (label, steps, differences) against the envelope of the others."""
    rows = []
    for i, (label, steps, differences) in enumerate(pairs):
        others = build_envelope({"others": [(s, d) for j, (_, s, d) in enumerate(pairs) if j != i]}, Settings({}))
        rows.append(Row(label, False, first_step_beyond(others, steps, differences)))
    return rows


def error_flags(settings: dict, flag: str, value, results_dir: str, run_id: str) -> list:
    """The reference run's settings as entry-script flags, with one changed."""
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
        flag,
        f"{value:g}",
        "--results_dir",
        results_dir,
        "--run_id",
        run_id,
        "--quiet",
    ]


def error_rows(results_dir: str, network: str, run_id: str, forwarded: list, envelope) -> list:
    reference = run_losses(results_dir, network, "torch", f"{run_id}-a")
    if reference is None:
        return []
    settings = read_settings(children.results_csv(results_dir, network, "torch")).get(f"{run_id}-a")
    rows = []
    for label, suffix, flag, name, factor in ERRORS:
        this_run = f"{run_id}-{suffix}"
        finished = run_losses(results_dir, network, "torch", this_run)
        if finished is None or finished[0].size < reference[0].size:
            flags = error_flags(settings, flag, settings[name] * factor, results_dir, this_run)
            children.run_framework("torch", forwarded + flags, f"torch, {label}")
            finished = run_losses(results_dir, network, "torch", this_run)
        if finished is None:
            continue
        steps, ia, ib = np.intersect1d(reference[0], finished[0], return_indices=True)
        differences = relative_difference(reference[1][ia], finished[1][ib])
        rows.append(Row(f"torch, {label}", True, first_step_beyond(envelope, steps, differences)))
    return rows


def confusion(results_dir: str, network: str, run_id: str, forwarded: list) -> list:
    """The rows: drift sources first, then the errors."""
    names = [name for name in MAIN_ENV if run_losses(results_dir, network, name, f"{run_id}-a") is not None]
    losses = {
        (name, variant): run_losses(results_dir, network, name, f"{run_id}-{variant}")
        for name in names
        for variant, _, _ in variants(name)
    }
    pairs = [item for items in honest_pairs(losses, names).values() for item in items]
    envelope = build_envelope({"all": [(steps, differences) for _, steps, differences in pairs]}, Settings({}))
    return drift_rows(pairs) + error_rows(results_dir, network, run_id, forwarded, envelope)


def format_confusion(rows: list) -> str:
    body = [
        [row.source, "error" if row.error else "drift", row.verdict, "right" if row.right else "WRONG"] for row in rows
    ]
    errors = [row for row in rows if row.error]
    drifts = [row for row in rows if not row.error]
    caught = [row for row in errors if row.step is not None]
    lines = [f"confusion table of the parity regime (beyond drift: above {ENVELOPE_FACTOR:g}x the envelope):"]
    lines += text_table(["source", "is", "verdict", ""], body, indent="  ")
    lines.append(
        f"\nreal errors caught: {len(caught)} of {len(errors)}"
        + (f" (at step {', '.join(str(row.step) for row in caught)})" if caught else "")
        + f"; drift sources called drift: {sum(row.right for row in drifts)} of {len(drifts)}"
    )
    lines.append("not run:")
    lines += [f"  {line}" for line in NOT_RUN]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = children.study_parser("python -m algorithms.studies.power", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_id", default=DEFAULT_RUN_ID, help="the envelope runs' --run_id (make envelope)")
    parser.add_argument("--results_dir", default=f"{RESULTS_DIR}/drift", help="where the envelope runs are")
    parser.add_argument("--network", default=DEFAULT_NETWORK)
    args, forwarded = children.parse_study_flags(parser, list(sys.argv[1:] if argv is None else argv))
    rows = confusion(args.results_dir, args.network, args.run_id, forwarded)
    if not any(not row.error for row in rows):
        print(
            f"error: no parity runs {args.run_id}-a/-b in {args.results_dir}: make them with make envelope "
            "(python -m algorithms.studies.drift --envelope)",
            file=sys.stderr,
        )
        return 2
    print(format_confusion(rows))
    return 0 if all(row.right for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
