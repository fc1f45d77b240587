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


def format_agreement(pairs: list, images: int) -> str:
    """The summary line and every pair, lowest first."""
    if not pairs:
        return "test predictions: fewer than two runs predicted the test set"
    shares = [share for _, _, share in pairs]
    lowest = min(pairs, key=lambda pair: pair[2])
    lines = [
        f"test predictions ({images} images) agree pairwise: median {100 * statistics.median(shares):.1f}%, "
        f"lowest {100 * lowest[2]:.1f}% ({lowest[0]} vs {lowest[1]})"
    ]
    lines += [f"  {100 * share:5.1f}%  {a} vs {b}" for a, b, share in sorted(pairs, key=lambda pair: pair[2])]
    return "\n".join(lines)
