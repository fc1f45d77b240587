"""An input cut short (a copy or download interrupted) or damaged, in every reader: an .npz,
a .csv.gz, a .zip holding a CSV, a PNG or JPEG in a folder of images, an ONNX model, as
training or test data. Each is one line naming the file and the fix (copy, download or
save it again), exit status 2, nothing written; never a traceback, and never a line of
the garbled text called the user's to correct. A damaged cache beside an input is not the
user's: the input is read again."""

from __future__ import annotations

import gzip
import io
import os
import zipfile

import numpy as np
import pytest

from algorithms.dataset.data import load_images
from tests.conftest import REPO_ROOT
from tests.helpers.refused import run_refused

DIGITS_NET = os.path.join(REPO_ROOT, "examples", "digits_8x8.toml")
ROWS = 1500  # a CSV whose gzip is larger than the 64 KB check_file reads first: the damage is found by the parse


def images(count: int = ROWS, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 8, 8), dtype=np.uint8), np.arange(count) % 10


def csv_bytes(count: int = ROWS) -> bytes:
    x, y = images(count)
    lines = ["label," + ",".join(f"pixel{k}" for k in range(64))]
    lines += [f"{y[n]}," + ",".join(map(str, x[n].ravel())) for n in range(count)]
    return ("\n".join(lines) + "\n").encode()


def zipped(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def npz_bytes(count: int = 40) -> bytes:
    x, y = images(count)
    buffer = io.BytesIO()
    np.savez(buffer, x=x, y=y)
    return buffer.getvalue()


def cut(data: bytes, fraction: float = 0.5) -> bytes:
    return data[: int(len(data) * fraction)]


def garbled(data: bytes, at: float = 0.75, length: int = 40) -> bytes:
    """`length` bytes from `at` of the way through set to zeros: the archive's length and its
    directory intact, its contents (and their checksum) not."""
    start = int(len(data) * at)
    return data[:start] + b"\0" * length + data[start + length :]


def image_folder(root, suffix: str, damage) -> str:
    """Two class folders of 8x8 greyscale images, one of them damaged by `damage`."""
    from PIL import Image

    x, _ = images(6)
    for n in range(6):
        folder = root / f"class_{n % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(x[n], "L").save(folder / f"{n}{suffix}")
    broken = root / "class_1" / f"5{suffix}"
    broken.write_bytes(damage(broken.read_bytes()))
    return str(root)


def onnx_bytes() -> bytes:
    """A one-layer model for 8x8 images (Flatten, Gemm), written with onnx's own helpers."""
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.zeros((64, 10), np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(10, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [weights, bias],
    )
    return helper.make_model(graph).SerializeToString()


def write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


# case: (what it writes into tmp_path: (train, test, network), the one line's start)
CASES = {
    "npz_cut": (lambda t: (write(t / "x.npz", cut(npz_bytes())), "none", DIGITS_NET), "x.npz: a NumPy .npz file cut"),
    "npz_garbled": (
        lambda t: (write(t / "x.npz", garbled(npz_bytes(), 0.3)), "none", DIGITS_NET),
        "x.npz: a NumPy .npz file cut short or damaged (Bad CRC-32 for file 'x.npy')",
    ),
    "npz_cut_as_test": (
        lambda t: (write(t / "x.npz", npz_bytes()), write(t / "t.npz", cut(npz_bytes())), DIGITS_NET),
        "t.npz: a NumPy .npz file cut short or damaged",
    ),
    "csv_gz_cut": (
        lambda t: (write(t / "train.csv.gz", cut(gzip.compress(csv_bytes()), 0.8)), "none", DIGITS_NET),
        "train.csv.gz: a gzip file cut short or damaged (Compressed file ended",
    ),
    "csv_gz_garbled": (
        lambda t: (write(t / "train.csv.gz", garbled(gzip.compress(csv_bytes()))), "none", DIGITS_NET),
        "train.csv.gz: a gzip file cut short or damaged",
    ),
    "zip_cut": (
        lambda t: (write(t / "train.csv.zip", cut(zipped("train.csv", csv_bytes()))), "none", DIGITS_NET),
        "train.csv.zip: a zip file cut short or damaged (no central directory at its end)",
    ),
    "zip_garbled": (
        lambda t: (write(t / "train.csv.zip", garbled(zipped("train.csv", csv_bytes()))), "none", DIGITS_NET),
        "train.csv.zip: a zip file cut short or damaged",
    ),
    "png_cut": (
        lambda t: (image_folder(t / "images", ".png", cut), "none", DIGITS_NET),
        "class_1/5.png: not an image Pillow can read, or one cut short or damaged",
    ),
    "png_garbled": (
        lambda t: (image_folder(t / "images", ".png", lambda data: garbled(data, 0.5, 8)), "none", DIGITS_NET),
        "class_1/5.png: not an image Pillow can read, or one cut short or damaged",
    ),
    "jpeg_cut": (
        lambda t: (image_folder(t / "images", ".jpg", cut), "none", DIGITS_NET),
        "class_1/5.jpg: not an image Pillow can read, or one cut short or damaged",
    ),
    "onnx_cut": (
        lambda t: (write(t / "x.npz", npz_bytes()), "none", write(t / "model.onnx", cut(onnx_bytes(), 0.6))),
        "model.onnx: not an ONNX model, or one cut short or damaged",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_input_cut_short_or_damaged_is_one_line_naming_the_file_and_the_fix(case, tmp_path, capsys):
    make, expected = CASES[case]
    train, test, network = make(tmp_path)
    err = run_refused(tmp_path, capsys, ["--network", network, "--train", train, "--test", test])
    assert expected in err, err
    assert "again" in err and "correct or delete that line" not in err, err


def test_the_entry_script_refuses_a_cut_npz_with_status_2_and_writes_nothing(tmp_path):
    """The issue's case, as a user meets it: a .npz copied half-way, given to the entry script."""
    from tests.conftest import run_script

    train = write(tmp_path / "my_digits.npz", cut(npz_bytes()))
    results = tmp_path / "results"
    proc = run_script("torch_script.py", ["--network", DIGITS_NET, "--train", train, "--results_dir", str(results)])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "my_digits.npz: a NumPy .npz file cut short or damaged" in proc.stderr and "copy it again" in proc.stderr
    assert not results.exists()


def test_a_damaged_cache_beside_an_input_is_read_again(tmp_path):
    """A cache is ours, not the user's: cut or garbled, the input it stands for is read again."""
    from algorithms.dataset.array_data import folder_cache_path
    from algorithms.dataset.csv_data import cache_path
    from algorithms.network.networks import get_network
    from algorithms.network.onnx_network import cache_path as onnx_cache_path

    folder = image_folder(tmp_path / "images", ".png", lambda data: data)
    csv = write(tmp_path / "train.csv", csv_bytes(50))
    model = write(tmp_path / "model.onnx", onnx_bytes())
    first = [load_images(folder, True)[0], load_images(csv, True)[0]]
    network = get_network(model)
    for cache in (folder_cache_path(folder), cache_path(csv), onnx_cache_path(model)):
        assert os.path.exists(cache), cache
        data = open(cache, "rb").read()
        with open(cache, "wb") as handle:  # a zip's start and then nothing: what a copy cut short leaves
            handle.write(b"PK\x03\x04" + data[4 : len(data) // 2])
    again = [load_images(folder, True)[0], load_images(csv, True)[0]]
    assert all(np.array_equal(before, after) for before, after in zip(first, again))
    assert get_network(model) == network
