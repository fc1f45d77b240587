"""The wrapper contract's types: everything the shared code (the entry point, the loops,
the session, the probe, the capability table) asks of a framework wrapper, written once,
as code.

A wrapper is a package `<name>_wrapper/` with the same files in every framework, each
one a Protocol below that the module itself implements (PEP 544: the module's
functions stand for the protocol's methods, without `self`):

    __init__.py     PackageModule: supported() -> Support; prepare_process(config, dataset);
                    launch(config, argv). Imports no framework: read before one loads.
    model.py        ModelModule: build_model(network, ...): the spec translated.
    trainer.py      TrainerModule: build_trainer(config) -> a Trainer (Keras: a FitTrainer).
    train.py        TrainModule: describe_runtime() -> Runtime; records(config) -> bool;
                    train(session) -> summary; describe_modes(config, trainer).
    probes.py       ProbesModule: initial_loss_and_logits(network, images, labels, seed)
                    -> (the framework's own loss, logits); model_parameters(network) and
                    layer_outputs_and_gradients(network, weights, images, labels): the
                    cross-framework tests', the structural check's and the localisation's
                    view of the model, outside any run.
    native.py       NativeModule: the benchmark's side.
    determinism.py  DeterminismModule: enable() -> (what was set, what is still not deterministic).

`train(session)` gets the run's RunSession; `WrapperSession` names all of it a wrapper
may read, call or set.

check.py's `check_wrapper(package)` holds a wrapper to this: every name present, every function's
and every trainer method's parameters those of the contract (names and order, optional
where the contract's are, nothing more required), and every `session.<name>` in its
files one of WrapperSession's. tests/test_contract.py runs it for every framework of the
registry (the legacy ones in .venv-legacy). Nothing here is discovered with `hasattr`:
every name is required.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from algorithms.machine.resources import Footprint
from algorithms.machine.tuning import Tuning
from algorithms.reference.train_state import StateNotHeld, TrainState  # noqa: F401 (part of the contract)

if TYPE_CHECKING:
    from algorithms.config.run_config import RunConfig
    from algorithms.dataset.data import Dataset


@dataclass(frozen=True)
class Support:
    """What a wrapper runs: strategies, the optional flags (`RunConfig.uses()` keys) it
    implements, its --tuned table, and `advice` replacing the generic refusal for a
    strategy or a flag it does not run; with a strategy besides single, the measured
    `footprint` its processes and devices are checked against (resources.py). What its
    framework reads from the environment as it loads, beyond the shared thread variables
    (machine/threads.py), the entry point and the probe set through it before it loads:
    `thread_environment(threads)` for the run's thread count (and what else the framework's
    libraries read as they load: OpenBLAS's core, backends/openblas.py), and in the benchmark's
    profile `profile_environment(folder)`, where its compiler writes what it compiled."""

    strategies: Sequence[str]
    flags: Sequence[str]
    tuning: Tuning
    advice: Mapping[str, str] = field(default_factory=dict)
    footprint: Optional[Footprint] = None
    thread_environment: Optional[Callable[[int], None]] = None
    profile_environment: Optional[Callable[[str], None]] = None
    # with "--device gpu" among its flags: why this install of the framework cannot use a GPU,
    # read without loading it (a CPU-only build), or None; and what it reads from the
    # environment as it loads to stay on the device asked for (jax's platform)
    gpu_build: Optional[Callable[[], Optional[str]]] = None
    device_environment: Optional[Callable[[str], None]] = None
    # a layer of the vocabulary (its class name in network/layers.py) the wrapper does not
    # translate -> the one line that says why: the entry point refuses a network holding it
    # before the framework loads (status 2). Empty in every wrapper today; every other layer
    # kind its model.py translates (tests/test_layer_vocabulary.py)
    layers_refused: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Device:
    """Where a run's model and batches live, as the loaded framework placed them: `kind`
    (`cpu` or `gpu`: what --device asks and the settings record holds), `name` (the CSV's
    device column: `cpu`, `cuda:0`, the recording process's device) and `detail` (the
    device's model and its driver and runtime versions where known, for results.log and
    the settings record)."""

    kind: str = "cpu"
    name: str = "cpu"
    detail: str = "cpu"


@dataclass(frozen=True)
class Runtime:
    """The framework as this process loaded it, for the CSV's identity and results.log:
    `devices` in the framework's words, `device` where the run trains (Device)."""

    framework: str
    backend: str
    versions: Mapping[str, str]
    devices: str
    device: Device = field(default_factory=Device)


@dataclass(frozen=True)
class GradientNorms:
    """One optimizer step's squared gradient norms (of the mean loss over each batch)."""

    small_batch: float  # samples behind each replica's gradient (the per-replica batch)
    small_sq: float  # |G_small|^2, the mean over the replicas, before the all-reduce
    big_batch: float  # samples behind the all-reduced gradient (the global batch)
    big_sq: float  # |G_big|^2, after the all-reduce


@dataclass(frozen=True)
class StepResult:
    """One optimizer step: the mean loss and accuracy over its samples, the part of
    its time spent communicating where the strategy can measure it, and with
    --noise_scale the gradient norms before and after the all-reduce (GradientNorms, from
    which algorithms/session/noise_scale.py estimates the noise scale)."""

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
    objects, for the structural check (algorithms/localisation/structure.py): its name in the
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
    the localisation (algorithms/localisation/localise.py), in the spec's layout (numpy):
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
        network/dropout.py, whose mask rule every wrapper applies) -> the framework's batch
        (timed as data time)."""

    def step(self, batches: list) -> StepResult:
        """One optimizer step over these batches: one, or K with --accumulate K."""

    def set_learning_rate(self, learning_rate: float) -> None:
        """Called before a step whenever the schedule's lr differs from the one set."""

    def prepare_batch(self, batch_size: int) -> None:
        """--batch_schedule: the next epoch's batches are `batch_size` rows (all replicas):
        re-trace, re-compile or reshape for that shape now (outside every step's time),
        leaving the weights, optimizer and RNG as they were; nothing where the framework
        needs nothing."""

    def logits(self, images):
        """numpy images -> numpy logits (N, classes), dropout off."""

    def save_checkpoint(self, folder: str) -> None:
        """The framework's own state files (weights, optimizer, RNG) into `folder`."""

    def load_checkpoint(self, folder: str) -> None: ...

    def train_state(self) -> TrainState:
        """The model's weights and the optimizer's slots now, in the spec's layout and its one
        optimizer convention (reference/train_state.py), for the step check (run/step_check.py);
        raises StateNotHeld (with why) where this process holds a part of the model only."""


@runtime_checkable
class FitTrainer(Protocol):
    """What algorithms/run/loop.py drives an epoch at a time (Keras's model.fit)."""

    def fit_epoch(self, session: WrapperSession, epoch: int, steps: list, first_index: int) -> None:
        """Train `steps` (lists of index arrays, one per optimizer step) of `epoch`,
        recording each step in the session; `first_index` counts steps done before."""

    def set_learning_rate(self, learning_rate: float) -> None: ...

    def prepare_batch(self, batch_size: int) -> None: ...

    def logits(self, images): ...

    def save_checkpoint(self, folder: str) -> None: ...

    def load_checkpoint(self, folder: str) -> None: ...

    def train_state(self) -> TrainState:
        """The model's weights and the optimizer's slots now, in the spec's layout and its one
        optimizer convention (reference/train_state.py), for the step check (run/step_check.py);
        raises StateNotHeld (with why) where this process holds a part of the model only."""


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
    """The run's RunSession (algorithms/session/run_session.py) as a wrapper sees it: all a
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
    # every process stops after the same step (algorithms/session/faults.py)
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
        """The dropout uniforms of these training rows in this epoch (network/dropout.py): what a
        trainer that gathers its own rows (Keras's fit) feeds its Dropout layers."""

    def checkpoint_due(self) -> bool: ...

    def save_checkpoint(self, trainer, epoch: int, next_index: int) -> None:
        """`trainer.save_checkpoint(folder)`, then where the run stands."""

    def should_stop(self) -> bool: ...

    # the run's StepCheck (run/step_check.py) where the wrapper's own per-step hook drives it
    # (a FitTrainer's callback: `before(trainer, epoch, index)` at a step's start,
    # `after(trainer, capture, *session.last_step)` once its row is written); None otherwise
    step_check: Optional[object]
    last_step: Optional[tuple]  # (loss, accuracy) of the last optimizer step recorded


class PackageModule(Protocol):
    """<package>/__init__.py, read before the framework loads: it imports none."""

    def supported(self) -> Support: ...

    def prepare_process(self, config, dataset) -> None:
        """What the framework reads at import (device counts, compiler flags), set now; what it
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

    def describe_modes(self, config, trainer) -> tuple:
        """(execution, precision) as `trainer` runs them, in the framework's own words, for
        results.log: what --execution and --precision became. train(session) sets
        session.execution_note and precision_note from it once the trainer is built."""


class ProbesModule(Protocol):
    """probes.py: the model the wrapper builds of a network, seen from outside a run (the
    cross-framework tests, the structural check, the localisation); no session, no trainer."""

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
    """native.py: the benchmark's side (algorithms/run/probe.py says what each is)."""

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
    "probes": ProbesModule,
    "native": NativeModule,
    "determinism": DeterminismModule,
}
