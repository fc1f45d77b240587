"""TensorFlow's tensor and pipeline parallelism, for real on 3 logical CPU devices.
One probe process compares the first optimizer step of each against one device at
the same global batch, dropout on (the masks are drawn per row of the step, so they
do not depend on the split): 2 and 3 devices, uneven channel shards and uneven
micro-batches, --accumulate with both; then trains 2 epochs of each through
the wrapper's train().

    python -m tests.test_parallel_tf_split TRAIN_CSV RESULTS_DIR    # the probe, prints JSON
"""

import json
import os
import sys

import numpy as np
import pytest

from tests.helpers.training import BATCH, EPOCHS, NETWORK, assert_trains, run_probe, train_rows, train_strategy

pytestmark = pytest.mark.slow  # TensorFlow on logical devices: `make test-fast` leaves it out

FLOAT32_ABSOLUTE = 1e-6  # losses (about 2.3) and updated weights (|w| < 0.3), summed in another order


def probe(train_csv: str, results_dir: str) -> dict:
    from algorithms.dataset.data import load_kaggle_csv
    from algorithms.network.parallel import layer_stages, tensor_shards
    from algorithms.network.networks import get_network
    from tensorflow_wrapper.devices import local_devices
    from algorithms.network.dropout import uniforms
    from tensorflow_wrapper.trainer import TensorFlowTrainer

    devices = local_devices(3)  # before any op
    network = get_network(NETWORK)
    images, labels = load_kaggle_csv(train_csv, labelled=True)

    def trainer(**placement):
        return TensorFlowTrainer(network, network.training.optimizer, seed=3, **placement)

    def tensor(count):
        return trainer(shards=tensor_shards(network, count), shard_devices=devices[:count])

    def pipeline(count, micro_batches):
        stages = layer_stages(network, count)
        layer_devices = [devices[stage] for stage, (first, stop) in enumerate(stages) for _ in range(first, stop)]
        return trainer(layer_devices=layer_devices, micro_batches=micro_batches)

    def weights(t):
        gathered = getattr(t.model, "gathered_weights", None)
        return gathered() if gathered else [v.numpy() for v in t.variables]

    def step(t, parts=((0, 64),)):
        return t.step(
            [t.to_batch(images[a:b], labels[a:b], uniforms(network, 3, 0, np.arange(a, b))) for a, b in parts]
        ).loss

    single = trainer()
    start = weights(single)
    reference = step(single)
    out = {"max_weight_change": max(float(np.abs(a - b).max()) for a, b in zip(weights(single), start))}
    for name, other, parts in (
        ("tensor_2", tensor(2), ((0, 64),)),
        ("tensor_3", tensor(3), ((0, 64),)),  # 10 output units: shards of 4, 3, 3
        ("pipeline_2", pipeline(2, 4), ((0, 64),)),
        ("pipeline_3", pipeline(3, 5), ((0, 64),)),  # micro-batches of 13, 13, 13, 13, 12
        ("pipeline_2_accumulate", pipeline(2, 4), ((0, 32), (32, 64))),
        ("tensor_2_accumulate", tensor(2), ((0, 32), (32, 64))),
    ):
        loss = step(other, parts)
        out[name] = {
            "loss_diff": abs(loss - reference),
            "max_weight_diff": max(float(np.abs(a - b).max()) for a, b in zip(weights(single), weights(other))),
            "variable_devices": sorted({v.device.split("/")[-1] for v in other.variables}),
            "variables": len(other.variables),
        }
    for strategy in ("tensor", "pipeline"):
        results = os.path.join(results_dir, strategy, "results")
        train_strategy("tensorflow_wrapper.train", "tensorflow_script.py", train_csv, results, strategy, 2)
    return out


@pytest.fixture(scope="module")
def probed(small_data, tmp_path_factory):
    results = tmp_path_factory.mktemp("tf_split_probe")
    return run_probe("tests.test_parallel_tf_split", small_data / "train.csv", results), results


@pytest.mark.parametrize(
    "name", ["tensor_2", "tensor_3", "pipeline_2", "pipeline_3", "pipeline_2_accumulate", "tensor_2_accumulate"]
)
def test_one_step_equals_one_device_with_dropout_on(probed, name):
    result = probed[0]
    got = result[name]
    assert result["max_weight_change"] > 1e-3  # the step moved the weights, so equality means something
    assert got["loss_diff"] < FLOAT32_ABSOLUTE, got
    assert got["max_weight_diff"] < FLOAT32_ABSOLUTE, got
    count = int(name.split("_")[1])
    assert got["variable_devices"] == [f"device:CPU:{i}" for i in range(count)], got
    layers_with_weights = 6
    # tensor: a kernel and a bias per layer and device; pipeline: the layers' own, on their stage's device
    assert got["variables"] == 2 * layers_with_weights * (count if name.startswith("tensor") else 1)


@pytest.mark.parametrize("strategy", ["tensor", "pipeline"])
def test_tensor_and_pipeline_train_and_record(probed, strategy):
    run = probed[1] / strategy
    rows = train_rows(run / "results" / f"{NETWORK}_tensorflow.csv")
    assert {(r["strategy"], r["devices"], r["global_batch"]) for r in rows} == {(strategy, 2, BATCH)}
    assert len(rows) == EPOCHS * 15
    assert all(r["comm_time_ms"] is None for r in rows)  # the copies happen inside the one step call
    assert_trains([r["loss"] for r in rows])
    log = (run / "results.log").read_text()
    expected = "stages layers 0-7 | layers 8-13, 4 micro-batches" if strategy == "pipeline" else "tensor on 2 devices"
    assert expected in log


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:])))
