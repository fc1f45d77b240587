"""The contract's checker: `check_wrapper(package)` lists the ways a wrapper package
breaks the contract of types.py (a name missing, a function's or a trainer method's
parameters other than the contract's, a `session.<name>` WrapperSession does not name)
and leaves its skeleton (skeleton.py: the files, the order, the config paths);
`python -m algorithms.contract PACKAGE` prints them (__main__.py)."""

from __future__ import annotations

import ast
import importlib
import inspect
from typing import Sequence

from algorithms.errors import EXIT_FAILED
from algorithms.config.run_config import OPTIONAL_FLAGS
from algorithms.contract.skeleton import skeleton_problems, source_files
from algorithms.contract.types import FILES, FitTrainer, Runtime, Support, Trainer, WrapperSession


def check_wrapper(package: str, strategies: Sequence[str], flags: Sequence[str]) -> list:
    """The ways `package` breaks the contract (empty: none). Imports the framework."""
    problems = []
    modules = {}
    for file, protocol in FILES.items():
        module_name = f"{package}.{file}" if file else package
        try:
            modules[file] = module = importlib.import_module(module_name)
        except ImportError as error:
            problems.append(f"{module_name}: cannot be imported ({error})")
            continue
        problems += member_problems(module_name, module, protocol)
    if "" in modules and hasattr(modules[""], "supported"):
        support = modules[""].supported()
        if not isinstance(support, Support):
            problems.append(f"{package}.supported() returned {type(support).__name__}, not Support")
        else:
            problems += [
                f"{package}.supported(): unknown strategy {s!r}" for s in support.strategies if s not in strategies
            ]
            problems += [f"{package}.supported(): unknown flag {f!r}" for f in support.flags if f not in flags]
            if support.footprint is None:
                problems.append(f"{package}.supported(): no footprint, its measured memory (resources.py)")
    if "train" in modules and hasattr(modules["train"], "describe_runtime"):
        runtime = modules["train"].describe_runtime()
        if not isinstance(runtime, Runtime):
            problems.append(f"{package}.train.describe_runtime() returned {type(runtime).__name__}, not Runtime")
    if "trainer" in modules:
        problems += _trainer_class_problems(package, modules["trainer"])
    if "" in modules:
        problems += session_use_problems(package)
        problems += skeleton_problems(package)
    return problems


def _trainer_class_problems(package: str, module) -> list:
    """The trainer classes defined in trainer.py must implement Trainer or FitTrainer in full."""
    problems = []
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__ or not name.endswith("Trainer") or name.startswith("_"):
            continue
        protocol = FitTrainer if hasattr(cls, "fit_epoch") else Trainer
        problems += member_problems(f"{package}.trainer.{name}", cls, protocol)
    return problems


def protocol_members(protocol) -> dict:
    """name -> the protocol's function or property, or None for a data member (annotated)."""
    members = {name: None for name in vars(protocol).get("__annotations__", {})}
    for name, value in vars(protocol).items():
        if (inspect.isfunction(value) or isinstance(value, property)) and not name.startswith("__"):
            members[name] = value
    return members


def member_problems(where: str, implementation, protocol) -> list:
    """How `implementation` (a module, a class or an instance) falls short of `protocol`:
    each member it lacks, and each method whose parameters differ from the protocol's."""
    problems = []
    suffix = "" if inspect.ismodule(implementation) else f" ({protocol.__name__})"
    for name, expected in protocol_members(protocol).items():
        if not hasattr(implementation, name):
            problems.append(f"{where}: no {name}{suffix}")
            continue
        if not inspect.isfunction(expected):  # a data member or a property: there is all it takes
            continue
        found = getattr(implementation, name)
        if not callable(found):
            problems.append(f"{where}.{name}: not callable{suffix}")
            continue
        try:
            parameters = list(inspect.signature(found).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
            continue
        if inspect.isclass(implementation) and inspect.isfunction(inspect.getattr_static(implementation, name)):
            parameters = parameters[1:]  # self
        contract = list(inspect.signature(expected).parameters.values())[1:]
        differences = signature_differences(contract, parameters)
        if differences:
            problems.append(
                f"{where}.{name}{_parameter_text(parameters)}: {'; '.join(differences)} "
                f"(contract: {protocol.__name__}.{name}{_parameter_text(contract)})"
            )
    return problems


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def signature_differences(contract: list, found: list) -> list:
    """How the parameters `found` (inspect.Parameter, `self` left out) differ from the
    contract's, as the shared code calls them: the contract's positional parameters
    first, by the same names in the same order (a *args of the wrapper's may take the
    rest), optional where the contract's are; any further parameter optional, unless
    the contract ends in *framework_args (what else it takes is the framework's)."""
    wanted = [p for p in contract if p.kind in _POSITIONAL]
    given = [p for p in found if p.kind in _POSITIONAL]
    wanted_names, given_names = [p.name for p in wanted], [p.name for p in given]
    open_ended = any(p.kind is p.VAR_POSITIONAL for p in contract)
    takes_the_rest = any(p.kind is p.VAR_POSITIONAL for p in found)
    differences, renamed = [], set()
    for index, want in enumerate(wanted):
        have = given[index] if index < len(given) else None
        if want.name in given_names:
            match = given[given_names.index(want.name)]
            if want.default is not want.empty and match.default is match.empty:
                differences.append(f"{want.name!r} needs a default (the shared code may leave it out)")
        elif have is not None and have.name not in wanted_names:
            renamed.add(have.name)
            differences.append(f"{have.name!r} where the contract has {want.name!r}")
        elif have is not None or not takes_the_rest:
            differences.append(f"no parameter {want.name!r}")
    if not renamed and all(name in given_names for name in wanted_names[: len(given)]):
        differences += [  # a parameter missing moves the others: said once, above
            f"{name!r} is parameter {given_names.index(name) + 1}, the contract's {index + 1}"
            for index, name in enumerate(wanted_names)
            if name in given_names and given_names.index(name) != index
        ]
    differences += [
        f"required parameter {p.name!r} the contract never passes"
        for p in given
        if p.name not in wanted_names and p.name not in renamed and p.default is p.empty and not open_ended
    ]
    differences += [
        f"required keyword-only parameter {p.name!r} the contract never passes"
        for p in found
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    ]
    return differences


def _parameter_text(parameters: list) -> str:
    """(a, b=1, *rest): the names and defaults, annotations left out."""
    return str(inspect.Signature([p.replace(annotation=p.empty) for p in parameters]))


def session_use_problems(package: str) -> list:
    """Every `session.<name>` (or `<object>.session.<name>`) in the package's files
    that WrapperSession does not name, as file:line. Read from the source: a session
    reached under another name is not seen."""
    names = set(protocol_members(WrapperSession))
    problems = []
    for file, text in source_files(package).items():
        tree = ast.parse(text, file)
        outside = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _is_session(node.value) and node.attr not in names
        ]
        problems += [
            f"{package}/{file}:{node.lineno}: session.{node.attr} is not in the contract's WrapperSession"
            for node in sorted(outside, key=lambda node: (node.lineno, node.col_offset))
        ]
    return problems


def _is_session(node) -> bool:
    return (isinstance(node, ast.Name) and node.id == "session") or (
        isinstance(node, ast.Attribute) and node.attr == "session"
    )


def known_flags() -> tuple:
    """Every optional flag a wrapper may declare in Support.flags."""
    return OPTIONAL_FLAGS


def main(argv=None) -> int:
    """python -m algorithms.contract PACKAGE: the ways PACKAGE breaks the contract; exit status 1 if any."""
    import argparse

    from algorithms.network.parallel import STRATEGIES

    parser = argparse.ArgumentParser(
        prog="python -m algorithms.contract",
        description="Check wrapper packages against the wrapper contract (algorithms/contract/types.py). "
        "Each is imported, framework and all: set KERAS_BACKEND first for keras_wrapper, and use "
        ".venv-legacy/bin/python for lasagne_wrapper and Keras on theano.",
    )
    parser.add_argument("packages", nargs="+", metavar="PACKAGE", help="e.g. torch_wrapper")
    args = parser.parse_args(argv)
    problems = [problem for package in args.packages for problem in check_wrapper(package, STRATEGIES, known_flags())]
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{', '.join(args.packages)}: meets the wrapper contract (algorithms/contract/types.py)")
    return EXIT_FAILED if problems else 0
