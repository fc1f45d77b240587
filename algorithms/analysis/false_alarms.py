"""How often the seed regime's verdicts say "beyond" when nothing is wrong: the shipped
baselines of one setting judged against each other, each verdict resting only on the
seeds it does not judge (leave out the pair's seeds).

    python -m algorithms.analysis.false_alarms [--baseline results/baseline/default]

Printed, each as a count and a rate:
- `make compare` reports: for each seed s, the main command's report as it would read
  with every framework run at seed s (the first framework against each other one),
  judged against the bands of the other seeds: how many reports carry a false "beyond";
  the same with every framework first in turn (a report per seed and first framework);
- every cross-framework pair at one seed, and at two different seeds;
- every two seeds of one framework, against its remaining seeds (the pure false-alarm
  rate: the same framework, the same settings);
- each seed against its framework's other seeds, as the baseline check reads it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from algorithms.errors import EXIT_INPUT_ERROR
from algorithms.analysis.baseline import baseline_runs
from algorithms.analysis.spread import ALPHA, SeedBand, pair_test, reproduction_test
from algorithms.analysis.verdict import Yardsticks, judge
from algorithms.paths import BASELINE_DIR
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.network.networks import get_network

DEFAULT_FOLDER = os.path.join(BASELINE_DIR, "default")
DEFAULT_NETWORK = "cnn2d_3layer_fullconnected_3layer"


def seeds_by_framework(folder: str, network: str) -> dict:
    """framework name -> {seed: run} of the baselines in `folder` (not its subfolders)."""
    found = {}
    for framework in FRAMEWORKS:
        runs = [
            run
            for run in baseline_runs(network, framework.framework, framework.backend, folder)
            if os.path.dirname(os.path.abspath(run.path)) == os.path.abspath(folder)
        ]
        by_seed = {_seed(run): run for run in runs}
        if len(by_seed) >= 3:
            found[framework.name] = by_seed
    return found


def _seed(run) -> int:
    return run.seed if run.seed is not None else int(run.run_id.rsplit("seed", 1)[-1])


def _without(groups: dict, seeds: set) -> list:
    return [run for by_seed in groups.values() for seed, run in by_seed.items() if seed not in seeds]


def one_framework_alarms(groups: dict) -> list:
    """For every two seeds of one framework, judged against its other seeds: called beyond?"""
    alarms = []
    for by_seed in groups.values():
        for i, j in itertools.combinations(sorted(by_seed), 2):
            rest = tuple(run for seed, run in by_seed.items() if seed not in (i, j))
            test = pair_test(by_seed[i], by_seed[j], [SeedBand(rest, "the other seeds")])
            if test is not None:
                alarms.append(test.beyond)
    return alarms


def measure(groups: dict, own: dict = None) -> dict:
    """name -> (beyond, judged) of each measurement in the module docstring; the two of one
    framework's seeds against its others over `own` (default: every framework of `groups`)."""
    own = groups if own is None else own
    names = list(groups)
    first = names[0]
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in groups.values())))
    names_of_counts = ("reports", "every first", "same seed", "other seeds", "one framework", "baseline check")
    counts = {name: [0, 0] for name in names_of_counts}

    def count(name: str, beyond: bool) -> None:
        counts[name][0] += beyond
        counts[name][1] += 1

    for seed in seeds:
        yardsticks = Yardsticks(_without(groups, {seed}))
        verdicts = {
            (a, b): judge(groups[a][seed], groups[b][seed], yardsticks) for a, b in itertools.combinations(names, 2)
        }
        count("reports", any(verdicts[first, other].beyond for other in names[1:]))
        for reference in names:
            count("every first", any(verdict.beyond for pair, verdict in verdicts.items() if reference in pair))
        for verdict in verdicts.values():
            count("same seed", verdict.beyond)
    for a, b in itertools.combinations(names, 2):
        for i, j in itertools.permutations(seeds, 2):
            count("other seeds", judge(groups[a][i], groups[b][j], Yardsticks(_without(groups, {i, j}))).beyond)
    for beyond in one_framework_alarms(own):
        count("one framework", beyond)
    for by_seed in own.values():
        for seed, run in by_seed.items():
            test = reproduction_test(run, [other for other_seed, other in by_seed.items() if other_seed != seed])
            if test is not None:
                count("baseline check", test.beyond)
    return {name: tuple(value) for name, value in counts.items()}


def format_rates(counts: dict, groups: dict, own: dict = None) -> str:
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in groups.values())))
    what = {
        "reports": f"`make compare` reports (first: {next(iter(groups))}) with a false 'beyond'",
        "every first": "the same, every framework first in turn",
        "same seed": "cross-framework pairs at one seed called 'beyond'",
        "other seeds": "cross-framework pairs at two seeds called 'beyond'",
        "one framework": "two seeds of one framework called 'beyond' (against its other seeds)",
        "baseline check": "seeds called 'outside' their framework's other seeds",
    }
    lines = [
        f"false alarms, leave the judged seeds out: {len(groups)} frameworks ({', '.join(groups)}), "
        f"seeds {', '.join(map(str, seeds))}; stated rate of one verdict: {ALPHA:g}"
    ]
    own = groups if own is None else own
    for name, (beyond, judged) in counts.items():
        if judged:
            lines.append(f"  {what[name]:<75} {beyond:>4} of {judged:<4} ({beyond / judged:.3f})")
        elif name in ("one framework", "baseline check"):  # one framework's seeds judged by its own others
            fewest = min((len(by_seed) for by_seed in own.values()), default=0)
            lines.append(
                f"  {what[name]:<75} none: {fewest} seeds of {', '.join(own)}, too few to judge one by the others"
            )
        else:
            lines.append(f"  {what[name]:<75} none judged")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m algorithms.analysis.false_alarms", description=__doc__)
    parser.add_argument("--baseline", default=DEFAULT_FOLDER, help="a folder of baselines at one setting")
    parser.add_argument("--network", default=DEFAULT_NETWORK)
    args = parser.parse_args(argv)
    get_network(args.network)
    groups = seeds_by_framework(args.baseline, args.network)
    if len(groups) < 2:
        print(f"error: {args.baseline}: fewer than two frameworks with 3 or more seeds", file=sys.stderr)
        return EXIT_INPUT_ERROR
    print("\n\n".join(format_rates(measure(block, own), block, own) for block, own in blocks_of(groups)))
    return 0


def blocks_of(groups: dict) -> list:
    """(frameworks, the frameworks whose own seeds are judged against each other) of each
    block printed: the frameworks with the most seeds, on all of them; then, if others have
    fewer (`make baseline` ran out of time for them), every framework on the seeds all of
    them share, bands still from every other seed, and only the others' own seeds judged,
    so no count of the first block is repeated in the second."""
    most = max(len(by_seed) for by_seed in groups.values())
    fullest = {name: by_seed for name, by_seed in groups.items() if len(by_seed) == most}
    if len(fullest) < 2 or len(fullest) == len(groups):
        return [(groups, groups)]
    return [(fullest, fullest), (groups, {name: by_seed for name, by_seed in groups.items() if name not in fullest})]


if __name__ == "__main__":
    sys.exit(main())
