"""Keras 3 tensor and hybrid parallel on jax (keras.distribution.ModelParallel), for
real on 4 host CPU devices. One probe process checks the shardings every variable
actually got (a LayoutMap key that matches no path leaves the weights replicated,
silently), that the first step of tensor (1 x 2 mesh) and hybrid (2 x 2 mesh)
equals one device's at the same global batch, dropout on, then trains 2 epochs of
each through the wrapper's train(). What Keras cannot run is refused in one line.

    KERAS_BACKEND=jax python -m tests.test_parallel_keras_tensor TRAIN_CSV RESULTS_DIR   # the probe, prints JSON
"""

import json
import os
import sys
import numpy as np
import pytest

from algorithms.records import read_rows
from tests.conftest import run_script
from tests.helpers.flags import run_flags
from tests.helpers.training import BATCH, EPOCHS, NETWORK, assert_trains, run_probe, train_strategy

pytestmark = pytest.mark.slow  # jax on 4 host devices: `make test-fast` leaves it out

FLOAT32_ABSOLUTE = 1e-6  # losses (about 2.3) and updated weights (|w| < 0.3), summed in another order


def shardings(model) -> dict:
    """path -> (mesh axis sizes, partition spec, each device's shard shape) of every model and optimizer variable."""
    out = {}
    for variable in [*model.weights, *model.optimizer.variables]:
        value = variable.value
        out[variable.path] = {
            "mesh": dict(value.sharding.mesh.shape),
            "spec": [axis for axis in value.sharding.spec] + [None] * (len(value.shape) - len(value.sharding.spec)),
            "shard_shapes": sorted({tuple(shard.data.shape) for shard in value.addressable_shards}),
            "devices": len(value.sharding.device_set),
        }
    return out


def probe(train_csv: str, results_dir: str) -> dict:
    import keras

    from algorithms.network.parallel import make_plan
    from algorithms.run.entry import prepare
    from algorithms.network.dropout import uniforms
    from algorithms.network.networks import get_network
    from keras_wrapper.trainer import fit_inputs, make_model

    network = get_network(NETWORK)
    optimizer = network.training.optimizer
    _, dataset = prepare(["--train", train_csv, "--test", "none"], "probe", "")
    rows = np.arange(64)
    x, labels = fit_inputs(dataset.train_x[rows], uniforms(network, 5, 0, rows)), dataset.train_y[rows]

    def one_step(model, batch_size=64):
        history = model.fit(x, labels, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
        return float(history.history["batch_loss"][-1])

    single = make_model(network, optimizer, seed=5).training  # before any distribution is set: one device
    start = single.get_weights()
    reference = one_step(single)
    out = {
        "max_weight_change": max(float(np.abs(a - b).max()) for a, b in zip(single.get_weights(), start)),
        "devices": len(keras.distribution.list_devices()),
    }
    for name, plan in (
        ("tensor", make_plan(network, "tensor", 2, 64)),
        ("hybrid", make_plan(network, "hybrid", 4, 64, group=2, inner="tensor")),
    ):
        model = make_model(network, optimizer, seed=5, tensor_plan=plan).training
        loss = one_step(model)
        out[name] = {
            "loss_diff": abs(loss - reference),
            "max_weight_diff": max(
                float(np.abs(a - b).max()) for a, b in zip(single.get_weights(), model.get_weights())
            ),
            "shardings": shardings(model),
        }
    # --accumulate 2 of 32 rows under ModelParallel equals one step of 64, dropout on (single took that step)
    parts = make_model(network, optimizer, seed=5, accumulate=2, tensor_plan=make_plan(network, "tensor", 2, 32))
    one_step(parts.training, batch_size=32)
    out["accumulate_weight_diff"] = max(
        float(np.abs(a - b).max()) for a, b in zip(single.get_weights(), parts.training.get_weights())
    )
    for strategy, devices in (("tensor", 2), ("hybrid", 4)):
        results = os.path.join(results_dir, strategy)
        train_strategy(
            "keras_wrapper.train", "keras_script.py", train_csv, results, strategy, devices, "--inner", "tensor"
        )
    return out


@pytest.fixture(scope="module")
def probed(small_data, tmp_path_factory):
    results = tmp_path_factory.mktemp("keras_tensor_probe")
    env = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    return run_probe("tests.test_parallel_keras_tensor", small_data / "train.csv", results, env), results


@pytest.mark.parametrize("strategy, mesh", [("tensor", {"batch": 1, "model": 2}), ("hybrid", {"batch": 2, "model": 2})])
def test_every_kernel_and_bias_is_sharded_on_its_output_channels(probed, strategy, mesh):
    from algorithms.network.networks import Conv2D, Dense, get_network

    layers = get_network(NETWORK).layers
    got = probed[0][strategy]["shardings"]
    expected_paths = set()
    for index, layer in enumerate(layers):
        if not isinstance(layer, (Conv2D, Dense)):
            continue
        width = layer.filters if isinstance(layer, Conv2D) else layer.units
        kernel_spec = [None, None, None, "model"] if isinstance(layer, Conv2D) else [None, "model"]
        for variable, spec in (("kernel", kernel_spec), ("bias", ["model"])):
            path = f"{NETWORK}/layer_{index}/{variable}"
            expected_paths.add(path)
            assert got[path]["mesh"] == mesh and got[path]["spec"] == spec, (path, got[path])
            assert got[path]["devices"] == mesh["batch"] * mesh["model"]
            assert got[path]["shard_shapes"][0][-1] == width // 2, (path, got[path])  # the plan's even halves
    assert len(expected_paths) == 12
    momentum = [path for path in got if path.endswith("_momentum")]
    assert len(momentum) == 12 and all(got[path]["spec"][-1] == "model" for path in momentum)  # slots follow


@pytest.mark.parametrize("strategy", ["tensor", "hybrid"])
def test_one_step_equals_one_device_with_dropout_on(probed, strategy):
    result = probed[0]
    assert result["devices"] == 4
    assert result["max_weight_change"] > 1e-3  # the step moved the weights, so equality means something
    assert result[strategy]["loss_diff"] < FLOAT32_ABSOLUTE, result[strategy]["loss_diff"]
    assert result[strategy]["max_weight_diff"] < FLOAT32_ABSOLUTE, result[strategy]["max_weight_diff"]
    assert result["accumulate_weight_diff"] < FLOAT32_ABSOLUTE  # --accumulate 2 x 32 equals one step of 64


@pytest.mark.parametrize("strategy, devices", [("tensor", 2), ("hybrid", 4)])
def test_tensor_and_hybrid_train_through_model_fit(probed, strategy, devices):
    rows = read_rows(str(probed[1] / strategy / f"{NETWORK}_keras_jax.csv"))
    train = [r for r in rows if r["phase"] == "train"]
    assert {(r["strategy"], r["devices"], r["global_batch"]) for r in rows} == {(strategy, devices, BATCH)}
    assert len(train) == EPOCHS * 15
    assert_trains([r["loss"] for r in train])


@pytest.mark.parametrize(
    "script, backend, argv, message",
    [
        ("keras_script.py", "tensorflow", ["--strategy", "tensor"], "--strategy tensor: Keras's tensor parallel"),
        ("keras_script.py", "torch", ["--strategy", "hybrid", "--devices", "4"], "--strategy hybrid: Keras's hybrid"),
        ("keras_script.py", "jax", ["--strategy", "pipeline"], "--strategy pipeline: Keras has no pipeline-parallel"),
        ("keras_script.py", "jax", ["--strategy", "hybrid", "--devices", "4"], "--strategy hybrid --inner model: "),
        ("keras_script.py", "jax", ["--strategy", "tensor", "--devices", "4"], "--devices 4: jax shards a layer's"),
        pytest.param(
            "caffe_script.py",
            "",
            ["--strategy", "pipeline"],
            "--strategy pipeline: caffe_script.py runs single only: ",
            marks=pytest.mark.caffe,
        ),
    ],
)
def test_what_a_framework_cannot_run_is_one_line_before_it_loads(script, backend, argv, message, small_data):
    argv = run_flags(small_data / "train.csv", quiet=False, devices=2) + argv
    proc = run_script(script, argv, {"KERAS_BACKEND": backend} if backend else {})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {message}"), proc.stderr


def test_lasagne_refuses_every_parallel_strategy_naming_the_reason(small_data):
    """In-process: lasagne_script.py would first re-execute itself in .venv-legacy, but the
    refusal is read from lasagne_wrapper's supported() before Theano loads, in any env."""
    from algorithms.config.run_config import parse_config
    from algorithms.errors import InputError
    from algorithms.run.entry import check_supported

    argv = run_flags(small_data / "train.csv", quiet=False, strategy="pipeline", devices=2)
    with pytest.raises(InputError, match=r"^--strategy pipeline: lasagne_script.py runs single only: Lasagne on "):
        check_supported(parse_config(argv, "lasagne_script.py", ""), "lasagne_wrapper.train", "lasagne_script.py")


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:])))
