"""The wrapper contract: everything the shared code (run.py, loop.py, session.py,
probe.py, capabilities.py) asks of a framework wrapper, written once, as code.

A wrapper is a package `<name>_wrapper/` with the same files in every framework:

    __init__.py     supported() -> Support; prepare_process(config, dataset);
                    launch(config, argv). Imports no framework: read before one loads.
    model.py        build_model(network, weights, ...): the spec translated.
    trainer.py      build_trainer(config) -> a Trainer (or, for Keras, a FitTrainer).
    train.py        describe_runtime() -> Runtime; records(config) -> bool;
                    train(session) -> summary; initial_loss_and_logits(network, images,
                    labels, seed) -> (the framework's own loss, logits).
    native.py       the benchmark's side (NATIVE_NAMES below).
    determinism.py  enable() -> (what was set, what is still not deterministic).

`check_wrapper(package)` holds a wrapper to this; tests/test_contract.py runs it for
every framework of the registry (the legacy ones in .venv-legacy). Nothing here is
discovered with `hasattr`: every name is required.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Mapping, Optional, Protocol, Sequence, runtime_checkable

from algorithms.run.noise_scale import GradientNorms
from algorithms.run.resources import Footprint
from algorithms.run.tuning import Tuning


@dataclass(frozen=True)
class Support:
    """What a wrapper runs: strategies, the optional flags (`RunConfig.uses()` keys) it
    implements, its --tuned table, and `advice` replacing the generic refusal for a
    strategy or a flag it does not run; with a strategy besides single, the measured
    `footprint` its processes and devices are checked against (resources.py)."""

    strategies: Sequence[str]
    flags: Sequence[str]
    tuning: Tuning
    advice: Mapping[str, str] = field(default_factory=dict)
    footprint: Optional[Footprint] = None


@dataclass(frozen=True)
class Runtime:
    """The framework as this process loaded it, for the CSV's identity and results.log."""

    framework: str
    backend: str
    versions: Mapping[str, str]
    devices: str


@dataclass(frozen=True)
class StepResult:
    """One optimizer step: the mean loss and accuracy over its samples, the part of
    its time spent communicating where the strategy can measure it, and with
    --noise_scale the gradient norms before and after the all-reduce."""

    loss: float
    accuracy: float
    comm_time_ms: Optional[float] = None
    # --precision fp16: the loss scale this step's loss was multiplied by, and whether
    # its gradients overflowed (the step was skipped and the scale halved)
    loss_scale: Optional[float] = None
    skipped: bool = False
    gradient_norms: Optional[GradientNorms] = None


@runtime_checkable
class Trainer(Protocol):
    """What algorithms/run/loop.py steps by hand (TensorFlow, PyTorch, Lasagne, Caffe)."""

    def to_batch(self, images, labels):
        """numpy (N, 28, 28) float32 images and int labels -> the framework's batch (timed as data time)."""

    def step(self, batches: list) -> StepResult:
        """One optimizer step over these batches: one, or K with --accumulate K."""

    def set_learning_rate(self, learning_rate: float) -> None:
        """Called before a step whenever the schedule's lr differs from the one set."""

    def logits(self, images):
        """numpy images -> numpy logits (N, classes), dropout off."""

    def save_checkpoint(self, folder: str) -> None:
        """The framework's own state files (weights, optimizer, RNG) into `folder`."""

    def load_checkpoint(self, folder: str) -> None: ...

    def prepare_batch(self, batch_size: int) -> None:
        """--batch_schedule: the next epoch's batches are `batch_size` rows (all replicas):
        re-trace, re-compile or reshape for that shape now (outside every step's time),
        leaving the weights, optimizer and RNG as they were; nothing where the framework
        needs nothing."""


@runtime_checkable
class FitTrainer(Protocol):
    """What algorithms/run/loop.py drives an epoch at a time (Keras's model.fit)."""

    def fit_epoch(self, session, epoch: int, steps: list, first_index: int) -> None:
        """Train `steps` (lists of index arrays, one per optimizer step) of `epoch`,
        recording each step in the session; `first_index` counts steps done before."""

    def set_learning_rate(self, learning_rate: float) -> None: ...

    def logits(self, images): ...

    def save_checkpoint(self, folder: str) -> None: ...

    def load_checkpoint(self, folder: str) -> None: ...

    def prepare_batch(self, batch_size: int) -> None: ...


PACKAGE_NAMES = ("supported", "prepare_process", "launch")
TRAIN_NAMES = ("describe_runtime", "records", "train", "initial_loss_and_logits")
TRAINER_NAMES = ("build_trainer",)
MODEL_NAMES = ("build_model",)
DETERMINISM_NAMES = ("enable",)
NATIVE_NAMES = (
    "apply_threads",
    "Native",
    "Harness",
    "gemm",
    "compiled_ms",
    "profile_ops",
    "STEPS_PER_CALL",
    "device_memory_mb",
)
FILES = {
    "": PACKAGE_NAMES,
    "model": MODEL_NAMES,
    "trainer": TRAINER_NAMES,
    "train": TRAIN_NAMES,
    "native": NATIVE_NAMES,
    "determinism": DETERMINISM_NAMES,
}


def check_wrapper(package: str, strategies: Sequence[str], flags: Sequence[str]) -> list:
    """The ways `package` breaks the contract (empty: none). Imports the framework."""
    problems = []
    modules = {}
    for file, names in FILES.items():
        module_name = f"{package}.{file}" if file else package
        try:
            modules[file] = module = importlib.import_module(module_name)
        except ImportError as error:
            problems.append(f"{module_name}: cannot be imported ({error})")
            continue
        problems += [f"{module_name}: no {name}" for name in names if not hasattr(module, name)]
    if "" in modules and hasattr(modules[""], "supported"):
        support = modules[""].supported()
        if not isinstance(support, Support):
            problems.append(f"{package}.supported() returned {type(support).__name__}, not Support")
        else:
            problems += [
                f"{package}.supported(): unknown strategy {s!r}" for s in support.strategies if s not in strategies
            ]
            problems += [f"{package}.supported(): unknown flag {f!r}" for f in support.flags if f not in flags]
            if support.footprint is None and set(support.strategies) - {"single"}:
                problems.append(f"{package}.supported(): parallel strategies and no footprint (resources.py)")
    if "train" in modules and hasattr(modules["train"], "describe_runtime"):
        runtime = modules["train"].describe_runtime()
        if not isinstance(runtime, Runtime):
            problems.append(f"{package}.train.describe_runtime() returned {type(runtime).__name__}, not Runtime")
    if "trainer" in modules:
        problems += _trainer_class_problems(package, modules["trainer"])
    return problems


def _trainer_class_problems(package: str, module) -> list:
    """The trainer classes defined in trainer.py must implement Trainer or FitTrainer in full."""
    problems = []
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__ or not name.endswith("Trainer") or name.startswith("_"):
            continue
        protocol = FitTrainer if hasattr(cls, "fit_epoch") else Trainer
        missing = [method for method in _protocol_methods(protocol) if not callable(getattr(cls, method, None))]
        problems += [f"{package}.trainer.{name}: no {method} ({protocol.__name__})" for method in missing]
    return problems


def _protocol_methods(protocol) -> list:
    return [name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")]


def known_flags() -> tuple:
    """Every optional flag a wrapper may declare in Support.flags."""
    from algorithms.run.config import parse_config

    return tuple(parse_config(["--test", "none"], "contract", "").uses()) + ("--checkpoint_every",)


def main(argv=None) -> int:
    """python -m algorithms.run.contract PACKAGE: the ways PACKAGE breaks the contract; exit status 1 if any."""
    import argparse

    from algorithms.spec.parallel import STRATEGIES

    parser = argparse.ArgumentParser(
        prog="python -m algorithms.run.contract",
        description="Check wrapper packages against the wrapper contract (algorithms/run/contract.py). "
        "Each is imported, framework and all: set KERAS_BACKEND first for keras_wrapper, and use "
        ".venv-legacy/bin/python for lasagne_wrapper and Keras on theano.",
    )
    parser.add_argument("packages", nargs="+", metavar="PACKAGE", help="e.g. torch_wrapper")
    args = parser.parse_args(argv)
    contract = importlib.import_module("algorithms.run.contract")  # not __main__: its classes are the wrappers'
    problems = [
        problem for package in args.packages for problem in contract.check_wrapper(package, STRATEGIES, known_flags())
    ]
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{', '.join(args.packages)}: meets the wrapper contract (algorithms/run/contract.py)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
