"""Prints, as JSON, one wrapper's initial loss and logits on a fixed batch for
every network (run in its own process: a Keras backend is fixed at import).

    python -m tests.initial_loss_probe WRAPPER_MODULE TRAIN_CSV
"""
import importlib
import json
import sys

from algorithms.data import load_kaggle_csv
from algorithms.spec import NETWORKS

BATCH = 32


def main(wrapper_module: str, train_csv: str) -> None:
    images, labels = load_kaggle_csv(train_csv, labelled=True)
    wrapper = importlib.import_module(wrapper_module)
    framework, backend, _, _ = wrapper.describe_runtime()
    results = {}
    for name, network in NETWORKS.items():
        loss, logits = wrapper.initial_loss_and_logits(network, images[:BATCH], labels[:BATCH], seed=7)
        results[name] = {"loss": loss, "logits": logits.tolist()}
    print(json.dumps({"framework": framework, "backend": backend, "networks": results}))


if __name__ == "__main__":
    main(*sys.argv[1:])
