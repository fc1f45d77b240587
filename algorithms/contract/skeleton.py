"""The wrapper skeleton, read from a wrapper's source (nothing is imported, so no
framework loads): every wrapper has the contract's files (FILES); each trainer class
defines the contract's methods in the contract's order (Trainer's, or FitTrainer's for
a trainer driven an epoch at a time), train.py its functions in TrainModule's order and
probes.py its own in ProbesModule's; and every wrapper reads the run's strategy and device count from the same place,
config.strategy and config.devices, never through the parallel plan (config.plan holds
what the flags alone do not: stages, shards, replicas, group, micro-batches), in its
subpackages too (what only its framework needs may sit in a folder of its own).
check_wrapper reports these beside the rest of the contract (docs/architecture.md, the
wrapper skeleton)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os

from algorithms.contract.types import FILES, FitTrainer, ProbesModule, Trainer, TrainModule

# read through the config, where the flags put them, and never through the plan
CONFIG_PATHS = ("strategy", "devices")


def skeleton_problems(package: str) -> list:
    """The ways `package` leaves the skeleton, as file:line and what the skeleton has."""
    folder = os.path.dirname(importlib.util.find_spec(package).origin)
    problems = [
        f"{package}/{file or '__init__'}.py: missing (every wrapper has the contract's files)"
        for file in FILES
        if not os.path.isfile(os.path.join(folder, f"{file or '__init__'}.py"))
    ]
    trees = {file: ast.parse(text, file) for file, text in source_files(package).items()}
    if "trainer.py" in trees:
        for node in trees["trainer.py"].body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Trainer"):
                methods = [item.name for item in node.body if isinstance(item, ast.FunctionDef)]
                protocol = FitTrainer if "fit_epoch" in methods else Trainer
                problems += order_problems(f"{package}/trainer.py:{node.lineno}: {node.name}", methods, protocol)
    for file, protocol in (("train.py", TrainModule), ("probes.py", ProbesModule)):
        if file in trees:
            functions = [node.name for node in trees[file].body if isinstance(node, ast.FunctionDef)]
            problems += order_problems(f"{package}/{file}", functions, protocol)
    for file, tree in trees.items():
        problems += [
            f"{package}/{file}:{node.lineno}: {ast.unparse(node)}: read config.{node.attr} (the skeleton's config path)"
            for node in sorted(ast.walk(tree), key=lambda node: getattr(node, "lineno", 0))
            if isinstance(node, ast.Attribute) and node.attr in CONFIG_PATHS and _is_plan(node.value)
        ]
    return problems


def source_files(package: str) -> dict:
    """Each .py file of the package, its subpackages' too, by its path inside the package
    (`trainer.py`, `asynchronous/hogwild.py`) -> its text."""
    folder = os.path.dirname(importlib.util.find_spec(package).origin)
    files = {}
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(name for name in folders if name != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as handle:
                    files[os.path.relpath(path, folder).replace(os.sep, "/")] = handle.read()
    return files


def contract_order(protocol) -> list:
    """The protocol's functions in the order the contract defines them."""
    return [name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("__")]


def order_problems(where: str, defined: list, protocol) -> list:
    """One problem when the protocol's functions among `defined` stand in another order than the contract's."""
    contract = contract_order(protocol)
    found = [name for name in defined if name in contract]
    wanted = [name for name in contract if name in found]
    if found == wanted:
        return []
    return [f"{where}: {', '.join(found)}; the skeleton's order is {', '.join(wanted)} ({protocol.__name__})"]


def _is_plan(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "plan") or (
        isinstance(node, ast.Attribute) and node.attr == "plan"
    )
