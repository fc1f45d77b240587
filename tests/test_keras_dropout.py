"""Keras applies the shared dropout uniforms (algorithms/network/dropout.py) on every Keras 3
backend: its Dropout layers equal the numpy mask rule bit for bit (and under the bf16
policy), hold none of Keras's own randomness, and a short real run with dropout on takes
TensorFlow's wrapper's steps: the init row and the first steps' training losses equal
tensorflow_script.py's at the same seed to float32 drift. Keras 2 on Theano is held to the
same in tests/test_legacy_frameworks.py."""

import json
import os
import subprocess

import pytest

from algorithms.registry.frameworks import get
from algorithms.records import read_rows
from tests.conftest import REPO_ROOT, csv_suffix, run_script, script_env
from tests.helpers.flags import run_flags

pytestmark = pytest.mark.slow  # a real run per Keras backend, beside TensorFlow's

NETWORK = "cnn2d_3layer_fullconnected_3layer"
KERAS_3 = [get(name) for name in ("keras_tensorflow", "keras_torch", "keras_jax")]
STEPS, BATCH, SEED = 3, 100, 11
FIRST_STEP_RELATIVE = 1e-6  # the same masks: float32 summation order only (measured about 1e-7)
LATER_STEPS_RELATIVE = 1e-5  # two updates later, still float32 drift (measured about 1e-8)


def probe_dropout(framework) -> dict:
    """tests/helpers/keras_dropout_probe.py's JSON, run by the framework's own Python."""
    proc = subprocess.run(
        [framework.python, "-m", "tests.helpers.keras_dropout_probe"],
        cwd=REPO_ROOT,
        env=script_env(framework.env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_the_mask_rule(report: dict, backend: str) -> None:
    assert report["backend"] == backend
    assert report["own_randomness"] == []  # no keras.layers.Dropout, no seed generator state
    for precision in ("fp32", "bf16") if backend != "theano" else ("fp32",):
        for layer, found in report[precision].items():
            where = f"{backend} {precision} layer {layer}"
            assert found["equal"], (where, found)
            assert 0.23 < found["dropped"] < 0.27, (where, found)  # rate 0.25: it drops, so equality means something
            assert found["identity_alone"] and found["identity_outside_training"], (where, found)


def short_run(framework, train_csv, results_dir) -> list:
    """(phase, step, loss) of a --max_steps STEPS run, dropout on (no --parity)."""
    flags = run_flags(
        train_csv, results_dir, max_steps=STEPS, batch_size=BATCH, seed=SEED, run_id=f"dropout-{framework.name}"
    )
    proc = run_script(framework.script, flags, framework.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(os.path.join(str(results_dir), f"{NETWORK}_{csv_suffix(framework)}.csv"))
    return [(r["phase"], r["step"], r["loss"]) for r in rows if r["phase"] in ("init", "train")]


def assert_same_steps(reference: list, got: list, name: str, later_relative: float = LATER_STEPS_RELATIVE) -> None:
    """The init row and step 1 to FIRST_STEP_RELATIVE, the later steps to `later_relative`."""
    assert [(phase, step) for phase, step, _ in got] == [(phase, step) for phase, step, _ in reference], name
    for (phase, step, expected), (_, _, loss) in zip(reference, got):
        tolerance = FIRST_STEP_RELATIVE if step <= 1 else later_relative
        assert loss == pytest.approx(expected, rel=tolerance), (name, phase, step, loss, expected)


@pytest.fixture(scope="module")
def tensorflow_steps(small_data, tmp_path_factory):
    return short_run(get("tensorflow"), small_data / "train.csv", tmp_path_factory.mktemp("tensorflow"))


@pytest.mark.parametrize("framework", KERAS_3, ids=[f.name for f in KERAS_3])
def test_keras_dropout_is_the_shared_mask_rule_and_draws_nothing_itself(framework):
    assert_the_mask_rule(probe_dropout(framework), framework.backend)


@pytest.mark.parametrize("framework", KERAS_3, ids=[f.name for f in KERAS_3])
def test_keras_steps_equal_tensorflows_with_dropout_on(framework, tensorflow_steps, small_data, tmp_path):
    got = short_run(framework, small_data / "train.csv", tmp_path)
    assert [phase for phase, _, _ in got] == ["init"] + ["train"] * STEPS
    assert_same_steps(tensorflow_steps, got, framework.name)
