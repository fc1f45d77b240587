"""The main job: train the same network on the same data with every framework
available, one process after another (so timings do not compete), and print one
comparison table read back from the CSVs they wrote.

    python run_all.py [--only tensorflow,torch] [--seeds 0,1] [--preset original] [any flag of the entry scripts]
    python run_all.py --versions 'keras==3.14.0' 'keras==3.15.1' [...]   # a framework upgrade: releases.py

Its default trains to convergence on the default data: where a network's preset makes too
few updates there (the 3-layer net's batch 1000: 40), the same samples in smaller batches
(Network.main_command_batch); `--preset original` runs the original preset instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from algorithms.analysis.agreement import format_agreement, pairwise_agreement, predictions_path, read_predictions
from algorithms.analysis.baseline import format_checks
from algorithms.analysis.compare import agreement_notes, build_report, format_against_first, write_outputs
from algorithms.analysis.pair_figure import pair_folder
from algorithms.analysis.report_files import default_prefix, localisation_png
from algorithms.registry.capabilities import support
from algorithms.registry.environments import NotRun, not_run
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, InputError
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.machine.devices import kind_of
from algorithms.machine.network_memory import network_memory
from algorithms.machine.resources import available_memory_mb, check_network_fits, dataset_mb
from algorithms.paths import BASELINE_DIR, REPO_ROOT, RESULTS_DIR
from algorithms.config.argv import flag_value, without_flags
from algorithms.records import run_ids, summarize_rows
from algorithms.run.entry import prepare
from algorithms.network.parallel import STRATEGIES
from algorithms.analysis.runs import val_progress
from algorithms.session.run_session import new_run_id
from algorithms.analysis.tensorboard import export_run
from algorithms.studies import children
from algorithms.studies.wall_split import Split, format_split, run_split
from algorithms.tables import number, text_table, wrapped

TABLE_ACCURACY = 0.9  # the table's time-to-accuracy columns, unless --target_accuracy names another


def suite_parser():
    """run_all.py's own flags (every other flag goes on to the entry scripts)."""
    parser = children.study_parser(
        "run_all.py",
        allow_abbrev=False,  # --seed is an entry-script flag, not short for --seeds
        description="Train one network with every framework and print a comparison table. "
        "Every other flag is passed to each entry script (see python torch_script.py --help). "
        "With --versions SET SET ...: one framework under two releases instead "
        "(python -m algorithms.studies.releases --help).",
    )
    parser.add_argument(
        "--only", default=",".join(NAMES), help=f"comma-separated subset of: {', '.join(NAMES)} (default: all)"
    )
    parser.add_argument(
        "--preset",
        choices=("main", "original"),
        default="main",
        help="main: the network's preset, at a batch that converges on the default data where the preset's "
        "does not (the 3-layer net: batch 100 instead of 1000, the same 10 epochs); original: the preset as "
        "the original ran it. An explicit --batch_size wins over both",
    )
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds (e.g. 0,1): every framework runs once per seed, and the seeds' spread "
        "is the run-to-run band the verdicts rest on (default: one run at --seed)",
    )
    parser.add_argument(
        "--strategies",
        default=None,
        help="comma-separated strategies (e.g. single,data): every framework runs once per strategy it runs "
        "(with --devices for the others), run id <run id>-<strategy>, and each is judged against the first "
        "framework's run of the first strategy: a parallel run against its single-device one is a same-seed "
        "pair, judged as drift when the split is synchronous (docs/comparing.md#parallel-against-single)",
    )
    parser.add_argument(
        "--no_epoch_check",
        action="store_true",
        help="skip each framework's epoch check (the run's first steps again on epochs of 3 batches, a few "
        "seconds each: what lets the compare judge the epoch boundaries; see --epoch_check in any script's --help)",
    )
    parser.add_argument(
        "--baseline",
        default=BASELINE_DIR,
        help="the folder the verdicts' seed bands and drift envelopes are read from (default: the shipped "
        "baselines); a network of your own has none there: `python -m algorithms.studies.drift --envelope "
        "--envelope_dir DIR` with this run's flags writes its envelopes into DIR (docs/own-network.md)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show every line the frameworks write to stderr, their start-up notices (TensorFlow's absl and "
        "oneDNN lines, Caffe's net dump) too; they are always in <results_dir>/logs/<run_id>/<framework>.log",
    )
    return parser


def parse_suite_args(argv):
    parser = suite_parser()
    args, forwarded = children.parse_study_flags(parser, argv)
    seeds = None
    if args.seeds is not None:
        try:
            seeds = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
        except ValueError:
            parser.error(f"--seeds: expected whole numbers like 0,1, got {args.seeds!r}")
        if len(seeds) < 2 or len(set(seeds)) != len(seeds):
            parser.error(f"--seeds {args.seeds}: give two or more different seeds")
        if "--seed" in forwarded:
            parser.error("--seeds and --seed: give one of them")
    strategies = None
    if args.strategies is not None:
        strategies = [strategy.strip() for strategy in args.strategies.split(",") if strategy.strip()]
        unknown = [strategy for strategy in strategies if strategy not in STRATEGIES]
        if unknown or len(strategies) < 2 or len(set(strategies)) != len(strategies):
            parser.error(
                f"--strategies {args.strategies}: give two or more different strategies of {', '.join(STRATEGIES)}"
            )
        if "--strategy" in forwarded:
            parser.error("--strategies and --strategy: give one of them")
    if not args.no_epoch_check and "--epoch_check" not in forwarded:
        forwarded = forwarded + ["--epoch_check"]
    names = framework_names(parser, args.only, "--only")
    return names, args.preset, seeds, forwarded, args.verbose, args.baseline, strategies


def main_command_flags(network, forwarded: list, preset: str) -> tuple:
    """The flags with the main command's batch added (see the module docstring), and a note
    saying so. A batch given (--batch_size, --batch_schedule) wins. With --lr_scaling linear
    the lr still scales from the preset's batch, as in an entry script given the same
    flags (docs/batch-size.md#scaling-the-learning-rate), and the note says what it becomes."""
    given = any(flag in forwarded for flag in ("--batch_size", "--batch_schedule"))
    if preset == "original" or given or network.main_command_batch is None:
        return forwarded, ""
    batch, preset_batch = network.main_command_batch, network.training.batch_size
    note = (
        f"batch {batch}, not the preset's {preset_batch}: the preset makes too few updates to "
        f"converge on small data (run_all.py --preset original runs it)"
    )
    if flag_value(forwarded, "--lr_scaling", "none") == "linear":
        samples = batch * int(flag_value(forwarded, "--accumulate", "1"))
        rate = float(flag_value(forwarded, "--learning_rate", network.training.optimizer.learning_rate))
        scaled = "" if "--lr_schedule" in forwarded else f" = {rate * samples / preset_batch:g}"
        note += (
            f"; --lr_scaling linear scales the lr from the preset's batch, not from {batch}: "
            f"{'the schedule' if scaled == '' else f'{rate:g}'} x {samples}/{preset_batch}{scaled}"
        )
    return forwarded + ["--batch_size", str(batch)], note


def main(argv=None) -> int:
    started = time.perf_counter()
    argv = sys.argv[1:] if argv is None else argv
    names, preset, seeds, forwarded, verbose, baseline, strategies = parse_suite_args(argv)
    first = strategies[0] if strategies else None  # each strategy's flags are checked by its own runs
    try:
        # checks flags and data once, makes default data
        config, dataset = prepare(strategy_flags(forwarded, first), "run_all.py", "")
        forwarded, note = main_command_flags(config.network, forwarded, preset)
        if note:
            config, dataset = prepare(strategy_flags(forwarded, first), "run_all.py", "")
        check_every_framework_fits(config, dataset, names)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    run_id = config.run_id or new_run_id()
    forwarded = without_flags(forwarded, "--run_id")
    # one run id per seed: every framework's run of seed s is <run_id>-seed<s>; per strategy, <...>-<strategy>
    runs = [(None, run_id)] if seeds is None else [(seed, f"{run_id}-seed{seed}") for seed in seeds]
    strategy_of = {}
    if strategies:
        runs = [(seed, f"{this_run}-{strategy}") for seed, this_run in runs for strategy in strategies]
        strategy_of = {this_run: this_run.rsplit("-", 1)[1] for _, this_run in runs}
    print(f"run {run_id}: {config.network.name} on {dataset.describe()}, frameworks: {', '.join(names)}", flush=True)
    for line in blas_lines(names, config.threads):
        print(line, flush=True)
    print((f"{note}\n" if note else "") + (f"seeds {args_text(seeds)}\n" if seeds else ""), flush=True)
    outcomes = {}
    build_logs = os.path.join(config.results_dir, "build")
    frameworks_s = 0.0  # the frameworks' processes; the rest before the compare is set-up
    for seed, this_run in runs:
        flags = forwarded + ["--run_id", this_run] + ([] if seed is None else ["--seed", str(seed)])
        flags = strategy_flags(flags, strategy_of.get(this_run))
        for index, name in enumerate(names, start=1):
            prefix = f"[{index}/{len(names)}{seed_text(seed)}{strategy_text(strategy_of.get(this_run))}] "
            environment_missing = not_run(get(name), build_logs, prefix) or strategy_not_run(
                name, strategy_of.get(this_run)
            )
            outcomes[name, this_run] = environment_missing or children.run_framework(
                name, flags, prefix + name, log=framework_log(flags, name), verbose=verbose
            )
            frameworks_s += 0.0 if environment_missing else outcomes[name, this_run][1]
    setup_s = time.perf_counter() - started - frameworks_s
    compare_started = time.perf_counter()
    first_run = runs[0][1]
    csv_paths = print_table(config, first_run, names, {name: outcomes[name, first_run] for name in names})
    agreement = print_agreement(config, csv_paths, first_run, names)
    twins = []
    twins_started = time.perf_counter()
    for seed, this_run in runs:
        flags = forwarded + ([] if seed is None else ["--seed", str(seed)])
        twins += reference_on_each_device(config, names, this_run, flags, verbose, outcomes)
    twins_s = time.perf_counter() - twins_started
    if len(csv_paths) >= 2:
        compare_runs(config, runs, csv_paths, twins, agreement, (strategies, forwarded, baseline, verbose, run_id))
    for _, this_run in runs:
        finished = [path for path in csv_paths if this_run in run_ids(path)]
        export_run(finished, this_run, os.path.join(config.results_dir, "tensorboard"))
    compare_s = time.perf_counter() - compare_started - twins_s
    print("\n" + "\n".join(wall_lines(config, names, runs, outcomes, setup_s, compare_s, started)))
    # a framework whose environment could not be built is shown, not counted (docs/legacy.md)
    ran = [outcome for outcome in outcomes.values() if not isinstance(outcome, NotRun)]
    return 0 if ran and all(code == 0 for code, _ in ran) else EXIT_FAILED


def compare_runs(config, runs: list, csv_paths: list, twins: list, agreement, options: tuple) -> None:
    """The compare of every run run_all.py made (and the twins on other devices): the
    report, its verdicts against the first run on the console, and where the evidence is."""
    strategies, forwarded, baseline, verbose, run_id = options
    first_run = runs[0][1]
    specs = [f"{path}@{this_run}" for _, this_run in runs for path in csv_paths if this_run in run_ids(path)]
    specs += twins
    report = build_report(specs, [0.5, 0.8, 0.9], baseline)
    report["agreement"] = agreement
    if strategies:  # every strategy's run of every framework against the first's first
        report["against_first"] = "every run"
    prefix = default_prefix(os.path.join(config.results_dir, "compare"), report["runs"])
    png, page = write_outputs(report, prefix, localisation_png(config.results_dir, run_id))
    print("\n" + format_against_first(report, verbose))
    for line in yardstick_advice(report, config, forwarded, baseline):
        print(line)
    print("\n" + format_checks(report["baseline"], verbose))
    for note in agreement_notes(report):
        print("\n".join(wrapped(note)))
    print(
        "\nthe evidence: the report (every pair's verdict, its picture, its yardstick and numbers, the rule of the "
        f"verdicts), for a browser:\n  {page}\nthe curves:\n  {png}\n"
        f"each pair's picture:\n  {pair_folder(prefix)}/\nper-step rows, run {first_run}:\n"
        f"  {config.results_dir}/{config.network.name}_*.csv\nsummaries:\n  {config.results_log}\n"
        "any two runs: python -m algorithms.analysis.compare A.csv[@RUN_ID] B.csv[@RUN_ID]"
    )


def blas_lines(names: list, threads: int) -> list:
    """Where a framework computes in the system OpenBLAS: its SGEMM GFLOP/s on the core the
    runs will name, beside the main env's numpy BLAS (algorithms/machine/openblas.py), one
    line measured in a child process (a second or two)."""
    on_it = [name for name in names if get(name).openblas]
    if not on_it:
        return []
    who = ", ".join(on_it[:-1]) + (" and " if len(on_it) > 1 else "") + on_it[-1]
    command = [sys.executable, "-m", "algorithms.machine.openblas", "--threads", str(threads), "--who", who]
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return [f"BLAS: not measured ({type(error).__name__})"]
    lines = child.stdout.strip().splitlines()
    return wrapped(lines[-1] if lines else f"BLAS: not measured (exit {child.returncode})", "", "  ")


def wall_lines(config, names: list, runs: list, outcomes: dict, setup_s: float, compare_s: float, started) -> list:
    """Where the suite's wall time went, per framework (wall_split.py), summed over the seeds' runs."""
    splits = {}
    for name in names:
        for _, this_run in runs:
            outcome = outcomes[name, this_run]
            if isinstance(outcome, NotRun):
                continue
            path = children.results_csv(config.results_dir, config.network.name, name)
            splits.setdefault(name, Split()).add(run_split(path, this_run, outcome[1]))
    return format_split(splits, setup_s, compare_s, time.perf_counter() - started)


def check_every_framework_fits(config, dataset, names: list) -> None:
    """The network in each framework's memory, one process training it on the whole batch,
    against what this machine has free: refused before any framework starts (each entry
    script checks its own run's processes and devices again)."""
    memory, data_mb, free = network_memory(config.network, config.optimizer), dataset_mb(dataset), available_memory_mb()
    for name in names:
        check_network_fits(config, support(get(name)).footprint, memory, data_mb, free)


def reference_on_each_device(config, names: list, run_id: str, flags: list, verbose: bool, outcomes: dict) -> list:
    """Where the frameworks of run `run_id` trained on different kinds of device (on a GPU
    machine under --device auto, Theano and Caffe on the CPU beside the others on the GPU),
    the reference (the first framework that finished) once more on each kind it did not
    train on, as run `<run_id>-<kind>`: a GPU run is never judged against a CPU run, so
    each framework is then judged against the reference on its own kind of device. Returns
    those runs' `path@run_id`s (none where every framework ran on one kind)."""
    kinds = {}
    for name in names:
        outcome = outcomes.get((name, run_id))
        path = children.results_csv(config.results_dir, config.network.name, name)
        rows = [] if isinstance(outcome, NotRun) or not outcome or outcome[0] else children.run_rows(path, run_id)
        if rows:
            kinds[name] = kind_of(rows[0]["device"])
    if len(set(kinds.values())) < 2:
        return []
    reference = next(iter(kinds))
    specs = []
    for kind in sorted(set(kinds.values()) - {kinds[reference]}):
        twin = f"{run_id}-{kind}"
        others = ", ".join(name for name, other in kinds.items() if other == kind)
        print(f"{reference} once more on the {kind} ({twin}), the reference of {others} there:", flush=True)
        twin_flags = flags + ["--run_id", twin, "--device", kind]
        code, _ = children.run_framework(
            reference,
            twin_flags,
            f"[{reference} on the {kind}]",
            log=framework_log(twin_flags, reference),
            verbose=verbose,
        )
        path = children.results_csv(config.results_dir, config.network.name, reference)
        if code == 0 and children.run_rows(path, twin):
            specs.append(f"{path}@{twin}")
    return specs


def strategy_flags(flags: list, strategy) -> list:
    """A strategy's run: --strategy, and --devices only where it splits over devices."""
    if strategy is None:
        return flags
    return (without_flags(flags, "--devices") if strategy == "single" else flags) + ["--strategy", strategy]


def strategy_text(strategy) -> str:
    return "" if strategy is None else f", {strategy}"


def strategy_not_run(name: str, strategy):
    """A framework that does not run this strategy: a row saying so, no process."""
    if strategy is None or strategy in support(get(name)).strategies:
        return None
    return NotRun(
        f"--strategy {strategy}", "this framework does not run it", "", "python -m algorithms.registry.capabilities"
    )


def args_text(seeds: list) -> str:
    return ", ".join(str(seed) for seed in seeds)


def seed_text(seed) -> str:
    return "" if seed is None else f", seed {seed}"


def print_agreement(config, csv_paths: list, run_id: str, names: list):
    """The agreement matrix of the finished runs' test predictions (when the test set was
    predicted); returns (names, pairs, images) for the report, or None."""
    predictions = {}
    for name in names:
        path = children.results_csv(config.results_dir, config.network.name, name)
        prediction_file = predictions_path(config.results_dir, path, run_id)
        if path in csv_paths and os.path.exists(prediction_file):
            predictions[name] = read_predictions(prediction_file)
    if len(predictions) < 2:
        return None
    images = len(next(iter(predictions.values())))
    pairs = pairwise_agreement(predictions)
    print("\n" + format_agreement(pairs, images, list(predictions)))
    return list(predictions), pairs, images


def framework_log(flags: list, name: str) -> str:
    """Where a framework's whole stderr is kept: <results_dir>/logs/<run_id>/<name>.log."""
    results_dir = flag_value(flags, "--results_dir", RESULTS_DIR)
    return os.path.join(results_dir, "logs", flag_value(flags, "--run_id", "-"), f"{name}.log")


def print_table(config, run_id: str, names: list, outcomes: dict) -> list:
    """Prints the table; returns the CSVs of the runs that finished."""
    header = ("framework", "backend", "device", "val acc", "test acc", "final loss", "ms/step", "samples/s", "wall s")
    accuracy = config.target_accuracy or TABLE_ACCURACY
    header += tuple(f"{what} to {accuracy:g}" for what in ("steps", "s", "samples"))
    lines, finished, not_run_lines = [], [], []
    for name in names:
        framework, backend = get(name).framework, get(name).backend
        if isinstance(outcomes[name], NotRun):
            lines.append((framework, backend, "not run (below)"))
            not_run_lines += wrapped(f"{framework}/{backend} {outcomes[name]}", "  ", "    ")
            continue
        code, wall = outcomes[name]
        path = children.results_csv(config.results_dir, config.network.name, name)
        rows = children.run_rows(path, run_id)
        if code == EXIT_INPUT_ERROR and not rows:  # the framework refused the run (a layer, a flag): its one line
            reason = refusal(os.path.join(config.results_dir, "logs", run_id, f"{name}.log"))
            lines.append((framework, backend, "not run (below)"))
            not_run_lines += wrapped(f"{framework}/{backend} not run: {reason}", "  ", "    ")
            continue
        if code != 0 or not rows:
            lines.append((framework, backend, "", f"failed (exit {code})", "", "", "", "", f"{wall:.0f}", "", "", ""))
            continue
        finished.append(path)
        s = summarize_rows(rows)
        lines.append(
            (
                framework,
                backend,
                rows[0]["device"],
                number(s["val_accuracy"]),
                number(s["test_accuracy"]),
                number(s["train_loss"]),
                number(s["median_ms"], ".1f"),
                number(s["samples_per_sec"], ".0f"),
                f"{wall:.0f}",
                *to_accuracy_cells(rows, accuracy),
            )
        )
    print(f"{config.network.name} · run {run_id} · batch {config.batch_size} · {config.num_epochs} epochs")
    for line in text_table(header, lines, left=2, rule=True) + not_run_lines:
        print(line)
    return finished


def yardstick_advice(report: dict, config, forwarded: list, baseline: str) -> list:
    """Where a pair found no yardstick at all (`no band`: runs from before the run measured its
    own, or made with --yardstick off), how to make one, in this run's flags. A pair judged to
    its horizon and by its step check, whose last word is only that no seed band covers it,
    needs no note: its verdict line says so."""
    unjudged = [verdict for verdict in report["verdicts"] if verdict.word == "no band"]
    if not unjudged:
        return []
    flags = " ".join(without_flags(forwarded, ("--yardstick",), bare="--epoch_check"))
    note = (
        f"note: {len(unjudged)} pair(s) with no yardstick: neither {baseline} nor the runs' own "
        "(made with --yardstick off, or before a run measured its own) covers these settings. "
        f"Run again to measure one: python run_all.py --yardstick measure {flags} "
        "(docs/comparing.md#a-yardstick-of-the-runs-own); "
        f"seed-regime verdicts: python run_all.py --seeds 0,1,2,3,4 {flags}"
    )
    return wrapped(note, "", "  ")


def refusal(log: str) -> str:
    """The one line an entry script refused its run with (the last `error: ` line of its stderr)."""
    try:
        with open(log, errors="replace") as handle:
            errors = [line.strip() for line in handle if line.startswith("error: ")]
    except OSError:
        errors = []
    return errors[-1].removeprefix("error: ") if errors else "refused (exit 2), no reason in its log"


def to_accuracy_cells(rows: list, threshold: float) -> tuple:
    """Steps, wall seconds and training samples to the first validation row at or above
    `threshold` (DAWNBench's time to accuracy), or dashes."""
    val = [row for row in rows if row["phase"] == "val"]
    for row, (wall, samples) in zip(val, val_progress(rows)):
        if row["accuracy"] >= threshold:
            return str(row["step"]), f"{wall:.1f}", f"{samples:,}"
    return "-", "-", "-"
