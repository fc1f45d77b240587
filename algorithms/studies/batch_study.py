"""Smith et al. 2017, "Don't Decay the Learning Rate, Increase the Batch Size": a
step decay of the learning rate against the batch growth that matches it (at each
decay epoch the lr is divided by --factor in one arm, the batch multiplied by it in
the other), the same epochs, seed and data; test accuracy, optimizer updates and wall
time side by side, and one plot.

    python -m algorithms.studies.batch_study [--framework torch] [--batch 100] [--factor 2] \\
        [--decay_epochs 3,5] [--num_epochs 6] [any flag of the entry scripts]

Each arm is one entry-script run (`--lr_schedule` in one, `--batch_schedule` in the
other), read back from its CSV.
"""

from __future__ import annotations

import os
import sys

from algorithms.figures import grid_and_legend, pyplot, save_figure
from algorithms.registry.capabilities import capabilities
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, InputError
from algorithms.config.argv import without_flags
from algorithms.records import read_rows
from algorithms.run.entry import prepare
from algorithms.analysis.settings import epoch_batches
from algorithms.config.parser import DefaultsHelpFormatter
from algorithms.session.run_session import new_run_id
from algorithms.studies import children
from algorithms.tables import number, text_table
from algorithms.registry.frameworks import framework_names


def parse_study_args(argv: list):
    parser = children.study_parser(
        "python -m algorithms.studies.batch_study",
        __doc__.split("\n\n")[0],
        allow_abbrev=False,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--framework",
        default="torch",
        help="torch, tensorflow or keras_tensorflow / keras_torch / keras_jax (those with --lr_schedule)",
    )
    parser.add_argument("--batch", type=int, default=100, help="the batch both arms start from")
    parser.add_argument("--factor", type=int, default=2, help="lr divided by / batch multiplied by this")
    parser.add_argument("--decay_epochs", default="3,5", help="the epochs (1-based) at which each arm changes")
    parser.add_argument("--num_epochs", type=int, default=6, help="epochs of both arms")
    parser.add_argument("--learning_rate", type=float, default=None, help="the starting lr (default: the preset's)")
    args, forwarded = children.parse_study_flags(parser, argv)
    (name,) = framework_names(parser, args.framework, "--framework")
    if "--lr_schedule" not in dict((n, f) for n, _, f in capabilities())[name]:
        parser.error(
            f"--framework {name}: it has no per-step lr hook (--lr_schedule); use torch, tensorflow or keras_*"
        )
    try:
        epochs = [int(epoch) for epoch in args.decay_epochs.split(",")]
    except ValueError:
        parser.error(f"--decay_epochs: expected epochs like 3,5, got {args.decay_epochs!r}")
    if epochs != sorted(set(epochs)) or epochs[0] < 2 or epochs[-1] > args.num_epochs or args.factor < 2:
        parser.error(
            f"--decay_epochs {args.decay_epochs} --factor {args.factor}: rising epochs from 2 to --num_epochs "
            f"{args.num_epochs}, and a factor of 2 or more"
        )
    return name, args, epochs, forwarded


def arm_flags(args, epochs: list, base_lr: float) -> dict:
    """The two arms' entry-script flags: the same lr / batch ratio in every epoch."""
    phases = list(enumerate([1] + epochs))  # (changes so far, first epoch of the phase)
    decay = ",".join(f"{first}:{base_lr / args.factor**k:g}" for k, first in phases)
    growth = ",".join(f"{first}:{args.batch * args.factor**k}" for k, first in phases)
    common = ["--num_epochs", str(args.num_epochs)]
    return {
        "lr decay": common + ["--batch_size", str(args.batch), "--lr_schedule", decay],
        "batch growth": common + ["--batch_schedule", growth, "--learning_rate", f"{base_lr:g}"],
    }


def summarize_arm(rows: list) -> dict:
    train = [row for row in rows if row["phase"] == "train"]
    val = [row for row in rows if row["phase"] == "val"]
    test = [row["accuracy"] for row in rows if row["phase"] == "test"]
    return {
        "updates": len(train),
        "test": test[-1] if test else None,
        "val": val[-1]["accuracy"] if val else None,
        "wall": rows[-1]["wall_time_s"] if rows else None,
        "val_curve": [(row["epoch"], row["step"], row["accuracy"]) for row in val],
        "batches": sorted(set(epoch_batches(train).values())),
        "rates": sorted({row["learning_rate"] for row in train}, reverse=True),
    }


def format_table(results: dict) -> str:
    header = ("arm", "batches", "learning rates", "updates", "test acc", "final val acc", "wall s")
    lines = []
    for arm, s in results.items():
        lines.append(
            (
                arm,
                " -> ".join(str(b) for b in s["batches"]),
                " -> ".join(f"{r:g}" for r in s["rates"]),
                str(s["updates"]),
                number(s["test"]),
                number(s["val"]),
                number(s["wall"], ".1f"),
            )
        )
    return "\n".join(text_table(header, lines, left=3, rule=True))


def plot(results: dict, title: str, path: str) -> None:
    plt = pyplot()
    import matplotlib.ticker

    figure, (by_epoch, by_update) = plt.subplots(1, 2, figsize=(11, 4.2))
    for arm, s in results.items():
        epochs, steps, accuracy = zip(*s["val_curve"])
        by_epoch.plot(epochs, accuracy, marker="o", label=arm)
        by_update.plot(steps, accuracy, marker="o", label=f"{arm} ({s['updates']} updates)")
    by_epoch.set(title="validation accuracy by epoch", xlabel="epoch", ylabel="accuracy")
    by_epoch.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    by_update.set(title="validation accuracy by optimizer update", xlabel="update", ylabel="accuracy")
    grid_and_legend(by_epoch, by_update, fontsize=8)
    figure.suptitle(title, fontsize=9)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_figure(figure, path)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name, args, epochs, forwarded = parse_study_args(argv)
    try:
        config, _ = prepare(forwarded + ["--num_epochs", str(args.num_epochs)], "batch_study", "")
        base_lr = args.learning_rate or config.optimizer.learning_rate
        arms = arm_flags(args, epochs, base_lr)
        for flags in arms.values():
            prepare(forwarded + flags, "batch_study", "")  # every arm's flags and batches checked first
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    run_id = config.run_id or new_run_id()
    forwarded = without_flags(forwarded, "--run_id")  # each arm gets <run_id>-lr-decay / -batch-growth
    path = children.results_csv(config.results_dir, config.network.name, name)
    results = {}
    for index, (arm, flags) in enumerate(arms.items(), start=1):
        arm_id = f"{run_id}-{arm.replace(' ', '-')}"
        code, _ = children.run_framework(name, forwarded + flags + ["--run_id", arm_id], f"[{index}/2 {arm}] {name}")
        if code != 0:
            print(f"error: the {arm} run failed (exit {code}); its output is above", file=sys.stderr)
            return EXIT_FAILED
        results[arm] = summarize_arm(read_rows(path, arm_id))
    title = (
        f"{name} · {config.network.name} · {args.num_epochs} epochs · x{args.factor} at epochs "
        f"{args.decay_epochs} · run {run_id}"
    )
    print(f"\n{title}\n{format_table(results)}")
    png = os.path.join(config.results_dir, "batch_study", f"{run_id}.png")
    plot(results, title, png)
    print(f"\nplot: {png}\nrows: {path} (run ids {run_id}-lr-decay, {run_id}-batch-growth)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
