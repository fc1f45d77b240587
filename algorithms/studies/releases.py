"""Check a framework upgrade: the same network, data and seed under two releases, one verdict
that names both releases and, where they differ for real, the first layer that changed.

    python run_all.py --versions 'keras==3.14.0' 'keras==3.15.1' --only keras_torch [entry-script flags]
    python -m algorithms.studies.releases --versions 'jax==0.9.2 jaxlib==0.9.2' main

Each --versions argument is a release set (NAME==VERSION, several with spaces or commas, or
`main`, the main env as it is); the first is the one the others are judged against. Each set's
environment is built once from the registry and cached (registry/release_env.py: a small venv
layered on the main env, everything else pinned as in requirements.txt). Every framework the
sets change (--only picks) trains once per set, with the same flags (`--parity` or the default
mode; the same seed, so the pair is judged in the same-seed regime), run id
`<run id>-<set>`, and the pair's verdict is printed with both releases named:

    keras_torch  keras 3.14.0 -> 3.15.1 (torch backend): beyond drift at step 2; first difference:
                 layer 6 (BatchNorm) bias gradient, 3.0e-02 against rounding 2.0e-07

A verdict beyond drift (or with --localise, any verdict) runs the localisation across the
releases (localisation/across_releases.py): each release's forward and backward pass on the
same weights and batch, the first layer where they differ beyond float32 rounding. The
HTML report (with the releases of every run) and the localisation heatmap are written as
run_all.py writes them; each run's results.log block names its releases.
"""

from __future__ import annotations

import os
import sys

from algorithms.analysis.answer import pair_index
from algorithms.analysis.compare import build_report, write_outputs
from algorithms.analysis.releases import verdict_line
from algorithms.analysis.report_files import default_prefix, localisation_png
from algorithms.config.argv import without_flags
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, EXIT_RESOURCE_ERROR, InputError, ResourceError
from algorithms.localisation.across_releases import first_difference, localise_releases
from algorithms.localisation.localisation_report import format_localisation, plot_heatmap, write_cells_csv
from algorithms.paths import BASELINE_DIR
from algorithms.registry.frameworks import framework_names
from algorithms.registry.release_env import ensure_environment, parse_release_set
from algorithms.run.entry import prepare
from algorithms.session.run_session import new_run_id
from algorithms.studies import children
from algorithms.studies.suite import framework_log, main_command_flags
from algorithms.tables import number, wrapped

AGREE = "none beyond rounding in one forward and backward pass at the shared initial weights"
LATER = "; the difference enters later (the update rule, or a layer at other weights)"


def wants_releases(argv: list) -> bool:
    """Whether run_all.py's command line asks for this study (--versions) rather than the suite."""
    return any(arg.split("=", 1)[0] == "--versions" for arg in argv)


def parse_args(argv: list):
    parser = children.study_parser(
        "run_all.py --versions",
        allow_abbrev=False,
        description="Train one network under two or more releases of a framework and judge each against the "
        "first. Every other flag is passed to each entry script (see python torch_script.py --help).",
    )
    parser.add_argument(
        "--versions",
        nargs="+",
        default=[],
        metavar="SET",
        help="release sets, the first the reference: NAME==VERSION (keras==3.14.0), several in one set with spaces "
        "or commas ('jax==0.9.2 jaxlib==0.9.2'), or main (the main env as it is)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated frameworks (default: every framework of the main env the sets change)",
    )
    parser.add_argument(
        "--preset",
        choices=("main", "original"),
        default="main",
        help="as run_all.py's: main trains the 3-layer net at batch 100 (converges on the default data)",
    )
    parser.add_argument(
        "--baseline",
        default=BASELINE_DIR,
        help="the folder of drift envelopes and seed bands the verdicts read (default: the shipped baselines)",
    )
    parser.add_argument(
        "--localise",
        action="store_true",
        help="localise every pair across the releases, not only a pair beyond drift or spread",
    )
    parser.add_argument("--verbose", action="store_true", help="every line the frameworks write to stderr")
    args, forwarded = children.parse_study_flags(parser, argv)
    if not args.versions:
        parser.error("--versions: give two release sets or more (the first is the reference)")
    try:
        args.sets = [parse_release_set(text) for text in args.versions]
    except InputError as error:
        parser.error(str(error).removeprefix("--versions "))
    if len(args.sets) < 2:
        parser.error("--versions: give two release sets or more (the first is the reference)")
    if len({release_set.key for release_set in args.sets}) < len(args.sets):
        parser.error("--versions: a release set twice; give different sets")
    touched = [name for release_set in args.sets for name in release_set.frameworks()]
    if args.only is None and not touched:
        parser.error("--versions: no set names keras, tensorflow(-cpu), torch, jax, jaxlib or numpy; give --only")
    args.names = framework_names(parser, args.only or ",".join(dict.fromkeys(touched)), "--only")
    return args, forwarded


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, forwarded = parse_args(argv)
    try:
        config, dataset = prepare(forwarded, "run_all.py", "")
        forwarded, note = main_command_flags(config.network, forwarded, args.preset)
        if note:
            config, dataset = prepare(forwarded, "run_all.py", "")
        run_id = config.run_id or new_run_id()
        forwarded = without_flags(forwarded, "--run_id")
        print(f"run {run_id}: {config.network.name} on {dataset.describe()}, frameworks: {', '.join(args.names)}")
        print((f"{note}\n" if note else "") + "release sets:", flush=True)
        pythons = {}
        for release_set in args.sets:
            log = os.path.join(config.results_dir, "build", f"release-{release_set.key}.log")
            built = ensure_environment(release_set, log)
            pythons[release_set.key] = built.python
            print(f"  {built.describe(release_set)}", flush=True)
    except (InputError, ResourceError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR if isinstance(error, InputError) else EXIT_RESOURCE_ERROR
    print(flush=True)
    failed = False
    lines = []
    for name in args.names:
        specs = []
        for index, release_set in enumerate(args.sets, start=1):
            this_run = f"{run_id}-{release_set.key}"
            flags = forwarded + ["--run_id", this_run]
            label = f"[{name} {index}/{len(args.sets)}: {release_set.text}]"
            log = framework_log(flags, name)
            code, _ = children.run_framework(
                name, flags, label, log=log, verbose=args.verbose, python=pythons[release_set.key]
            )
            path = children.results_csv(config.results_dir, config.network.name, name)
            if code != 0 or not children.run_rows(path, this_run):
                why = children.last_error(log) or "no error line"
                lines += wrapped(f"{name}  {release_set.text}: failed (exit {code}): {why}; log {log}", "", "  ")
                failed = True
                continue
            specs.append(f"{path}@{this_run}")
        if len(specs) >= 2:
            lines += judge_releases(name, specs, args, config, forwarded, pythons)
    print("\n" + "\n".join(lines))
    return EXIT_FAILED if failed else 0


def judge_releases(name: str, specs: list, args, config, forwarded: list, pythons: dict) -> list:
    """Each later release's run against the first's: the verdict line naming both releases,
    the first differing layer where it is beyond; the report's paths."""
    report = build_report(specs, [0.5, 0.8, 0.9], args.baseline)
    first, lines = report["runs"][0], []
    done = [release_set for release_set in args.sets if any(spec.endswith(f"-{release_set.key}") for spec in specs)]
    heatmap = None
    for run, release_set in zip(report["runs"][1:], done[1:]):
        index = pair_index(report, first, run)
        pair, verdict = report["pairs"][index], report["verdicts"][index]
        text = verdict_line(first, run, verdict.text)
        if verdict.beyond or args.localise:
            localisation = localise_releases(
                name,
                [(done[0].text, pythons[done[0].key]), (release_set.text, pythons[release_set.key])],
                config.network.name if config.network.builtin else config.network.source,
                os.path.abspath(config.train),
                seed=config.seed,
            )
            heatmap = heatmap or write_localisation(localisation, config.results_dir, first.run_id)
            found = first_difference(localisation) or AGREE + (LATER if verdict.beyond else "")
            text += f"; first difference: {found}"
        numbers = f"val acc gap {number(pair.final_accuracy_gap, '.4f')}"
        lines += wrapped(f"{name}  {text} · {numbers}", "", "  ")
        if verdict.settings_line and verdict.settings_line not in text:
            lines += wrapped(verdict.settings_line, "  ", "  ")
    prefix = default_prefix(os.path.join(config.results_dir, "compare"), report["runs"])
    png, page = write_outputs(report, prefix, heatmap or localisation_png(config.results_dir, first.run_id))
    lines += wrapped(f"the report (every verdict's evidence, each run's releases): {page}", "  ", "    ")
    return lines


def write_localisation(localisation, results_dir: str, run_id: str) -> str:
    """The localisation's table printed, its cells and heatmap beside the suite's
    (results/localise/<run id>.{csv,png}: the report shows the heatmap)."""
    print(format_localisation(localisation), flush=True)
    folder = os.path.join(results_dir, "localise")
    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, run_id)
    if not os.path.exists(prefix + ".csv"):
        write_cells_csv(localisation, prefix + ".csv")
    plot_heatmap(localisation, prefix + ".png")
    return prefix + ".png"


if __name__ == "__main__":
    sys.exit(main())
