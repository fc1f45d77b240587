"""The wrapper skeleton (algorithms/contract/skeleton.py, docs/architecture.md): every
wrapper of the registry has the contract's files, its trainers' methods and train.py's and
probes.py's functions in the contract's order, and reads the strategy and the device count as
config.strategy and config.devices, in its subpackages too. Read from the source, so no
framework loads; and the check names a wrapper that leaves the skeleton, each way it does."""

from __future__ import annotations

import pytest

from algorithms.contract.skeleton import skeleton_problems
from algorithms.registry.frameworks import FRAMEWORKS
from tests.test_contract import SOUND, write_package

PACKAGES = sorted({framework.package for framework in FRAMEWORKS})


@pytest.mark.parametrize("package", PACKAGES)
def test_every_wrapper_keeps_the_skeleton(package):
    assert skeleton_problems(package) == []


def test_a_wrapper_that_leaves_the_skeleton_is_named_each_way_it_does(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    write_package(tmp_path, "sound_wrapper", SOUND)
    assert skeleton_problems("sound_wrapper") == []

    stray = {file: text for file, text in SOUND.items() if file != "determinism.py"}
    logits = "    def logits(self, images):\n        return images\n"
    stray["trainer.py"] = (
        SOUND["trainer.py"].replace(logits, "").replace("    def to_batch(", logits + "    def to_batch(")
    )
    stray["train.py"] = SOUND["train.py"].replace(
        "    return {'steps': session.config.max_steps}\n",
        "    if session.config.plan.strategy == 'data':\n        pass\n"
        "    return {'steps': session.config.max_steps}\n",
    )
    stray["__init__.py"] = (
        SOUND["__init__.py"] + "def devices(config):\n    plan = config.plan\n    return plan.devices\n"
    )
    write_package(tmp_path, "stray_wrapper", stray)
    assert skeleton_problems("stray_wrapper") == [
        "stray_wrapper/determinism.py: missing (every wrapper has the contract's files)",
        "stray_wrapper/trainer.py:1: SoundTrainer: logits, to_batch, step, set_learning_rate, prepare_batch, "
        "save_checkpoint, load_checkpoint, train_state; the skeleton's order is to_batch, step, set_learning_rate, "
        "prepare_batch, logits, save_checkpoint, load_checkpoint, train_state (Trainer)",
        "stray_wrapper/__init__.py:12: plan.devices: read config.devices (the skeleton's config path)",
        "stray_wrapper/train.py:8: session.config.plan.strategy: read config.strategy (the skeleton's config path)",
    ]


def test_a_subpackage_is_allowed_and_held_to_the_config_paths(tmp_path, monkeypatch):
    """What only one framework needs may sit in a folder of its own (torch_wrapper/asynchronous/);
    its files are read like the package's own."""
    monkeypatch.syspath_prepend(str(tmp_path))
    write_package(tmp_path, "nested_wrapper", SOUND)
    (tmp_path / "nested_wrapper" / "pools").mkdir()
    (tmp_path / "nested_wrapper" / "pools" / "__init__.py").write_text('"""Pools."""\n')
    pool = tmp_path / "nested_wrapper" / "pools" / "pool.py"
    pool.write_text("def workers(config):\n    return config.devices\n")
    assert skeleton_problems("nested_wrapper") == []

    pool.write_text("def workers(config):\n    return config.plan.devices\n")
    assert skeleton_problems("nested_wrapper") == [
        "nested_wrapper/pools/pool.py:2: config.plan.devices: read config.devices (the skeleton's config path)"
    ]


def test_train_pys_functions_out_of_the_contracts_order_are_named(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    moved = dict(SOUND)
    records = "def records(config):\n    return True\n"
    moved["train.py"] = SOUND["train.py"].replace(records, "") + records
    write_package(tmp_path, "moved_wrapper", moved)
    (problem,) = skeleton_problems("moved_wrapper")
    assert problem.startswith("moved_wrapper/train.py: describe_runtime, train, describe_modes, ")
    assert problem.endswith("; the skeleton's order is describe_runtime, records, train, describe_modes (TrainModule)")


def test_the_probes_stand_apart_from_training_in_the_contracts_order(tmp_path, monkeypatch):
    """probes.py holds the model's probes (the tests', the structural check's and the
    localisation's), in ProbesModule's order; a wrapper without it leaves the skeleton."""
    monkeypatch.syspath_prepend(str(tmp_path))
    swapped = dict(SOUND)
    initial = "def initial_loss_and_logits(network, images, labels, seed=0):\n    return 0.0, images\n"
    swapped["probes.py"] = SOUND["probes.py"].replace(initial, "") + initial
    write_package(tmp_path, "swapped_wrapper", swapped)
    assert skeleton_problems("swapped_wrapper") == [
        "swapped_wrapper/probes.py: model_parameters, layer_outputs_and_gradients, initial_loss_and_logits; "
        "the skeleton's order is initial_loss_and_logits, model_parameters, layer_outputs_and_gradients "
        "(ProbesModule)"
    ]
    write_package(tmp_path, "probeless_wrapper", {file: text for file, text in SOUND.items() if file != "probes.py"})
    assert skeleton_problems("probeless_wrapper") == [
        "probeless_wrapper/probes.py: missing (every wrapper has the contract's files)"
    ]
