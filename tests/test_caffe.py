"""Caffe specifics: the generated prototxt round-trips through Caffe's own protobuf
messages, and OpenCV's independent Caffe importer reproduces pycaffe's outputs from
the deploy net and the trained weights a run leaves behind.

pycaffe is built by `make caffe`, which `make test` runs first; it is imported inside
the tests, so that `make test-fast` (-m "not caffe", no Caffe build) collects this file."""

import glob

import cv2
import numpy as np
import pytest

from algorithms.dataset.data import load_kaggle_csv
from algorithms.network.networks import NETWORKS
from tests.conftest import run_script
from tests.helpers.flags import run_flags

pytestmark = pytest.mark.caffe


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_prototxt_round_trips_through_caffe_pb2(name, tmp_path):
    from caffe.proto import caffe_pb2

    from caffe_wrapper.model import build_model, read_prototxt, solver_parameter, write_prototxt

    network = NETWORKS[name]
    for deploy in (False, True):
        message = build_model(network, batch_size=8, deploy=deploy)
        path = str(tmp_path / f"net_{deploy}.prototxt")
        write_prototxt(message, path)
        assert read_prototxt(path, caffe_pb2.NetParameter) == message
    solver = solver_parameter(network.training.optimizer, "train.prototxt", seed=3)
    write_prototxt(solver, str(tmp_path / "solver.prototxt"))
    again = read_prototxt(str(tmp_path / "solver.prototxt"), caffe_pb2.SolverParameter)
    assert again == solver and again.type == {"sgd": "Nesterov", "adam": "Adam"}[network.training.optimizer.name]


def test_three_layer_prototxt_folds_zero_padding_into_the_convolutions_and_feeds_dropout_its_uniforms():
    from caffe_wrapper.model import build_model

    network = NETWORKS["cnn2d_3layer_fullconnected_3layer"]
    net = build_model(network, batch_size=4, deploy=False)
    dropout = ["Threshold", "Power", "Eltwise"]  # the mask rule on the uniforms, times the activation
    body = ["Convolution", "ReLU", "Convolution", "ReLU", "Pooling", "Convolution", "ReLU", "Pooling"]
    body += ["InnerProduct", "ReLU", *dropout, "InnerProduct", "ReLU", *dropout, "InnerProduct"]
    assert [layer.type for layer in net.layer] == ["Input"] * 4 + body + ["SoftmaxWithLoss", "Accuracy"]
    assert [(layer.top[0], list(layer.input_param.shape[0].dim)) for layer in net.layer[:4]] == [
        ("data", [4, 1, 28, 28]),
        ("label", [4]),
        ("uniforms1", [4, 128]),
        ("uniforms2", [4, 128]),
    ]
    keep, mask, drop = net.layer[14:17]
    assert (keep.bottom, keep.threshold_param.threshold) == (["uniforms1"], 0.25)
    assert (mask.bottom, mask.power_param.scale, mask.power_param.power, mask.power_param.shift) == (
        ["keep1"],
        np.float32(1 / 0.75),
        1.0,
        0.0,
    )
    assert (drop.bottom, drop.top, drop.eltwise_param.operation) == (["fc1", "mask1"], ["drop1"], 0)  # 0: PROD
    assert list(drop.propagate_down) == [True, False]  # no gradient into the mask and the uniforms
    assert net.layer[17].bottom == ["drop1"]
    convs = [layer.convolution_param for layer in net.layer if layer.type == "Convolution"]
    assert [(c.num_output, list(c.kernel_size), list(c.pad)) for c in convs] == [
        (32, [3], [1]),
        (48, [3], [1]),
        (32, [3], [1]),
    ]
    deploy = build_model(network, batch_size=4, deploy=True)
    assert [layer.type for layer in deploy.layer] == ["Input"] + [t for t in body if t not in dropout]


def test_opencv_reproduces_pycaffe_from_the_runs_deploy_net_and_weights(small_data, tmp_path):
    import caffe

    results = tmp_path / "results"
    proc = run_script(
        "caffe_script.py", run_flags(small_data / "train.csv", results, quiet=False, max_steps=5, batch_size=32)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (directory,) = glob.glob(str(results / "caffe" / "*"))
    deploy, weights = f"{directory}/deploy.prototxt", f"{directory}/trained.caffemodel"
    images, _ = load_kaggle_csv(str(small_data / "train.csv"), labelled=True)
    batch = np.ascontiguousarray(images[:16].transpose(0, 3, 1, 2))

    net = caffe.Net(deploy, caffe.TEST, weights=weights)
    net.blobs["data"].reshape(*batch.shape)
    net.reshape()
    net.blobs["data"].data[...] = batch
    expected = net.forward()["logits"].copy()

    opencv_net = cv2.dnn.readNetFromCaffe(deploy, weights)
    opencv_net.setInput(batch)
    got = opencv_net.forward()
    assert expected.std() > 0.01  # logits that differ per sample and class: a real comparison
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def boundary_uniforms(network, rows: int) -> tuple:
    """The run's uniforms of `rows` rows (seed 0, epoch 0), with the mask rule's edge cases
    in each layer's first row: exactly the rate (dropped), one step above it (kept), one
    below (dropped), 0 (dropped)."""
    from algorithms.network.dropout import dropout_layers, uniforms

    drawn = uniforms(network, 0, 0, np.arange(rows))
    for u, (_, layer, _) in zip(drawn, dropout_layers(network)):
        rate = np.float32(layer.rate)
        u.reshape(rows, -1)[0, :4] = [rate, np.nextafter(rate, np.float32(1)), np.nextafter(rate, np.float32(0)), 0]
    return drawn


def test_a_train_step_drops_by_the_mask_rule_and_sends_no_gradient_into_the_uniforms(small_data, tmp_path):
    """A real solver step on 10 rows of a net built for 16 (the input blobs follow the
    smaller batch): each dropped blob is the numpy mask rule (network/dropout.py) of its
    activation bit for bit, the edge cases included, and the uniforms, keep and mask blobs
    get no gradient while the activation does. (Threshold has no backward: Caffe would
    abort had the step asked it for one.)"""
    from algorithms.network.dropout import apply
    from caffe_wrapper.trainer import CaffeTrainer

    network = NETWORKS["cnn2d_3layer_fullconnected_3layer"]
    trainer = CaffeTrainer(network, network.training.optimizer, 0, 16, str(tmp_path))
    images, labels = load_kaggle_csv(str(small_data / "train.csv"), labelled=True)
    uniforms = boundary_uniforms(network, 10)
    trainer.step([trainer.to_batch(images[:10], labels[:10], uniforms)])
    blobs = trainer.solver.net.blobs
    for number, (u, activation) in enumerate(zip(uniforms, ("fc1", "fc2")), start=1):
        assert blobs[f"uniforms{number}"].data.shape == (10, 128)
        dropped = blobs[f"drop{number}"].data
        np.testing.assert_array_equal(dropped, apply(blobs[activation].data, u, 0.25))
        assert list(blobs[f"keep{number}"].data[0, :4]) == [0, 1, 0, 0]
        assert 0.2 < (blobs[f"keep{number}"].data == 0).mean() < 0.3
        assert all(not blobs[f"{name}{number}"].diff.any() for name in ("uniforms", "keep", "mask"))
        assert blobs[activation].diff.any()


def test_caffe_native_loop_and_harness_step_give_the_same_losses_with_dropout_on(small_data, tmp_path):
    """The benchmark's two sides feed the same uniforms: the native loop's losses (read
    from the loss blob after each solver step) equal the harness's CSV rows."""
    from algorithms.run.timing import step_schedule
    from algorithms.run.entry import prepare
    from algorithms.records import read_rows
    from algorithms.session.run_session import RunSession
    from caffe_wrapper import native as native_module
    from caffe_wrapper.train import describe_runtime

    config, dataset = prepare(run_flags(small_data / "train.csv", tmp_path / "results", batch_size=32), "test", "")
    session = RunSession(config, dataset, describe_runtime())
    schedule = step_schedule(session, 3)
    native = native_module.Native(config, dataset, schedule)
    native_losses = []
    for step in schedule:
        native.run([step])
        native_losses.append(float(native.solver.net.blobs["loss"].data))
    native_module.Harness(config, session).run(schedule)
    harness_losses = [row["loss"] for row in read_rows(session.csv_path, session.run_id)]
    assert len(harness_losses) == 3 and len(set(harness_losses)) == 3
    assert native_losses == pytest.approx(harness_losses, rel=1e-6)


def test_a_run_resumed_from_caffes_snapshot_with_dropout_on_gives_the_uninterrupted_losses(small_data, tmp_path):
    """The masks come with the rows, not from Caffe's RNG (which no snapshot holds): a run
    stopped after step 6 and resumed from its step-4 .caffemodel/.solverstate, dropout on,
    writes the uninterrupted run's rows exactly."""
    from algorithms.records import read_rows

    results = tmp_path / "results"
    common = run_flags(small_data / "train.csv", results, batch_size=32, num_epochs=2)
    assert run_script("caffe_script.py", common + ["--run_id", "whole"]).returncode == 0
    cut = run_script("caffe_script.py", common + ["--run_id", "cut", "--max_steps", "6", "--checkpoint_every", "4"])
    assert cut.returncode == 0, cut.stderr[-3000:]
    resumed = run_script("caffe_script.py", common + ["--resume", "cut"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming run cut at step 5" in resumed.stdout + resumed.stderr
    csv_path = str(results / "cnn2d_3layer_fullconnected_3layer_caffe.csv")
    whole = [(r["phase"], r["step"], r["loss"]) for r in read_rows(csv_path, "whole")]
    assert len(whole) == 1 + 30 + 2  # the init row, 2 epochs of 15 steps, 2 validations
    assert [(r["phase"], r["step"], r["loss"]) for r in read_rows(csv_path, "cut")] == whole
