"""How often the frameworks' test predictions agree: for every pair of one run's
Kaggle submissions (results/predictions/*.csv, `ImageId,Label`), the share of test
images both label the same. Two nets at 96% accuracy that agree on 99% of the images
make the same mistakes; at 90% agreement they learned different functions."""

from __future__ import annotations

import itertools
import os
import statistics

import numpy as np

from algorithms.errors import InputError
from algorithms.tables import text_table


def predictions_path(results_dir: str, csv_path: str, run_id: str) -> str:
    """Where session.finish writes a run's test predictions."""
    stem = os.path.splitext(os.path.basename(csv_path))[0]
    return os.path.join(results_dir, "predictions", f"{stem}_{run_id}.csv")


def read_predictions(path: str) -> np.ndarray:
    """The Label column of an ImageId,Label file, in ImageId order."""
    with open(path) as handle:
        header = handle.readline().strip()
        if header != "ImageId,Label":
            raise InputError(f"{path}:1: expected the header ImageId,Label, got {header[:40]!r}")
        rows = [line.split(",") for line in handle if line.strip()]
    ids = np.array([int(image_id) for image_id, _ in rows])
    return np.array([int(label) for _, label in rows])[np.argsort(ids)]


def pairwise_agreement(predictions: dict) -> list:
    """[(name a, name b, share of images labelled alike)] for every pair of {name: labels}."""
    pairs = []
    for (a, labels_a), (b, labels_b) in itertools.combinations(predictions.items(), 2):
        if len(labels_a) != len(labels_b):
            raise InputError(f"{a} has {len(labels_a)} test predictions, {b} {len(labels_b)}: not the same test set")
        pairs.append((a, b, float(np.mean(labels_a == labels_b))))
    return pairs


def short_name(name: str) -> str:
    """A framework's column heading: keras_tensorflow -> keras/tf, tensorflow -> tf."""
    return name.replace("tensorflow", "tf").replace("keras_", "keras/")


def agreement_matrix(names: list, pairs: list) -> list:
    """Rows of the matrix: [name, share with each of `names` (None on the diagonal or
    where a pair has no share)]."""
    shares = {(a, b): share for a, b, share in pairs} | {(b, a): share for a, b, share in pairs}
    return [[row] + [shares.get((row, column)) for column in names] for row in names]


def agreement_summary(pairs: list) -> str:
    shares = [share for _, _, share in pairs]
    lowest = min(pairs, key=lambda pair: pair[2])
    return f"median {100 * statistics.median(shares):.1f}%; lowest {100 * lowest[2]:.1f}% ({lowest[0]} vs {lowest[1]})"


def format_agreement(pairs: list, images: int, names: list = None) -> str:
    """The matrix (% of the test images each two runs label alike), then the median and the
    lowest pair under it. `names`: the rows' order (default: as the pairs name them)."""
    if not pairs:
        return "test predictions: fewer than two runs predicted the test set"
    names = names or list(dict.fromkeys(name for a, b, _ in pairs for name in (a, b)))
    header = ("", *(short_name(name) for name in names))
    body = [
        [row[0]] + ["-" if share is None else f"{100 * share:.1f}" for share in row[1:]]
        for row in agreement_matrix(names, pairs)
    ]
    lines = [f"test predictions agree (% of the {images:,} test images two frameworks label alike):"]
    lines += text_table(header, body, indent="  ")
    lines.append(f"  {agreement_summary(pairs)}")
    return "\n".join(lines)
