"""The benchmark's data path: a Kaggle-size train.csv (generated: random digits'
pixels, 785 columns) loaded by CSV parse and by the binary cache algorithms/dataset/data.py
keeps beside it. Imports no framework."""

from __future__ import annotations

import io
import os
import tempfile
import time

import numpy as np

from algorithms.dataset.data import TRAIN_HEADER, cache_path, load_kaggle_csv

DISTINCT_ROWS = 1000  # the file repeats these; parsing costs the same as for distinct rows


def write_kaggle_csv(path: str, rows: int, seed: int = 0) -> None:
    generator = np.random.default_rng(seed)
    table = np.concatenate(
        [
            generator.integers(0, 10, (DISTINCT_ROWS, 1)),
            generator.integers(0, 256, (DISTINCT_ROWS, 784)) * (generator.random((DISTINCT_ROWS, 784)) < 0.2),
        ],
        axis=1,
    )
    text = io.StringIO()
    np.savetxt(text, table, fmt="%d", delimiter=",")
    block = text.getvalue()
    lines = block.count("\n")
    with open(path, "w") as handle:
        handle.write(",".join(TRAIN_HEADER) + "\n")
        for _ in range(rows // lines):
            handle.write(block)
        handle.write("".join(block.splitlines(keepends=True)[: rows % lines]))


def csv_vs_cache(rows: int) -> dict:
    """Seconds for load_kaggle_csv without the cache (parse, convert, write the cache)
    and with it (read, convert), the best of 3 each."""
    with tempfile.TemporaryDirectory(prefix="bench-data-") as directory:
        path = os.path.join(directory, "train.csv")
        write_kaggle_csv(path, rows)
        csv_s = min(_timed(lambda: _load_without_cache(path)) for _ in range(3))
        assert os.path.exists(cache_path(path))
        cache_s = min(_timed(lambda: load_kaggle_csv(path, labelled=True)) for _ in range(3))
    return {"rows": rows, "csv_s": csv_s, "cache_s": cache_s, "ratio": csv_s / cache_s}


def _load_without_cache(path: str) -> None:
    """What a first run does: parse, convert, write the cache."""
    if os.path.exists(cache_path(path)):
        os.remove(cache_path(path))
    load_kaggle_csv(path, labelled=True)


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start
