"""Real training runs of every modern wrapper through its entry script: the loss
goes down, the CSV rows parse back with the schema, results.log and the
predictions are written; and the shared init gives the same initial loss in
every framework."""

import math
import os
import subprocess
import sys

import pytest

from algorithms.paths import REPO_ROOT
from algorithms.registry.frameworks import FRAMEWORKS, get
from algorithms.records import CSV_COLUMNS, read_rows, run_ids
from tests.conftest import csv_suffix, framework_param, run_python, run_script
from tests.helpers.flags import run_flags
from tests.helpers.initial_loss_probe import assert_same_initial_outputs, run_probe
from tests.helpers.training import assert_trains

pytestmark = pytest.mark.slow  # a real run of every framework: `make test-fast` leaves them out

NETWORK = "cnn2d_3layer_fullconnected_3layer"
MAIN = [framework for framework in FRAMEWORKS if framework.venv == "main"]  # tests/legacy/ runs the others
EPOCHS, BATCH, TRAIN_ROWS = 2, 32, 480  # 600 rows less the 20% validation split


@pytest.mark.parametrize("framework", [framework_param(f) for f in MAIN], ids=[csv_suffix(f) for f in MAIN])
def test_short_run_lowers_the_loss_and_records_every_step(framework, small_data, tmp_path):
    results = tmp_path / "results"
    suffix = csv_suffix(framework)
    flags = run_flags(
        small_data / "train.csv",
        results,
        test=small_data / "test.csv",
        quiet=False,
        num_epochs=EPOCHS,
        batch_size=BATCH,
        run_id=f"test-{suffix}",
    )
    proc = run_script(framework.script, flags, framework.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Epoch 2/2" in proc.stdout and "median" in proc.stdout
    assert "oneDNN" not in proc.stderr and "absl::InitializeLog" not in proc.stderr, proc.stderr  # start-up notices

    csv_path = results / f"{NETWORK}_{suffix}.csv"
    with open(csv_path) as handle:
        assert handle.readline().strip().split(",") == CSV_COLUMNS
    assert run_ids(str(csv_path)) == [f"test-{suffix}"]
    rows = read_rows(str(csv_path))
    assert {(r["framework"], r["backend"], r["network"], r["strategy"], r["devices"]) for r in rows} == {
        (framework.framework, framework.backend, NETWORK, "single", 1)
    }
    train = [r for r in rows if r["phase"] == "train"]
    steps_per_epoch = math.ceil(TRAIN_ROWS / BATCH)
    assert [r["step"] for r in train] == list(range(1, EPOCHS * steps_per_epoch + 1))
    assert [r["epoch"] for r in train] == [1] * steps_per_epoch + [2] * steps_per_epoch
    for r in train:
        assert r["global_batch"] == BATCH and r["learning_rate"] == 0.05
        assert r["step_time_ms"] > 0 and r["data_time_ms"] >= 0 and 0 <= r["accuracy"] <= 1
        assert r["samples_per_sec"] == pytest.approx(BATCH * 1000 / r["step_time_ms"])
    assert_trains([r["loss"] for r in train])

    val = [r for r in rows if r["phase"] == "val"]
    assert [r["epoch"] for r in val] == [1, 2]
    assert val[1]["loss"] < val[0]["loss"] and val[1]["loss"] < math.log(10) - 0.3, [r["loss"] for r in val]
    (test,) = [r for r in rows if r["phase"] == "test"]
    assert test["accuracy"] > 0.3  # 200 real digits; chance is 0.1

    log = (tmp_path / "results.log").read_text()
    assert f"=== test-{suffix} · {NETWORK} · {framework.framework}/{framework.backend} · completed" in log
    assert "final test:" in log and "median step:" in log and f"{framework.backend} " in log

    predictions = (results / "predictions" / f"{NETWORK}_{suffix}_test-{suffix}.csv").read_text().splitlines()
    assert predictions[0] == "ImageId,Label" and len(predictions) == 201
    assert all(
        line.split(",")[0] == str(i) and 0 <= int(line.split(",")[1]) <= 9
        for i, line in enumerate(predictions[1:], start=1)
    )


def test_max_steps_stops_early_and_keras_tensorflow_script_warns_on_backend_mismatch(small_data, tmp_path):
    proc = run_script(
        "keras_tensorflow_backend.py",
        run_flags(small_data / "train.csv", tmp_path / "results", quiet=False, max_steps=3, batch_size=32),
        {"KERAS_BACKEND": "jax"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning: KERAS_BACKEND=jax" in proc.stderr
    rows = read_rows(str(tmp_path / "results" / f"{NETWORK}_keras_tensorflow.csv"))
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1, 2, 3]
    assert [r["phase"] for r in rows] == ["init"] + ["train"] * 3 + ["val"]  # validated at the stop, no test set


PROGRESS_AT_EVERY_STEP = """
import sys
import algorithms.session.progress as progress
progress.NON_TTY_PROGRESS_EVERY_S = 0.0
from algorithms.run.entry import run_entry_point
sys.exit(run_entry_point("keras_wrapper.train", "keras_script.py", "", sys.argv[1:]))
"""


def test_an_epoch_is_reported_once_when_a_progress_line_falls_on_its_last_step(tiny_train, tmp_path):
    """Off a terminal, a progress line comes every 15 s: Keras on jax's first epoch (its
    compilation) often ends near one, and its last step's line said the epoch's numbers
    just before its epoch line said them again. Here a line is due at every step."""
    flags = run_flags(tiny_train, tmp_path / "results", quiet=False, batch_size=8, num_epochs=1)
    proc = run_python(["-c", PROGRESS_AT_EVERY_STEP, *flags], {"KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("Epoch 1/1")]
    assert len(lines) == 4 and [line.count("4/4") for line in lines] == [0, 0, 0, 1], proc.stdout


@pytest.mark.caffe  # Caffe's initial outputs among the others
def test_shared_init_gives_the_same_initial_loss_and_logits_everywhere(small_data):
    train_csv = str(small_data / "train.csv")
    torch_run = get("torch")
    reference = run_probe(torch_run.python, torch_run.package, torch_run.env, train_csv)
    frameworks = [framework for framework in MAIN if framework is not torch_run]
    others = [run_probe(framework.python, framework.package, framework.env, train_csv) for framework in frameworks]
    assert [(o["framework"], o["backend"]) for o in others] == [(f.framework, f.backend) for f in frameworks]
    assert_same_initial_outputs(reference, others)


SEEDED_WITHOUT_TENSORFLOW = """
import random, sys
import numpy as np
from keras_wrapper import compat
compat.set_random_seed(3)
from keras.src.utils.rng_utils import get_random_seed
print(get_random_seed(), random.random() == random.Random(3).random(),
      np.random.rand() == np.random.RandomState(3).rand(), "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras_on_jax_and_torch_seeds_everything_without_loading_tensorflow(backend):
    """keras.utils.set_random_seed would load TensorFlow only to seed it (seconds of each
    run's start); the wrapper's seeding sets Keras's seed, Python's and numpy's without it."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", SEEDED_WITHOUT_TENSORFLOW], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["3", "True", "True", "False"], proc.stdout
