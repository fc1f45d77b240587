"""Your own network and your own data (issue 44, docs/own-network.md): the two built-in
networks as network files build today's models; a network file and an ONNX model read
into the spec, every bad one refused in one line (file, line or node, key, fix) with
exit status 2 and nothing written; data of any shape and class count from a CSV, an
.npz and a folder of images, the same pixels from each, every bad input one line too."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from algorithms.errors import InputError
from algorithms.dataset.data import describe_data, load_dataset, load_images
from algorithms.network.networks import (
    CNN2D_2LAYER,
    CNN2D_3LAYER,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    MaxPool2D,
    Network,
    Optimizer,
    TrainingDefaults,
    ZeroPad2D,
    get_network,
    network_for_data,
)
from algorithms.network.weights import initial_weights
from tests.conftest import REPO_ROOT
from tests.helpers.refused import run_refused

EXAMPLES = os.path.join(REPO_ROOT, "examples")

# the two networks as algorithms/network/networks.py wrote them in code before they became files
BEFORE = {
    "cnn2d_3layer_fullconnected_3layer": Network(
        name="cnn2d_3layer_fullconnected_3layer",
        description="the original Keras net: 3 conv (32, 48, 32; 3x3), 2 max-pools, 3 dense",
        layers=(
            ZeroPad2D(1),
            Conv2D(32, 3),
            ZeroPad2D(1),
            Conv2D(48, 3),
            MaxPool2D(2),
            ZeroPad2D(1),
            Conv2D(32, 3),
            MaxPool2D(2),
            Flatten(),
            Dense(128),
            Dropout(0.25),
            Dense(128),
            Dropout(0.25),
            Dense(10, activation="softmax"),
        ),
        training=TrainingDefaults(
            optimizer=Optimizer("sgd", learning_rate=0.05, momentum=0.9, nesterov=True), batch_size=1000, epochs=10
        ),
        main_command_batch=100,
    ),
    "cnn2d_2layer_full_connected_2layer": Network(
        name="cnn2d_2layer_full_connected_2layer",
        description="the original TensorFlow net: 2 conv (32, 64; 5x5 SAME), 2 max-pools, 2 dense",
        layers=(
            Conv2D(32, 5, padding="same"),
            MaxPool2D(2),
            Conv2D(64, 5, padding="same"),
            MaxPool2D(2),
            Flatten(),
            Dense(1024),
            Dropout(0.5),
            Dense(10, activation="softmax"),
        ),
        training=TrainingDefaults(
            optimizer=Optimizer("adam", learning_rate=5e-4, epsilon=1e-8), batch_size=50, epochs=10
        ),
    ),
}


@pytest.mark.parametrize("network", [CNN2D_3LAYER, CNN2D_2LAYER], ids=lambda network: network.name)
def test_the_built_in_network_files_build_todays_models(network, small_data):
    import torch_wrapper.probes as torch_probes

    before = BEFORE[network.name]
    assert network == before and get_network(network.name) == before
    for seed in (0, 3):
        for now, then in zip(initial_weights(network, seed), initial_weights(before, seed)):
            assert now.layer_index == then.layer_index
            np.testing.assert_array_equal(now.kernel, then.kernel)
            np.testing.assert_array_equal(now.bias, then.bias)
    images, labels, _ = load_images(str(small_data / "train.csv"), True)
    loss, logits = torch_probes.initial_loss_and_logits(network, images[:64], labels[:64])
    loss_then, logits_then = torch_probes.initial_loss_and_logits(before, images[:64], labels[:64])
    assert loss == loss_then and np.array_equal(logits, logits_then)  # bit for bit


def test_an_example_network_file_reads_into_the_spec_completed_by_the_data(tmp_path):
    network = get_network(os.path.join(EXAMPLES, "bn_32x32x3.toml"))
    assert network.input_shape == (32, 32, 3) and network.layers[-1].units is None  # its classes: the data's
    x = np.zeros((20, 32, 32, 3), np.uint8)
    np.savez(tmp_path / "three.npz", x=x, y=np.arange(20) % 3)
    network = network_for_data(network.source, str(tmp_path / "three.npz"))
    assert network.num_classes == 3 and network.layers[-1].units == 3
    strided, norm = network.layers[2], network.layers[3]
    assert strided.stride == 2 and strided.paddings((32, 32, 16)) == ((0, 1), (0, 1))
    assert isinstance(norm, BatchNormalization) and norm.momentum == 0.9 and norm.activation == "relu"
    assert network.output_shapes()[4] == (8, 8, 32) and network.output_shapes()[9] == (64,)
    weights = initial_weights(network, 0)  # the batch norms draw nothing: the convolutions' are as without them
    without = replace(
        network, layers=tuple(layer for layer in network.layers if not isinstance(layer, BatchNormalization))
    )
    kernels = [w.kernel for w in weights if w.kernel.ndim > 1]
    np.testing.assert_array_equal(kernels[0], initial_weights(without, 0)[0].kernel)
    assert all((w.kernel == 1).all() and (w.running_var == 1).all() for w in weights if w.kernel.ndim == 1)


# --------------------------------------------------------------------------- bad network files

GOOD = """name = "tiny"
input_shape = [8, 8, 1]

[training]
optimizer = "sgd"
learning_rate = 0.1
batch_size = 16
epochs = 1

[[layers]]
type = "Conv2D"
filters = 4
kernel_size = 3
padding = "same"

[[layers]]
type = "Flatten"

[[layers]]
type = "Dense"
activation = "softmax"
"""

BAD_NETWORK_FILES = {
    # name: (a change to GOOD, the text the one line holds)
    "toml_syntax": (("filters = 4", "filters = = 4"), "net.toml:12: not valid TOML"),
    "unknown_top_key": (('name = "tiny"', 'name = "tiny"\nlayer_count = 3'), "net.toml:2: unknown key 'layer_count'"),
    "unknown_layer_type": (('type = "Flatten"', 'type = "Flaten"'), "net.toml:17: layers[1].type = 'Flaten'"),
    "missing_filters": (("filters = 4\n", ""), "net.toml:10: layers[0] (Conv2D) has no filters; add filters = ..."),
    "kernel_size_text": (("kernel_size = 3", 'kernel_size = "3"'), "net.toml:13: layers[0].kernel_size = '3'"),
    "unknown_layer_key": (("kernel_size = 3", "kernel = 3"), "net.toml:13: layers[0] (Conv2D): unknown key 'kernel'"),
    "bad_activation": (
        ('padding = "same"', 'padding = "same"\nactivation = "tanh"'),
        "net.toml:15: layers[0].activation",
    ),
    "bad_padding": (('padding = "same"', 'padding = "full"'), "net.toml:14: layers[0].padding = 'full'"),
    "softmax_inside": (('padding = "same"', 'padding = "same"\nactivation = "softmax"'), "only the last layer's"),
    "ends_in_flatten": (
        ('type = "Dense"\nactivation = "softmax"', 'type = "Flatten"'),
        "net.toml:20: the last layer is a Flatten",
    ),
    "dense_on_a_map": (('type = "Flatten"', 'type = "MaxPool2D"\npool_size = 2'), "layers[2] Dense takes a vector"),
    "too_small": (
        ('kernel_size = 3\npadding = "same"', "kernel_size = 9"),
        "net.toml:11: layers[0] Conv2D on a 8x8x1 input leaves 0x0x4",
    ),
    "bad_optimizer": (('optimizer = "sgd"', 'optimizer = "rmsprop"'), "net.toml:5: optimizer = 'rmsprop'"),
    "momentum_with_adam": (('optimizer = "sgd"', 'optimizer = "adam"\nmomentum = 0.9'), "net.toml:6: momentum: adam"),
    "training_key": (("epochs = 1", "epoch = 1"), "net.toml:8: [training]: unknown key 'epoch'"),
    "shape_of_other_data": (("input_shape = [8, 8, 1]", "input_shape = [32, 32, 3]"), "but data/train.csv"),
    "batch_norm_of_pixels": (
        ('type = "Flatten"', 'type = "Flatten"\n\n[[layers]]\ntype = "BatchNormalization"'),
        "net.toml:20: layers[2] BatchNormalization of a flattened map",
    ),
    "conv_after_flatten_with_a_batch_norm": (  # the batch norm's check read every layer's shape first: a traceback
        (
            'padding = "same"\n\n[[layers]]\ntype = "Flatten"',
            'padding = "same"\n\n[[layers]]\ntype = "BatchNormalization"\n\n[[layers]]\ntype = "Flatten"'
            '\n\n[[layers]]\ntype = "Conv2D"\nfilters = 4\nkernel_size = 1',
        ),
        "net.toml:23: layers[3] Conv2D takes an (H, W, C) map, its input is a vector of 256",
    ),
    "dropout_rate": (
        ('type = "Flatten"', 'type = "Flatten"\n\n[[layers]]\ntype = "Dropout"\nrate = 1.5'),
        "net.toml:21: layers[2].rate = 1.5",
    ),
    "too_few_units": (
        ('activation = "softmax"', 'units = 4\nactivation = "softmax"'),
        "digits.npz: row 5 has label 4, but the network has 4 classes (0-3)",
    ),
}


def write_digits_8x8(path, count: int = 120, classes: int = 10):
    """An .npz of `count` 8x8 uint8 images and their labels 0..classes-1."""
    rng = np.random.default_rng(1)
    np.savez(path, x=rng.integers(0, 256, (count, 8, 8), dtype=np.uint8), y=np.arange(count) % classes)
    return path


@pytest.mark.parametrize("case", sorted(BAD_NETWORK_FILES))
def test_a_bad_network_file_is_one_line_naming_file_line_key_and_fix(case, tmp_path, capsys):
    (old, new), expected = BAD_NETWORK_FILES[case]
    assert old in GOOD
    (tmp_path / "net.toml").write_text(GOOD.replace(old, new, 1))
    train = "data/train.csv" if case == "shape_of_other_data" else str(write_digits_8x8(tmp_path / "digits.npz"))
    os.chdir(REPO_ROOT) if case == "shape_of_other_data" else None
    err = run_refused(tmp_path, capsys, ["--network", str(tmp_path / "net.toml"), "--train", train, "--test", "none"])
    assert expected in err, err


def test_a_good_network_file_and_an_unknown_network_name(tmp_path, capsys):
    (tmp_path / "net.toml").write_text(GOOD)
    network = network_for_data(str(tmp_path / "net.toml"), str(write_digits_8x8(tmp_path / "digits.npz")))
    assert network.num_classes == 10 and network.name == "tiny" and not network.builtin
    err = run_refused(tmp_path, capsys, ["--network", "resnet50"])
    assert "--network unknown network 'resnet50'; choose one of" in err
    err = run_refused(tmp_path, capsys, ["--network", str(tmp_path / "missing.toml")])
    assert "missing.toml: file not found" in err


def test_a_batch_norm_network_runs_whole_batches_on_one_device(tmp_path, capsys):
    network, train = os.path.join(EXAMPLES, "digits_8x8.toml"), str(write_digits_8x8(tmp_path / "digits.npz"))
    for flags, why in (
        (["--strategy", "data", "--devices", "2"], "--strategy data would take them per replica"),
        (["--accumulate", "2"], "--accumulate 2 would take them per accumulated part"),
    ):
        err = run_refused(tmp_path, capsys, ["--network", network, "--train", train, "--test", "none", *flags])
        assert why in err and "digits_8x8 has a BatchNormalization" in err


# --------------------------------------------------------------------------- data


def write_images(tmp_path, images: np.ndarray, labels: np.ndarray) -> dict:
    """The same uint8 images as a CSV, an .npz and a folder of PNGs (class subfolders)."""
    from PIL import Image

    csv = tmp_path / "train.csv"
    pixels = images.reshape(len(images), -1)
    header = "label," + ",".join(f"pixel{k}" for k in range(pixels.shape[1]))
    rows = [f"{label}," + ",".join(map(str, row)) for label, row in zip(labels, pixels)]
    csv.write_text(header + "\n" + "\n".join(rows) + "\n")
    np.savez(tmp_path / "train.npz", x=images, y=labels)
    folder = tmp_path / "folder"
    for k, (image, label) in enumerate(zip(images, labels)):
        (folder / f"class{label}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image).save(
            folder / f"class{label}" / f"{k:03}.png"
        )
    return {"csv": str(csv), "npz": str(tmp_path / "train.npz"), "folder": str(folder)}


@pytest.mark.parametrize("shape", [(6, 5, 3), (7, 7, 1)], ids=["6x5x3", "7x7x1"])
def test_a_csv_an_npz_and_a_folder_of_images_give_the_same_pixels(shape, tmp_path):
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (12, *shape), dtype=np.uint8)
    labels = np.arange(12) % 3
    paths = write_images(tmp_path, images, labels)
    given = tuple(shape) if shape[0] != shape[1] else None  # a square's shape the pixel count says
    loaded = {kind: load_images(path, True, given) for kind, path in paths.items()}
    order = np.argsort(labels, kind="stable")  # the folder lists class by class
    for kind, (x, y, names) in loaded.items():
        rows = order if kind == "folder" else np.arange(12)
        np.testing.assert_array_equal(x, images[rows].astype(np.float32) / np.float32(255), err_msg=kind)
        np.testing.assert_array_equal(y, labels[rows], err_msg=kind)
    assert loaded["folder"][2] == ("class0", "class1", "class2")
    assert describe_data(paths["npz"]) == (shape, 3)
    # the test set, labelled by the training folder's class names (a class it lacks is fine)
    test = tmp_path / "test"
    (test / "class2").mkdir(parents=True)
    os.replace(os.path.join(paths["folder"], "class2", "002.png"), test / "class2" / "a.png")
    dataset = load_dataset(paths["folder"], str(test), None, 0.25, 0)
    assert dataset.test_y.tolist() == [2] and dataset.class_names == ("class0", "class1", "class2")


def bad_data_inputs(tmp_path) -> dict:
    """name: (--train, --test, extra flags, the text the one line holds)"""
    from PIL import Image

    good = str(write_digits_8x8(tmp_path / "good.npz"))
    cases = {}

    def npz(name, **arrays):
        np.savez(tmp_path / name, **arrays)
        return str(tmp_path / name)

    x = np.zeros((30, 8, 8), np.uint8)
    cases["npz_without_x"] = (npz("a.npz", images=x, y=np.zeros(30)), "none", [], "a.npz: no array 'x'")
    cases["npz_without_y"] = (npz("b.npz", x=x), "none", [], "b.npz: no array 'y' of labels")
    cases["npz_int64_pixels"] = (
        npz("c.npz", x=x.astype(np.int64), y=np.zeros(30, int)),
        "none",
        [],
        "c.npz: x is int64",
    )
    cases["npz_negative_label"] = (npz("d.npz", x=x, y=np.r_[np.zeros(29, int), -1]), "none", [], "d.npz: y[29] = -1")
    cases["npz_short_y"] = (npz("e.npz", x=x, y=np.zeros(12, int)), "none", [], "e.npz: y has shape (12,), x has 30")
    cases["npz_nan"] = (npz("f.npz", x=np.full((30, 8, 8), np.nan), y=np.zeros(30, int)), "none", [], "f.npz: x[0]")
    cases["test_of_other_shape"] = (
        good,
        npz("g.npz", x=np.zeros((5, 9, 9), np.uint8)),
        [],
        "g.npz: its images are 9x9x1",
    )
    folder = tmp_path / "images"
    for name, size, mode in (("cat", (8, 8), "L"), ("dog", (8, 8), "L")):
        (folder / name).mkdir(parents=True)
        for k in range(4):
            Image.new(mode, size).save(folder / name / f"{k}.png")
    Image.new("L", (9, 8)).save(folder / "dog" / "9.png")
    cases["image_of_other_size"] = (str(folder), "none", [], "dog/9.png: 8x9x1 (height x width x channels), but")
    alpha = tmp_path / "alpha"
    (alpha / "a").mkdir(parents=True)
    Image.new("RGBA", (8, 8)).save(alpha / "a" / "0.png")
    cases["rgba_image"] = (str(alpha), "none", [], "a/0.png: a RGBA image")
    stray = tmp_path / "stray"
    (stray / "a").mkdir(parents=True)
    Image.new("L", (8, 8)).save(stray / "a" / "0.png")
    (stray / "a" / "notes.txt").write_text("x")
    cases["stray_file"] = (str(stray), "none", [], "a/notes.txt: not a .png or .jpg image")
    broken = tmp_path / "broken"
    (broken / "a").mkdir(parents=True)
    (broken / "a" / "0.png").write_bytes(b"not a png at all")
    cases["unreadable_image"] = (str(broken), "none", [], "a/0.png: not an image Pillow can read")
    unknown = tmp_path / "unknown_class"
    (unknown / "cow").mkdir(parents=True)
    Image.new("L", (8, 8)).save(unknown / "cow" / "0.png")
    known = tmp_path / "known"
    for name in ("cat", "dog"):
        (known / name).mkdir(parents=True)
        for k in range(4):
            Image.new("L", (8, 8)).save(known / name / f"{k}.png")
    cases["test_class_unknown"] = (str(known), str(unknown), [], "cow: no training class of that name")
    csv = tmp_path / "odd.csv"
    csv.write_text("label," + ",".join(f"pixel{k}" for k in range(60)) + "\n1," + ",".join(["0"] * 60) + "\n")
    cases["csv_count_says_no_shape"] = (str(csv), "none", [], "odd.csv:1: 60 pixel columns are no square image")
    cases["csv_shape_flag_disagrees"] = (str(csv), "none", ["--input_shape", "8x8x1"], "odd.csv:1: 60 pixel columns")
    return cases


BAD_DATA_NAMES = [
    "npz_without_x",
    "npz_without_y",
    "npz_int64_pixels",
    "npz_negative_label",
    "npz_short_y",
    "npz_nan",
    "test_of_other_shape",
    "image_of_other_size",
    "rgba_image",
    "stray_file",
    "unreadable_image",
    "test_class_unknown",
    "csv_count_says_no_shape",
    "csv_shape_flag_disagrees",
]


@pytest.mark.parametrize("case", BAD_DATA_NAMES)
def test_a_bad_data_input_is_one_line_naming_the_file_and_the_row_or_image(case, tmp_path, capsys):
    train, test, flags, expected = bad_data_inputs(tmp_path)[case]
    network = os.path.join(EXAMPLES, "digits_8x8.toml")
    if case.startswith("csv"):
        (tmp_path / "any.toml").write_text(GOOD.replace("input_shape = [8, 8, 1]\n", ""))
        network = str(tmp_path / "any.toml")
    err = run_refused(tmp_path, capsys, ["--network", network, "--train", train, "--test", test, *flags])
    assert expected in err, err


def test_a_built_in_network_refuses_images_of_another_shape_or_more_classes(tmp_path, capsys):
    train = str(write_digits_8x8(tmp_path / "digits.npz"))
    err = run_refused(tmp_path, capsys, ["--train", train, "--test", "none"])
    assert "digits.npz: its images are 8x8x1 (height x width x channels), but the network takes 28x28x1" in err
    x = np.zeros((40, 28, 28), np.uint8)
    np.savez(tmp_path / "many.npz", x=x, y=np.arange(40) % 12)
    err = run_refused(tmp_path, capsys, ["--train", str(tmp_path / "many.npz"), "--test", "none"])
    assert "many.npz: row 11 has label 10, but the network has 10 classes (0-9)" in err


# --------------------------------------------------------------------------- ONNX


def export(model, shape: tuple, path) -> str:
    import torch

    model.train()
    torch.onnx.export(
        model,
        (torch.zeros(2, *shape),),
        str(path),
        dynamo=False,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
    )
    return str(path)


def test_an_onnx_model_reads_into_the_spec_with_its_weights(tmp_path):
    import torch
    from torch import nn

    from algorithms.network.onnx_network import cache_path
    from algorithms.reference.reference import forward

    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, stride=2, padding=1),  # pads 1 all round at stride 2: a ZeroPad2D, then a valid conv
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 8, 3, padding=1),  # TensorFlow's same at stride 1
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.3),
        nn.Linear(8 * 2 * 2, 5),
    )
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.2, 0.2)  # statistics of its own, carried over
        model[1].running_var.uniform_(0.5, 2.0)
    path = export(model, (3, 16, 16), tmp_path / "model.onnx")
    network = get_network(path)
    kinds = [type(layer).__name__ for layer in network.layers]
    assert kinds == [
        "ZeroPad2D",
        "Conv2D",
        "BatchNormalization",
        "Conv2D",
        "MaxPool2D",
        "AveragePooling2D",
        "Flatten",
        "Dropout",
        "Dense",
    ]
    assert network.layers[1].stride == 2 and network.layers[3].padding == "same"
    assert network.layers[2].momentum == 0.9 and network.layers[2].epsilon == 1e-5
    assert network.layers[2].activation == "relu" and network.layers[7].rate == 0.3
    assert network.input_shape == (16, 16, 3) and network.num_classes == 5
    images = np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32)
    model.eval()
    with torch.no_grad():
        expected = model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()
    spec = network.without_dropout()
    got = forward(spec, initial_weights(spec, seed=7), images)[-1]  # the model's weights, whatever the seed
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    # the cache the legacy env reads (it has no onnx) gives the same network and weights
    assert os.path.exists(cache_path(path))
    from algorithms.network import onnx_network

    again = onnx_network._read_cache(path)
    assert again == network
    for a, b in zip(initial_weights(again, 0), initial_weights(network, 0)):
        np.testing.assert_array_equal(a.kernel, b.kernel)
        np.testing.assert_array_equal(a.bias, b.bias)
        assert (a.running_var is None) == (b.running_var is None)
        if a.running_var is not None:
            np.testing.assert_array_equal(a.running_var, b.running_var)


class _Skip:  # a residual block: no chain
    def __new__(cls):
        from torch import nn

        class Residual(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(2, 2, 3, padding=1)
                self.head = nn.Linear(2 * 6 * 6, 3)

            def forward(self, x):
                return self.head((x + self.conv(x)).flatten(1))

        return Residual()


def onnx_refusals() -> dict:
    from torch import nn

    return {
        "skip_connection": (_Skip(), "(Add): takes 'input', '/conv/Conv_output_0', not the output of the node before"),
        "grouped": (nn.Sequential(nn.Conv2d(2, 2, 3, groups=2), nn.Flatten(), nn.Linear(32, 3)), "group 2"),
        "sigmoid": (nn.Sequential(nn.Conv2d(2, 2, 3), nn.Sigmoid(), nn.Flatten(), nn.Linear(32, 3)), "(Sigmoid)"),
        "overlapping_pool": (nn.Sequential(nn.MaxPool2d(3, stride=1), nn.Flatten(), nn.Linear(32, 3)), "(MaxPool)"),
        "relu_after_pool": (
            nn.Sequential(nn.Conv2d(2, 2, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3)),
            "(Relu): a ReLU after MaxPool2D",
        ),
    }


@pytest.mark.parametrize("case", ["skip_connection", "grouped", "sigmoid", "overlapping_pool", "relu_after_pool"])
def test_an_onnx_node_outside_the_vocabulary_is_refused_naming_the_node(case, tmp_path, capsys):
    model, expected = onnx_refusals()[case]
    path = export(model, (2, 6, 6), tmp_path / f"{case}.onnx")
    with pytest.raises(InputError) as error:
        get_network(path)
    message = str(error.value)
    assert message.startswith(f"{path}: node ") and expected in message and "\n" not in message, message
    # and through an entry script: one line, status 2, nothing written
    err = run_refused(tmp_path, capsys, ["--network", path, "--train", str(write_digits_8x8(tmp_path / "d.npz"))])
    assert expected in err


# --------------------------------------------------------------------------- the data a run trains on


def test_the_test_set_follows_the_training_data(tmp_path):
    """--test left out: data/test.csv beside the default training data, no test set beside any
    other. It was the bundled MNIST test set whatever --train said, scored against the user's
    network: a 32x32x3 network refused its 784 pixel columns, naming a file the user never gave."""
    from algorithms.config.run_config import parse_config
    from algorithms.paths import DEFAULT_TEST, DEFAULT_TRAIN
    from algorithms.registry.legacy_env import prepare_inputs
    from algorithms.run.entry import prepare

    colour = str(tmp_path / "my_32x32x3.npz")
    np.savez(colour, x=np.zeros((20, 32, 32, 3), np.uint8), y=np.arange(20) % 3)
    flags = ["--network", os.path.join(EXAMPLES, "bn_32x32x3.toml"), "--train", colour, "--parity"]
    config, dataset = prepare(flags, "run_all.py", "")
    assert config.test is None and dataset.test_x is None
    prepare_inputs(flags)  # what a legacy script reads in the main env first: no data/test.csv either
    assert parse_config([], "t", "").test == DEFAULT_TEST
    assert parse_config(["--train", DEFAULT_TRAIN], "t", "").test == DEFAULT_TEST
    assert parse_config(["--train", colour, "--network", flags[1], "--test", "none"], "t", "").test is None
    assert parse_config(["--train", colour, "--network", flags[1], "--test", colour], "t", "").test == colour


def test_the_settings_record_fingerprints_a_folder_of_images_by_its_files(tmp_path):
    """A folder's fingerprint is its images' names (their classes) and contents: a copy elsewhere
    is the same data, an image edited or moved to another class is other data, the cache
    beside them is not part of it. Hashing the folder as a file raised IsADirectoryError."""
    import shutil

    from PIL import Image

    from algorithms.config.run_config import parse_config
    from algorithms.session.settings_record import file_fingerprint, settings_of

    folder = tmp_path / "images"
    for name in ("cat", "dog"):
        (folder / name).mkdir(parents=True)
        for k in range(5):
            Image.fromarray(np.full((8, 8), 40 * k, np.uint8), "L").save(folder / name / f"{k}.png")
    before = file_fingerprint(str(folder))
    shutil.copytree(folder, tmp_path / "copy")
    assert file_fingerprint(str(tmp_path / "copy")) == before
    load_images(str(folder), True)  # writes the hidden cache beside the images
    assert file_fingerprint(str(folder)) == before
    config = parse_config(["--network", os.path.join(EXAMPLES, "digits_8x8.toml"), "--train", str(folder)], "t", "")
    assert settings_of(config)["data"] == before
    os.rename(folder / "dog" / "4.png", folder / "cat" / "9.png")
    moved = file_fingerprint(str(folder))
    assert moved != before
    Image.fromarray(np.full((8, 8), 255, np.uint8), "L").save(folder / "cat" / "9.png")
    assert file_fingerprint(str(folder)) not in (before, moved)
