"""The wrapper contract: everything the shared code (run.py, loop.py, session.py,
probe.py, capabilities.py) asks of a framework wrapper, written once, as code.

A wrapper is a package `<name>_wrapper/` with the same files in every framework, each
one a Protocol below that the module itself implements (PEP 544: the module's
functions stand for the protocol's methods, without `self`):

    __init__.py     PackageModule: supported() -> Support; prepare_process(config, dataset);
                    launch(config, argv). Imports no framework: read before one loads.
    model.py        ModelModule: build_model(network, ...): the spec translated.
    trainer.py      TrainerModule: build_trainer(config) -> a Trainer (Keras: a FitTrainer).
    train.py        TrainModule: describe_runtime() -> Runtime; records(config) -> bool;
                    train(session) -> summary; initial_loss_and_logits(network, images,
                    labels, seed) -> (the framework's own loss, logits); model_parameters(
                    network) and layer_outputs_and_gradients(network, weights, images, labels):
                    the structural check's and the localisation's view of the model.
    native.py       NativeModule: the benchmark's side.
    determinism.py  DeterminismModule: enable() -> (what was set, what is still not deterministic).

`train(session)` gets the run's RunSession; `WrapperSession` names all of it a wrapper
may read, call or set.

`check_wrapper(package)` holds a wrapper to this: every name present, every function's
and every trainer method's parameters those of the contract (names and order, optional
where the contract's are, nothing more required), and every `session.<name>` in its
files one of WrapperSession's. tests/test_contract.py runs it for every framework of the
registry (the legacy ones in .venv-legacy). Nothing here is discovered with `hasattr`:
every name is required.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from algorithms.run.config import OPTIONAL_FLAGS
from algorithms.run.noise_scale import GradientNorms
from algorithms.run.resources import Footprint
from algorithms.run.tuning import Tuning

if TYPE_CHECKING:
    from algorithms.run.config import RunConfig
    from algorithms.spec.data import Dataset


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


@dataclass(frozen=True)
class ModelParameter:
    """One parameter tensor of a wrapper's model, read from the framework's own parameter
    objects, for the structural check (algorithms/analysis/structure.py): its name in the
    framework, the spec layer that owns it (-1: none), its role ("kernel" or "bias"), its
    shape as the framework holds it and that shape's layout (weights.LAYOUT_AXES)."""

    name: str
    layer_index: int
    role: str
    shape: tuple
    layout: str


@dataclass(frozen=True)
class LayerProbe:
    """One forward and backward pass of a wrapper's model on one batch, dropout off, for
    the localisation (algorithms/studies/localise.py), in the spec's layout (numpy):
    `outputs` {layer index: the layer's output} for the layers whose output the model
    holds, `gradients` {(layer index, role): d loss / d parameter} for each parameter the
    model holds, None where the framework's own objects say it computed none (a tensor
    frozen or cut from the graph: torch's grad None, a TensorFlow tape's None, a variable
    left out of Keras's trainable weights, a Theano input disconnected from the loss),
    never zeros in its place, and the framework's own mean cross-entropy. Optional (a
    wrapper that gives them localises more finely): `input_gradients` {layer index: d loss
    / d the layer's input} where the model holds that input (the layer before's output, or
    the images), and `evaluation_outputs` {layer index: the output in evaluation} (running
    statistics in a BatchNormalization) where the network has a BatchNormalization."""

    loss: float
    outputs: Mapping[int, np.ndarray]
    gradients: Mapping[tuple, np.ndarray]
    input_gradients: Mapping[int, np.ndarray] = field(default_factory=dict)
    evaluation_outputs: Mapping[int, np.ndarray] = field(default_factory=dict)


@runtime_checkable
class Trainer(Protocol):
    """What algorithms/run/loop.py steps by hand (TensorFlow, PyTorch, Lasagne, Caffe).
    A class may set `CONVERT_AHEAD = True` when its to_batch touches nothing the step
    uses: the loop then calls it in the prefetch thread, during the step before."""

    def to_batch(self, images, labels, uniforms):
        """numpy (N, H, W, C) float32 images, int labels and the rows' dropout uniforms (a tuple,
        one (N, *input shape) float32 array per Dropout layer, spec layout; () without dropout:
        spec/dropout.py, whose mask rule every wrapper applies) -> the framework's batch
        (timed as data time)."""

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

    def fit_epoch(self, session: WrapperSession, epoch: int, steps: list, first_index: int) -> None:
        """Train `steps` (lists of index arrays, one per optimizer step) of `epoch`,
        recording each step in the session; `first_index` counts steps done before."""

    def set_learning_rate(self, learning_rate: float) -> None: ...

    def logits(self, images): ...

    def save_checkpoint(self, folder: str) -> None: ...

    def load_checkpoint(self, folder: str) -> None: ...

    def prepare_batch(self, batch_size: int) -> None: ...


@dataclass(frozen=True)
class Update:
    """One applied update of an asynchronous strategy (ps, async), as its worker reports
    it. The times are the worker's own, measured on the worker, the same in every
    framework: `step_time_ms` from its read of the parameters (a pull, or the forward
    pass's start on shared ones) to its update applied, not counting the time its job
    waited for the worker; `data_time_ms` its gathering of its share's rows before that
    (0 where the rows arrive with the job); `comm_time_ms` the part of step_time_ms spent
    in calls to the parameter server, None where the framework's reads and writes of the
    parameters are not separate calls."""

    worker: int
    loss: float  # mean over its samples
    accuracy: float
    step_time_ms: float
    data_time_ms: float
    samples: int
    staleness: int  # updates other workers applied between this one's read and its apply
    comm_time_ms: Optional[float] = None


class UpdatePool(Protocol):
    """What algorithms/run/updates.py drives: workers that each apply their own update
    as soon as it is done (torch's ps and Hogwild, TensorFlow's ps)."""

    slots: int  # jobs in flight at once
    parts: int  # pieces each step's batch is cut into

    def submit(self, slot: int, indices: np.ndarray, learning_rate: float, uniforms: tuple) -> None:
        """Starts one job: the update of these training rows at this lr, their dropout drawn
        from `uniforms` (as Trainer.to_batch's). `slot` is one of range(slots) that no job
        holds, taken back when an Update with that `worker` arrives; a pool whose own
        scheduler picks the worker ignores it."""

    def result(self, timeout_s: float) -> Optional[Update]:
        """The next applied update, or None if none came within the timeout."""

    def check(self, after: str) -> None:
        """Raises errors.PeerLost if a process of the run has died."""

    def logits(self, images: np.ndarray) -> np.ndarray: ...

    def absorbed_faults(self) -> list:
        """What went wrong that the run went on past (a worker lost, an update applied
        twice), one sentence each, for results.log's diagnostics; empty where every fault
        ends the run."""


class WrapperSession(Protocol):
    """The run's RunSession (algorithms/run/session.py) as a wrapper sees it: all a
    wrapper reads or calls on it, and the notes `train(session)` sets once its trainer
    is built. check_wrapper holds every `session.<name>` in a wrapper's files to these
    names; tests/test_contract.py holds RunSession to this protocol."""

    config: RunConfig
    dataset: Dataset
    run_id: str
    checkpoint_root: str  # where the run's checkpoint folders go (Caffe's solver snapshots there first)
    resume_from: Optional[str]  # the checkpoint folder a --resume run starts from, else None
    steps_per_epoch: int  # the optimizer steps (updates, for ps and async) of the epoch about to run
    # set by train(session), in the framework's own words, for results.log: what --execution
    # and --precision became (eager, graph or compiled and how; compute dtype, loss scale)
    execution_note: str
    precision_note: str
    # set by train(session) in a multi-process run: takes this process's signal number (0:
    # none) and returns the one any process received (0: none), one collective per step, so
    # every process stops after the same step (algorithms/run/faults.py)
    signal_of_any_process: Optional[Callable[[int], int]]

    @property
    def learning_rate(self) -> float:
        """The lr for the optimizer step about to run: set it on the optimizer first."""

    def train_step(
        self,
        epoch: int,
        loss: float,
        accuracy: float,
        step_time_ms: float,
        data_time_ms: float,
        batch_size: int,
        comm_time_ms: Optional[float] = None,
        worker: int = 0,
        staleness: int = 0,
        loss_scale: Optional[float] = None,
        skipped: bool = False,
        global_rows: Optional[int] = None,
    ) -> None:
        """Record one finished optimizer step (its CSV row); raises on a stop signal.
        `batch_size`: the rows this row's update trained on; `global_rows`: the rows of the
        global batch it is part of, where that differs (an asynchronous worker's share)."""

    def dropout_uniforms(self, epoch: int, rows) -> tuple:
        """The dropout uniforms of these training rows in this epoch (spec/dropout.py): what a
        trainer that gathers its own rows (Keras's fit) feeds its Dropout layers."""

    def checkpoint_due(self) -> bool: ...

    def save_checkpoint(self, trainer, epoch: int, next_index: int) -> None:
        """`trainer.save_checkpoint(folder)`, then where the run stands."""

    def should_stop(self) -> bool: ...


class PackageModule(Protocol):
    """<package>/__init__.py, read before the framework loads: it imports none."""

    def supported(self) -> Support: ...

    def prepare_process(self, config, dataset) -> None:
        """What the framework reads at import (device counts, XLA_FLAGS), set now; what it
        cannot run with this config or data refused (InputError)."""

    def launch(self, config, argv: list) -> None:
        """A multi-process strategy's processes started (it may not return); returns in a
        worker or a single process."""


class ModelModule(Protocol):
    def build_model(self, network, *framework_args):
        """The spec translated into the framework's layers; what else it takes (the initial
        weights, a seed, devices; Caffe's batch and phase) is the framework's."""


class TrainerModule(Protocol):
    def build_trainer(self, config) -> Trainer | FitTrainer: ...


class TrainModule(Protocol):
    def describe_runtime(self) -> Runtime: ...

    def records(self, config) -> bool:
        """Whether this process writes the records (rank 0, the chief)."""

    def train(self, session: WrapperSession) -> dict: ...

    def initial_loss_and_logits(self, network, images, labels, seed: int = 0) -> tuple:
        """The framework's own loss and logits of the shared initial weights, dropout off."""

    def model_parameters(self, network) -> list:
        """Every parameter tensor (ModelParameter) of the model the wrapper builds of `network`."""

    def layer_outputs_and_gradients(self, network, weights, images, labels, on_output=None) -> LayerProbe:
        """The model built of `network` (dropout-free) with `weights` (canonical
        LayerWeights), run forward and backward on one batch with the framework's own loss;
        `on_output(layer index, output)`, if given, gets each held output in the spec's layout
        as soon as the wrapper has it, before the backward pass (the localisation's child
        saves each at once, so a process that dies later still leaves it)."""


class NativeModule(Protocol):
    """native.py: the benchmark's side (algorithms/bench/probe.py says what each is)."""

    STEPS_PER_CALL: int

    def apply_threads(self, config) -> str: ...

    def Native(self, config, dataset, schedule): ...

    def Harness(self, config, session: WrapperSession): ...

    def gemm(self, n: int, precision: str = "fp32") -> Callable[[], object]: ...

    def compiled_ms(self, config, dataset, schedule, block: int) -> dict: ...

    def profile_ops(self, config, dataset, schedule, warmup: int) -> tuple: ...

    def device_memory_mb(self) -> Optional[dict]: ...


class DeterminismModule(Protocol):
    def enable(self) -> tuple: ...


FILES = {
    "": PackageModule,
    "model": ModelModule,
    "trainer": TrainerModule,
    "train": TrainModule,
    "native": NativeModule,
    "determinism": DeterminismModule,
}


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
            if support.footprint is None and set(support.strategies) - {"single"}:
                problems.append(f"{package}.supported(): parallel strategies and no footprint (resources.py)")
    if "train" in modules and hasattr(modules["train"], "describe_runtime"):
        runtime = modules["train"].describe_runtime()
        if not isinstance(runtime, Runtime):
            problems.append(f"{package}.train.describe_runtime() returned {type(runtime).__name__}, not Runtime")
    if "trainer" in modules:
        problems += _trainer_class_problems(package, modules["trainer"])
    if "" in modules:
        problems += session_use_problems(package)
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
    folder = os.path.dirname(importlib.util.find_spec(package).origin)
    names = set(protocol_members(WrapperSession))
    problems = []
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".py"):
            continue
        with open(os.path.join(folder, file)) as handle:
            tree = ast.parse(handle.read(), file)
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
