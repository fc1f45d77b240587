"""Images as CSV, Kaggle digit-recognizer's layout generalised: one image per line, its
pixels 0-255 in (H, W, C) order (pixel k is row k // (W C), column k // C % W, channel
k % C), after an integer label in a labelled file:

    train.csv: header `label,pixel0,...,pixel{P-1}`
    test.csv:  header `pixel0,...,pixel{P-1}` (no labels), or the train layout (labelled)

The image's shape comes from the network (its input_shape), --input_shape, or the count
P alone where it can say: a square of one channel (P = S*S) or of three (P = 3*S*S).
Columns are checked by name and position, not reordered: a header out of order is
refused at its first misplaced column. Any of the files may be a `.csv.gz` or a `.zip`
holding one CSV. Labels for an unlabelled test.csv (so test accuracy can be scored) may
live in a separate `ImageId,Label` file, the Kaggle submission format. A parsed file is
cached beside it (`cache_path`) and read from there while the file is unchanged.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from typing import Optional

import numpy as np

from algorithms.errors import InputError
from algorithms.dataset.input_files import DAMAGED_ARCHIVE, check_archive, check_file, open_binary, text_problem

CACHE_FORMAT = 4  # 3: int8 labels (10 classes); 4: int32 labels, any class count
KAGGLE_PIXELS = 28 * 28
PIXEL_HEADER = [f"pixel{i}" for i in range(KAGGLE_PIXELS)]
TRAIN_HEADER = ["label"] + PIXEL_HEADER


def pixel_header(pixels: int) -> list:
    return [f"pixel{i}" for i in range(pixels)]


def shape_text(shape) -> str:
    return "x".join(str(side) for side in shape)


def image_shape(pixels: int, input_shape: Optional[tuple], path: str) -> tuple:
    """(H, W, C) of a row of `pixels` values: `input_shape` where given (and matching), else
    a square of one or three channels; InputError naming the fix otherwise."""
    if input_shape is not None:
        if math.prod(input_shape) != pixels:
            raise InputError(
                f"{path}:1: {pixels} pixel columns, but {shape_text(input_shape)} images have "
                f"{math.prod(input_shape)}; give the shape of these images with --input_shape HxWxC"
            )
        return tuple(input_shape)
    for channels in (1, 3):
        side = math.isqrt(pixels // channels)
        if pixels % channels == 0 and side * side * channels == pixels:
            return (side, side, channels)
    raise InputError(
        f"{path}:1: {pixels} pixel columns are no square image of 1 or 3 channels; "
        "say the images' shape with --input_shape HxWxC (e.g. --input_shape 24x32x1)"
    )


def load_csv(path: str, labelled: bool, input_shape: Optional[tuple] = None, num_classes: Optional[int] = None):
    """(images float32 (N, H, W, C) in [0, 1], labels int32 or None), via the cache. A test
    file (labelled False) whose header starts with `label` is read as a labelled one.
    `num_classes`: the network's, which every label must be below (None: any)."""
    check_file(path, "train.csv" if labelled else "test.csv")
    header = _check_header(path, labelled, input_shape)
    labelled = header[0] == "label"
    pixels = len(header) - labelled
    shape = image_shape(pixels, input_shape, path)
    cached = _read_cache(path, labelled)
    if cached is None:
        stamp = _source_stamp(path, labelled)
        try:
            raw = _parse(path, header, num_classes)
        except InputError:
            _refuse_if_changed(path, labelled, stamp)  # a row cut off by the writer is not the user's bad row
            raise
        _refuse_if_changed(path, labelled, stamp)
        cached = _to_cache_arrays(raw, labelled)
        _write_cache(path, cached, labelled, stamp)
    elif num_classes is not None and len(cached["labels"]) and cached["labels"].max() >= num_classes:
        raise InputError(_diagnose(path, header, num_classes) or f"{path}: a label is {num_classes} or more")
    images = np.empty(cached["pixels"].shape, np.float32)
    # one pass, the same values as float32(x) / 255: uint8 converts to float32 exactly
    np.divide(cached["pixels"], np.float32(255.0), out=images, dtype=np.float32)
    images = images.reshape(-1, *shape)
    labels = cached["labels"].astype(np.int32) if labelled else None
    return images, labels


def load_labels(path: str, expected_rows: int, test_path: Optional[str] = None) -> np.ndarray:
    """Labels from an `ImageId,Label` file (Kaggle submission format), ordered by ImageId."""
    check_file(path, "test_labels.csv")
    try:
        with open_binary(path) as raw:
            rows = list(csv.reader(io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")))
    except UnicodeDecodeError:
        raise InputError(_text_diagnosis(path) or f"{path}: is not UTF-8 text; save it as a UTF-8 CSV") from None
    if not rows or [cell.strip() for cell in rows[0]] != ["ImageId", "Label"]:
        raise InputError(
            f"{path}:1: expected the header 'ImageId,Label'; "
            "write one line per test image: ImageId (1-based), Label (a whole number from 0)"
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
        if not 1 <= image_id <= expected_rows or label < 0:
            raise InputError(
                f"{path}:{line_number}: ImageId must be 1..{expected_rows} and Label a whole number from 0, "
                f"got {image_id},{label}"
            )
        labels[image_id - 1] = label
    missing = np.flatnonzero(labels < 0)
    if missing.size:
        raise InputError(
            f"{path}: no label for ImageId {missing[0] + 1} ({missing.size} missing); "
            f"{test_path or 'the test file'} has {expected_rows} images; pass the labels of that test file"
        )
    return labels


def _parse(path: str, header: list, num_classes: Optional[int]) -> np.ndarray:
    import pandas as pd  # the C parser is 4x faster than numpy.loadtxt on a Kaggle-size file

    try:
        with open_binary(path) as raw:
            table = pd.read_csv(
                raw, header=None, skiprows=1, dtype=np.float32, engine="c", encoding="utf-8-sig"
            ).to_numpy()
    except pd.errors.EmptyDataError:
        table = np.zeros((0, len(header)), np.float32)
    except (ValueError, pd.errors.ParserError) as parse_error:
        raise InputError(_diagnose(path, header, num_classes) or f"{path}: {parse_error}") from None
    if table.shape[0] == 0:
        raise InputError(f"{path}:2: no data rows after the header; add one line per image")
    if table.shape[1] != len(header) or not _values_ok(table, header[0] == "label", num_classes):
        raise InputError(
            _diagnose(path, header, num_classes) or f"{path}: expected {len(header)} numeric columns per row"
        )
    return table


def _values_ok(table: np.ndarray, labelled: bool, num_classes: Optional[int]) -> bool:
    if not np.isfinite(table).all():
        return False
    pixels = table[:, 1:] if labelled else table
    if pixels.min() < 0 or pixels.max() > 255:
        return False
    if labelled:
        labels = table[:, 0]
        below = labels < num_classes if num_classes is not None else True
        return bool(((labels >= 0) & below & (labels == np.round(labels))).all())
    return True


def _check_header(path: str, labelled: bool, input_shape: Optional[tuple]) -> list:
    """The header's cells, checked: `label` first in a training file, then pixel0.. in order."""
    with open_binary(path) as raw:
        first_line = raw.readline()
    problem = text_problem(first_line, at_end=True)
    if problem:
        raise InputError(f"{path}:1: the header line is {problem}")
    header = [cell.strip().strip('"') for cell in first_line.decode("utf-8-sig").rstrip("\r\n").split(",")]
    has_label = bool(header) and header[0] == "label"
    pixels = len(header) - has_label
    expected_pixels = math.prod(input_shape) if input_shape else pixels
    if has_label and header[1:] == pixel_header(pixels) and pixels:
        return header
    if not has_label and header == pixel_header(pixels) and pixels:
        if labelled:
            raise InputError(
                f"{path}:1: this is a test file (no 'label' column); pass the training file "
                "with --train and this one with --test"
            )
        return header
    what = ("label," if labelled or has_label else "") + "pixel0,...,pixel" + str(expected_pixels - 1)
    if header and _is_number(header[0]):
        raise InputError(f"{path}:1: no header line; the first line must be '{what}'")
    expected = (["label"] if labelled or has_label else []) + pixel_header(max(expected_pixels, pixels))
    column = next((i for i, (got, want) in enumerate(zip(header, expected)) if got != want), len(header))
    order = "every column is there, out of order: " if sorted(header) == sorted(expected[: len(header)]) else ""
    got = header[column] if column < len(header) else "(none)"
    want = expected[column] if column < len(expected) else "(none)"
    raise InputError(
        f"{path}:1: header column {column + 1} is '{got}', expected '{want}'; "
        f"{order}the header must be '{what}' in that order (columns are not reordered)"
    )


def _text_diagnosis(path: str) -> Optional[str]:
    check_archive(path)
    with open_binary(path) as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            problem = text_problem(raw_line, at_end=True)
            if problem:
                return f"{path}:{line_number}: this line is {problem}"
    return None


def _diagnose(path: str, header: list, num_classes: Optional[int]) -> Optional[str]:
    """Find the first bad data line (slow, only on the error path), or the damage of a
    compressed file that garbled it."""
    check_archive(path)
    with open_binary(path) as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            problem = text_problem(raw_line, at_end=True)
            if problem:
                return f"{path}:{line_number}: this line is {problem}"
            line = raw_line.decode("utf-8-sig")
            if line_number == 1 or not line.strip():
                continue
            problem = _line_problem(line, header, num_classes)
            if problem:
                return f"{path}:{line_number}: {problem}; correct or delete that line"
    return None


def _line_problem(line: str, names: list, num_classes: Optional[int]) -> Optional[str]:
    labelled = names[0] == "label"
    cells = [cell.strip().strip('"') for cell in line.rstrip("\r\n").split(",")]
    if len(cells) != len(names):
        what = f"{'a label and ' if labelled else ''}{len(names) - labelled} pixels"
        return f"{len(cells)} columns, expected {len(names)} ({what})"
    for column, (name, cell) in enumerate(zip(names, cells), start=1):
        try:
            value = float(cell)
        except ValueError:
            return f"column {column} ({name}) is {cell!r}, not a number"
        if not math.isfinite(value):
            return f"column {column} ({name}) is {cell!r}; every cell must be a finite number"
        if name == "label" and (value != int(value) or value < 0):
            return f"label {cell!r} is not a whole number from 0; labels are the classes 0, 1, 2, ..."
        if name == "label" and num_classes is not None and value >= num_classes:
            return (
                f"label {cell!r} is outside 0-{num_classes - 1}; the network has {num_classes} classes "
                "(give it one unit per class in its last layer)"
            )
        if name != "label" and not 0 <= value <= 255:
            return f"{name} is {cell!r}, outside 0-255; pixels are 8-bit levels"
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
    except (OSError, ValueError, *DAMAGED_ARCHIVE):  # a damaged cache: the source is read again
        return None


def _to_cache_arrays(table: np.ndarray, labelled: bool) -> dict:
    pixels = table[:, 1:] if labelled else table
    if np.array_equal(pixels, np.round(pixels)):
        pixels = pixels.astype(np.uint8)  # 4x smaller, and exact for integer pixels
    pixels = np.ascontiguousarray(pixels)  # pandas gives columns (Fortran order): rows load without a reshape copy
    labels = table[:, 0].astype(np.int32) if labelled else np.zeros(0, np.int32)
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
