"""Prints, as JSON, which layers of the spec's vocabulary a wrapper translates: for each
kind, a small network holding it goes through the wrapper's probes.initial_loss_and_logits
(its build_model and a forward pass, dropout off), and the kind's entry is null where that
ran, else the error's one line. A kind the wrapper refuses (Support.layers_refused) is left
out. Run in the framework's own process and environment, from tests/test_layer_vocabulary.py
and tests/legacy/:

    KERAS_BACKEND=jax python -m tests.helpers.layer_vocabulary_probe keras_wrapper"""

from __future__ import annotations

import importlib
import json
import sys
from typing import get_args

import numpy as np

from algorithms.network.layers import (
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
)

VOCABULARY = [kind.__name__ for kind in get_args(Layer)]
INPUT_SHAPE, CLASSES = (8, 8, 1), 3


def network_holding(name: str, *layers) -> Network:
    """An 8x8 one-channel network of `layers`, ending in a softmax Dense of three classes."""
    training = TrainingDefaults(Optimizer("sgd", 0.01), batch_size=4, epochs=1)
    layers = (*layers, Dense(CLASSES, activation="softmax"))
    return Network(f"vocabulary_{name}", layers, training, input_shape=INPUT_SHAPE, num_classes=CLASSES)


# one small network per layer kind of the vocabulary: a new kind has none until one is added here
NETWORKS = {
    "ZeroPad2D": network_holding("pad", ZeroPad2D(1), Conv2D(2, 3), Flatten()),
    "Conv2D": network_holding("conv", Conv2D(2, 3, padding="same", stride=2), Flatten()),
    "BatchNormalization": network_holding("batch_norm", Conv2D(2, 3, activation=None), BatchNormalization(), Flatten()),
    "MaxPool2D": network_holding("max_pool", Conv2D(2, 3), MaxPool2D(2), Flatten()),
    "AveragePooling2D": network_holding("average_pool", Conv2D(2, 3), AveragePooling2D(2), Flatten()),
    "GlobalAveragePooling2D": network_holding("global_pool", Conv2D(2, 3), GlobalAveragePooling2D()),
    "Flatten": network_holding("flatten", Flatten()),
    "Dense": network_holding("dense", Flatten(), Dense(4)),
    "Dropout": network_holding("dropout", Flatten(), Dense(4), Dropout(0.5)),
}


def translations(package: str) -> dict:
    """Each kind the wrapper does not refuse -> None where its network built and ran, else why not."""
    refused = importlib.import_module(package).supported().layers_refused
    probes = importlib.import_module(f"{package}.probes")
    rng = np.random.default_rng(0)
    images = rng.random((4, *INPUT_SHAPE), dtype=np.float32)
    labels = np.arange(4) % CLASSES
    found = {}
    for kind in VOCABULARY:
        if kind in refused:
            continue
        if kind not in NETWORKS:
            found[kind] = "no network of it in tests/helpers/layer_vocabulary_probe.py"
            continue
        try:
            probes.initial_loss_and_logits(NETWORKS[kind], images, labels)
            found[kind] = None
        except Exception as error:  # noqa: BLE001 (what the wrapper said is the answer)
            found[kind] = f"{type(error).__name__}: {error}".splitlines()[0]
    return found


if __name__ == "__main__":
    print(json.dumps(translations(sys.argv[1])))
