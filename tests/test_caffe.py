"""Caffe specifics: the generated prototxt round-trips through Caffe's own protobuf
messages, and OpenCV's independent Caffe importer reproduces pycaffe's outputs from
the deploy net and the trained weights a run leaves behind.

pycaffe is built by `make caffe`, which `make test` runs first; it is imported inside
the tests, so that `make test-fast` (-m "not caffe", no Caffe build) collects this file."""

import glob

import cv2
import numpy as np
import pytest

from algorithms.spec.data import load_kaggle_csv
from algorithms.spec.networks import NETWORKS
from tests.conftest import run_script
from tests.flags import run_flags

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


def test_three_layer_prototxt_folds_zero_padding_into_the_convolutions():
    from caffe_wrapper.model import build_model

    net = build_model(NETWORKS["cnn2d_3layer_fullconnected_3layer"], batch_size=4, deploy=False)
    types = [layer.type for layer in net.layer]
    assert types == [
        "Input",
        "Input",
        "Convolution",
        "ReLU",
        "Convolution",
        "ReLU",
        "Pooling",
        "Convolution",
        "ReLU",
        "Pooling",
        "InnerProduct",
        "ReLU",
        "Dropout",
        "InnerProduct",
        "ReLU",
        "Dropout",
        "InnerProduct",
        "SoftmaxWithLoss",
        "Accuracy",
    ]
    convs = [layer.convolution_param for layer in net.layer if layer.type == "Convolution"]
    assert [(c.num_output, list(c.kernel_size), list(c.pad)) for c in convs] == [
        (32, [3], [1]),
        (48, [3], [1]),
        (32, [3], [1]),
    ]


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
    batch = images[:16, None]

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
