"""Other releases, really installed from the registry (registry/release_env.py) and run
(run_all.py --versions, studies/support_window.py), with known answers: two identical
environments are `same`; a gradient planted in one environment's copy of Keras is beyond
drift, and localised across the releases to the layer whose op it altered; a set that
conflicts with requirements.txt's pins is refused in one line naming what to pin; the
oldest and the newest supported Keras train on a short run."""

from __future__ import annotations

import glob
import os
import re

import pytest

from algorithms.network.layers import BatchNormalization
from algorithms.network.networks import get_network
from algorithms.localisation.across_releases import first_difference, localise_releases
from algorithms.registry.release_env import ensure_environment, parse_release_set
from scripts.example_data import colour_digits
from tests.conftest import REPO_ROOT, run_module, run_script

pytestmark = pytest.mark.slow  # every one installs from the registry or starts framework processes

NEWEST = "keras==3.15.1"  # requirements.txt's: the planted copy is the main env's Keras, altered
# Keras 3.0 to 3.9 call jax.spmd_mode, which jax 0.10 no longer has (docs/releases.md's window)
OLDEST_ON_JAX = "keras==3.10.0"
BN_NET = os.path.join(REPO_ROOT, "examples", "bn_32x32x3.toml")
# Keras on torch: relu's gradient 3% larger where x > 0, its output bit for bit the same
RELU = ("    return tnn.relu(x)\n", "    return tnn.relu(x) + 0.03 * (x - x.detach()) * (x > 0)\n")
# Keras on torch: batch_normalization's offset (beta) gradient 3% larger, its output the same
BN_OFFSET = ("        .add_(offset)\n    )\n", "        .add_(offset)\n    ).add(0.03 * (offset - offset.detach()))\n")


def planted_keras(cache, plant: tuple) -> str:
    """A release environment of the main env's own Keras in `cache`, its copy of Keras's torch
    backend (keras/src/backend/torch/nn.py) altered by `plant` (old text, new text)."""
    built = ensure_environment(parse_release_set(NEWEST), str(cache / "build.log"), cache=str(cache))
    (path,) = glob.glob(os.path.join(os.path.dirname(built.python), "..", "lib", "python*", "site-packages"))
    nn = os.path.join(path, "keras", "src", "backend", "torch", "nn.py")
    text = open(nn).read()
    assert text.count(plant[0]) >= 1, "the line to alter is not in this Keras"
    with open(nn, "w") as handle:
        handle.write(text.replace(plant[0], plant[1], 1))
    return built.python


def run_versions(sets: list, flags: list, cache=None):
    env = {"CNN_PARALLEL_RELEASES": str(cache)} if cache else None
    return run_script("run_all.py", ["--versions", *sets, *flags], env, timeout=1800)


def verdict_line(stdout: str, name: str) -> str:
    block = stdout[stdout.rindex("\n" + name + "  ") :]
    return " ".join(block.split("\n  the report")[0].split())


def test_identical_environments_are_same_and_a_planted_relu_gradient_is_beyond_drift_at_its_layer(full_data, tmp_path):
    """The same flags in the main env and in a release env of the same Keras: `same`. The
    release env's Keras with relu's gradient altered (its forward bit for bit the same): beyond
    drift within the shipped parity envelope's steps, and the localisation across the releases
    names the last Dense layer with a ReLU, layer 11 (the first the backward pass reaches through one)."""
    flags = ["--only", "keras_torch", "--parity", "--max_steps", "5", "--train", str(full_data / "train.csv")]
    flags += ["--test", "none", "--results_dir", str(tmp_path / "results")]
    honest = run_versions(["main", NEWEST], flags, tmp_path / "honest")
    assert honest.returncode == 0, honest.stdout[-3000:] + honest.stderr[-3000:]
    assert verdict_line(honest.stdout, "keras_torch").startswith("keras_torch same")

    planted_keras(tmp_path / "planted", RELU)
    planted = run_versions(["main", NEWEST], flags, tmp_path / "planted")
    assert planted.returncode == 0, planted.stdout[-3000:] + planted.stderr[-3000:]
    line = verdict_line(planted.stdout, "keras_torch")
    # the step check finds it at its first step, the localisation at the same layer (the user's numbering)
    beyond = r"keras_torch beyond drift at step [1-5]; beyond rounding at step 1 "
    beyond += r"\(keras/torch: layer 11 Dense gradient\)"
    assert re.search(beyond + r"; first difference: layer 11 \(Dense 128\)", line), line
    assert "gradient" in line.split("first difference:")[1].split(",")[0]


def test_the_localisation_across_releases_names_the_batch_norm_whose_offset_gradient_was_planted(tmp_path):
    """The batch-norm example: the release env's batch_normalization with its offset (beta)
    gradient 3% larger is named at the last BatchNormalization, its bias gradient, far beyond
    rounding; the main env against an unaltered copy of the same Keras differs nowhere."""
    train, _ = colour_digits(str(tmp_path / "colour"))
    import sys

    honest = ensure_environment(parse_release_set(NEWEST), str(tmp_path / "h.log"), cache=str(tmp_path / "honest"))
    clean = localise_releases("keras_torch", [("main", sys.executable), (NEWEST, honest.python)], BN_NET, train)
    assert first_difference(clean) is None
    python = planted_keras(tmp_path / "planted", BN_OFFSET)
    result = localise_releases("keras_torch", [("main", sys.executable), (NEWEST + " planted", python)], BN_NET, train)
    found = first_difference(result)
    last = max(index for index, layer in enumerate(get_network(BN_NET).layers) if isinstance(layer, BatchNormalization))
    assert found is not None and found.startswith(f"layer {last} (BatchNorm) bias gradient"), found
    difference, rounding = (float(value) for value in re.findall(r"(\d\.\de[-+]\d+)", found))
    assert difference > 1e-2 and rounding < 1e-5, found


def test_a_set_that_conflicts_with_the_pins_is_one_line_naming_what_to_pin(tmp_path):
    proc = run_versions(["jax==0.9.2", "main"], ["--results_dir", str(tmp_path)], tmp_path / "cache")
    assert proc.returncode == 2
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "conflicts with requirements.txt's pins of jaxlib" in line
    assert "--versions 'jax==0.9.2 jaxlib==VERSION'" in line
    assert not os.path.exists(tmp_path / "cache" / "jax-0.9.2")  # nothing half built is kept
    missing = run_versions(["keras==3.99.0", "main"], ["--results_dir", str(tmp_path)], tmp_path / "cache")
    assert missing.returncode == 2 and "the registry has no keras==3.99.0" in missing.stderr


@pytest.mark.parametrize("framework", ["keras_torch", "keras_tensorflow", "keras_jax"])
def test_the_oldest_and_newest_supported_keras_train_a_short_run(framework, small_data, tmp_path):
    """docs/releases.md's window: its oldest and newest Keras on each backend, two steps each."""
    oldest = {"keras_torch": "keras==3.0.0", "keras_tensorflow": "keras==3.0.0", "keras_jax": OLDEST_ON_JAX}[framework]
    proc = run_module(
        "algorithms.studies.support_window",
        ["--versions", oldest, NEWEST, "--only", framework, "--train", str(small_data / "train.csv")]
        + ["--results_dir", str(tmp_path)],
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("keras==")]
    assert [(row[0], row[1], row[2]) for row in rows] == [(oldest, framework, "runs"), (NEWEST, framework, "runs")]
