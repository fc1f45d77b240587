"""Prints, as JSON, one wrapper's initial loss and logits on a fixed batch for
every network (run in its own process: a Keras backend is fixed at import).

    python -m tests.helpers.initial_loss_probe WRAPPER_PACKAGE TRAIN_CSV
"""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from algorithms.dataset.data import load_kaggle_csv
from algorithms.paths import REPO_ROOT
from algorithms.network.networks import NETWORKS

BATCH = 32


def run_probe(python: str, package: str, env: dict, train_csv: str) -> dict:
    """This probe's JSON for one wrapper, run by `python` in its own process."""
    proc = subprocess.run(
        [python, "-m", "tests.helpers.initial_loss_probe", package, train_csv],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_same_initial_outputs(reference: dict, others: list) -> None:
    """Loss to 1e-5 relative and logits to 1e-5 absolute, for every network."""
    for network, expected in reference["networks"].items():
        reference_logits = np.array(expected["logits"])
        # Glorot logits are small (std ~0.04); 1e-5 absolute is far below what a wrong
        # kernel or flatten layout changes, so the layouts are checked, not just the loss
        assert reference_logits.std() > 0.01
        for other in others:
            got = other["networks"][network]
            where = f"{other['framework']}/{other['backend']} {network}"
            assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5), where
            np.testing.assert_allclose(np.array(got["logits"]), reference_logits, rtol=1e-4, atol=1e-5, err_msg=where)


def main(package: str, train_csv: str) -> None:
    images, labels = load_kaggle_csv(train_csv, labelled=True)
    runtime = importlib.import_module(f"{package}.train").describe_runtime()
    probes = importlib.import_module(f"{package}.probes")
    results = {}
    for name, network in NETWORKS.items():
        loss, logits = probes.initial_loss_and_logits(network, images[:BATCH], labels[:BATCH], seed=7)
        results[name] = {"loss": loss, "logits": logits.tolist()}
    print(json.dumps({"framework": runtime.framework, "backend": runtime.backend, "networks": results}))


if __name__ == "__main__":
    main(*sys.argv[1:])
