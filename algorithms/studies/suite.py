"""The main job: train the same network on the same data with every framework
available, one process after another (so timings do not compete), and print one
comparison table read back from the CSVs they wrote.

    python run_all.py [--only tensorflow,torch] [--seeds 0,1] [--preset original] [any flag of the entry scripts]

Its default trains to convergence on the default data: where a network's preset makes too
few updates there (the 3-layer net's batch 1000: 40), the same samples in smaller batches
(Network.main_command_batch); `--preset original` runs the original preset instead.
"""

from __future__ import annotations

import os
import sys

from algorithms.analysis.agreement import format_agreement, pairwise_agreement, predictions_path, read_predictions
from algorithms.analysis.baseline import format_checks
from algorithms.analysis.compare import agreement_notes, build_report, format_against_first, write_outputs
from algorithms.analysis.report_files import default_prefix, localisation_png
from algorithms.registry.environments import NotRun, not_run
from algorithms.errors import EXIT_INPUT_ERROR, InputError
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.machine.devices import kind_of
from algorithms.paths import BASELINE_DIR, RESULTS_DIR
from algorithms.config.argv import flag_value, without_flags
from algorithms.records import run_ids, summarize_rows
from algorithms.run.entry import prepare
from algorithms.analysis.runs import val_progress
from algorithms.session.run_session import new_run_id
from algorithms.analysis.tensorboard import export_run
from algorithms.studies import children
from algorithms.tables import number, text_table, wrapped

TABLE_ACCURACY = 0.9  # the table's time-to-accuracy columns, unless --target_accuracy names another


def parse_suite_args(argv):
    parser = children.study_parser(
        "run_all.py",
        allow_abbrev=False,  # --seed is an entry-script flag, not short for --seeds
        description="Train one network with every framework and print a comparison table. "
        "Every other flag is passed to each entry script (see python torch_script.py --help).",
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
    if not args.no_epoch_check and "--epoch_check" not in forwarded:
        forwarded = forwarded + ["--epoch_check"]
    names = framework_names(parser, args.only, "--only")
    return names, args.preset, seeds, forwarded, args.verbose, args.baseline


def main_command_flags(network, forwarded: list, preset: str) -> tuple:
    """The flags with the main command's batch added (see the module docstring), and a note saying so."""
    if preset == "original" or "--batch_size" in forwarded or network.main_command_batch is None:
        return forwarded, ""
    batch = network.main_command_batch
    note = (
        f"batch {batch}, not the preset's {network.training.batch_size}: the preset makes too few updates to "
        f"converge on small data (run_all.py --preset original runs it)"
    )
    return forwarded + ["--batch_size", str(batch)], note


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names, preset, seeds, forwarded, verbose, baseline = parse_suite_args(argv)
    try:
        config, dataset = prepare(forwarded, "run_all.py", "")  # checks flags and data once, makes default data
        forwarded, note = main_command_flags(config.network, forwarded, preset)
        if note:
            config, dataset = prepare(forwarded, "run_all.py", "")
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    run_id = config.run_id or new_run_id()
    forwarded = without_flags(forwarded, "--run_id")
    # one run id per seed: every framework's run of seed s is <run_id>-seed<s>
    runs = [(None, run_id)] if seeds is None else [(seed, f"{run_id}-seed{seed}") for seed in seeds]
    print(f"run {run_id}: {config.network.name} on {dataset.describe()}, frameworks: {', '.join(names)}", flush=True)
    print((f"{note}\n" if note else "") + (f"seeds {args_text(seeds)}\n" if seeds else ""), flush=True)
    outcomes = {}
    build_logs = os.path.join(config.results_dir, "build")
    for seed, this_run in runs:
        flags = forwarded + ["--run_id", this_run] + ([] if seed is None else ["--seed", str(seed)])
        for index, name in enumerate(names, start=1):
            prefix = f"[{index}/{len(names)}{seed_text(seed)}] "
            environment_missing = not_run(get(name), build_logs, prefix)
            outcomes[name, this_run] = environment_missing or children.run_framework(
                name, flags, prefix + name, log=framework_log(flags, name), verbose=verbose
            )
    first_run = runs[0][1]
    csv_paths = print_table(config, first_run, names, {name: outcomes[name, first_run] for name in names})
    agreement = print_agreement(config, csv_paths, first_run, names)
    twins = []
    for seed, this_run in runs:
        flags = forwarded + ([] if seed is None else ["--seed", str(seed)])
        twins += reference_on_each_device(config, names, this_run, flags, verbose, outcomes)
    if len(csv_paths) >= 2:
        specs = [f"{path}@{this_run}" for _, this_run in runs for path in csv_paths if this_run in run_ids(path)]
        specs += twins
        report = build_report(specs, [0.5, 0.8, 0.9], baseline)
        report["agreement"] = agreement
        prefix = default_prefix(os.path.join(config.results_dir, "compare"), report["runs"])
        png, page = write_outputs(report, prefix, localisation_png(config.results_dir, run_id))
        print("\n" + format_against_first(report, verbose))
        for line in yardstick_advice(report, config, forwarded, baseline):
            print(line)
        print("\n" + format_checks(report["baseline"], verbose))
        for note in agreement_notes(report):
            print("\n".join(wrapped(note)))
        print(
            "\nthe evidence: the report (every pair's verdict, its yardstick and numbers, the rule of the verdicts), "
            f"for a browser:\n  {page}\nthe curves:\n  {png}\nper-step rows, run {first_run}:\n"
            f"  {config.results_dir}/{config.network.name}_*.csv\nsummaries:\n  {config.results_log}\n"
            "any two runs: python -m algorithms.analysis.compare A.csv[@RUN_ID] B.csv[@RUN_ID]"
        )
    for _, this_run in runs:
        finished = [path for path in csv_paths if this_run in run_ids(path)]
        export_run(finished, this_run, os.path.join(config.results_dir, "tensorboard"))
    # a framework whose environment could not be built is shown, not counted (docs/legacy.md)
    ran = [outcome for outcome in outcomes.values() if not isinstance(outcome, NotRun)]
    return 0 if ran and all(code == 0 for code, _ in ran) else 1


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
    """Where a verdict found no yardstick (no drift envelope, no seed band at these
    settings, as for any network of the user's), how to make each, in this run's flags."""
    if not any("no band" in verdict.text or "no seed band" in verdict.text for verdict in report["verdicts"]):
        return []
    flags = " ".join(without_flags(forwarded, bare="--epoch_check"))
    # drift measures both modes (dropout on, --parity) to its own number of steps, in its own folder
    measured = " ".join(
        without_flags(forwarded, ("--max_steps", "--results_dir", "--results_log"), ("--epoch_check", "--parity"))
    )
    whose = "a network of your own ships none" if not config.network.builtin else "the shipped ones cover others"
    return wrapped(
        f"note: no drift envelope or seed band in {baseline} for these settings ({whose}), so no verdict. "
        f"Same-seed verdicts: measure the envelope, python -m algorithms.studies.drift --envelope --envelope_dir "
        f"DIR {measured}, then judge against it, python run_all.py --baseline DIR {flags}. Seed-regime verdicts: "
        f"python run_all.py --seeds 0,1,2,3,4 {flags} (docs/own-network.md)",
        "",
        "  ",
    )


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
