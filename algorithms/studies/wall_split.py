"""Where a suite's wall time went (run_all.py prints it at its end): each framework's process
split into start-up, epoch check, training and test, read back from the rows it wrote, and
the suite's own set-up and compare beside them.

A run's rows carry `wall_time_s`, the seconds since its session started: the epoch check's
last row is the check's whole session (its trainer built, its steps, its validations), the
run's last train or validation row its training (the trainer built and compiled, the
step-0 evaluation, the steps, the validations), its test row the test on top. What the
process spent besides is its start-up: the interpreter (and the legacy env's re-execution),
the imports, the data, the framework loading, and at the end results.log, the predictions
and the exit."""

from __future__ import annotations

import os
from dataclasses import dataclass

from algorithms.records import check_csv
from algorithms.studies import children
from algorithms.tables import text_table, wrapped


@dataclass
class Split:
    total_s: float = 0.0  # the process, start to exit (run_framework's wall)
    check_s: float = 0.0
    training_s: float = 0.0
    test_s: float = 0.0

    @property
    def start_up_s(self) -> float:
        return max(0.0, self.total_s - self.check_s - self.training_s - self.test_s)

    def add(self, other: "Split") -> None:
        self.total_s += other.total_s
        self.check_s += other.check_s
        self.training_s += other.training_s
        self.test_s += other.test_s


def run_split(csv_path: str, run_id: str, total_s: float) -> Split:
    """One framework process's split, from its run's rows and its epoch check's."""
    rows = children.run_rows(csv_path, run_id)
    check_path = check_csv(csv_path)
    check = children.run_rows(check_path, run_id) if os.path.exists(check_path) else []
    trained = [row["wall_time_s"] for row in rows if row["phase"] in ("init", "train", "val")]
    tested = [row["wall_time_s"] for row in rows if row["phase"] == "test"]
    training_s = max(trained, default=0.0)
    return Split(
        total_s=total_s,
        check_s=max((row["wall_time_s"] for row in check), default=0.0),
        training_s=training_s,
        test_s=max(0.0, max(tested) - training_s) if tested else 0.0,
    )


def format_split(splits: dict, setup_s: float, compare_s: float, whole_s: float) -> list:
    """The lines: the whole, then a row per framework (name -> Split) and the suite's own parts."""
    header = ("framework", "start-up s", "epoch check s", "training s", "test s", "total s")
    lines = [
        (name, f"{s.start_up_s:.1f}", f"{s.check_s:.1f}", f"{s.training_s:.1f}", f"{s.test_s:.1f}", f"{s.total_s:.1f}")
        for name, s in splits.items()
    ]
    every = Split()
    for split in splits.values():
        every.add(split)
    lines.append(
        (
            "all frameworks",
            f"{every.start_up_s:.1f}",
            f"{every.check_s:.1f}",
            f"{every.training_s:.1f}",
            f"{every.test_s:.1f}",
            f"{every.total_s:.1f}",
        )
    )
    other_s = max(0.0, whole_s - setup_s - every.total_s - compare_s)
    return [
        *wrapped(
            f"wall time: {whole_s:.0f} s in all: set-up {setup_s:.1f} s (flags, data, environments, the BLAS "
            f"line), frameworks {every.total_s:.1f} s, compare {compare_s:.1f} s (verdicts, report, TensorBoard), "
            f"other {other_s:.1f} s",
            "",
            "  ",
        ),
        *text_table(header, lines, left=1, rule=True),
    ]
