"""Every form of data the docs offer (docs/own-network.md#your-data), written from one small
set of real images, and the runs that train on each form in one framework.

    python -m tests.helpers.data_forms FOLDER

writes the forms under FOLDER (the legacy env, which has neither scikit-learn nor Pillow,
has the main env write them) and reads each folder of images once, which leaves the cache
the legacy env reads (what an entry script started from the main env does first). The
images: scikit-learn's 8x8 digits of classes 0-3, 40 to train on (32 after the validation
split: two steps of 16) and 12 to test on, for examples/digits_8x8.toml.

    python -m tests.helpers.data_forms --runs WRAPPER_MODULE SCRIPT FOLDER RESULTS

trains each of RUNS through the entry point (`run_entry_point`, what the entry script
calls), one after the other in this one process (the framework loads once), each into
RESULTS/<run>, and prints {run: exit status} as JSON on its last line.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zipfile

import numpy as np

from algorithms.paths import REPO_ROOT

NETWORK = os.path.join(REPO_ROOT, "examples", "digits_8x8.toml")
TRAIN_IMAGES, TEST_IMAGES, CLASSES = 40, 12, 4
BATCH = 16  # 32 training rows after the split: two steps

# run: (the training form, the test form); each form once, the test sets labelled and not
RUNS = {
    "csv": ("train.csv", "csv_unlabelled/test.csv"),  # scored by the test_labels.csv beside it
    "csv_gz": ("train.csv.gz", "zip_labelled/test.csv.zip"),
    "zip": ("train.csv.zip", "npz_unlabelled/test.npz"),
    "npz": ("train.npz", "flat_jpeg"),  # a test folder of images with no class folders: unlabelled
    "folder": ("folder_png", "folder_labelled"),
}
LABELLED_TEST = {"csv": True, "csv_gz": True, "zip": False, "npz": False, "folder": True}


def digits() -> tuple:
    """(images uint8 (N, 8, 8), labels) of the classes 0-3, the first TRAIN + TEST of them."""
    from sklearn.datasets import load_digits

    found = load_digits()
    keep = np.flatnonzero(found.target < CLASSES)[: TRAIN_IMAGES + TEST_IMAGES]
    return np.round(found.images[keep] * 255 / 16).astype(np.uint8), found.target[keep].astype(np.int64)


def csv_text(images: np.ndarray, labels) -> bytes:
    pixels = [f"pixel{k}" for k in range(images[0].size)]
    header = ",".join((["label"] if labels is not None else []) + pixels)
    rows = [
        ",".join(([str(labels[n])] if labels is not None else []) + [str(v) for v in images[n].ravel()])
        for n in range(len(images))
    ]
    return ("\n".join([header, *rows]) + "\n").encode()


def write_images(folder: str, images: np.ndarray, labels, suffix: str) -> None:
    """One file per image: in its class's subfolder (`labels`), or all in `folder` (None)."""
    from PIL import Image

    for n, image in enumerate(images):
        where = folder if labels is None else os.path.join(folder, str(labels[n]))
        os.makedirs(where, exist_ok=True)
        Image.fromarray(image, "L").save(os.path.join(where, f"{n:03d}{suffix}"))


def write_data_forms(folder: str) -> dict:
    """{form: path} of every form in RUNS, under `folder`; each folder of images read once (its cache)."""
    from algorithms.dataset.data import load_images

    images, labels = digits()
    train_x, train_y = images[:TRAIN_IMAGES], labels[:TRAIN_IMAGES]
    test_x, test_y = images[TRAIN_IMAGES:], labels[TRAIN_IMAGES:]
    path = {name: os.path.join(folder, name) for pair in RUNS.values() for name in pair}
    for name in path.values():
        os.makedirs(os.path.dirname(name), exist_ok=True)
    train_csv = csv_text(train_x, train_y)
    with open(path["train.csv"], "wb") as handle:
        handle.write(train_csv)
    with open(path["train.csv.gz"], "wb") as handle:
        handle.write(gzip.compress(train_csv, mtime=0))
    for name, member, text in (
        ("train.csv.zip", "train.csv", train_csv),
        ("zip_labelled/test.csv.zip", "test.csv", csv_text(test_x, test_y)),
    ):
        with zipfile.ZipFile(path[name], "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(member, text)
    with open(path["csv_unlabelled/test.csv"], "wb") as handle:
        handle.write(csv_text(test_x, None))
    ids = "\n".join(f"{n + 1},{label}" for n, label in enumerate(test_y))
    with open(os.path.join(folder, "csv_unlabelled", "test_labels.csv"), "w") as handle:
        handle.write(f"ImageId,Label\n{ids}\n")
    np.savez(path["train.npz"], x=train_x, y=train_y)
    np.savez(path["npz_unlabelled/test.npz"], x=test_x)
    write_images(path["folder_png"], train_x, train_y, ".png")
    write_images(path["folder_labelled"], test_x, test_y, ".png")
    write_images(path["flat_jpeg"], test_x, None, ".jpg")
    _, _, names = load_images(path["folder_png"], True)
    load_images(path["folder_labelled"], False, class_names=names)
    load_images(path["flat_jpeg"], False)
    return path


def run_flags(train: str, test: str, results: str, run: str) -> list:
    flags = ["--network", NETWORK, "--train", train, "--test", test, "--batch_size", str(BATCH), "--max_steps", "2"]
    return (
        flags
        + ["--results_dir", results, "--results_log", os.path.join(results, "results.log")]
        + ["--run_id", run, "--quiet"]
    )


def run_every_form(wrapper_module: str, script: str, folder: str, results: str) -> dict:
    from algorithms.run.entry import run_entry_point

    codes = {}
    for run, (train, test) in RUNS.items():
        flags = run_flags(os.path.join(folder, train), os.path.join(folder, test), os.path.join(results, run), run)
        codes[run] = run_entry_point(wrapper_module, script, "", flags)
    return codes


if __name__ == "__main__":
    if sys.argv[1] == "--runs":
        print(json.dumps(run_every_form(*sys.argv[2:6])), flush=True)
    else:
        write_data_forms(sys.argv[1])


def check_every_form(framework, folder: str, results: str) -> None:
    """Each of RUNS trained in `framework` (a registry entry), through its entry point in one
    process of its own environment: two steps, their rows read back, the test set scored
    where it has labels (its own, or the labels file beside it) and predicted either way,
    and the settings record holding the training data's fingerprint (a folder's: its files')."""
    import glob
    import math
    import subprocess

    from algorithms.records import read_rows, read_settings
    from algorithms.session.settings_record import file_fingerprint

    command = [framework.python, "-m", "tests.helpers.data_forms", "--runs", f"{framework.package}.train"]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env}
    proc = subprocess.run(
        command + [framework.script, folder, results],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert codes == {run: 0 for run in RUNS}, proc.stderr[-3000:]
    for run, (train, test) in RUNS.items():
        [csv_path] = glob.glob(os.path.join(results, run, "*.csv"))
        rows = read_rows(csv_path)
        train_rows = [row for row in rows if row["phase"] == "train"]
        assert [row["step"] for row in train_rows] == [1, 2], (run, rows)
        assert all(math.isfinite(row["loss"]) for row in rows if row["loss"] is not None), (run, rows)
        assert len([row for row in rows if row["phase"] == "test"]) == LABELLED_TEST[run], (run, test, rows)
        [predictions] = glob.glob(os.path.join(results, run, "predictions", "*.csv"))
        with open(predictions) as handle:
            assert len(handle.read().splitlines()) == 1 + TEST_IMAGES, (run, test)
        settings = read_settings(csv_path)[run]
        assert settings["data"] == file_fingerprint(os.path.join(folder, train)), (run, settings["data"])
