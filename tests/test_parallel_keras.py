"""Keras 3 data parallel, for real on this CPU with 2 devices: MirroredStrategy on
the tensorflow backend (2 logical CPU devices), keras.distribution.DataParallel
on jax (2 host devices). One probe process per backend checks, dropout on (the rows'
shared uniforms are fit inputs, cut with the images), that the first step equals one
device's at the same global batch, that --accumulate 2 equals a 2 x batch step and
that the per-step lr reaches the optimizer, then trains 2 epochs through the wrapper's
train(); the torch backend points to torch_script.py.

    KERAS_BACKEND=jax python -m tests.test_parallel_keras TRAIN_CSV RESULTS_DIR   # the probe, prints JSON
"""

import json
import math
import os
import sys

import numpy as np
import pytest

from algorithms.records import read_rows
from algorithms.network.networks import get_network
from tests.conftest import run_script
from tests.helpers.flags import run_flags
from tests.helpers.training import BATCH, EPOCHS, NETWORK, assert_trains, run_probe, train_strategy

pytestmark = pytest.mark.slow  # Keras data parallel on two backends: `make test-fast` leaves them out

WARMUP = 1000
SEED = 5


def probe(train_csv: str, results_dir: str) -> dict:
    import keras

    from algorithms.run.entry import prepare
    from algorithms.session.run_session import RunSession
    from algorithms.network.dropout import uniforms
    from keras_wrapper.train import describe_runtime
    from keras_wrapper.trainer import StepRecorder, fit_inputs, make_model

    backend = keras.backend.backend()
    network = get_network(NETWORK)  # dropout on
    config, dataset = prepare(
        run_flags(train_csv, results_dir, batch_size=64, max_steps=1, warmup_steps=WARMUP), "probe", ""
    )
    rows = np.arange(64)
    x, labels = fit_inputs(dataset.train_x[rows], uniforms(network, SEED, 0, rows)), dataset.train_y[rows]

    def model(**options):
        return make_model(network, network.training.optimizer, seed=SEED, **options).training

    def one_step(model, callbacks=(), batch_size=64):
        history = model.fit(
            x, labels, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=list(callbacks)
        )
        return float(history.history["batch_loss"][-1])

    whole_step = []

    def accumulated(devices=0):
        """max |weights| difference: --accumulate 2 of 32 rows vs one step of 64."""
        if not whole_step:
            whole = model()
            one_step(whole)
            whole_step.append(whole.get_weights())
        parts = model(data_parallel_devices=devices, accumulate=2)
        one_step(parts, batch_size=32)
        return max(float(np.abs(a - b).max()) for a, b in zip(whole_step[0], parts.get_weights()))

    # tensorflow fixes its devices at first use, so the 2-device model comes first there;
    # on jax the distribution is global, so the 1-device model comes first
    order = ("data", "single") if backend == "tensorflow" else ("single", "data")
    models, losses = {}, {}
    for name in order:
        models[name] = model(data_parallel_devices=2 if name == "data" else 0)
        if name == "single":
            start = [np.array(w) for w in models[name].get_weights()]
            losses[name] = one_step(models[name])
            accumulate_diff = accumulated()
    losses["data"] = one_step(models["data"])
    # the warm-up lr (peak / WARMUP at the first step) set by the step callback before the batch
    warm = model(data_parallel_devices=2)
    session = RunSession(config, dataset, describe_runtime())
    recorder = StepRecorder(session)
    recorder.batch_sizes = [64]
    one_step(warm, [recorder])
    single, data = models["single"].get_weights(), models["data"].get_weights()
    out = {
        "losses": [losses["single"], losses["data"]],
        "max_weight_diff": max(float(np.abs(a - b).max()) for a, b in zip(single, data)),
        "max_weight_change": max(float(np.abs(a - s).max()) for a, s in zip(single, start)),
        "warmup_change_ratio": float(
            np.median([np.abs(a - s).max() / np.abs(w - s).max() for a, w, s in zip(data, warm.get_weights(), start)])
        ),
        "devices": [str(d) for d in keras.distribution.list_devices()],
        "accumulate_weight_diff": accumulate_diff,
    }
    if backend == "jax":  # accumulation inside DataParallel (MirroredStrategy refuses it: see keras_wrapper)
        out["accumulate_data_weight_diff"] = accumulated(devices=2)
    if backend == "tensorflow":  # every replica's copy took the same update
        copies = [v.value.values[1].numpy() for v in models["data"].trainable_variables]
        out["max_replica_diff"] = max(float(np.abs(a - b).max()) for a, b in zip(single, copies))
    train_strategy("keras_wrapper.train", "keras_script.py", train_csv, os.path.join(results_dir, "run"), "data", 2)
    return out


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_two_devices_equal_one_the_lr_schedule_applies_and_data_parallel_trains(backend, small_data, tmp_path):
    env = {"KERAS_BACKEND": backend, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    result = run_probe("tests.test_parallel_keras", small_data / "train.csv", tmp_path, env)
    single, data = result["losses"]
    assert data == pytest.approx(single, rel=1e-5)
    assert result["max_weight_change"] > 1e-3  # the step moved the weights, so equality means something
    assert result["max_weight_diff"] < 1e-6, result
    assert result.get("max_replica_diff", 0.0) < 1e-6
    assert result["warmup_change_ratio"] == pytest.approx(WARMUP, rel=1e-2)
    assert result["accumulate_weight_diff"] < 1e-6  # --accumulate 2 x 32 equals one step of 64
    assert result.get("accumulate_data_weight_diff", 0.0) < 1e-6

    rows = read_rows(str(tmp_path / "run" / f"{NETWORK}_keras_{backend}.csv"))
    train = [r for r in rows if r["phase"] == "train"]
    assert {(r["strategy"], r["devices"], r["global_batch"]) for r in rows} == {("data", 2, BATCH)}
    assert len(train) == EPOCHS * 15
    assert_trains([r["loss"] for r in train])  # its first loss: the mean over both replicas, not their sum
    val = [r["loss"] for r in rows if r["phase"] == "val"]
    assert val[1] < val[0] < math.log(10)


def test_accumulation_keras_cannot_make_equal_to_a_k_x_batch_step_is_refused(small_data):
    train_csv = str(small_data / "train.csv")
    uneven = run_script(
        "keras_script.py",
        ["--train", train_csv, "--test", "none", "--batch_size", "32", "--accumulate", "2"],
        {"KERAS_BACKEND": "jax"},
    )
    assert uneven.returncode == 2 and len(uneven.stderr.strip().splitlines()) == 1
    assert "the 480 training rows leave a last step of 32 rows" in uneven.stderr
    mirrored = run_script(
        "keras_script.py",
        run_flags(train_csv, quiet=False, batch_size=48, accumulate=2, strategy="data", devices=2),
        {"KERAS_BACKEND": "tensorflow"},
    )
    assert mirrored.returncode == 2
    assert mirrored.stderr.startswith("error: --accumulate with --strategy data: Keras's gradient accumulation")


def test_keras_on_torch_points_data_parallel_to_torch_script(small_data):
    proc = run_script(
        "keras_script.py",
        ["--train", str(small_data / "train.csv"), "--test", "none", "--strategy", "data", "--devices", "2"],
        {"KERAS_BACKEND": "torch"},
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: --strategy data: Keras on torch has no data parallel here; run torch_script.py "
        "--strategy data (DistributedDataParallel), or KERAS_BACKEND=tensorflow or jax\n"
    )


def test_jax_refuses_training_rows_it_cannot_split_evenly_before_loading(small_data):
    proc = run_script(
        "keras_script.py",
        run_flags(
            small_data / "train.csv", quiet=False, validation_split=0.215, batch_size=32, strategy="data", devices=2
        ),
        {"KERAS_BACKEND": "jax"},
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "the last batch of each epoch has 23 of the 471 training rows" in proc.stderr


def test_jax_refuses_more_devices_than_the_users_xla_flags_name(small_data):
    proc = run_script(
        "keras_script.py",
        run_flags(small_data / "train.csv", quiet=False, batch_size=32, strategy="data", devices=2),
        {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"},
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-1500:]
    assert proc.stderr == (
        "error: --devices 2: XLA_FLAGS names --xla_force_host_platform_device_count=1, so jax would see 1 "
        "CPU device(s); drop it from XLA_FLAGS (the run sets it) or pass --devices 1\n"
    )


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:])))
