"""The run configuration (`RunConfig`): the preset's defaults overridden by the flags,
resolved once by `parse_config` from the flags every entry script shares (flags.py's
table: the value of each flag it marks `copied` as parsed, the others resolved here),
after the rules of which flags can run together (checks.py); and the optional
flags a wrapper may or may not implement (`OPTIONAL_FLAGS`)."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import MISSING, dataclass, fields, replace
from typing import Optional

from algorithms.errors import InputError
from algorithms.config.checks import check_flags
from algorithms.config.flags import DEFAULT_SYNC_EVERY, FLAGS, HelpScope, layer_list
from algorithms.config.values import schedule_text
from algorithms.config.parser import build_parser
from algorithms.config.schedule import LearningRateSchedule, linear_scale
from algorithms.machine.tuning import Tuning
from algorithms.dataset.data import batch_size_at, steps_per_epoch, test_input
from algorithms.network.networks import Network, Optimizer, network_for_data
from algorithms.network.parallel import STRATEGIES, ParallelPlan, make_plan
from algorithms.network.variants import TRAINING_KINDS, Fault, faulted_network, parse_fault

# The optional flags a wrapper declares in Support.flags (contract.py) and RunConfig.uses()
# reports, in the column order of the README's capability table
# (python -m algorithms.registry.capabilities). `--name value` is in use when the run's
# field `name` holds that value; `--name` when `name` is not its default.
OPTIONAL_FLAGS = (
    "--device gpu",
    "--accumulate",
    "--lr_scaling linear",
    "--warmup_steps",
    "--reduce_lr_on_plateau",
    "--checkpointing",
    "--compile",
    "--checkpoint_every",
    "--lr_schedule",
    "--precision bf16",
    "--precision fp16",
    "--execution eager",
    "--execution graph",
    "--noise_scale",
    "--dp_impl dataparallel",
    "--ps_endpoint",
    "--fault bias",
    "--fault loss",
    "--fault eval_dropout",
    "--fault momentum_reset",
    "--fault lr_late",
    "--fault accuracy_labels",
    "--fault frozen",
    "--fault shape",
    "--fault bn_mean",
    "--fault bn_eval",
    "--fault same_side",
    "--fault late_lr",
    "--fault late_momentum",
    "--fault skip",
    "--fault maxnorm",
)
# variants no other framework has, so the capability table gives them no column: torch's one
# process driving N GPUs (nn.DataParallel, a variant of --strategy data), its parameter
# server across hosts (--ps_endpoint), the known errors only its build path and trainer put
# in (--fault bias:LAYER, loss:sum, eval_dropout, momentum_reset, lr_late, accuracy_labels;
# the other training --fault kinds run everywhere), and two the localisation alone takes
# (python -m algorithms.localisation.localise --fault FRAMEWORK:frozen:LAYER,
# FRAMEWORK:shape:LAYER), which only some build paths translate
TORCH_ONLY_FAULTS = (
    "--fault bias",
    "--fault bn_mean",
    "--fault bn_eval",
    "--fault same_side",
    "--fault loss",
    "--fault eval_dropout",
    "--fault momentum_reset",
    "--fault lr_late",
    "--fault accuracy_labels",
    "--fault late_lr",
    "--fault late_momentum",
    "--fault skip",
    "--fault maxnorm",
)
WITHOUT_TABLE_COLUMN = (
    "--dp_impl dataparallel",
    "--ps_endpoint",
    *TORCH_ONLY_FAULTS,
    "--fault frozen",
    "--fault shape",
)


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
    tuned: str = ""  # --tuned: "" (the framework's defaults), "best", or a setting of the wrapper's table
    tuning: Optional[Tuning] = None  # --tuned: the wrapper's table (Support.tuning), once resolved
    sync_every: int = 0  # localsgd: local steps between parameter averages
    ps_sync: bool = False  # ps: the server applies the sum of all workers' gradients at once
    ps_endpoint: Optional[str] = None  # ps across hosts: where the processes meet (this host's address)
    remote_workers: int = 0  # ps across hosts: the last R workers run on other hosts
    precision: str = "fp32"
    execution: Optional[str] = None  # None: the framework's default mode; --compile is "compiled"
    noise_scale: bool = False
    batch_size_auto: bool = False  # --batch_size auto: batch_size is the preset's until the finder chooses
    memory_budget_mb: Optional[float] = None
    batch_search: Optional[str] = None  # the finder's trials and choice, for results.log
    fault: Optional[Fault] = None  # --fault: a known error put in on purpose (network/variants.py)
    epoch_check: bool = False  # --epoch_check: the short-epoch run first (run/epoch_check.py)
    part: str = "run"  # "run", or "epoch check" in the config the epoch check runs with
    device: str = "auto"  # --device: auto, cpu or gpu, as asked (where the run is: its Runtime's device)
    step_check: str = "on"  # --step_check: re-take sampled steps in float64 (run/step_check.py)
    yardstick: str = "auto"  # --yardstick: the run's own drift yardstick where none covers it (run/yardstick.py)
    # the spec the step check holds the run to: the network without a --fault (a fault is a known error)
    reference_network: Optional[Network] = None

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step: --batch_size x --accumulate."""
        return self.batch_size * self.accumulate

    def batch_at(self, epoch: int) -> int:
        """--batch_size of the 0-based `epoch` (the --batch_schedule phase it is in)."""
        return batch_size_at(self.batch_schedule, epoch) if self.batch_schedule else self.batch_size

    def steps_at(self, rows: int, batch: int) -> int:
        """The optimizer steps an epoch of `rows` training rows takes at --batch_size `batch`
        (each worker's share one update where --strategy ps or async updates unsynchronised)."""
        steps = steps_per_epoch(rows, batch * self.accumulate)
        if self.strategy in ("ps", "async") and not self.ps_sync:
            steps *= self.plan.replicas
        return steps

    def epoch_steps(self, rows: int) -> list:
        """The optimizer steps each epoch takes on `rows` training rows, at its own batch
        (--batch_schedule); their sum is what the whole run plans, before --max_steps."""
        return [self.steps_at(rows, self.batch_at(epoch)) for epoch in range(self.num_epochs)]

    def side_run(self, results_dir: str, part: str, **changes) -> "RunConfig":
        """A run trained inside this one (the epoch check, a yardstick twin): its rows in
        `results_dir`, `part` naming it; quiet, never stopped early, checkpointed or resumed,
        and with no epoch check, step check or yardstick of its own (the epoch check's
        boundaries are judged against its own envelope; a twin is what a yardstick is made of)."""
        return replace(
            self,
            early_stopping=0,
            target_accuracy=None,
            checkpoint_every=0,
            resume=None,
            quiet=True,
            results_dir=results_dir,
            epoch_check=False,
            step_check="off",
            yardstick="off",
            part=part,
            **changes,
        )

    def order_epoch(self, epoch: int) -> int:
        """The epoch whose batch order this one takes: its own, or epoch 1's with --fault same_order."""
        return 0 if self.fault and self.fault.kind == "same_order" else epoch

    def order_seed(self, epoch: int) -> int:
        """The seed the 0-based `epoch`'s batch order is drawn with: --seed, unless
        --fault order:EPOCH:SEED names this epoch."""
        fault = self.fault
        return int(fault.value) if fault and fault.kind == "order" and fault.layer == epoch + 1 else self.seed

    def effective_batch_at(self, epoch: int) -> int:
        return self.batch_at(epoch) * self.accumulate

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
        """OPTIONAL_FLAGS -> whether this run asks it of the wrapper."""
        return {flag: _in_use(self, flag) for flag in OPTIONAL_FLAGS}

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
            f"max_steps={self.max_steps} device={self.device} strategy={self.strategy} devices={self.devices} "
            f"threads={self.threads}"
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
            + (f" batch_schedule={schedule_text(self.batch_schedule)}" if self.batch_schedule else "")
            + (f" lr_schedule={schedule_text(self.lr_schedule)}" if self.lr_schedule else "")
            + (f" target_accuracy={self.target_accuracy:g}" if self.target_accuracy is not None else "")
            + (f" sync_every={self.sync_every}" if self.strategy == "localsgd" else "")
            + (" ps_sync" if self.ps_sync else "")
            + (f" ps_endpoint={self.ps_endpoint} remote_workers={self.remote_workers}" if self.ps_endpoint else "")
            + (f" plan=[{self.plan.describe()}]" if self.plan and self.plan.strategy != "single" else "")
            + (f" fault={self.fault.describe()} (a known error, on purpose)" if self.fault else "")
        )


_DEFAULTS = {field.name: field.default for field in fields(RunConfig) if field.default is not MISSING}


def _in_use(config: RunConfig, flag: str) -> bool:
    name, _, value = flag.removeprefix("--").partition(" ")
    held = getattr(config, name)
    if isinstance(held, Fault):  # --fault KIND: a fault of that kind
        held = held.kind
    return held == value if value else held != _DEFAULTS[name]


def check_batch_statistics(network: Network, args) -> None:
    """A BatchNormalization's statistics are its batch's: a strategy that cuts the batch
    (replicas, accumulated parts, micro-batches, workers) or runs a block twice would take
    other ones, so a network with one runs on one device, whole batches, once."""
    if not network.batch_normalizations():
        return
    why = None
    if args.strategy != "single":
        why = f"--strategy {args.strategy} would take them per replica, stage or worker"
    elif args.accumulate > 1:
        why = f"--accumulate {args.accumulate} would take them per accumulated part"
    elif args.checkpointing:
        why = "--checkpointing would update its running statistics again in the recomputation"
    if why:
        raise InputError(
            f"{why}: {network.name} has a BatchNormalization, whose statistics are the whole batch's; "
            "run it with --strategy single, no --accumulate or --checkpointing"
        )


def help_scope(support) -> HelpScope:
    """What a script's --help lists of the strategies, --fault kinds and optional flags:
    those its wrapper's Support runs (contract.Support; None: every one, as a study passes
    them on)."""
    if support is None:
        return HelpScope()
    kinds = tuple(
        kind for kind in TRAINING_KINDS if f"--fault {kind}" not in OPTIONAL_FLAGS or f"--fault {kind}" in support.flags
    )
    strategies = tuple(strategy for strategy in STRATEGIES if strategy in support.strategies)
    lacks = tuple(flag for flag in OPTIONAL_FLAGS if flag not in support.flags)
    return HelpScope(strategies, kinds, lacks)


def parse_config(argv: Optional[list], prog: str, description: str, support=None) -> RunConfig:
    """Flags to a RunConfig; argparse itself exits with status 2 on a malformed flag, and
    flags that cannot run together (or a plan the devices cannot hold) are an InputError.
    `support`: the wrapper's contract.Support, whose strategies, faults and optional flags --help lists."""
    args = build_parser(prog, description, help_scope(support)).parse_args(argv)
    network = network_for_data(args.network, args.train, args.input_shape)
    reference_network = network.without_dropout() if args.parity else network
    fault = None
    if args.fault is not None:
        try:
            fault = parse_fault(args.fault, network, TRAINING_KINDS)
        except ValueError as error:
            raise InputError(f"--fault {error} ({network.name}'s layers: {layer_list(network)})") from None
        network = faulted_network(fault, network)
    if args.parity:
        network = network.without_dropout()
    defaults = network.training
    check_batch_statistics(network, args)
    check_flags(args, defaults.epochs)
    batch_schedule, lr_schedule = args.batch_schedule or (), args.lr_schedule or ()
    batch_size_auto = args.batch_size == "auto"
    if batch_schedule:
        batch_size = batch_schedule[0][1]
    else:
        batch_size = defaults.batch_size if batch_size_auto else args.batch_size or defaults.batch_size
    plan = make_plan(
        network, args.strategy, args.devices, batch_size, args.micro_batches, args.group, args.inner, batch_schedule
    )
    optimizer = defaults.optimizer
    if args.learning_rate is not None:
        optimizer = replace(optimizer, learning_rate=args.learning_rate)
    if lr_schedule:
        optimizer = replace(optimizer, learning_rate=lr_schedule[0][1])
    for flag, value in (("momentum", args.momentum), ("nesterov", args.nesterov)):
        if value is None:
            continue
        if optimizer.name != "sgd":
            raise InputError(
                f"--{flag}: {network.name} trains with {optimizer.name}, which has no {flag}; drop the flag"
            )
        optimizer = replace(optimizer, **{flag: value == "on" if flag == "nesterov" else value})
    test = test_input(args.train, args.test)
    results_dir = os.path.abspath(args.results_dir)
    command = [os.path.basename(sys.argv[0]) if argv is None else prog] + (sys.argv[1:] if argv is None else list(argv))
    execution = "compiled" if args.compile else args.execution
    return RunConfig(
        **{shared.dest: getattr(args, shared.dest) for shared in FLAGS if shared.copied},
        network=network,
        optimizer=optimizer,
        test=test,
        num_epochs=args.num_epochs or defaults.epochs,
        batch_size=batch_size,
        validation_split=defaults.validation_split if args.validation_split is None else args.validation_split,
        results_dir=results_dir,
        results_log=args.results_log or os.path.join(os.path.dirname(results_dir), "results.log"),
        run_id=args.resume or args.run_id,
        command_line="python " + " ".join(shlex.quote(part) for part in command),
        plan=plan,
        compile=execution == "compiled",
        batch_schedule=batch_schedule,
        lr_schedule=lr_schedule,
        sync_every=(args.sync_every or DEFAULT_SYNC_EVERY) if args.strategy == "localsgd" else 0,
        execution=execution,
        batch_size_auto=batch_size_auto,
        fault=fault,
        reference_network=reference_network,
    )
