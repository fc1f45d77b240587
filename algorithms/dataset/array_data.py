"""Images as arrays: a NumPy `.npz` file and a folder of image files.

    train.npz     x: (N, H, W) or (N, H, W, C), uint8 (0-255, scaled to [0, 1]) or float
                  (taken as it is); y: (N,) whole numbers from 0, the classes. A test
                  .npz may leave y out (unlabelled).
    train/        one subfolder per class, its name the class's (sorted, they are classes
                  0, 1, ...), holding PNG or JPEG images of one size: greyscale (one
                  channel) or RGB (three). A test folder has the same subfolders (labelled,
                  by the training folder's class names) or its images directly in it
                  (unlabelled, in file-name order).

Images are read with Pillow, which the main env has and the legacy env (Theano, numpy
1.23) has not: a folder is cached, as a CSV is, beside its images (`folder_cache_path`,
a hidden file the listing skips), and the legacy env reads the cache the main env wrote
(run_all.py and every script started from the main env write it before a legacy run).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Optional

import numpy as np

from algorithms.errors import InputError
from algorithms.dataset.input_files import DAMAGED_ARCHIVE, damaged

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
FOLDER_CACHE = ".cnn-parallel.cache"
FOLDER_CACHE_FORMAT = "1"
NPZ_FIX = "copy it again, or save it again with np.savez(path, x=images, y=labels)"
CHANNELS_OF_MODE = {"L": 1, "1": 1, "I;16": 1, "RGB": 3, "P": 3, "CMYK": 3, "YCbCr": 3}


def load_npz(path: str, labelled: bool) -> tuple:
    """(images float32 (N, H, W, C), labels int32 or None): a test file (labelled False)
    with a y is read as labelled."""
    try:
        archive = np.load(path, allow_pickle=False)
    except DAMAGED_ARCHIVE as error:  # a zip's start, its end missing: a copy cut short
        raise InputError(damaged(path, "NumPy .npz", error, NPZ_FIX)) from None
    except (OSError, ValueError) as error:
        raise InputError(f"{path}: not a NumPy .npz file ({str(error)[:120]}); save it with np.savez(x=..., y=...)")
    if not hasattr(archive, "files"):
        raise InputError(
            f"{path}: holds one array, not an .npz archive; save it with np.savez(path, x=images, y=labels)"
        )
    with archive:
        if "x" not in archive.files:
            raise InputError(
                f"{path}: no array 'x' (it holds {', '.join(archive.files) or 'none'}); "
                "save the images as x: np.savez(path, x=images, y=labels)"
            )
        try:
            x, y = archive["x"], archive["y"] if "y" in archive.files else None
        except DAMAGED_ARCHIVE as error:  # a bad CRC, a cut deflate stream
            raise InputError(damaged(path, "NumPy .npz", error, NPZ_FIX)) from None
        except ValueError as error:  # an object array (pickled, which is not read), or an array cut short
            if "pickle" not in str(error):
                raise InputError(damaged(path, "NumPy .npz", error, NPZ_FIX)) from None
            raise InputError(f"{path}: {error}; save plain numeric arrays (no objects)") from None
    if labelled and y is None:
        raise InputError(f"{path}: no array 'y' of labels; a training file needs them: np.savez(path, x=..., y=...)")
    images = _images_from_array(path, x)
    labels = None if y is None else _labels_from_array(path, y, len(images))
    return images, labels


def _images_from_array(path: str, x: np.ndarray) -> np.ndarray:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or min(x.shape) < 1:
        raise InputError(f"{path}: x has shape {x.shape}; expected (N, H, W) or (N, H, W, C) images")
    if x.dtype == np.uint8:
        images = np.empty(x.shape, np.float32)
        np.divide(x, np.float32(255.0), out=images, dtype=np.float32)
        return images
    if x.dtype.kind != "f":
        raise InputError(f"{path}: x is {x.dtype}; save uint8 pixels (0-255) or floats (used as they are)")
    images = np.ascontiguousarray(x, np.float32)
    bad = np.flatnonzero(~np.isfinite(images).reshape(len(images), -1).all(axis=1))
    if bad.size:
        raise InputError(f"{path}: x[{bad[0]}] holds NaN or Inf; every pixel must be a finite number")
    return images


def _labels_from_array(path: str, y: np.ndarray, count: int) -> np.ndarray:
    if y.ndim != 1 or len(y) != count:
        raise InputError(
            f"{path}: y has shape {y.shape}, x has {count} images; give one label per image, shape ({count},)"
        )
    if y.dtype.kind not in "iub":
        whole = y.dtype.kind == "f" and np.isfinite(y).all() and (y == np.round(y)).all()
        if not whole:
            raise InputError(f"{path}: y is {y.dtype} with values that are not whole numbers; labels are 0, 1, 2, ...")
    negative = np.flatnonzero(y < 0)
    if negative.size:
        raise InputError(f"{path}: y[{negative[0]}] = {y[negative[0]]}; labels are whole numbers from 0")
    return y.astype(np.int32)


# --------------------------------------------------------------------------- folders


def folder_cache_path(folder: str) -> str:
    return os.path.join(folder, FOLDER_CACHE)


def folder_files(folder: str) -> list:
    """Every file under an image folder that a run reads (hidden ones, the cache among them,
    left out), relative to it, sorted: what the settings record fingerprints."""
    found = []
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        found += [os.path.relpath(os.path.join(root, name), folder) for name in files if not name.startswith(".")]
    return sorted(found)


def _listing(folder: str, labelled: bool) -> tuple:
    """(class names or None, [(path, class index or -1)]): the images of a class-subfolder
    folder or, unlabelled, of a flat one; InputError for anything else in it."""
    try:
        entries = sorted(entry for entry in os.listdir(folder) if not entry.startswith("."))
    except OSError as error:
        raise InputError(f"{folder}: cannot be read ({error.strerror}); pass a readable folder")
    folders = [entry for entry in entries if os.path.isdir(os.path.join(folder, entry))]
    files = [entry for entry in entries if not os.path.isdir(os.path.join(folder, entry))]
    if folders and files:
        raise InputError(
            f"{os.path.join(folder, files[0])}: a file beside the class folders; every image goes into "
            "its class's subfolder (move it, or out of the folder)"
        )
    if not folders:
        if labelled:
            raise InputError(
                f"{folder}: no class subfolders; a training folder holds one subfolder of images per class "
                "(e.g. train/cat/1.png, train/dog/2.png)"
            )
        return None, [(_image(folder, entry), -1) for entry in files]
    images = []
    for index, name in enumerate(folders):
        inside = sorted(entry for entry in os.listdir(os.path.join(folder, name)) if not entry.startswith("."))
        if not inside:
            raise InputError(f"{os.path.join(folder, name)}: an empty class folder; put its images in, or remove it")
        images += [(_image(os.path.join(folder, name), entry), index) for entry in inside]
    return tuple(folders), images


def _image(folder: str, entry: str) -> str:
    path = os.path.join(folder, entry)
    if os.path.isdir(path):
        raise InputError(f"{path}: a folder inside a class folder; put the images directly in their class's folder")
    if not entry.lower().endswith(IMAGE_SUFFIXES):
        raise InputError(f"{path}: not a .png or .jpg image; move it out of the data folder")
    if not os.path.getsize(path):
        raise InputError(f"{path}: an empty file; remove it or save the image again")
    return path


def _stamp(folder: str, listing: list, labelled: bool) -> str:
    digest = hashlib.sha256(f"{FOLDER_CACHE_FORMAT} {int(labelled)}".encode())
    for path, label in listing:
        stat = os.stat(path)
        digest.update(f"{os.path.relpath(path, folder)} {label} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def load_folder(folder: str, labelled: bool, class_names: Optional[tuple] = None) -> tuple:
    """(images float32 (N, H, W, C), labels int32 or None, class names or None), via the cache.
    `class_names`: the training folder's, which a labelled test folder's subfolders are named by."""
    names, listing = _listing(folder, labelled)
    if not listing:
        raise InputError(f"{folder}: no images; put the PNG or JPEG images in it")
    stamp = _stamp(folder, listing, names is not None)
    cached = _read_folder_cache(folder, stamp)
    if cached is None:
        pixels = _read_images(listing)
        cached = {"pixels": pixels, "labels": np.array([label for _, label in listing], np.int32)}
        _write_folder_cache(folder, stamp, cached, names)
    images = np.empty(cached["pixels"].shape, np.float32)
    np.divide(cached["pixels"], np.float32(255.0), out=images, dtype=np.float32)
    if names is None:
        return images, None, None
    labels = cached["labels"]
    if class_names is not None:  # a test folder: its classes by the training folder's names
        unknown = [name for name in names if name not in class_names]
        if unknown:
            raise InputError(
                f"{os.path.join(folder, unknown[0])}: no training class of that name "
                f"(the training classes: {', '.join(class_names)}); rename or remove it"
            )
        labels = np.array([class_names.index(names[label]) for label in labels], np.int32)
    return images, labels, names


def _read_images(listing: list) -> np.ndarray:
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise InputError(
            f"{os.path.dirname(listing[0][0])}: images need Pillow, which this environment lacks (the legacy "
            "env reads the cache the main env writes): run the script from .venv, or run_all.py, once"
        ) from None
    first_shape, arrays = None, []
    for path, _ in listing:
        try:
            with Image.open(path) as image:
                mode = image.mode
                if mode not in CHANNELS_OF_MODE:
                    raise InputError(
                        f"{path}: a {mode} image (an alpha channel or a mode not read here); "
                        "save it as greyscale or RGB PNG/JPEG"
                    )
                array = np.asarray(image.convert("L" if CHANNELS_OF_MODE[mode] == 1 else "RGB"), np.uint8)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:  # OSError: cut short
            raise InputError(
                f"{path}: not an image Pillow can read, or one cut short or damaged ({str(error)[:100]}); "
                "save or copy it again"
            ) from None
        array = array[..., None] if array.ndim == 2 else array
        if first_shape is None:
            first_shape = array.shape
        elif array.shape != first_shape:
            raise InputError(
                f"{path}: {'x'.join(map(str, array.shape))} (height x width x channels), but "
                f"{listing[0][0]} is {'x'.join(map(str, first_shape))}; every image must have one size "
                "and one channel count (resize or convert it)"
            )
        arrays.append(array)
    return np.stack(arrays)


def _read_folder_cache(folder: str, stamp: str) -> Optional[dict]:
    try:
        with open(folder_cache_path(folder), "rb") as cache:
            if str(np.load(cache)) != stamp:
                return None
            return {"labels": np.load(cache), "pixels": np.load(cache)}
    except (OSError, ValueError, *DAMAGED_ARCHIVE):  # a damaged cache: the source is read again
        return None


def _write_folder_cache(folder: str, stamp: str, arrays: dict, names) -> None:
    target = folder_cache_path(folder)
    temporary = f"{target}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as cache:
            for array in (np.array(stamp), arrays["labels"], arrays["pixels"]):
                np.save(cache, array)
        os.replace(temporary, target)
    except OSError as error:
        print(
            f"note: could not write the cache {target} ({error.strerror}); the images will be read each run "
            "(and the legacy env, which has no Pillow, cannot read them)",
            file=sys.stderr,
        )
        if os.path.exists(temporary):
            os.remove(temporary)
