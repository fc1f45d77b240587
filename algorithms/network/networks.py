"""The networks: the two built-in ones, each a network file in network_files/, and a
user's, given to --network as a file (a .toml network file: network_file.py; an .onnx
model: onnx_network.py). The vocabulary they are written in is layers.py's, re-exported
here, where every wrapper imports it from.

A wrapper reads a `Network` and translates each layer; it never hard-codes one.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Optional

from algorithms.errors import InputError
from algorithms.paths import DEFAULT_DATA_DIR, DEFAULT_TRAIN
from algorithms.dataset.data import describe_data, ensure_default_data, shape_text
from algorithms.network.layers import (  # noqa: F401  (the vocabulary, for every wrapper)
    PARAMETRIC,
    WEIGHTED,
    AveragePooling2D,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAveragePooling2D,
    Layer,
    MaxPool2D,
    Network,
    Optimizer,
    TrainingDefaults,
    ZeroPad2D,
    layer_label,
    output_shape,
    same_padding,
    weight_shapes,
)
from algorithms.network.network_file import complete, read_network_file

NETWORK_FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "network_files")
NETWORK_SUFFIXES = (".toml", ".onnx")


def _builtin(name: str) -> Network:
    network = read_network_file(os.path.join(NETWORK_FILES, f"{name}.toml"))
    network = replace(network, source="", builtin=True)  # a built-in is known by its name
    return complete(network, network.input_shape, network.num_classes, f"{name}'s own input")


CNN2D_3LAYER = _builtin("cnn2d_3layer_fullconnected_3layer")
CNN2D_2LAYER = _builtin("cnn2d_2layer_full_connected_2layer")

NETWORKS = {net.name: net for net in (CNN2D_3LAYER, CNN2D_2LAYER)}
DEFAULT_NETWORK = CNN2D_3LAYER.name


def is_network_file(name: str) -> bool:
    """Whether --network names a file (a path, or a name ending in .toml or .onnx) rather than a built-in."""
    return name.lower().endswith(NETWORK_SUFFIXES) or os.sep in name or os.path.isfile(name)


def get_network(name: str) -> Network:
    """A built-in network by name, or a network file's (its input_shape and last layer's
    units None where the file leaves them to the data). InputError for a bad file;
    KeyError for a name that is neither."""
    if name in NETWORKS:
        return NETWORKS[name]
    if not is_network_file(name):
        raise KeyError(
            f"unknown network {name!r}; choose one of: {', '.join(NETWORKS)}, or give a network file "
            "(.toml or .onnx: docs/own-network.md)"
        )
    if not os.path.exists(name):
        raise InputError(f"{name}: file not found; --network takes a built-in name ({', '.join(NETWORKS)}) or a file")
    if name.lower().endswith(".onnx"):
        from algorithms.network.onnx_network import read_onnx_network

        return read_onnx_network(name)
    if not name.lower().endswith(".toml"):
        raise InputError(f"{name}: --network takes a .toml network file or an .onnx model; rename it if it is one")
    return read_network_file(name)


def network_for_data(name: str, train_path: str, input_shape: Optional[tuple] = None) -> Network:
    """--network's network, ready to build: a file's checked layer by layer, with what it
    leaves to the data (input_shape, the last layer's units) read from `train_path`;
    `input_shape`: --input_shape, which a network's own must equal. InputError, one line."""
    try:
        network = get_network(name)
    except KeyError as error:
        raise InputError(f"--network {error.args[0]}") from None
    if input_shape is not None and network.input_shape is not None and tuple(input_shape) != network.input_shape:
        raise InputError(
            f"--input_shape {shape_text(input_shape)}: {network_text(network)} takes "
            f"{shape_text(network.input_shape)} images; drop the flag or give data and a network that agree"
        )
    if network.builtin:
        return network
    if network.input_shape is None or network.num_classes is None:
        if os.path.abspath(train_path) == DEFAULT_TRAIN:
            ensure_default_data(DEFAULT_DATA_DIR)
        shape, classes = describe_data(train_path, input_shape)
        return complete(network, shape, classes, train_path)
    return complete(network, network.input_shape, network.num_classes, f"{network.name}'s own input")


def network_text(network: Network) -> str:
    """How runs name the network: its name, and a user's file beside it."""
    return network.name if network.builtin else f"{network.name} ({network.source})"
